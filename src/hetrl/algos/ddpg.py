"""DDPG (Lillicrap et al. 2016) and TD3 (Fujimoto et al. 2018) as a variant of it.

TD3 = DDPG + twin critics (the smaller target Q is used), target policy smoothing (clipped
Gaussian noise on the target action) and delayed actor and target updates.

The config's defaults are the generic ones, used for an env without a row in ``hetrl.tuned``: the
tuned Pendulum-v1 values of rl-baselines3-zoo (lr 1e-3, gamma 0.98, tau 0.005, batch 256, 400x300
networks, Gaussian exploration noise 0.1 in units of half the action range, 10k random steps
before learning, one update per env step). ``noise_type=ornstein-uhlenbeck`` makes the exploration
noise correlated in time (``hetrl.algos.exploration.OrnsteinUhlenbeck``), as the zoo's
MountainCarContinuous rows use it: ``action_noise`` is then the process's sigma.
"""

from __future__ import annotations

import copy
import hashlib
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from hetrl.algos.base import AgentConfig, Algorithm, TorchLearner, adam, frozen, polyak_, seeded_init
from hetrl.algos.exploration import FreshDraws, OrnsteinUhlenbeck
from hetrl.nets import Actor, Critic


NOISE_TYPES = ("normal", "ornstein-uhlenbeck")


@dataclass
class DDPGConfig(AgentConfig):
    hidden: tuple[int, ...] = (400, 300)
    lr: float = 1e-3
    gamma: float = 0.98
    batch_size: int = 256
    buffer_size: int = 200_000
    learning_starts: int = 10_000
    replay_ratio: float = 1.0
    train_every: int = 1
    tau: float = 0.005
    action_noise: float = 0.1  # exploration: the noise's std, as a fraction of half the action range
    noise_type: str = "normal"  # "normal": fresh Gaussian noise each step; "ornstein-uhlenbeck": correlated in time
    twin_critics: bool = False
    target_noise: float = 0.0  # target policy smoothing std (fraction of half range); 0 = off
    target_noise_clip: float = 0.5
    policy_delay: int = 1  # critic updates per actor (and target) update

    COST_FREE = AgentConfig.COST_FREE | {"action_noise", "noise_type", "target_noise_clip"}

    def validate(self) -> list[str]:
        problems = super().validate()
        if not 0 < self.tau <= 1:
            problems.append(f"tau must be in (0, 1] (got {self.tau})")
        if self.policy_delay < 1:
            problems.append(f"policy_delay must be >= 1 (got {self.policy_delay})")
        if self.action_noise < 0 or self.target_noise < 0 or self.target_noise_clip < 0:
            problems.append(f"action_noise, target_noise and target_noise_clip must be >= 0 (got {self.action_noise}, "
                            f"{self.target_noise}, {self.target_noise_clip})")
        if self.noise_type not in NOISE_TYPES:
            problems.append(f"noise_type must be one of {', '.join(NOISE_TYPES)} (got {self.noise_type!r})")
        return problems


@dataclass
class TD3Config(DDPGConfig):
    twin_critics: bool = True
    target_noise: float = 0.2
    policy_delay: int = 2


class DDPGCheckpoint:
    """DDPG's checkpoint format, written once for every DDPG learner (Learn/torch, Learn/blas), so a run
    resumes on either. A learner has ``actor``, ``critic``, their targets, ``actor_optimizer`` and
    ``critic_optimizer`` (anything with torch Adam's state dicts), ``generator`` and ``updates``."""

    actor: torch.nn.Module
    critic: torch.nn.Module
    actor_target: torch.nn.Module
    critic_target: torch.nn.Module
    actor_optimizer: Any
    critic_optimizer: Any
    generator: torch.Generator
    updates: int

    def state_dict(self) -> dict[str, Any]:
        return {
            "actor": self.actor.state_dict(),
            "critic": self.critic.state_dict(),
            "actor_target": self.actor_target.state_dict(),
            "critic_target": self.critic_target.state_dict(),
            "actor_optimizer": self.actor_optimizer.state_dict(),
            "critic_optimizer": self.critic_optimizer.state_dict(),
            "generator": self.generator.get_state(),
            "generator_device": self.generator.device.type,
            "updates": self.updates,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        for name in ("actor", "critic", "actor_target", "critic_target", "actor_optimizer", "critic_optimizer"):
            getattr(self, name).load_state_dict(state[name])
        saved = state["generator"]
        if state.get("generator_device", self.generator.device.type) == self.generator.device.type:
            self.generator.set_state(saved)
        else:  # a CUDA generator's state means nothing to a CPU one (and back): reseed from it, deterministically
            digest = hashlib.sha256(saved.numpy().tobytes()).digest()
            self.generator.manual_seed(int.from_bytes(digest[:8], "little"))
        self.updates = state["updates"]


class DDPGLearner(DDPGCheckpoint, TorchLearner):
    def __init__(self, algo: "DDPG", device: torch.device, seed: int) -> None:
        cfg = algo.config
        with seeded_init(seed):
            nets = algo.make_networks()
        self.actor, self.critic = nets["actor"], nets["critic"]
        self.actor.to(device)
        self.critic.to(device)
        self.actor_target = copy.deepcopy(self.actor).requires_grad_(False)
        self.critic_target = copy.deepcopy(self.critic).requires_grad_(False)
        self.actor_optimizer = adam(self.actor.parameters(), cfg.lr)
        self.critic_optimizer = adam(self.critic.parameters(), cfg.lr)
        # Target policy smoothing draws on the learner's device, from its own seeded generator.
        self.generator = torch.Generator(device=device)
        self.generator.manual_seed(seed + 1)
        self.cfg = cfg
        self.updates = 0

    @property
    def policy_network(self) -> Actor:
        return self.actor

    def optimizers(self) -> list[torch.optim.Optimizer]:
        return [self.critic_optimizer, self.actor_optimizer]

    def draw_inputs(self, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """TD3's target policy smoothing noise, one draw per action, from the learner's generator."""
        if self.cfg.target_noise <= 0:
            return {}
        actions = batch["actions"]
        return {"target_noise": torch.randn(actions.shape, generator=self.generator, device=actions.device)}

    def step(self, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """The critic's update."""
        cfg = self.cfg
        obs, actions, next_obs = batch["obs"], batch["actions"], batch["next_obs"]
        with torch.no_grad():
            next_actions = self.actor_target(next_obs)
            if cfg.target_noise > 0:
                scale = self.actor.scale
                noise = batch["target_noise"]
                noise = (noise * cfg.target_noise).clamp(-cfg.target_noise_clip, cfg.target_noise_clip) * scale
                low, high = self.actor.center - scale, self.actor.center + scale
                next_actions = torch.maximum(torch.minimum(next_actions + noise, high), low)
            next_q = torch.stack(self.critic_target(next_obs, next_actions)).min(dim=0).values
            target = batch["rewards"] + batch["discounts"] * next_q
        q_values = self.critic(obs, actions)
        weights = batch["weights"]
        critic_loss = sum((weights * F.mse_loss(q, target, reduction="none")).mean() for q in q_values)
        self.critic_optimizer.zero_grad(set_to_none=True)
        critic_loss.backward()
        if cfg.max_grad_norm is not None:
            torch.nn.utils.clip_grad_norm_(self.critic.parameters(), cfg.max_grad_norm)
        self.critic_optimizer.step()
        return {"td_errors": (target - q_values[0]).detach().abs(), "loss": critic_loss.detach()}

    def periodic_due(self) -> bool:
        return self.updates % self.cfg.policy_delay == 0

    def periodic(self, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """The actor's update (delayed in TD3), then both targets' Polyak averaging; returns the
        actor's loss, -mean Q(s, mu(s)) of the first critic head."""
        cfg, obs = self.cfg, batch["obs"]
        with frozen(self.critic):  # the critic's weight gradients here would be thrown away at its next step
            actor_loss = -self.critic(obs, self.actor(obs))[0].mean()
            self.actor_optimizer.zero_grad(set_to_none=True)
            actor_loss.backward()
        if cfg.max_grad_norm is not None:
            torch.nn.utils.clip_grad_norm_(self.actor.parameters(), cfg.max_grad_norm)
        self.actor_optimizer.step()
        polyak_(self.actor_target, self.actor, cfg.tau)
        polyak_(self.critic_target, self.critic, cfg.tau)
        return {"actor_loss": actor_loss.detach()}


class DDPG(Algorithm):
    name = "ddpg"
    exploration_rule = "gaussian-noise"
    Config = DDPGConfig
    policy_key = "actor"
    discrete_actions = False
    default_steps = 20_000
    config: DDPGConfig

    def __init__(self, spec, config) -> None:
        super().__init__(spec, config)
        self._low = np.asarray(spec.action_low, dtype=np.float32)
        self._high = np.asarray(spec.action_high, dtype=np.float32)
        self._half_range = (self._high - self._low) / 2

    def build_learner(self, device: torch.device, seed: int) -> DDPGLearner:
        return DDPGLearner(self, device, seed)

    def make_networks(self) -> dict[str, torch.nn.Module]:
        cfg, spec = self.config, self.spec
        obs_dim, act_dim = int(np.prod(spec.obs_shape)), spec.action_shape[0]
        return {
            "actor": Actor(obs_dim, act_dim, cfg.hidden, spec.action_low, spec.action_high),
            "critic": Critic(obs_dim, act_dim, cfg.hidden, n=2 if cfg.twin_critics else 1),
        }

    def random_actions(self, rng: np.random.Generator, n: int) -> np.ndarray:
        return rng.uniform(self._low, self._high, size=(n, self._low.size)).astype(np.float32)

    def draw_exploration(self, rng: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray]:
        noise = rng.standard_normal((n, self._low.size), dtype=np.float32) * self._half_range
        return noise, np.zeros((n, self._low.size), dtype=np.float32)

    def exploration_process(self, n: int) -> FreshDraws:
        """Gaussian noise drawn afresh each step, or an Ornstein-Uhlenbeck process per env (``noise_type``)."""
        if self.config.noise_type == "ornstein-uhlenbeck":
            return OrnsteinUhlenbeck(self, n, self._half_range)
        return FreshDraws(self, n)

    def exploration(self, env_steps: int) -> float:
        return self.config.action_noise

    def action_rule(self, out: np.ndarray, explore: np.ndarray, random_actions: np.ndarray, level: float) -> np.ndarray:
        return np.clip(out + level * explore, self._low, self._high).astype(np.float32, copy=False)

    def greedy_rule(self, out: np.ndarray) -> np.ndarray:
        return out.astype(np.float32, copy=False)

    def greedy_torch(self, out: torch.Tensor) -> torch.Tensor:
        return out


class TD3(DDPG):
    name = "td3"
    Config = TD3Config
