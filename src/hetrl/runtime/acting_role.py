"""The acting side of every executor: EnvStep, Act (with its WeightSync) and n-step assembly, built
from the placement's EnvStep and Act slots by the factory.

The inline executor is an acting role and a learner role in one process; an actor process or a Ray
actor is an acting role and a transport. So wherever the placement puts EnvStep and Act, that is
what runs, in every executor.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
from torch import nn

from hetrl.algos import AgentConfig, Algorithm, make_algorithm
from hetrl.algos.exploration import FreshDraws
from hetrl.envs import AtariOptions, EnvSource, env_spec
from hetrl.errors import HetrlError
from hetrl.primitives import build
from hetrl.protocol import EnvStep, Placement
from hetrl.runtime.denormals import set_flushing
from hetrl.runtime.env_halves import EnvHalves
from hetrl.runtime.frame_stream import StackFrames, frame_rows
from hetrl.runtime.host_blas import one_blas_thread
from hetrl.runtime.nstep import NStepAssembler

# Central inference: (obs, explore, random_actions) -> actions, answered by the learner's process
RemoteAct = Callable[[np.ndarray, np.ndarray, np.ndarray], np.ndarray]


class TimerSink(Protocol):
    def add(self, name: str, seconds: float, calls: int = 1) -> None: ...


class ActingRole:
    """``source``: the network the acting copy syncs from (the learner's, or an actor's local
    replica of it). ``remote``: act through central inference (its round trip timed as
    ``InferenceWait``) instead of with an acting copy here; then no Act is built. ``frames``: the
    observations are stacks of uint8 frames and transitions leave as frame ids (``frame_rows``),
    their new frames through :meth:`new_frames`, numbered from ``first_frame_id``
    (``runtime/frame_stream.py``). ``async_envs``: the envs step as two halves, acting on one while
    the other steps (``runtime/env_halves.py``); every step still returns every env's transition."""

    def __init__(self, algo: Algorithm, placement: Placement, num_envs: int, seed: int, rng: np.random.Generator,
                 timers: TimerSink, source: nn.Module, remote: RemoteAct | None = None, frames: bool = False,
                 first_frame_id: int = 0, async_envs: bool = False) -> None:
        cfg = algo.config
        self.algo, self.rng, self.timers, self.remote, self.num_envs = algo, rng, timers, remote, num_envs
        self.exploration = algo.exploration_process(num_envs)  # noise correlated in time remembers here
        if async_envs:
            if type(self.exploration) is not FreshDraws:
                raise HetrlError(f"async_envs draws exploration per half and cannot keep {algo.name}'s noise that is "
                                 "correlated in time; set async_envs=false")
            self.env: EnvStep | EnvHalves = EnvHalves(
                lambda s, n: build("EnvStep", placement.env, algo, s, num_envs=n), num_envs, seed, timers.add)
        else:
            self.env = build("EnvStep", placement.env, algo, seed, num_envs=num_envs)
        self.policy = build("Act", placement.act, algo, seed, source=source) if remote is None else None
        self.nstep = NStepAssembler(num_envs, cfg.n_step, cfg.gamma)
        self.obs = self.env.reset()
        self.stacks = StackFrames(num_envs, algo.spec.obs_shape[0], first_frame_id) if frames else None
        if self.stacks is not None:
            self.stacks.start(self.obs)

    def ran(self) -> dict[str, str]:
        """Where EnvStep and Act ran (Act: absent when central inference acted for this role)."""
        return {"EnvStep": self.env.describe(), **({"Act": self.policy.describe()} if self.policy else {})}

    def max_rows_per_step(self) -> int:
        """The most transitions one step can emit (every env ending an n-step queue)."""
        return self.num_envs * self.nstep.n

    def sync(self) -> None:
        """WeightSync: the acting copy takes the source network's weights."""
        start = time.perf_counter()
        self.policy.sync()
        self.timers.add("WeightSync", time.perf_counter() - start)

    def step(self, env_steps: int) -> tuple[dict[str, np.ndarray] | None, list[tuple[float, int]]]:
        """One step of every env; ``env_steps`` is the run's count so far (for the schedules).
        Returns the transitions ready for the replay and the episodes that ended."""
        if isinstance(self.env, EnvHalves):  # times its own EnvStep waits
            actions, out = self.env.step(lambda obs, _: self._act(obs, env_steps, self.algo.draw_exploration))
        else:
            actions = self._act(self.obs, env_steps, lambda rng, _: self.exploration.draw(rng))
            start = time.perf_counter()
            out = self.env.step(actions)
            self.timers.add("EnvStep", time.perf_counter() - start)
        self.exploration.episodes_ended(out["terminated"] | out["truncated"])
        if self.stacks is None:
            ready = self.nstep(self.obs, actions, out["rewards"], out["final_obs"], out["terminated"], out["truncated"])
        else:
            ids = self.stacks.ids
            final_ids, _ = self.stacks.step(self.obs, out["final_obs"], out["next_obs"], out["terminated"] | out["truncated"])
            ready = self.nstep(ids, actions, out["rewards"], final_ids, out["terminated"], out["truncated"])
            ready = frame_rows(ready) if ready is not None else None
        self.obs = out["next_obs"]
        return ready, self.env.finished

    def _act(self, obs: np.ndarray, env_steps: int,
             draw: Callable[[np.random.Generator, int], tuple[np.ndarray, np.ndarray]]) -> np.ndarray:
        """Behaviour actions for ``obs`` (every env, or one async half); ``draw(rng, n)``: the exploration."""
        algo, n = self.algo, len(obs)
        if env_steps < algo.config.learning_starts:
            return algo.random_actions(self.rng, n)
        explore, random_actions = draw(self.rng, n)
        start = time.perf_counter()
        if self.remote is not None:
            actions = self.remote(obs, explore, random_actions)
            self.timers.add("InferenceWait", time.perf_counter() - start)
        else:
            actions = self.policy.act(obs, explore, random_actions, algo.exploration(env_steps))
            self.timers.add("Act", time.perf_counter() - start)
        return actions

    def new_frames(self) -> np.ndarray | None:
        """Frames given ids since the last call (frame mode), to be sent before the rows that refer to them."""
        return self.stacks.take()

    def max_frames_per_step(self) -> int:
        """The most frames the next step's :meth:`new_frames` can hold (those not yet taken included)."""
        return self.stacks.pending + self.stacks.max_new_per_step()

    def oldest_frame(self) -> int:
        """The oldest frame id this role may still refer to: in a current stack or a queued n-step obs."""
        queued = [int(q[0][0].min()) for q in self.nstep.pending if q]
        return min([int(self.stacks.ids.min()), *queued])

    def close(self) -> None:
        self.env.close()


@dataclass(frozen=True)
class ActorSpec:
    """Everything an actor process needs to build its acting role (picklable)."""

    algo: str
    env: str | EnvSource  # pickled to the actor: only a source other processes can make (checked here)
    agent: AgentConfig
    num_envs: int
    seed: int
    placement: Placement
    atari: AtariOptions | None = None  # an ALE id's preprocessing (the run's; None: the defaults)
    frames: bool = False  # transitions leave as frame ids and new frames (the learner keeps a frame replay)
    async_envs: bool = False  # the envs step as two halves against acting (runtime/env_halves.py)
    flush_denormals: bool = True  # the run's setting: the actor process counts denormal floats as zero (runtime/denormals.py)

    def __post_init__(self) -> None:  # in the learner's process (unpickling does not call it)
        if isinstance(self.env, EnvSource):
            self.env.check_portable("an actor process")

    def actor_seed(self, index: int, incarnation: int) -> int:
        """Distinct streams per actor and per restart of an actor."""
        return self.seed + 10_007 * (index + 1) + 1_000_003 * incarnation


class Actor:
    """An actor's acting role with its own generator and a local replica of the policy network
    (``source``): a transport writes the learner's weights into ``weights`` (host arrays that are
    views of the replica's tensors) and calls :meth:`weights_arrived`."""

    def __init__(self, spec: ActorSpec, seed: int, timers: TimerSink, remote: RemoteAct | None = None,
                 first_frame_id: int = 0) -> None:
        import torch

        set_flushing(spec.flush_denormals)  # for the process's life, as the learner computes
        torch.set_num_threads(1)  # an actor's work is small: one thread, no spinning pool beside the learner
        self._blas = one_blas_thread()  # likewise numpy's BLAS, for the actor process's life
        algo = make_algorithm(spec.algo, env_spec(spec.env, spec.atari), spec.agent)
        self.source = algo.make_policy_network().requires_grad_(False)
        self.weights: dict[str, np.ndarray] = {k: v.numpy() for k, v in self.source.state_dict().items()}
        self.role = ActingRole(algo, spec.placement, spec.num_envs, seed, np.random.default_rng(seed), timers,
                               self.source, remote, spec.frames, first_frame_id, spec.async_envs)
        self.num_envs = spec.num_envs

    def weights_arrived(self) -> None:
        """WeightSync from the replica into the acting copy; the transport times it with its fetch
        (``WeightFetch``)."""
        if self.role.policy is not None:
            self.role.policy.sync()

    def step(self, env_steps: int) -> tuple[dict[str, np.ndarray] | None, list[tuple[float, int]]]:
        return self.role.step(env_steps)

    def ran(self) -> dict[str, Any]:
        return self.role.ran()

    def max_rows_per_step(self) -> int:
        return self.role.max_rows_per_step()

    def close(self) -> None:
        self.role.close()
