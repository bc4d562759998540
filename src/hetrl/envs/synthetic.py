"""``hetrl/Bytes-v0``: a small synthetic env of uint8 (C, H, W) images, to run the pixel path
(uint8 storage, transfer, conv networks, executors) without the ``pixels`` extra and fast.

Each step shows a random one of ``n_actions`` classes as a bright vertical band of the image (one
band per class, camera-like values 0..255, noise elsewhere); the action naming the class earns 1,
any other 0. Episodes last ``length`` steps (truncated). A random policy earns ``length /
n_actions`` per episode, a perfect one ``length``.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np

BYTES_ID = "hetrl/Bytes-v0"


class BytesEnv(gym.Env):
    metadata = {"render_modes": []}

    def __init__(self, shape: tuple[int, int, int] = (2, 36, 36), n_actions: int = 3, length: int = 20,
                 render_mode: str | None = None) -> None:
        self.shape, self.n_actions, self.length, self.render_mode = tuple(shape), n_actions, length, render_mode
        self.observation_space = gym.spaces.Box(0, 255, self.shape, np.uint8)
        self.action_space = gym.spaces.Discrete(n_actions)
        self._label, self._t = 0, 0

    def _observe(self) -> np.ndarray:
        rng = self.np_random
        self._label = int(rng.integers(self.n_actions))
        obs = rng.integers(0, 64, self.shape, dtype=np.uint8)
        width = self.shape[2] // self.n_actions
        obs[:, :, self._label * width:(self._label + 1) * width] = 255
        return obs

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        self._t = 0
        return self._observe(), {}

    def step(self, action):
        reward = float(int(action) == self._label)
        self._t += 1
        return self._observe(), reward, False, self._t >= self.length, {}


def register_bytes() -> None:
    if BYTES_ID not in gym.registry:
        gym.register(BYTES_ID, entry_point=BytesEnv)
