"""What every algorithm provides to an executor.

An algorithm is written once, against the protocol: it builds a learner on a torch device it is
given (the Learn primitive), says how the acting policy turns network outputs into actions (the
shared part of Act), and draws its exploration randomness from the executor's generator. It never
names a device.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, fields
from typing import Any, ClassVar

import numpy as np
import torch
from torch import nn

from hetrl.algos.exploration import FreshDraws
from hetrl.envs.spec import EnvSpec
from hetrl.errors import field_type_problems


PRECISIONS = ("auto", "fp32", "bf16")
"""A learner's arithmetic (``precision``): ``fp32`` throughout; ``bf16``, mixed precision (the
convolutions and hidden layers in bfloat16, the weights, the optimiser, the output layer and the
loss in fp32: Learn/torch-bf16); ``auto``, whichever Learn backend the plan measures fastest.
Each Learn class says which it computes in (:attr:`hetrl.protocol.Learn.precision`)."""


@dataclass
class AgentConfig:
    """Settings shared by the off-policy algorithms."""

    hidden: tuple[int, ...] = (256, 256)
    lr: float = 1e-3
    gamma: float = 0.99
    batch_size: int = 256
    buffer_size: int = 100_000
    learning_starts: int = 1_000  # env steps of uniformly random actions before learning starts
    replay_ratio: float = 1.0  # gradient updates per env step (held fixed by every executor)
    train_every: int = 1  # env steps between bursts of updates (a burst is train_every*replay_ratio updates)
    n_step: int = 1
    prioritized: bool = False
    alpha: float = 0.6  # prioritisation exponent
    beta0: float = 0.4  # importance-sampling exponent, annealed linearly to 1
    beta_anneal_steps: int = 100_000  # env steps; absolute so that resuming does not change the schedule
    priority_eps: float = 1e-6
    max_grad_norm: float | None = None
    precision: str = "auto"  # the learner's arithmetic: auto (the plan's choice), fp32, or bf16 (mixed: see PRECISIONS)

    # Settings that change what is learned but not what any primitive costs per call, so a profile
    # measured with other values of them still holds (the profile cache ignores them). A setting
    # left out of here re-profiles when it changes: the safe default for a new one.
    COST_FREE: ClassVar[frozenset[str]] = frozenset({
        "lr", "gamma", "alpha", "beta0", "beta_anneal_steps", "priority_eps",
        "learning_starts",  # the profiler's loop sets its own
        "train_every",  # likewise; the model reads the run's own
    })

    def cost_settings(self) -> dict[str, Any]:
        """The settings a profile's measurements depend on (the profile cache's key)."""
        return {k: v for k, v in asdict(self).items() if k not in self.COST_FREE}

    def validate(self) -> list[str]:
        """Problems with the values, one message each. Every setting means one thing on every
        backend: a value a backend would read otherwise (a negative clipping norm, a NaN) is refused."""
        problems = field_type_problems(self)
        if problems:
            return problems  # every check below compares values of the right type
        problems = [f"{f.name} must be a finite number (got {getattr(self, f.name)})" for f in fields(self)
                    if isinstance(getattr(self, f.name), float) and not math.isfinite(getattr(self, f.name))]
        if problems:
            return problems  # every check below compares numbers
        for name in ("lr", "batch_size", "buffer_size", "n_step", "train_every"):
            if getattr(self, name) <= 0:
                problems.append(f"{name} must be > 0 (got {getattr(self, name)})")
        if not 0 < self.gamma <= 1:
            problems.append(f"gamma must be in (0, 1] (got {self.gamma})")
        if self.replay_ratio < 0:
            problems.append(f"replay_ratio must be >= 0 (got {self.replay_ratio})")
        if self.learning_starts < 0:
            problems.append(f"learning_starts must be >= 0 (got {self.learning_starts})")
        if self.max_grad_norm is not None and self.max_grad_norm <= 0:
            problems.append(f"max_grad_norm must be > 0, or null for no clipping (got {self.max_grad_norm})")
        if self.alpha < 0:
            problems.append(f"alpha (the prioritisation exponent) must be >= 0 (got {self.alpha})")
        if not 0 <= self.beta0 <= 1:
            problems.append(f"beta0 (the importance-sampling exponent at the start) must be in [0, 1] (got {self.beta0})")
        if self.beta_anneal_steps < 0 or self.priority_eps <= 0:
            problems.append(f"beta_anneal_steps must be >= 0 and priority_eps > 0 (got {self.beta_anneal_steps}, "
                            f"{self.priority_eps})")
        if self.precision not in PRECISIONS:
            problems.append(f"precision must be one of {', '.join(PRECISIONS)} (got {self.precision!r})")
        if not self.hidden or min(self.hidden) <= 0:
            problems.append(f"hidden must list positive layer widths (got {self.hidden})")
        if 0 < self.buffer_size < self.batch_size:
            problems.append(f"batch_size ({self.batch_size}) must not exceed buffer_size ({self.buffer_size})")
        return problems

    def beta(self, env_steps: int) -> float:
        frac = min(1.0, env_steps / max(1, self.beta_anneal_steps))
        return self.beta0 + frac * (1.0 - self.beta0)


class Learner(ABC):
    """The networks, optimisers and update rule of an algorithm, on one torch device."""

    updates: int

    @property
    @abstractmethod
    def policy_network(self) -> nn.Module:
        """The network the acting policy copies (Q-network or actor)."""

    @abstractmethod
    def update(self, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """One gradient update; returns ``td_errors`` (B,) and ``loss`` (scalar), detached, on device, and
        ``actor_loss`` (scalar) when the update stepped an actor (DDPG, TD3, SAC): the loss of that step,
        computed before it. Every tensor is new each update (the executor keeps them until it reports)."""

    @abstractmethod
    def state_dict(self) -> dict[str, Any]: ...

    @abstractmethod
    def load_state_dict(self, state: dict[str, Any]) -> None: ...


class TorchLearner(Learner):
    """A learner written in torch ops, whose update is split so that it can be captured as CUDA graphs
    (Learn/cudagraph): the part every update does (:meth:`step`), and a part due only on some updates
    (:meth:`periodic`: a target refresh, TD3's delayed actor), chosen by a counter kept outside both.
    Random inputs are drawn before the step (:meth:`draw_inputs`), so a graph replays the same draws;
    ``step`` and ``periodic`` both read them.
    """

    @abstractmethod
    def step(self, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """The work of every update; returns ``td_errors`` and ``loss``."""

    @abstractmethod
    def periodic_due(self) -> bool:
        """Whether :meth:`periodic` follows the update just counted in ``updates``."""

    @abstractmethod
    def periodic(self, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """Returns ``actor_loss`` where it steps an actor, else nothing (an empty dict)."""

    @abstractmethod
    def optimizers(self) -> list[torch.optim.Optimizer]: ...

    def draw_inputs(self, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """Random tensors this update reads (none by default)."""
        return {}

    def update(self, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        inputs = {**batch, **self.draw_inputs(batch)}  # periodic reads the draws too (SAC's actor noise), as in a graph
        out = self.step(inputs)
        self.updates += 1
        if self.periodic_due():
            out.update(self.periodic(inputs) or {})
        return out


class Algorithm(ABC):
    name: ClassVar[str]
    Config: ClassVar[type[AgentConfig]]
    discrete_actions: ClassVar[bool]
    default_steps: ClassVar[int]  # env steps of a run when none are given (what the defaults are tuned for)
    policy_key: ClassVar[str]  # which of make_networks() the acting policy is
    stochastic_policy: ClassVar[bool] = False  # the acting network outputs a distribution, not actions (SAC)
    exploration_rule: ClassVar[str]  # what action_rule does ("epsilon-greedy", "gaussian-noise"): an Act backend may fuse it

    def __init__(self, spec: EnvSpec, config: AgentConfig) -> None:
        self.spec, self.config = spec, config

    @abstractmethod
    def build_learner(self, device: torch.device, seed: int) -> TorchLearner: ...

    @abstractmethod
    def make_networks(self) -> dict[str, nn.Module]:
        """The trained networks, freshly initialised on the CPU (targets are copies of them)."""

    def mlp_networks(self) -> bool:
        """Whether every network is one of ``hetrl.nets.mlp``'s MLPs (the host backends serve no other)."""
        return True

    def numpy_policy(self) -> bool:
        """Whether the policy network has a numpy forward (``forward_numpy``), which Act/numpy runs."""
        return self.mlp_networks()

    def make_policy_network(self) -> nn.Module:
        """A fresh acting network (an actor fills in the learner's weights)."""
        return self.make_networks()[self.policy_key]

    def profiled_policy(self, network: nn.Module, observations: torch.Tensor | None = None) -> nn.Module:
        """The acting network as the profiler times Act on it, cycling through ``observations``.
        Its own by default; an algorithm whose acting cost depends on the inputs (exit-dqn) fixes
        that cost here."""
        return network

    def learner_parameters(self) -> int:
        """Trainable parameters of the learner (targets excluded): the size of its work."""
        return sum(p.numel() for net in self.make_networks().values() for p in net.parameters())

    @abstractmethod
    def random_actions(self, rng: np.random.Generator, n: int) -> np.ndarray:
        """What a uniformly random policy does in ``n`` envs (also used before learning starts)."""

    @abstractmethod
    def draw_exploration(self, rng: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray]:
        """The ``explore`` and ``random_actions`` inputs of Act for ``n`` envs."""

    def exploration_process(self, n: int) -> FreshDraws:
        """What an acting role draws ``explore`` from, step after step, for ``n`` envs: fresh draws of
        :meth:`draw_exploration` unless the algorithm's noise is correlated in time
        (``hetrl.algos.exploration``)."""
        return FreshDraws(self, n)

    @abstractmethod
    def exploration(self, env_steps: int) -> float:
        """The exploration level at this step (epsilon for DQN, noise scale for DDPG)."""

    @abstractmethod
    def action_rule(self, out: np.ndarray, explore: np.ndarray, random_actions: np.ndarray, level: float) -> np.ndarray:
        """Behaviour actions from the policy network's output (host arrays)."""

    @abstractmethod
    def greedy_rule(self, out: np.ndarray) -> np.ndarray:
        """Evaluation actions from the policy network's output."""

    @abstractmethod
    def greedy_torch(self, out: torch.Tensor) -> torch.Tensor:
        """:meth:`greedy_rule` in torch ops, for an exported policy (TorchScript, ONNX)."""


def seeded_init(seed: int):
    """A context in which module initialisation draws from ``seed`` without touching global RNG state.

    Modules are built on the CPU inside it and moved afterwards, so every device starts from the same
    weights.
    """
    return _SeededInit(seed)


class _SeededInit:
    def __init__(self, seed: int) -> None:
        self.seed = seed

    def __enter__(self) -> None:
        self._ctx = torch.random.fork_rng(devices=[])
        self._ctx.__enter__()
        torch.manual_seed(self.seed)

    def __exit__(self, *exc: object) -> None:
        self._ctx.__exit__(*exc)


def adam(params, lr: float) -> torch.optim.Adam:
    """Adam with the fused kernel where the device has one (fewer kernel launches per step)."""
    params = list(params)
    try:
        return torch.optim.Adam(params, lr=lr, fused=True)
    except RuntimeError:  # no fused Adam for this device type
        return torch.optim.Adam(params, lr=lr)


@contextmanager
def frozen(module: nn.Module) -> Iterator[None]:
    """``module``'s parameters take no gradient inside the block: a backward pass through it still
    computes gradients for its inputs, but not the weight gradients nobody will use."""
    params = [p for p in module.parameters() if p.requires_grad]
    for p in params:
        p.requires_grad_(False)
    try:
        yield
    finally:
        for p in params:
            p.requires_grad_(True)


def polyak_(target: nn.Module, source: nn.Module, tau: float) -> None:
    """target <- (1 - tau) * target + tau * source, for parameters (buffers are copied)."""
    with torch.no_grad():
        t_params, s_params = list(target.parameters()), list(source.parameters())
        if tau == 1.0:
            torch._foreach_copy_(t_params, s_params)
        else:
            torch._foreach_lerp_(t_params, s_params, tau)
