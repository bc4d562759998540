"""EnvStep/ale-vector: Atari (``ALE/...`` ids) through ale-py's own vector env
(``ale_py.vector_env.AtariVectorEnv``: the emulators and the preprocessing in C++, on threads).

The preprocessing is the run's :class:`~hetrl.envs.pixels.AtariOptions`, as the gymnasium backend
applies them (frame skip with max-pool, 84x84 grayscale, no-op starts, sticky actions, the frame
stack), with autoreset in the same step (``SameStep``) and the true last observation of an ended
game from ``info["final_obs"]``. A lost life ends the learner's episode while the game goes on
(``life_loss_info``: ale-py's ``episodic_life`` would restart the game instead). Rewards come raw
from the emulator and are clipped to their sign here, so ``finished`` reports raw game scores.

Where it differs from EnvStep/gymnasium on the same emulator frames (tests/test_envs.py checks
the frames equal otherwise): the frame stack after a reset holds zeros where Gymnasium's
FrameStackObservation repeats the first frame; after a lost life the game continues at once, where
the gymnasium backend (OpenAI baselines' EpisodicLifeEnv) plays one no-op step and restarts the
frame stack; no-op counts and sticky actions draw from the emulator's generator, not Gymnasium's,
so the same seed gives other games. The envs cannot be pickled: a checkpoint keeps no env state,
and a resumed run resets its envs (the executor warns).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from hetrl.envs.pixels import AtariOptions, ale_game, is_ale, register
from hetrl.errors import HetrlError
from hetrl.hardware import usable_cores
from hetrl.protocol import EnvStep, Slot, implements


@implements(EnvStep="step")
class EnvStepAleVector(EnvStep):
    backend = "ale-vector"
    steps_in_background = True

    @classmethod
    def unsupported(cls, algorithm: Any) -> str | None:
        env_id = algorithm.spec.env_id
        if not is_ale(env_id):
            return f"the ale-vector EnvStep steps Atari (ALE/...) envs only, not {env_id}; use the gymnasium EnvStep"
        try:
            import ale_py.vector_env  # noqa: F401
        except ImportError:
            return "the ale-vector EnvStep needs ale-py: pip install 'hetrl[pixels]'"
        return None

    @classmethod
    def build(cls, slot: Slot, algorithm: Any, seed: int, *, num_envs: int, **_: Any) -> "EnvStepAleVector":
        return cls(algorithm.spec.env_id, num_envs, seed, algorithm.spec.atari)

    def __init__(self, env_id: str, num_envs: int, seed: int, options: AtariOptions | None = None,
                 threads: int = 0) -> None:
        """``threads``: the emulator threads (0: one per env, at most one per core)."""
        from ale_py.vector_env import AtariVectorEnv

        register(env_id)
        opts = options or AtariOptions()
        opts.check()
        try:
            game = ale_game(env_id)
        except Exception as exc:
            raise HetrlError(f"unknown environment {env_id!r}: {exc}") from None
        self.options, self.num_envs, self.seed = opts, num_envs, seed
        self.env = AtariVectorEnv(
            game, num_envs, num_threads=threads or min(num_envs, usable_cores()),
            autoreset_mode="SameStep",
            repeat_action_probability=opts.repeat_action_probability, full_action_space=opts.full_action_space,
            max_num_frames_per_episode=opts.max_episode_frames, noop_max=opts.noop_max,
            frameskip=opts.frame_skip, maxpool=True, img_height=opts.screen_size, img_width=opts.screen_size,
            grayscale=True, stack_num=opts.frame_stack,
            episodic_life=False, life_loss_info=opts.terminal_on_life_loss,
            reward_clipping=False, use_fire_reset=False,
        )
        self.episode_returns = np.zeros(num_envs, dtype=np.float64)
        self.episode_lengths = np.zeros(num_envs, dtype=np.int64)
        self.lives = np.zeros(num_envs, dtype=np.int64)
        self.finished: list[tuple[float, int]] = []

    def reset(self) -> np.ndarray:
        """First observations; env i is seeded with ``seed + i``."""
        obs, info = self.env.reset(seed=np.arange(self.seed, self.seed + self.num_envs, dtype=np.int64))
        self.lives[:] = info["lives"]
        self.episode_returns[:] = 0
        self.episode_lengths[:] = 0
        return obs

    def step(self, actions: np.ndarray) -> dict[str, np.ndarray]:
        self.send(actions)
        return self.recv()

    def send(self, actions: np.ndarray) -> None:
        """Start a step on the emulator threads and return at once."""
        self.env.send(np.asarray(actions, dtype=np.int64))

    def recv(self) -> dict[str, np.ndarray]:
        """Wait for the step :meth:`send` started (in env order: the vector runs in sync mode)."""
        obs, raw, terminated, truncated, info = self.env.recv()
        lives = info["lives"]
        ended = terminated | truncated
        # a lost life (life_loss_info) ends the episode without a reset: fewer lives than before;
        # a game that ended was reset in this step, and has its full lives again
        game_over = ended & ~(lives < self.lives) if self.options.terminal_on_life_loss else ended
        self.lives[:] = lives
        raw = np.asarray(raw, dtype=np.float64)
        self.episode_returns += raw
        self.episode_lengths += 1
        self.finished = []
        final_obs = obs
        if game_over.any():
            final_obs = obs.copy()
            for i in np.flatnonzero(game_over):
                final_obs[i] = info["final_obs"][i]
                self.finished.append((float(self.episode_returns[i]), int(self.episode_lengths[i])))
            self.episode_returns[game_over] = 0
            self.episode_lengths[game_over] = 0
        rewards = np.sign(raw) if self.options.clip_rewards else raw
        return {
            "next_obs": obs,
            "rewards": rewards.astype(np.float32),
            "terminated": np.asarray(terminated, dtype=bool),
            "truncated": np.asarray(truncated, dtype=bool),
            "final_obs": final_obs,
        }

    def close(self) -> None:
        self.env.close()

    def __getstate__(self) -> dict[str, Any]:
        raise TypeError("ale-py's vector env cannot be pickled")
