"""DQN on pixels in the style of CleanRL's ``dqn_atari.py``: one file, a plain torch loop, a numpy
replay of uint8 observations (obs and next_obs, as CleanRL's default buffer keeps them).

Written for ``bench/pixels.py`` (not CleanRL's own file). The env comes from hetrl's ``make_env`` so
that every library of the benchmark plays the same preprocessed env (MinAtar: uint8 (C, 10, 10);
Atari: the DQN preprocessing, 4x84x84). Networks: the MinAtar network (Young and Tian 2019) or the
Nature CNN (Mnih et al. 2015), Huber loss, hard target copies, Adam. Run alone:

    python bench/cleanrl_dqn_pixels.py --env-id MinAtar/Breakout-v1 --total-timesteps 20000
"""

from __future__ import annotations

import argparse
import dataclasses
import random
import time
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from hetrl.envs import make_env


@dataclass
class Args:
    env_id: str = "MinAtar/Breakout-v1"
    seed: int = 1
    total_timesteps: int = 100_000
    network: str = "minatar"  # minatar | nature
    learning_rate: float = 1e-4
    buffer_size: int = 100_000
    gamma: float = 0.99
    target_network_frequency: int = 1_000  # env steps between hard target copies
    batch_size: int = 32
    start_e: float = 1.0
    end_e: float = 0.1
    exploration_steps: int = 100_000  # env steps over which epsilon decays linearly
    learning_starts: int = 5_000
    train_frequency: int = 1  # env steps between updates
    max_grad_norm: float = 0.0  # 0: no clipping
    device: str = "cpu"


def q_network(kind: str, obs_shape: tuple[int, ...], n_actions: int) -> nn.Module:
    c, h, w = obs_shape
    if kind == "minatar":
        return nn.Sequential(nn.Conv2d(c, 16, 3, 1), nn.ReLU(), nn.Flatten(),
                             nn.Linear(16 * (h - 2) * (w - 2), 128), nn.ReLU(), nn.Linear(128, n_actions))
    return nn.Sequential(nn.Conv2d(c, 32, 8, 4), nn.ReLU(), nn.Conv2d(32, 64, 4, 2), nn.ReLU(), nn.Conv2d(64, 64, 3, 1),
                         nn.ReLU(), nn.Flatten(), nn.Linear(3136, 512), nn.ReLU(), nn.Linear(512, n_actions))


class ReplayBuffer:
    """Uniform replay over preallocated uint8 observation arrays (a ring)."""

    def __init__(self, size: int, obs_shape: tuple[int, ...], rng: np.random.Generator) -> None:
        self.obs = np.zeros((size, *obs_shape), dtype=np.uint8)
        self.next_obs = np.zeros((size, *obs_shape), dtype=np.uint8)
        self.actions = np.zeros(size, dtype=np.int64)
        self.rewards = np.zeros(size, dtype=np.float32)
        self.dones = np.zeros(size, dtype=np.float32)
        self.size, self.pos, self.full, self.rng = size, 0, False, rng

    @property
    def nbytes(self) -> int:
        return sum(a.nbytes for a in (self.obs, self.next_obs, self.actions, self.rewards, self.dones))

    def add(self, obs: np.ndarray, next_obs: np.ndarray, action: int, reward: float, done: bool) -> None:
        i = self.pos
        self.obs[i], self.next_obs[i], self.actions[i], self.rewards[i], self.dones[i] = obs, next_obs, action, reward, done
        self.pos = (i + 1) % self.size
        self.full = self.full or self.pos == 0

    def sample(self, n: int, device: torch.device) -> tuple[torch.Tensor, ...]:
        idx = self.rng.integers(0, self.size if self.full else self.pos, size=n)
        return tuple(torch.from_numpy(a[idx]).to(device) for a in (self.obs, self.actions, self.next_obs, self.rewards, self.dones))


def train(args: Args) -> tuple[nn.Module, dict[str, Any]]:
    """Train; returns the Q-network (taking float inputs already scaled) and counts, episodes, bytes."""
    random.seed(args.seed)
    np.random.seed(args.seed)
    torch.manual_seed(args.seed)
    rng = np.random.default_rng(args.seed)
    env = make_env(args.env_id, training=True)
    env.action_space.seed(args.seed)
    obs_shape = tuple(env.observation_space.shape)
    scale = 1.0 if args.env_id.startswith("MinAtar/") else 255.0  # MinAtar's channels are 0/1 already
    device = torch.device(args.device)
    n_actions = int(env.action_space.n)
    q = q_network(args.network, obs_shape, n_actions).to(device)
    target = q_network(args.network, obs_shape, n_actions).to(device)
    target.load_state_dict(q.state_dict())
    optimizer = torch.optim.Adam(q.parameters(), lr=args.learning_rate)
    rb = ReplayBuffer(args.buffer_size, obs_shape, rng)

    updates, episodes, ep_return = 0, [], 0.0
    obs, _ = env.reset(seed=args.seed)
    for global_step in range(1, args.total_timesteps + 1):
        epsilon = max(args.end_e, args.start_e + (args.end_e - args.start_e) * global_step / args.exploration_steps)
        if global_step <= args.learning_starts or rng.random() < epsilon:
            action = int(env.action_space.sample())
        else:
            with torch.no_grad():
                x = torch.from_numpy(np.asarray(obs)[None]).to(device).float() / scale
                action = int(q(x).argmax(dim=1)[0])
        next_obs, reward, terminated, truncated, _ = env.step(action)
        rb.add(obs, next_obs, action, float(reward), bool(terminated))  # truncation still bootstraps
        ep_return += float(reward)
        if terminated or truncated:
            episodes.append((global_step, ep_return))
            ep_return = 0.0
            obs, _ = env.reset()
        else:
            obs = next_obs

        if global_step > args.learning_starts and global_step % args.train_frequency == 0:
            b_obs, b_actions, b_next_obs, b_rewards, b_dones = rb.sample(args.batch_size, device)
            with torch.no_grad():
                target_max = target(b_next_obs.float() / scale).max(dim=1).values
                td_target = b_rewards + args.gamma * target_max * (1 - b_dones)
            old_val = q(b_obs.float() / scale).gather(1, b_actions.unsqueeze(1)).squeeze(1)
            loss = F.smooth_l1_loss(old_val, td_target)
            optimizer.zero_grad()
            loss.backward()
            if args.max_grad_norm > 0:
                nn.utils.clip_grad_norm_(q.parameters(), args.max_grad_norm)
            optimizer.step()
            updates += 1

        if global_step % args.target_network_frequency == 0:
            target.load_state_dict(q.state_dict())
    env.close()
    return q, {"env_steps": args.total_timesteps, "updates": updates, "episodes": episodes, "scale": scale,
               "replay_bytes": rb.nbytes, "replay_capacity": args.buffer_size}


def parse_args() -> Args:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    for f in dataclasses.fields(Args):
        parser.add_argument(f"--{f.name.replace('_', '-')}", type=type(f.default), default=f.default)
    return Args(**vars(parser.parse_args()))


if __name__ == "__main__":
    arguments = parse_args()
    start = time.perf_counter()
    _, stats = train(arguments)
    seconds = time.perf_counter() - start
    print(f"{stats['env_steps']} env steps, {stats['updates']} updates in {seconds:.1f} s "
          f"({stats['env_steps'] / seconds:,.0f} env steps/s)")
