"""A user's own Gymnasium env, as tests/test_own_env.py brings it: an importable module that
registers an id on import, with a factory and a wrapper beside it. Its constructor takes no
``render_mode``, as many hand-written envs do."""

from __future__ import annotations

from typing import ClassVar

import gymnasium as gym
import numpy as np

ID = "HetrlTestCorridor-v0"


class Corridor(gym.Env):
    """Walk right to the end of a corridor of ``length`` cells: -1 a step until there. The
    observation is the one-hot cell. No ``render_mode`` argument."""

    metadata: ClassVar[dict] = {"render_modes": []}

    def __init__(self, length: int = 5) -> None:
        self.length = length
        self.observation_space = gym.spaces.Box(0.0, 1.0, (length,), np.float32)
        self.action_space = gym.spaces.Discrete(2)
        self.cell = 0

    def _obs(self) -> np.ndarray:
        obs = np.zeros(self.length, np.float32)
        obs[self.cell] = 1.0
        return obs

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        self.cell = 0
        return self._obs(), {}

    def step(self, action: int):
        self.cell = max(0, min(self.length - 1, self.cell + (1 if action == 1 else -1)))
        return self._obs(), -1.0, self.cell == self.length - 1, False, {}


class WithBias(gym.ObservationWrapper):
    """Appends a constant 1 to each observation (a wrapper whose effect shows in the spec)."""

    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        space = env.observation_space
        self.observation_space = gym.spaces.Box(0.0, 1.0, (space.shape[0] + 1,), np.float32)

    def observation(self, observation: np.ndarray) -> np.ndarray:
        return np.append(observation, np.float32(1.0))


def make_corridor(length: int = 5) -> gym.Env:
    """A factory, as ``hetrl.train(..., env=make_corridor, env_kwargs={"length": 7})`` takes one."""
    return gym.wrappers.TimeLimit(Corridor(length), max_episode_steps=30)


if ID not in gym.registry:
    gym.register(ID, entry_point=Corridor, max_episode_steps=30)


class CountingFrames(gym.Env):
    """Single 8x8 frames that say where they come from: bytes 0-3 a tag drawn at each reset,
    bytes 4-7 the step within the episode (5 to 29 steps, terminated). Stacked by
    :func:`make_counting_stack`, so a test can check any stack a replay rebuilds."""

    observation_space = gym.spaces.Box(0, 255, (8, 8), np.uint8)
    action_space = gym.spaces.Discrete(2)

    def _frame(self) -> np.ndarray:
        out = np.zeros((8, 8), np.uint8)
        out.reshape(-1)[:8] = np.array([self.tag, self.t], "<u4").view(np.uint8)
        return out

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        self.tag, self.t, self.left = int(self.np_random.integers(1, 2**31)), 0, int(self.np_random.integers(5, 30))
        return self._frame(), {}

    def step(self, action: int):
        self.t, self.left = self.t + 1, self.left - 1
        return self._frame(), 0.0, self.left <= 0, False, {}


def make_counting_stack() -> gym.Env:
    """:class:`CountingFrames`, the last 4 stacked (a new episode repeats its first frame)."""
    return gym.wrappers.FrameStackObservation(CountingFrames(), 4)


def counted(stacks: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(tags, steps) of each frame of ``stacks`` (..., 8, 8) from :class:`CountingFrames`."""
    words = np.ascontiguousarray(stacks.reshape(*stacks.shape[:-2], 64)[..., :8]).view("<u4")
    return words[..., 0], words[..., 1]
