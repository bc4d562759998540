"""DQN in the style of CleanRL's ``dqn.py``: one file, a plain torch loop, a numpy replay buffer.

Written for ``bench/peers.py`` (not CleanRL's own file): it trains the benchmark's DQN settings
(Huber loss and gradient clipping like SB3, uniform random actions before ``learning_starts``)
on one Gymnasium env. Run alone:

    python bench/cleanrl_dqn.py --total-timesteps 50000 --seed 1
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
    env_id: str = "CartPole-v1"
    seed: int = 1
    total_timesteps: int = 50_000
    hidden: tuple[int, ...] = (64, 64)
    learning_rate: float = 5e-4
    buffer_size: int = 50_000
    gamma: float = 0.99
    target_network_frequency: int = 500  # env steps between hard target copies
    batch_size: int = 64
    start_e: float = 1.0
    end_e: float = 0.05
    exploration_fraction: float = 0.2
    learning_starts: int = 1_000
    train_frequency: int = 1  # env steps between bursts of updates
    gradient_steps: int = 1  # updates per burst (rl-baselines3-zoo's bursts: e.g. 128 every 256 env steps)
    max_grad_norm: float = 10.0
    device: str = "cpu"  # where the networks live and learn ("cuda" as CleanRL's --cuda)


class QNetwork(nn.Module):
    def __init__(self, obs_dim: int, n_actions: int, hidden: tuple[int, ...]) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        for width in hidden:
            layers += [nn.Linear(obs_dim, width), nn.ReLU()]
            obs_dim = width
        self.network = nn.Sequential(*layers, nn.Linear(obs_dim, n_actions))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.network(x)


class ReplayBuffer:
    """Uniform replay over preallocated numpy arrays (a ring buffer)."""

    def __init__(self, size: int, obs_dim: int, rng: np.random.Generator) -> None:
        self.obs = np.zeros((size, obs_dim), dtype=np.float32)
        self.next_obs = np.zeros((size, obs_dim), dtype=np.float32)
        self.actions = np.zeros(size, dtype=np.int64)
        self.rewards = np.zeros(size, dtype=np.float32)
        self.dones = np.zeros(size, dtype=np.float32)
        self.size, self.pos, self.full, self.rng = size, 0, False, rng

    def add(self, obs: np.ndarray, next_obs: np.ndarray, action: int, reward: float, done: bool) -> None:
        i = self.pos
        self.obs[i], self.next_obs[i], self.actions[i], self.rewards[i], self.dones[i] = obs, next_obs, action, reward, done
        self.pos = (i + 1) % self.size
        self.full = self.full or self.pos == 0

    def sample(self, n: int, device: torch.device) -> tuple[torch.Tensor, ...]:
        idx = self.rng.integers(0, self.size if self.full else self.pos, size=n)
        return tuple(torch.from_numpy(a[idx]).to(device) for a in (self.obs, self.actions, self.next_obs, self.rewards, self.dones))


def linear_schedule(start_e: float, end_e: float, duration: int, t: int) -> float:
    slope = (end_e - start_e) / duration
    return max(slope * t + start_e, end_e)


def train(args: Args) -> tuple[QNetwork, dict[str, Any]]:
    """Train; returns the Q-network and the counts (env steps, gradient updates)."""
    random.seed(args.seed)
    np.random.seed(args.seed)
    torch.manual_seed(args.seed)
    rng = np.random.default_rng(args.seed)

    env = gym.make(args.env_id)
    env.action_space.seed(args.seed)
    obs_dim = int(np.prod(env.observation_space.shape))
    device = torch.device(args.device)
    q_network = QNetwork(obs_dim, int(env.action_space.n), args.hidden).to(device)
    optimizer = torch.optim.Adam(q_network.parameters(), lr=args.learning_rate)
    target_network = QNetwork(obs_dim, int(env.action_space.n), args.hidden).to(device)
    target_network.load_state_dict(q_network.state_dict())
    rb = ReplayBuffer(args.buffer_size, obs_dim, rng)

    updates = 0
    obs, _ = env.reset(seed=args.seed)
    obs = np.asarray(obs, dtype=np.float32)
    for global_step in range(1, args.total_timesteps + 1):
        epsilon = linear_schedule(args.start_e, args.end_e, int(args.exploration_fraction * args.total_timesteps), global_step)
        if global_step <= args.learning_starts or rng.random() < epsilon:
            action = int(env.action_space.sample())
        else:
            with torch.no_grad():
                action = int(q_network(torch.from_numpy(obs[None]).to(device)).argmax(dim=1)[0])
        next_obs, reward, terminated, truncated, _ = env.step(action)
        next_obs = np.asarray(next_obs, dtype=np.float32)
        rb.add(obs, next_obs, action, float(reward), bool(terminated))  # truncation still bootstraps
        obs = np.asarray(env.reset()[0], dtype=np.float32) if terminated or truncated else next_obs

        if global_step > args.learning_starts and global_step % args.train_frequency == 0:
            for _ in range(args.gradient_steps):
                b_obs, b_actions, b_next_obs, b_rewards, b_dones = rb.sample(args.batch_size, device)
                with torch.no_grad():
                    target_max = target_network(b_next_obs).max(dim=1).values
                    td_target = b_rewards + args.gamma * target_max * (1 - b_dones)
                old_val = q_network(b_obs).gather(1, b_actions.unsqueeze(1)).squeeze(1)
                loss = F.smooth_l1_loss(old_val, td_target)
                optimizer.zero_grad()
                loss.backward()
                nn.utils.clip_grad_norm_(q_network.parameters(), args.max_grad_norm)
                optimizer.step()
                updates += 1

        if global_step % args.target_network_frequency == 0:
            target_network.load_state_dict(q_network.state_dict())
    env.close()
    return q_network, {"env_steps": args.total_timesteps, "updates": updates}


def parse_args() -> Args:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    for f in dataclasses.fields(Args):
        if f.name != "hidden":
            parser.add_argument(f"--{f.name.replace('_', '-')}", type=type(f.default), default=f.default)
    return Args(**vars(parser.parse_args()))


if __name__ == "__main__":
    arguments = parse_args()
    start = time.perf_counter()
    _, counts = train(arguments)
    seconds = time.perf_counter() - start
    print(f"{counts['env_steps']} env steps, {counts['updates']} updates in {seconds:.1f} s "
          f"({counts['env_steps'] / seconds:,.0f} env steps/s)")
