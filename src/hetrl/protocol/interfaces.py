"""The protocol's vocabulary: one interface per primitive family, and the executor's surface.

Every implementation of a primitive subclasses its family here and declares what it can do as
class attributes (the devices it runs on, the host thread counts worth measuring, the algorithms
it cannot serve, the input it takes); the profiler, the planner and the factory read those, never
probe. Each is built by one classmethod, ``build(slot, algorithm, seed, **context)``, which
``hetrl.primitives.build`` calls after checking the slot; nothing else constructs one.

    EnvStep         N environments stepped together, auto-reset          (actors)
    Act             the acting copy of the policy (Act) and its refresh (WeightSync)
    Replay          ReplayAdd, ReplaySample, PriorityUpdate on one storage
    Learn           one gradient update of the algorithm's networks
    TabularLearn    Q-learning/SARSA units over an experience dataset
    Executor        runs an iteration of all of them, wherever the placement puts them
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, Any, ClassVar, Literal, Protocol

import numpy as np

if TYPE_CHECKING:
    from hetrl.protocol.placement import Slot


class Primitive(ABC):
    """What every implementation declares. ``backend`` is its registry name."""

    backend: ClassVar[str]
    device_types: ClassVar[tuple[str, ...] | None] = ("cpu",)  # torch device types it runs on; None: any
    host_threads: ClassVar[tuple[int, ...] | None] = None  # thread counts worth profiling on the host; None: all
    slot: "Slot"  # where it runs: set by the factory

    @classmethod
    def unsupported(cls, algorithm: Any) -> str | None:
        """Why it cannot serve ``algorithm`` (None: it can), with the fix."""
        return None

    @classmethod
    def runs_on(cls, device: str) -> bool:
        return cls.device_types is None or device.split(":")[0] in cls.device_types

    @classmethod
    @abstractmethod
    def build(cls, slot: "Slot", algorithm: Any, seed: int, **context: Any) -> "Primitive":
        """An instance for ``algorithm`` on ``slot`` (the factory has checked both)."""

    def describe(self) -> str:
        """Where it ran, for summaries: 'torch on cpu (1 thread)'."""
        return str(self.slot)


class EnvStep(Primitive):
    """N environments stepped together; ended episodes reset in the same step."""

    num_envs: int
    finished: list[tuple[float, int]]  # (return, length) of the episodes the last step ended

    @abstractmethod
    def reset(self) -> np.ndarray: ...

    @abstractmethod
    def step(self, actions: np.ndarray) -> dict[str, np.ndarray]: ...

    # Async stepping (runtime/env_halves.py): ``send`` starts a step and returns at once where the
    # backend steps in the background (``steps_in_background``); ``recv`` waits for it and returns
    # what ``step`` would. The defaults step in ``recv``, with nothing overlapped.
    steps_in_background: ClassVar[bool] = False

    def send(self, actions: np.ndarray) -> None:
        self._sent = actions

    def recv(self) -> dict[str, np.ndarray]:
        return self.step(self._sent)

    def close(self) -> None:
        """Release the environments."""


class Act(Primitive):
    """The acting copy of the policy network (Act) and its refresh from the learner's (WeightSync)."""

    @abstractmethod
    def act(self, obs: np.ndarray, explore: np.ndarray, random_actions: np.ndarray, level: float = 0.0) -> np.ndarray: ...

    @abstractmethod
    def sync(self) -> None:
        """Copy the source network's weights into the acting copy."""

    @abstractmethod
    def forward(self, obs: np.ndarray) -> np.ndarray: ...

    @abstractmethod
    def state_dict(self) -> dict[str, np.ndarray]: ...

    @abstractmethod
    def load_state_dict(self, state: dict[str, np.ndarray]) -> None: ...


class Replay(Primitive):
    """Ring storage of transitions: ReplayAdd, ReplaySample (uniform or prioritized), PriorityUpdate.
    ``host_arrays``: ``sample`` returns host numpy arrays (and ``update_priorities`` takes them)."""

    host_arrays: ClassVar[bool] = False

    @abstractmethod
    def add(self, **transitions: Any) -> None: ...

    @abstractmethod
    def sample(self, uniform: Any, beta: float = 0.4) -> dict[str, Any]: ...

    @abstractmethod
    def update_priorities(self, indices: Any, td_errors: Any) -> None: ...

    @abstractmethod
    def __len__(self) -> int: ...

    @property
    @abstractmethod
    def nbytes(self) -> int:
        """Bytes the storage holds (allocated for the whole capacity): what the run summary reports."""

    @abstractmethod
    def state_dict(self) -> dict[str, Any]: ...

    @abstractmethod
    def load_state_dict(self, state: dict[str, Any]) -> None: ...


class Learn(Primitive):
    """One gradient update of the algorithm's learner. ``input_kind`` says what ``learn`` reads:
    tensors on its device (the replay's batch after Transfer), or the replay's host arrays as they
    are (no Transfer happens)."""

    input_kind: ClassVar[Literal["device", "host"]] = "device"
    precision: ClassVar[str] = "fp32"  # the arithmetic of its update: fp32, or bf16 (mixed; hetrl.algos.base.PRECISIONS)
    learner: Any  # the algorithm's Learner: networks, optimisers, state dicts
    device: Any  # torch.device

    @abstractmethod
    def learn(self, **batch: Any) -> dict[str, Any]:
        """One update; returns ``td_errors`` (B,) and ``loss``, and ``actor_loss`` when it stepped an actor."""


class TabularLearn(Primitive):
    """Tabular Q-learning/SARSA units, each over its shard of an experience dataset."""

    @abstractmethod
    def run(self, *args: Any, **kwargs: Any) -> Any: ...


class Executor(Protocol):
    """What a training session drives: inline, local (actor processes) or ray."""

    name: str
    env_steps: int
    restarts: int
    actors_lost: int  # actors not restarted (ray: their node left the cluster and no other had room)

    @property
    def updates(self) -> int: ...

    @property
    def policy_network(self) -> Any: ...

    def iteration(self) -> None: ...

    def ran(self) -> dict[str, str]:
        """Where each primitive ran, as the built implementations report it."""
        ...

    def timer_totals(self) -> dict[str, tuple[float, int, int]]: ...

    def replay_bytes(self) -> int:
        """The replay's storage in bytes (:attr:`Replay.nbytes`), wherever it lives."""
        ...

    def drain_losses(self) -> float | None: ...

    def drain_actor_losses(self) -> float | None:
        """Mean actor loss since the last call (None: no actor step, or no actor: DQN)."""
        ...

    def drain_episodes(self) -> list[tuple[float, int]]: ...

    def drain_staleness(self) -> tuple[float | None, int | None]: ...

    def run_staleness(self) -> tuple[float, int]: ...

    def ratio_error(self) -> float | None: ...

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state: dict[str, Any]) -> None: ...

    def close(self) -> None: ...
