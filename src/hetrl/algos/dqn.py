"""DQN (Mnih et al. 2015) with double Q-learning, an optional dueling head, n-step returns,
uniform or prioritized replay, an epsilon schedule, hard or Polyak target updates, Huber loss and
gradient clipping.

The Q-network follows the observations (``network="auto"``): the MinAtar network (Young and Tian
2019) for small images (at most 16x16), the Nature CNN (Mnih et al. 2015) for larger ones, an MLP
of ``hidden`` for vectors; ``network`` names one of them, or ``"module:function"``, a factory
``(obs_shape, n_actions) -> nn.Module`` of the user's (importable, so actor processes and resumed
runs build the same network), checked on a dummy batch, or ``PATH.json``, an architecture a search
found (``hetrl cosearch``; :class:`hetrl.nets.searched.SearchedQNetwork`), read when the network is
built (so every process of a run reads the file: give a path they all see).

The config's defaults are the generic ones, used for an env without a row in ``hetrl.tuned``
(which holds the tuned values per env). They began as rl-baselines3-zoo's CartPole-v1 values
(lr 2.3e-3, batch 64, 256x256, 128 updates every 256 env steps, epsilon 1 -> 0.04 over 16k steps,
the target refreshed every 128 updates), with double Q-learning on.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from torch import nn

from hetrl.algos.base import AgentConfig, Algorithm, TorchLearner, adam, polyak_, seeded_init
from hetrl.algos.distillation import DISTILL, distillation_loss
from hetrl.envs.spec import EnvSpec
from hetrl.errors import HetrlError, user_code_failed
from hetrl.importable import load, name_of
from hetrl.nets import QNetwork
from hetrl.nets.conv import MinAtarNet, NatureCNN

NETWORKS = ("auto", "nature", "minatar", "mlp")  # or "module:function", a factory of the user's, or an architecture file
ARCHITECTURE_FILE = ".json"  # network=PATH.json: a searched architecture (hetrl cosearch)
SMALL_IMAGE = 16  # auto: images at most this high and wide get the MinAtar network, larger ones the Nature CNN


@dataclass
class DQNConfig(AgentConfig):
    hidden: tuple[int, ...] = (256, 256)
    lr: float = 2.3e-3
    gamma: float = 0.99
    batch_size: int = 64
    buffer_size: int = 100_000
    learning_starts: int = 1_000
    replay_ratio: float = 0.5
    train_every: int = 256
    double: bool = True
    dueling: bool = False
    target_update_every: int = 128  # gradient updates between hard target copies (tau == 1)
    tau: float = 1.0  # 1: hard copies every target_update_every updates; < 1: Polyak every update
    eps_start: float = 1.0
    eps_end: float = 0.04
    eps_decay_steps: int = 16_000
    max_grad_norm: float | None = 10.0
    network: str = "auto"  # auto (by the observations), nature, minatar, mlp, "module:function" (a factory) or PATH.json (hetrl cosearch's architecture)
    teacher: str = ""  # a DQN run directory of the same env whose Q-values the learner matches beside the TD loss (distillation); "" for none
    distill_weight: float = 1.0  # teacher: the distillation loss's weight (the TD loss's is 1)
    distill: str = "mse"  # teacher: mse (Q-values on every action, squared Q units) or kl (policies softmax(Q / T))
    distill_temperature: float = 1.0  # teacher, distill=kl: T

    COST_FREE = AgentConfig.COST_FREE | {"eps_start", "eps_end", "eps_decay_steps", "distill_weight", "distill",
                                         "distill_temperature"}

    def validate(self) -> list[str]:
        problems = super().validate()
        if self.network not in NETWORKS and ":" not in self.network and not self.network.endswith(ARCHITECTURE_FILE):
            problems.append(f"network must be one of {', '.join(NETWORKS)}, 'module:function' or an architecture "
                            f"file PATH.json (got {self.network!r})")
        if not 0 < self.tau <= 1:
            problems.append(f"tau must be in (0, 1] (got {self.tau})")
        if self.target_update_every <= 0:
            problems.append(f"target_update_every must be > 0 (got {self.target_update_every})")
        if not (0 <= self.eps_end <= self.eps_start <= 1):
            problems.append(f"epsilon must fall within [0, 1]: 0 <= eps_end <= eps_start <= 1 (got eps_start={self.eps_start}, "
                            f"eps_end={self.eps_end})")
        if self.eps_decay_steps < 0:
            problems.append(f"eps_decay_steps must be >= 0 (got {self.eps_decay_steps})")
        if self.teacher and not Path(self.teacher).is_dir():
            problems.append(f"teacher={self.teacher} is not a directory; give the run directory of a trained DQN agent "
                            "(runs/dqn_...) or teacher='' for none")
        if self.distill not in DISTILL:
            problems.append(f"distill must be one of {', '.join(DISTILL)} (got {self.distill!r})")
        if not self.distill_weight >= 0:
            problems.append(f"distill_weight must be >= 0 (got {self.distill_weight})")
        if not self.distill_temperature > 0:
            problems.append(f"distill_temperature must be > 0 (got {self.distill_temperature})")
        return problems


class DQNCheckpoint:
    """DQN's checkpoint format, written once for every DQN learner (Learn/torch, numba, blas), so a run
    resumes on any of them. A learner has ``q``, ``q_target``, an ``optimizer`` with torch Adam's
    state dicts and ``updates``."""

    q: nn.Module
    q_target: nn.Module
    optimizer: Any
    updates: int

    def state_dict(self) -> dict[str, Any]:
        return {"q": self.q.state_dict(), "q_target": self.q_target.state_dict(),
                "optimizer": self.optimizer.state_dict(), "updates": self.updates}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.q.load_state_dict(state["q"])  # copies into the parameters (a flat learner's vectors included)
        self.q_target.load_state_dict(state["q_target"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.updates = state["updates"]


class DQNLearner(DQNCheckpoint, TorchLearner):
    def __init__(self, algo: "DQN", device: torch.device, seed: int) -> None:
        cfg = algo.config
        with seeded_init(seed):
            self.q = algo.make_networks()["q"]
        self.q.to(device)
        self.q_target = copy.deepcopy(self.q).requires_grad_(False)
        self.optimizer = adam(self.q.parameters(), cfg.lr)
        self.cfg = cfg
        self.updates = 0
        self.teacher: nn.Module | None = None  # the frozen teacher where cfg.teacher names one (use_teacher)

    @property
    def policy_network(self) -> QNetwork:
        return self.q

    def use_teacher(self, network: nn.Module) -> None:
        """Distil from ``network`` (the frozen Q-network of the run ``teacher`` names; Learn/torch loads it)."""
        self.teacher = network.to(next(self.q.parameters()).device).requires_grad_(False)

    def distillation(self, obs: torch.Tensor, q_all: torch.Tensor) -> torch.Tensor:
        """The distillation loss of the online Q-values ``q_all`` on ``obs`` against the teacher's."""
        if self.teacher is None:
            raise HetrlError(f"teacher={self.cfg.teacher} was never loaded into this learner: distillation runs on the "
                             "torch learners (Learn/torch, torch-channels-last, torch-bf16), which load it")
        with torch.no_grad():
            teacher_q = self.teacher(obs).float()
        return distillation_loss(q_all.float(), teacher_q, self.cfg.distill, self.cfg.distill_temperature)

    def optimizers(self) -> list[torch.optim.Optimizer]:
        return [self.optimizer]

    def step(self, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        cfg = self.cfg
        q_all = self.q(batch["obs"])
        q = q_all.gather(1, batch["actions"].unsqueeze(1)).squeeze(1)
        with torch.no_grad():
            next_q_all = self.q_target(batch["next_obs"])
            if cfg.double:
                best = self.q(batch["next_obs"]).argmax(dim=1, keepdim=True)
                next_q = next_q_all.gather(1, best).squeeze(1)
            else:
                next_q = next_q_all.max(dim=1).values
            target = batch["rewards"] + batch["discounts"] * next_q
        td = target - q
        loss = (batch["weights"] * F.huber_loss(q, target, reduction="none")).mean()
        if cfg.teacher:
            loss = loss + cfg.distill_weight * self.distillation(batch["obs"], q_all)
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        if cfg.max_grad_norm is not None:
            torch.nn.utils.clip_grad_norm_(self.q.parameters(), cfg.max_grad_norm)
        self.optimizer.step()
        return {"td_errors": td.detach().abs(), "loss": loss.detach()}

    def periodic_due(self) -> bool:
        """Polyak averaging follows every update; hard copies every ``target_update_every``."""
        return self.cfg.tau < 1.0 or self.updates % self.cfg.target_update_every == 0

    def periodic(self, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        polyak_(self.q_target, self.q, self.cfg.tau)
        return {}  # no actor


def flat_mlp_refusal(algorithm: Algorithm, learner: str, fix: str) -> str | None:
    """Why a learner that writes DQN's update over a flat MLP (Learn/numba, Learn/triton) cannot run
    ``algorithm``'s, naming the ``learner`` and ending with the ``fix``; None when it can."""
    if not isinstance(algorithm, DQN) or algorithm.early_exits:
        return f"the {learner} learner implements DQN only, not {algorithm.name}; {fix}"
    if not algorithm.mlp_networks():
        return f"the {learner} learner runs MLP Q-networks only, not DQN's {algorithm.network_kind} network; {fix}"
    if algorithm.config.dueling:
        return f"the {learner} learner has no dueling head; set dueling=false or {fix}"
    if algorithm.distils:
        return f"the {learner} learner does not distil from a teacher; {fix}"
    return None


class DQN(Algorithm):
    name = "dqn"
    exploration_rule = "epsilon-greedy"
    Config = DQNConfig
    policy_key = "q"
    discrete_actions = True
    default_steps = 100_000
    early_exits = False  # a branched Q-network (exit-dqn): the flat host learners do not write it out
    config: DQNConfig

    def build_learner(self, device: torch.device, seed: int) -> DQNLearner:
        return DQNLearner(self, device, seed)

    def __init__(self, spec: EnvSpec, config: DQNConfig) -> None:
        super().__init__(spec, config)
        self.network_kind = network_kind(spec, config.network)

    @property
    def distils(self) -> bool:
        """Whether the learner also matches a teacher's Q-values (``teacher``): the torch learners only."""
        return bool(self.config.teacher)

    def mlp_networks(self) -> bool:
        return self.network_kind == "mlp"

    def numpy_policy(self) -> bool:
        # hetrl's own networks, searched ones included; a user's module has none
        return self.network_kind in ("mlp", "nature", "minatar", "searched")

    def make_networks(self) -> dict[str, nn.Module]:
        cfg, spec, kind = self.config, self.spec, self.network_kind
        if kind == "mlp":
            return {"q": QNetwork(int(np.prod(spec.obs_shape)), spec.n_actions, cfg.hidden, cfg.dueling)}
        if kind in ("nature", "minatar"):
            net = NatureCNN if kind == "nature" else MinAtarNet
            try:
                return {"q": net(spec.obs_shape, spec.n_actions, cfg.dueling, scale=spec.pixel_scale)}
            except ValueError as exc:
                raise HetrlError(f"network={kind} on {spec.env_id}: {exc}; use network=auto") from None
        if kind == "searched":
            return {"q": searched_q_network(cfg.network, spec)}
        return {"q": checked_q_network(load_factory(cfg.network), spec, cfg.network)}

    def random_actions(self, rng: np.random.Generator, n: int) -> np.ndarray:
        # floor(u * n_actions) of one float64 draw: uniform, and a third of rng.integers' cost per call
        return (rng.random(n) * self.spec.n_actions).astype(np.int64)

    def draw_exploration(self, rng: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray]:
        u = rng.random(2 * n)  # one call for both: the explore draws, then the random actions
        return u[:n].astype(np.float32), (u[n:] * self.spec.n_actions).astype(np.int64)

    def exploration(self, env_steps: int) -> float:
        cfg = self.config
        frac = min(1.0, env_steps / max(1, cfg.eps_decay_steps))
        return cfg.eps_start + frac * (cfg.eps_end - cfg.eps_start)

    def action_rule(self, out: np.ndarray, explore: np.ndarray, random_actions: np.ndarray, level: float) -> np.ndarray:
        return np.where(explore < level, random_actions, out.argmax(axis=1))

    def greedy_rule(self, out: np.ndarray) -> np.ndarray:
        return out.argmax(axis=1)

    def greedy_torch(self, out: torch.Tensor) -> torch.Tensor:
        return out.argmax(dim=1)


def network_kind(spec: EnvSpec, network: str) -> str:
    """What ``network`` means for ``spec``: "mlp", "nature", "minatar", "custom" (a factory) or
    "searched" (an architecture file)."""
    if network.endswith(ARCHITECTURE_FILE):
        return "searched"
    if ":" in network:
        return "custom"
    if network == "auto":
        if not spec.is_image:
            return "mlp"
        return "minatar" if max(spec.obs_shape[1:]) <= SMALL_IMAGE else "nature"
    if network in ("nature", "minatar") and not spec.is_image:
        raise HetrlError(f"network={network} is a conv network, but {spec.env_id} has {spec.obs_shape}-shaped "
                         "observations, not images (C, H, W); use network=mlp or auto")
    return network


def factory_name(factory: Callable[..., nn.Module]) -> str:
    """``factory`` as the ``network`` setting that names it ("module:function"), after checking that
    the name finds it again (a lambda or a nested function cannot be found in another process)."""
    name = name_of(factory)
    try:
        found = load_factory(name)
    except HetrlError:
        found = None
    if found is not factory:
        raise HetrlError(f"network factory {name} cannot be imported by that name (a lambda or a nested "
                         "function?); define it at the top level of a module")
    return name


def load_factory(name: str) -> Callable[..., nn.Module]:
    """The factory a ``"module:function"`` setting names."""
    try:
        obj = load(name)
    except (ImportError, AttributeError) as exc:
        raise HetrlError(f"network={name}: cannot import it ({exc}); give 'module:function' of an importable module") from None
    if not callable(obj):
        raise HetrlError(f"network={name} is not callable; give a function (obs_shape, n_actions) -> torch.nn.Module")
    return obj


def searched_q_network(path: str, spec: EnvSpec) -> nn.Module:
    """The network of the architecture file ``path``, checked to fit the env (its inputs divided by
    the env's pixel scale, as hetrl's conv networks are)."""
    from hetrl.nets.searched import Architecture

    try:
        architecture = Architecture.load(path).for_env(spec.obs_shape, spec.n_actions, spec.pixel_scale)
    except ValueError as exc:
        raise HetrlError(f"network={path}: {exc}") from None
    return architecture.build()


def checked_q_network(factory: Callable[..., nn.Module], spec: EnvSpec, name: str) -> nn.Module:
    """``factory(obs_shape, n_actions)``, checked to be a module mapping a batch of observations (of
    the env's dtype) to (batch, n_actions) Q-values."""
    try:
        net = factory(tuple(spec.obs_shape), spec.n_actions)
    except Exception as exc:  # the user's code (or a name that is no factory: math:sqrt)
        raise user_code_failed(f"network factory {name}", exc) from None
    if not isinstance(net, nn.Module):
        raise HetrlError(f"network factory {name} returned {type(net).__name__}, not a torch.nn.Module")
    dummy = torch.zeros((2, *spec.obs_shape), dtype=getattr(torch, spec.obs_dtype))
    with torch.no_grad():
        try:
            out = net(dummy)
        except Exception as exc:  # the user's module failed on a batch of the env's observations
            raise HetrlError(f"network factory {name} fails on a batch of {spec.env_id} observations "
                             f"{tuple(dummy.shape)} {spec.obs_dtype}: {type(exc).__name__}: {exc}") from None
    if not isinstance(out, torch.Tensor) or tuple(out.shape) != (2, spec.n_actions):
        shape = tuple(out.shape) if isinstance(out, torch.Tensor) else type(out).__name__
        raise HetrlError(f"network factory {name} maps a batch of 2 {spec.env_id} observations to {shape}; "
                         f"a Q-network must give (2, {spec.n_actions}): one Q-value per action")
    return net
