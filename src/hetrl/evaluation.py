"""Greedy-policy evaluation: all episodes step together, one batched forward per step."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np

from hetrl.envs import AtariOptions, make_env

EVAL_SEED_OFFSET = 1_000_003  # evaluation episodes never share seeds with training envs


def evaluate_policy(
    policy: Callable[[np.ndarray], np.ndarray], env_id: str, episodes: int, seed: int,
    atari: AtariOptions | None = None, seed_offset: int = EVAL_SEED_OFFSET,
) -> np.ndarray:
    """Returns of ``episodes`` episodes; env i is reset with ``seed + seed_offset + i`` (by default
    ``EVAL_SEED_OFFSET``: the test episodes; ``hetrl exits sweep`` plays validation episodes of
    another offset). The
    envs are made for evaluation (``training=False``): an Atari env plays full games (no life loss
    as terminal) and returns raw scores; observations keep their dtype (uint8 for pixels)."""
    envs = [make_env(env_id, training=False, atari=atari) for _ in range(episodes)]
    first = np.stack([env.reset(seed=seed + seed_offset + i)[0] for i, env in enumerate(envs)])
    obs = first if first.dtype == np.uint8 else first.astype(np.float32)
    returns = np.zeros(episodes)
    active = np.ones(episodes, dtype=bool)
    discrete = hasattr(envs[0].action_space, "n")
    while active.any():
        idx = np.flatnonzero(active)
        actions = policy(obs[idx])
        for j, i in enumerate(idx):
            o, r, term, trunc, _ = envs[i].step(int(actions[j]) if discrete else actions[j])
            returns[i] += r
            obs[i] = o
            if term or trunc:
                active[i] = False
    for env in envs:
        env.close()
    return returns


def record_gif(policy: Callable[[np.ndarray], np.ndarray], env_id: str, path: Path, seed: int, fps: int = 30,
               atari: AtariOptions | None = None) -> float:
    """Run one greedy episode with ``rgb_array`` rendering and save it as an animated GIF."""
    from PIL import Image

    env = make_env(env_id, render_mode="rgb_array", training=False, atari=atari)
    obs, _ = env.reset(seed=seed + EVAL_SEED_OFFSET)
    frames, total, done = [Image.fromarray(env.render())], 0.0, False
    discrete = hasattr(env.action_space, "n")
    while not done:
        obs = np.asarray(obs)
        action = policy((obs if obs.dtype == np.uint8 else obs.astype(np.float32))[None])[0]
        obs, reward, term, trunc, _ = env.step(int(action) if discrete else action)
        total += float(reward)
        done = term or trunc
        frames.append(Image.fromarray(env.render()))
    env.close()
    frames[0].save(path, save_all=True, append_images=frames[1:], duration=int(1000 / fps), loop=0)
    return total
