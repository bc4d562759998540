"""EnvStep/gymnasium: N Gymnasium environments stepped in turn on the host, with auto-reset.

Ended episodes reset in the same step, and the true last observation is returned as
``final_obs`` so that truncated episodes can bootstrap from it. The batch is picklable (for
checkpoints) when its environments are, which holds for Gymnasium's classic-control and toy-text.
"""

from __future__ import annotations

import numpy as np

from typing import Any

from hetrl.envs.spec import make_env
from hetrl.protocol import EnvStep, Slot, implements


@implements(EnvStep="step")
class EnvStepGymnasium(EnvStep):
    backend = "gymnasium"

    @classmethod
    def build(cls, slot: Slot, algorithm: Any, seed: int, *, num_envs: int, **_: Any) -> "EnvStepGymnasium":
        return cls(algorithm.spec.env_id, num_envs, seed)

    def __init__(self, env_id: str, num_envs: int, seed: int) -> None:
        self.envs = [make_env(env_id) for _ in range(num_envs)]
        self.num_envs = num_envs
        self.seed = seed
        self.episode_returns = np.zeros(num_envs, dtype=np.float64)
        self.episode_lengths = np.zeros(num_envs, dtype=np.int64)
        self._is_discrete = hasattr(self.envs[0].action_space, "n")
        self._obs_shape = (num_envs, *self.envs[0].observation_space.shape)  # a wrapper chain to walk: once

    def reset(self) -> np.ndarray:
        """First observations; env i is seeded with ``seed + i``."""
        obs = [env.reset(seed=self.seed + i)[0] for i, env in enumerate(self.envs)]
        self.episode_returns[:] = 0
        self.episode_lengths[:] = 0
        return np.asarray(obs, dtype=np.float32)

    def step(self, actions: np.ndarray) -> dict[str, np.ndarray]:
        n = self.num_envs
        next_obs = np.empty(self._obs_shape, dtype=np.float32)
        final_obs = np.empty(self._obs_shape, dtype=np.float32)
        rewards = np.empty(n, dtype=np.float32)
        terminated = np.empty(n, dtype=bool)
        truncated = np.empty(n, dtype=bool)
        returns, lengths = self.episode_returns, self.episode_lengths
        self.finished: list[tuple[float, int]] = []  # (return, length) of episodes ended this step
        for i, action in enumerate(actions.tolist() if self._is_discrete else actions):  # tolist: Python ints
            env = self.envs[i]
            obs, reward, term, trunc, _ = env.step(action)
            rewards[i], terminated[i], truncated[i] = reward, term, trunc
            final_obs[i] = obs
            returns[i] += reward
            lengths[i] += 1
            if term or trunc:
                self.finished.append((float(returns[i]), int(lengths[i])))
                returns[i] = 0
                lengths[i] = 0
                obs, _ = env.reset()
            next_obs[i] = obs
        return {
            "next_obs": next_obs,
            "rewards": rewards,
            "terminated": terminated,
            "truncated": truncated,
            "final_obs": final_obs,
        }

    def close(self) -> None:
        for env in self.envs:
            env.close()
