"""SAC: soft actor-critic with an automatically tuned entropy temperature (Haarnoja et al. 2018,
"Soft Actor-Critic Algorithms and Applications").

The update is Stable-Baselines3's (``sb3.SAC.train``), written against the protocol:

- twin critics trained towards ``r + discounts * (min_i Q'_i(s', a') - alpha * log pi(a'|s'))``
  with ``a' ~ pi(.|s')``, loss ``0.5 * sum_i mean(w * (Q_i(s, a) - target)^2)``; targets follow the
  critics by Polyak averaging (``tau``);
- a squashed Gaussian actor (``hetrl.nets.GaussianActor``: tanh of a diagonal Gaussian, scaled to
  the action bounds), trained to minimise ``mean(alpha * log pi(a|s) - min_i Q_i(s, a))``, ``a`` drawn
  by reparameterisation;
- the temperature ``alpha = exp(log_alpha)``, with its own Adam, trained to minimise
  ``-mean(log_alpha * (log pi(a|s) + target_entropy))``, target entropy ``-dim(A)`` by default.

How the update is split (:class:`~hetrl.algos.base.TorchLearner`: ``step`` every update, then
``periodic`` when due, so that Learn/cudagraph can capture each as a graph):

- ``step``: the critics' gradient step, then the critic targets' Polyak average. Every update, as
  Stable-Baselines3 (``target_update_interval=1``) and CleanRL (``target_network_frequency=1``) do.
- ``periodic``: the actor's gradient step (against the critics just updated, as in SB3), then the
  temperature's step from the same actions' log densities (detached). Due every ``policy_delay``
  updates; the default 1 is SB3's every update. A larger delay updates the actor and the
  temperature less often (CleanRL's ``policy_frequency``, without its catch-up steps).

  Both read the temperature of the start of the update (the critic's target and the actor's loss
  alike), as SB3 does, and the temperature moves last: the result equals SB3's update order.
- Random inputs: ``draw_inputs`` draws two standard normal tensors of the batch's action shape on
  the learner's device from its own seeded generator before the step: ``next_noise`` (for the
  next-state actions of the critic's target) and ``actor_noise`` (for the actor's and the
  temperature's step), drawn every update whether ``periodic`` is due or not, so that a graph
  replays the same draws as the torch learner.

Acting: the policy network's output is its mean and log std; the behaviour action is
``tanh(mu + level * std * eps) * scale + center`` with ``eps`` the executor's standard normal draws
(``level`` is 1: the policy's own noise), the greedy action ``tanh(mu) * scale + center``.

gSDE (``use_sde``; Raffin et al. 2022, as Stable-Baselines3 has it): the actor is
``hetrl.nets.SDEActor``, whose noise is ``z(s) @ (sigma * E)`` for the last hidden layer's features
``z(s)``, a learned std matrix ``sigma`` and a matrix of standard normals ``E`` that each env holds for
``sde_period()`` env steps (``hetrl.algos.exploration.HeldDraws``), so exploration is smooth in time,
which sparse-reward tasks such as MountainCarContinuous need. The learner draws one ``E`` per update
for the batch (the next-state actions and the actor's step alike), as SB3 does. Learn/torch runs it;
the host learners (blas) and the CUDA-graph learner refuse it with the reason.

Defaults are rl-baselines3-zoo's for Pendulum-v1 (lr 1e-3, 20k steps) over SB3's SAC defaults:
256x256 networks, batch 256, 100 random steps, tau 0.005, gamma 0.99, one update per env step,
``ent_coef="auto"`` starting at alpha 1. Updates start once the replay holds a batch (256
transitions; SB3 samples its first batches from the 100 it has). The replay holds 100k
transitions, not SB3's 1M: hetrl's replay is allocated whole and checkpointed whole, and a
20k-step run never fills even 100k (set ``buffer_size=1000000`` for SB3's).
"""

from __future__ import annotations

import copy
import hashlib
import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from hetrl.algos.base import AgentConfig, Algorithm, TorchLearner, adam, frozen, polyak_, seeded_init
from hetrl.algos.exploration import FreshDraws, HeldDraws
from hetrl.nets import Critic, GaussianActor, SDEActor


@dataclass
class SACConfig(AgentConfig):
    hidden: tuple[int, ...] = (256, 256)
    lr: float = 1e-3  # actor, critics and temperature alike
    gamma: float = 0.99
    batch_size: int = 256
    buffer_size: int = 100_000
    learning_starts: int = 100
    replay_ratio: float = 1.0
    train_every: int = 1
    tau: float = 0.005
    ent_coef: str = "auto"  # "auto" (tuned, starting at alpha 1), "auto_X" (tuned, starting at X), or a fixed alpha "X"
    target_entropy: float | None = None  # of the tuned temperature; none: -dim(A)
    policy_delay: int = 1  # critic updates per actor and temperature update
    use_sde: bool = False  # gSDE exploration (Raffin et al. 2022): the actor is hetrl.nets.SDEActor
    log_std_init: float = -3.0  # gSDE: the initial log of every entry of the noise's std matrix
    use_expln: bool = False  # gSDE: expln instead of exp for the std (grows like log above 1)
    sde_sample_freq: int = -1  # gSDE: env steps between new noise matrices while acting; -1: every train_every steps

    COST_FREE = AgentConfig.COST_FREE | {"log_std_init", "use_expln", "sde_sample_freq"}

    def sde_period(self) -> int:
        """Env steps (of each env) an actor holds one gSDE noise matrix: ``sde_sample_freq``, or with
        -1 ``train_every``, as Stable-Baselines3 redraws at the start of every rollout of ``train_freq``."""
        return self.sde_sample_freq if self.sde_sample_freq > 0 else self.train_every

    def validate(self) -> list[str]:
        problems = super().validate()
        if not 0 < self.tau <= 1:
            problems.append(f"tau must be in (0, 1] (got {self.tau})")
        if self.policy_delay < 1:
            problems.append(f"policy_delay must be >= 1 (got {self.policy_delay})")
        if self.sde_sample_freq == 0 or self.sde_sample_freq < -1:
            problems.append(f"sde_sample_freq must be -1 (a new gSDE matrix every train_every steps) or >= 1 "
                            f"(got {self.sde_sample_freq})")
        if self.n_step != 1:
            problems.append(f"n_step must be 1 for sac: the stored n-step reward would lack the entropy bonus of the "
                            f"steps inside it (got {self.n_step})")
        try:
            self.temperature()
        except ValueError as exc:
            problems.append(str(exc))
        return problems

    def temperature(self) -> tuple[bool, float]:
        """(whether alpha is tuned, its initial value), from ``ent_coef``; ValueError names a bad one."""
        text = self.ent_coef.strip().lower()
        tuned = text == "auto" or text.startswith("auto_")
        value = text[len("auto_"):] if text.startswith("auto_") else ("1" if tuned else text)
        try:
            alpha = float(value)
        except ValueError:
            alpha = -1.0
        if not (alpha > 0 and math.isfinite(alpha)):
            raise ValueError(f"ent_coef must be 'auto', 'auto_X' or a number X, with X > 0 (got {self.ent_coef!r})")
        return tuned, alpha


def restore_generator(generator: torch.Generator, state: dict[str, Any]) -> None:
    """Load a saved generator state; one of another device type (a GPU run's, loaded on a host, or
    back) means nothing to this one, so it is reseeded from the saved state, deterministically."""
    saved = state["generator"]
    if state.get("generator_device", generator.device.type) == generator.device.type:
        generator.set_state(saved)
    else:
        digest = hashlib.sha256(saved.numpy().tobytes()).digest()
        generator.manual_seed(int.from_bytes(digest[:8], "little"))


class SACCheckpoint:
    """SAC's checkpoint format, written once (as :class:`~hetrl.algos.ddpg.DDPGCheckpoint` is for
    DDPG): the networks, the critics' target, the optimisers, ``log_alpha`` and its optimiser (None
    for a fixed temperature), the noise generator and the update count."""

    actor: torch.nn.Module
    critic: torch.nn.Module
    critic_target: torch.nn.Module
    actor_optimizer: Any
    critic_optimizer: Any
    alpha_optimizer: Any
    log_alpha: torch.Tensor
    generator: torch.Generator
    updates: int

    def state_dict(self) -> dict[str, Any]:
        return {
            "actor": self.actor.state_dict(),
            "critic": self.critic.state_dict(),
            "critic_target": self.critic_target.state_dict(),
            "actor_optimizer": self.actor_optimizer.state_dict(),
            "critic_optimizer": self.critic_optimizer.state_dict(),
            "log_alpha": self.log_alpha.detach().clone(),
            "alpha_optimizer": self.alpha_optimizer.state_dict() if self.alpha_optimizer else None,
            "generator": self.generator.get_state(),
            "generator_device": self.generator.device.type,
            "updates": self.updates,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        for name in ("actor", "critic", "critic_target", "actor_optimizer", "critic_optimizer"):
            getattr(self, name).load_state_dict(state[name])
        with torch.no_grad():
            self.log_alpha.copy_(state["log_alpha"])
        if self.alpha_optimizer is not None:
            if state.get("alpha_optimizer") is None:
                raise ValueError("the checkpoint's temperature was fixed (ent_coef a number), this run tunes it (ent_coef auto)")
            self.alpha_optimizer.load_state_dict(state["alpha_optimizer"])
        restore_generator(self.generator, state)
        self.updates = state["updates"]


class SACLearner(SACCheckpoint, TorchLearner):
    def __init__(self, algo: "SAC", device: torch.device, seed: int) -> None:
        cfg = algo.config
        with seeded_init(seed):
            nets = algo.make_networks()
        self.actor: GaussianActor | SDEActor = nets["actor"].to(device)
        self.critic: Critic = nets["critic"].to(device)
        self.critic_target = copy.deepcopy(self.critic).requires_grad_(False)
        self.actor_optimizer = adam(self.actor.parameters(), cfg.lr)
        self.critic_optimizer = adam(self.critic.parameters(), cfg.lr)
        self.tuned, alpha = cfg.temperature()
        self.log_alpha = torch.full((1,), math.log(alpha), device=device, requires_grad=self.tuned)
        self.alpha_optimizer = adam([self.log_alpha], cfg.lr) if self.tuned else None
        self.target_entropy = algo.target_entropy()
        # The reparameterisation noise is drawn on the learner's device, from its own seeded generator.
        self.generator = torch.Generator(device=device)
        self.generator.manual_seed(seed + 1)
        self.cfg = cfg
        self.updates = 0
        # The latest actor and temperature losses (detached, on the device; None before the first).
        self.actor_loss: torch.Tensor | None = None
        self.alpha_loss: torch.Tensor | None = None

    @property
    def policy_network(self) -> GaussianActor | SDEActor:
        return self.actor

    @property
    def alpha(self) -> float:
        return float(self.log_alpha.detach().exp())

    def optimizers(self) -> list[torch.optim.Optimizer]:
        return [self.critic_optimizer, self.actor_optimizer] + ([self.alpha_optimizer] if self.alpha_optimizer else [])

    def draw_inputs(self, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """Standard normal noise for the next-state actions and for the actor's step, one per action;
        with gSDE one (features x actions) matrix for both, as SB3 resets its noise once per gradient step."""
        shape, device = batch["actions"].shape, batch["actions"].device
        if self.cfg.use_sde:
            matrix = torch.randn((self.actor.features, shape[1]), generator=self.generator, device=device)
            return {"next_noise": matrix, "actor_noise": matrix}
        return {"next_noise": torch.randn(shape, generator=self.generator, device=device),
                "actor_noise": torch.randn(shape, generator=self.generator, device=device)}

    def step(self, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """The critics' update, then their targets' Polyak average."""
        cfg = self.cfg
        obs, actions, next_obs = batch["obs"], batch["actions"], batch["next_obs"]
        with torch.no_grad():
            next_actions, next_log_prob = self.actor.sample(next_obs, batch["next_noise"])
            next_q = torch.stack(self.critic_target(next_obs, next_actions)).min(dim=0).values
            soft_q = next_q - self.log_alpha.exp() * next_log_prob
            target = batch["rewards"] + batch["discounts"] * soft_q
        q_values = self.critic(obs, actions)
        weights = batch["weights"]
        critic_loss = 0.5 * sum((weights * F.mse_loss(q, target, reduction="none")).mean() for q in q_values)
        self.critic_optimizer.zero_grad(set_to_none=True)
        critic_loss.backward()
        if cfg.max_grad_norm is not None:
            torch.nn.utils.clip_grad_norm_(self.critic.parameters(), cfg.max_grad_norm)
        self.critic_optimizer.step()
        polyak_(self.critic_target, self.critic, cfg.tau)
        return {"td_errors": (target - q_values[0]).detach().abs(), "loss": critic_loss.detach()}

    def periodic_due(self) -> bool:
        return self.updates % self.cfg.policy_delay == 0

    def periodic(self, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """The actor's update, then the temperature's, both with the temperature of the update's start;
        returns the actor's loss, mean(alpha * log pi(a|s) - min_i Q_i(s, a))."""
        cfg, obs = self.cfg, batch["obs"]
        alpha = self.log_alpha.detach().exp()
        actions, log_prob = self.actor.sample(obs, batch["actor_noise"])
        with frozen(self.critic):  # the critics' weight gradients here would be thrown away at their next step
            q = torch.stack(self.critic(obs, actions)).min(dim=0).values
            actor_loss = (alpha * log_prob - q).mean()
            self.actor_optimizer.zero_grad(set_to_none=True)
            actor_loss.backward()
        if cfg.max_grad_norm is not None:
            torch.nn.utils.clip_grad_norm_(self.actor.parameters(), cfg.max_grad_norm)
        self.actor_optimizer.step()
        self.actor_loss = actor_loss.detach()
        if self.alpha_optimizer is not None:
            alpha_loss = -(self.log_alpha * (log_prob.detach() + self.target_entropy)).mean()
            self.alpha_optimizer.zero_grad(set_to_none=True)
            alpha_loss.backward()
            self.alpha_optimizer.step()
            self.alpha_loss = alpha_loss.detach()
        return {"actor_loss": self.actor_loss}


class SAC(Algorithm):
    name = "sac"
    Config = SACConfig
    policy_key = "actor"
    discrete_actions = False
    default_steps = 20_000
    stochastic_policy = True  # the acting network outputs a distribution (mean, log std), not actions
    exploration_rule = "gaussian-policy"  # a sample of the policy's own distribution
    config: SACConfig

    def __init__(self, spec, config) -> None:
        super().__init__(spec, config)
        self._low = np.asarray(spec.action_low, dtype=np.float32)
        self._high = np.asarray(spec.action_high, dtype=np.float32)
        self._scale = (self._high - self._low) / 2
        self._center = (self._high + self._low) / 2
        self.action_dim = self._low.size

    def build_learner(self, device: torch.device, seed: int) -> SACLearner:
        return SACLearner(self, device, seed)

    def target_entropy(self) -> float:
        """The tuned temperature's target entropy: the setting's, or -dim(A)."""
        cfg = self.config
        return float(-self.action_dim if cfg.target_entropy is None else cfg.target_entropy)

    def make_networks(self) -> dict[str, torch.nn.Module]:
        cfg, spec = self.config, self.spec
        obs_dim = int(np.prod(spec.obs_shape))
        actor = (SDEActor(obs_dim, self.action_dim, cfg.hidden, spec.action_low, spec.action_high, cfg.log_std_init,
                          cfg.use_expln) if cfg.use_sde
                 else GaussianActor(obs_dim, self.action_dim, cfg.hidden, spec.action_low, spec.action_high))
        return {
            "actor": actor,
            "critic": Critic(obs_dim, self.action_dim, cfg.hidden, n=2),
        }

    def random_actions(self, rng: np.random.Generator, n: int) -> np.ndarray:
        return rng.uniform(self._low, self._high, size=(n, self.action_dim)).astype(np.float32)

    def draw_exploration(self, rng: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray]:
        """Standard normal draws for the Gaussian policy's sample (``explore``): one per action, or
        with gSDE a (features x actions) matrix per env, flattened; ``random_actions`` is unused."""
        width = self.action_dim * (self.config.hidden[-1] if self.config.use_sde else 1)
        return rng.standard_normal((n, width), dtype=np.float32), np.zeros((n, self.action_dim), dtype=np.float32)

    def exploration_process(self, n: int) -> FreshDraws:
        """gSDE holds each env's noise matrix for ``sde_period`` steps; the plain policy draws afresh."""
        return HeldDraws(self, n, self.config.sde_period()) if self.config.use_sde else FreshDraws(self, n)

    def exploration(self, env_steps: int) -> float:
        return 1.0  # the policy's own noise, unscaled

    def _squash(self, u: np.ndarray) -> np.ndarray:
        return np.clip(np.tanh(u) * self._scale + self._center, self._low, self._high).astype(np.float32, copy=False)

    def action_rule(self, out: np.ndarray, explore: np.ndarray, random_actions: np.ndarray, level: float) -> np.ndarray:
        a = self.action_dim
        if self.config.use_sde:  # out: mu, then z_f * sigma[f, a]; explore: E[f, a] (SDEActor)
            noise = np.einsum("nfa,nfa->na", out[:, a:].reshape(len(out), -1, a), explore.reshape(len(out), -1, a))
            return self._squash(out[:, :a] + level * noise)
        return self._squash(out[:, :a] + level * np.exp(out[:, a:]) * explore)

    def greedy_rule(self, out: np.ndarray) -> np.ndarray:
        return self._squash(out[:, :self.action_dim])

    def greedy_torch(self, out: torch.Tensor) -> torch.Tensor:
        low, high = torch.as_tensor(self._low), torch.as_tensor(self._high)
        return torch.clamp(torch.tanh(out[:, :self.action_dim]) * torch.as_tensor(self._scale) + torch.as_tensor(self._center), low, high)
