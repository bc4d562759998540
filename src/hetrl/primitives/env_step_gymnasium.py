"""EnvStep/gymnasium: N Gymnasium environments stepped in turn on the host, with auto-reset.

Ended episodes reset in the same step, and the true last observation is returned as
``final_obs`` so that truncated episodes can bootstrap from it. Observations keep the spec's
dtype: float32 for vector envs, uint8 for pixel envs (MinAtar, Atari). The envs are made for
training (``make_env(training=True)``): an Atari env ends an episode on a lost life and clips its
rewards, and the episodes it reports in ``finished`` are then the real games with their raw
scores (from ``info["episode"]``, Gymnasium's RecordEpisodeStatistics below those wrappers). The
batch is picklable (for checkpoints) when its environments are, which holds for Gymnasium's
classic-control and toy-text, MinAtar and ale-py's envs.
"""

from __future__ import annotations

import numpy as np

from typing import Any

from hetrl.envs.spec import EnvSpec
from hetrl.protocol import EnvStep, Slot, implements


@implements(EnvStep="step")
class EnvStepGymnasium(EnvStep):
    backend = "gymnasium"
    _obs_dtype = np.dtype(np.float32)  # defaults for batches pickled before these attributes existed
    _games = False

    @classmethod
    def build(cls, slot: Slot, algorithm: Any, seed: int, *, num_envs: int, **_: Any) -> "EnvStepGymnasium":
        return cls(algorithm.spec, num_envs, seed)

    def __init__(self, spec: EnvSpec | str, num_envs: int, seed: int) -> None:
        if isinstance(spec, str):
            from hetrl.envs.spec import env_spec

            spec = env_spec(spec)
        self.envs = [spec.make(training=True) for _ in range(num_envs)]
        self.num_envs = num_envs
        self.seed = seed
        self.episode_returns = np.zeros(num_envs, dtype=np.float64)
        self.episode_lengths = np.zeros(num_envs, dtype=np.int64)
        self._is_discrete = hasattr(self.envs[0].action_space, "n")
        self._obs_shape = (num_envs, *self.envs[0].observation_space.shape)  # a wrapper chain to walk: once
        self._obs_dtype = np.dtype(spec.obs_dtype)
        self._games = spec.is_atari  # episodes are the games of info["episode"], not the life-long ones

    def reset(self) -> np.ndarray:
        """First observations; env i is seeded with ``seed + i``."""
        obs = [env.reset(seed=self.seed + i)[0] for i, env in enumerate(self.envs)]
        self.episode_returns[:] = 0
        self.episode_lengths[:] = 0
        return np.asarray(obs, dtype=self._obs_dtype)

    def step(self, actions: np.ndarray) -> dict[str, np.ndarray]:
        n = self.num_envs
        next_obs = np.empty(self._obs_shape, dtype=self._obs_dtype)
        final_obs = np.empty(self._obs_shape, dtype=self._obs_dtype)
        rewards = np.empty(n, dtype=np.float32)
        terminated = np.empty(n, dtype=bool)
        truncated = np.empty(n, dtype=bool)
        returns, lengths = self.episode_returns, self.episode_lengths
        self.finished: list[tuple[float, int]] = []  # (return, length) of episodes ended this step
        for i, action in enumerate(actions.tolist() if self._is_discrete else actions):  # tolist: Python ints
            env = self.envs[i]
            obs, reward, term, trunc, info = env.step(action)
            rewards[i], terminated[i], truncated[i] = reward, term, trunc
            final_obs[i] = obs
            if self._games:
                if "episode" in info:
                    self.finished.append((float(info["episode"]["r"]), int(info["episode"]["l"])))
            else:
                returns[i] += reward
                lengths[i] += 1
                if term or trunc:
                    self.finished.append((float(returns[i]), int(lengths[i])))
                    returns[i] = 0
                    lengths[i] = 0
            if term or trunc:
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
