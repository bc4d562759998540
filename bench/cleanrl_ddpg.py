"""DDPG in the style of CleanRL's ``ddpg_continuous_action.py`` (and, with ``--td3``, TD3 as its
``td3_continuous_action.py``: twin critics, target policy smoothing, the delayed actor): one file, a
plain torch loop, a numpy replay buffer.

Written for ``bench/peers.py`` (not CleanRL's own file): it trains the benchmark's DDPG settings
(uniform random actions before ``learning_starts``, Gaussian exploration noise in units of half the
action range) on one Gymnasium env. Run alone:

    python bench/cleanrl_ddpg.py --total-timesteps 20000 --seed 1
"""

from __future__ import annotations

import argparse
import dataclasses
import random
import time
from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import numpy as np
import torch
import torch.nn.functional as F
from torch import nn


@dataclass
class Args:
    env_id: str = "Pendulum-v1"
    seed: int = 1
    total_timesteps: int = 20_000
    hidden: tuple[int, ...] = (256, 256)
    learning_rate: float = 1e-3
    buffer_size: int = 200_000
    gamma: float = 0.98
    tau: float = 0.005
    batch_size: int = 256
    exploration_noise: float = 0.1  # std, as a fraction of half the action range
    learning_starts: int = 1_000
    policy_frequency: int = 1  # critic updates per actor (and target) update
    train_frequency: int = 1  # env steps between bursts of updates
    gradient_steps: int = 1  # critic updates per burst
    td3: bool = False  # twin critics (the smaller target), target policy smoothing
    policy_noise: float = 0.2  # TD3's target smoothing std, as a fraction of half the action range
    noise_clip: float = 0.5  # ... clipped to this fraction of half the range
    device: str = "cpu"  # where the networks live and learn ("cuda" as CleanRL's --cuda)


def mlp(in_dim: int, hidden: tuple[int, ...], out_dim: int) -> nn.Sequential:
    layers: list[nn.Module] = []
    for width in hidden:
        layers += [nn.Linear(in_dim, width), nn.ReLU()]
        in_dim = width
    return nn.Sequential(*layers, nn.Linear(in_dim, out_dim))


class QNetwork(nn.Module):
    def __init__(self, obs_dim: int, act_dim: int, hidden: tuple[int, ...]) -> None:
        super().__init__()
        self.net = mlp(obs_dim + act_dim, hidden, 1)

    def forward(self, x: torch.Tensor, a: torch.Tensor) -> torch.Tensor:
        return self.net(torch.cat([x, a], 1))


class Actor(nn.Module):
    def __init__(self, obs_dim: int, act_dim: int, hidden: tuple[int, ...], low: np.ndarray, high: np.ndarray) -> None:
        super().__init__()
        self.net = mlp(obs_dim, hidden, act_dim)
        self.register_buffer("action_scale", torch.tensor((high - low) / 2.0, dtype=torch.float32))
        self.register_buffer("action_bias", torch.tensor((high + low) / 2.0, dtype=torch.float32))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.net(x)) * self.action_scale + self.action_bias


class ReplayBuffer:
    """Uniform replay over preallocated numpy arrays (a ring buffer)."""

    def __init__(self, size: int, obs_dim: int, act_dim: int, rng: np.random.Generator) -> None:
        self.obs = np.zeros((size, obs_dim), dtype=np.float32)
        self.next_obs = np.zeros((size, obs_dim), dtype=np.float32)
        self.actions = np.zeros((size, act_dim), dtype=np.float32)
        self.rewards = np.zeros(size, dtype=np.float32)
        self.dones = np.zeros(size, dtype=np.float32)
        self.size, self.pos, self.full, self.rng = size, 0, False, rng

    def add(self, obs: np.ndarray, next_obs: np.ndarray, action: np.ndarray, reward: float, done: bool) -> None:
        i = self.pos
        self.obs[i], self.next_obs[i], self.actions[i], self.rewards[i], self.dones[i] = obs, next_obs, action, reward, done
        self.pos = (i + 1) % self.size
        self.full = self.full or self.pos == 0

    def sample(self, n: int, device: torch.device) -> tuple[torch.Tensor, ...]:
        idx = self.rng.integers(0, self.size if self.full else self.pos, size=n)
        return tuple(torch.from_numpy(a[idx]).to(device) for a in (self.obs, self.actions, self.next_obs, self.rewards, self.dones))


def train(args: Args) -> tuple[Actor, dict[str, Any]]:
    """Train; returns the actor and the counts (env steps, gradient updates)."""
    random.seed(args.seed)
    np.random.seed(args.seed)
    torch.manual_seed(args.seed)
    rng = np.random.default_rng(args.seed)

    env = gym.make(args.env_id)
    env.action_space.seed(args.seed)
    low, high = env.action_space.low, env.action_space.high
    obs_dim, act_dim = int(np.prod(env.observation_space.shape)), int(np.prod(env.action_space.shape))
    device = torch.device(args.device)
    actor = Actor(obs_dim, act_dim, args.hidden, low, high).to(device)
    critics = [QNetwork(obs_dim, act_dim, args.hidden).to(device) for _ in range(2 if args.td3 else 1)]
    target_actor = Actor(obs_dim, act_dim, args.hidden, low, high).to(device)
    critic_targets = [QNetwork(obs_dim, act_dim, args.hidden).to(device) for _ in critics]
    target_actor.load_state_dict(actor.state_dict())
    for critic, target in zip(critics, critic_targets):
        target.load_state_dict(critic.state_dict())
    q_optimizer = torch.optim.Adam([p for c in critics for p in c.parameters()], lr=args.learning_rate)
    actor_optimizer = torch.optim.Adam(actor.parameters(), lr=args.learning_rate)
    rb = ReplayBuffer(args.buffer_size, obs_dim, act_dim, rng)

    updates = 0
    obs, _ = env.reset(seed=args.seed)
    obs = np.asarray(obs, dtype=np.float32)
    for global_step in range(1, args.total_timesteps + 1):
        if global_step <= args.learning_starts:
            action = env.action_space.sample()
        else:
            with torch.no_grad():
                action = actor(torch.from_numpy(obs[None]).to(device))[0]
                action += torch.normal(0.0, actor.action_scale * args.exploration_noise)
                action = action.cpu().numpy().clip(low, high)
        next_obs, reward, terminated, truncated, _ = env.step(action)
        next_obs = np.asarray(next_obs, dtype=np.float32)
        rb.add(obs, next_obs, action, float(reward), bool(terminated))  # truncation still bootstraps
        obs = np.asarray(env.reset()[0], dtype=np.float32) if terminated or truncated else next_obs

        if global_step > args.learning_starts and global_step % args.train_frequency == 0:
            for _ in range(args.gradient_steps):
                b_obs, b_actions, b_next_obs, b_rewards, b_dones = rb.sample(args.batch_size, device)
                with torch.no_grad():
                    next_state_actions = target_actor(b_next_obs)
                    if args.td3:
                        noise = (torch.randn_like(next_state_actions) * args.policy_noise).clamp(-args.noise_clip, args.noise_clip)
                        next_state_actions = (next_state_actions + noise * actor.action_scale).clamp(
                            actor.action_bias - actor.action_scale, actor.action_bias + actor.action_scale)
                    q_next_target = torch.stack([t(b_next_obs, next_state_actions).view(-1) for t in critic_targets]).min(0).values
                    next_q_value = b_rewards + (1 - b_dones) * args.gamma * q_next_target
                q_loss = sum(F.mse_loss(c(b_obs, b_actions).view(-1), next_q_value) for c in critics)
                q_optimizer.zero_grad()
                q_loss.backward()
                q_optimizer.step()
                updates += 1

                if updates % args.policy_frequency == 0:
                    actor_loss = -critics[0](b_obs, actor(b_obs)).mean()
                    actor_optimizer.zero_grad()
                    actor_loss.backward()
                    actor_optimizer.step()
                    with torch.no_grad():
                        for net, target in ((actor, target_actor), *zip(critics, critic_targets)):
                            for param, target_param in zip(net.parameters(), target.parameters()):
                                target_param.data.copy_(args.tau * param.data + (1 - args.tau) * target_param.data)
    env.close()
    return actor, {"env_steps": args.total_timesteps, "updates": updates}


def parse_args() -> Args:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    for f in dataclasses.fields(Args):
        if isinstance(f.default, bool):
            parser.add_argument(f"--{f.name.replace('_', '-')}", action="store_true")
        elif f.name != "hidden":
            parser.add_argument(f"--{f.name.replace('_', '-')}", type=type(f.default), default=f.default)
    return Args(**vars(parser.parse_args()))


if __name__ == "__main__":
    arguments = parse_args()
    start = time.perf_counter()
    _, counts = train(arguments)
    seconds = time.perf_counter() - start
    print(f"{counts['env_steps']} env steps, {counts['updates']} updates in {seconds:.1f} s "
          f"({counts['env_steps'] / seconds:,.0f} env steps/s)")
