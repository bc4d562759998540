"""EnvStep/envpool: Atari (``ALE/...`` ids) through EnvPool (``envpool.make_gymnasium``: the
emulators, the preprocessing and the batching in C++, on EnvPool's threads).

The preprocessing is the run's :class:`~hetrl.envs.pixels.AtariOptions`, mapped onto EnvPool's
Atari settings (``frame_skip``, ``noop_max``, ``img_height``/``img_width``, ``stack_num``,
``repeat_action_probability``, ``full_action_space``; always grayscale, max-pool of the last two
frames, INTER_AREA resize). EnvPool's own life and reward handling stay off (``episodic_life``,
``reward_clip``, ``use_fire_reset`` False): a lost life ends the learner's episode here, from
``info["lives"]``, while the game goes on, and rewards come raw and are clipped to their sign
here, so ``finished`` reports raw game scores.

Autoreset: EnvPool resets an ended env on the *next* step (the action is ignored, the reward is 0).
hetrl's contract is a reset in the same step with the true last observation, so after each step
the envs whose game ended are reset at once (``reset(env_ids)``, which EnvPool runs in sync mode
for those envs only): ``final_obs`` is the step's observation, ``next_obs`` the new game's first.

Where it differs from the other backends: on the same emulator frames its observations equal
Gymnasium's own wrappers (``AtariPreprocessing``, ``FrameStackObservation``: a new game's stack
repeats its first frame, as the gymnasium backend's does, where ale-vector's holds zeros). Its
outputs equal the gymnasium backend's over whole games without life loss, and up to the first
lost life with it (tests/primitives/test_env_step_envpool.py, with ``noop_max=1`` and no sticky
actions, so that both play the same frames); after a lost life the game continues at once (as
ale-vector), where the gymnasium backend plays a no-op step and restarts the stack. No-op counts
and sticky actions draw from EnvPool's generators (env i seeded with ``seed + i`` when the pool
is made; a second ``reset`` makes a new pool), so the same seed gives other games than the other
backends. EnvPool plays 1 to ``noop_max`` no-ops and cannot play none: ``noop_max=0`` is refused
(EnvPool crashes on it). The time limit counts agent steps (``ceil(max_episode_frames /
frame_skip)``) from the end of the no-op starts, where ALE counts the no-op frames too. The pool
cannot be pickled: a checkpoint keeps no env state, and a resumed run resets its envs (the
executor warns).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from hetrl.envs.pixels import ALE_PREFIX, AtariOptions, is_ale
from hetrl.errors import HetrlError
from hetrl.hardware import usable_cores
from hetrl.protocol import EnvStep, Slot, implements

INSTALL = "pip install envpool (Linux x86_64, Python 3.11+; or 'hetrl[pixels]' there)"


def envpool_task(env_id: str) -> str:
    """EnvPool's task id of an ALE id (``ALE/Breakout-v5`` -> ``Breakout-v5``)."""
    return env_id[len(ALE_PREFIX):]


def options_problem(options: AtariOptions) -> str | None:
    """The AtariOptions setting EnvPool cannot express, in one line (None: all of them can)."""
    if options.noop_max < 1:
        return (f"the envpool EnvStep cannot play noop_max={options.noop_max} (EnvPool always plays 1 to noop_max "
                "no-ops); set noop_max >= 1 or use the ale-vector or gymnasium EnvStep")
    return None


@implements(EnvStep="step")
class EnvStepEnvpool(EnvStep):
    backend = "envpool"
    steps_in_background = True

    @classmethod
    def unsupported(cls, algorithm: Any) -> str | None:
        spec = algorithm.spec
        if not is_ale(spec.env_id):
            return f"the envpool EnvStep steps Atari (ALE/...) envs only, not {spec.env_id}; use the gymnasium EnvStep"
        try:
            import envpool
        except ImportError:
            return f"the envpool EnvStep needs envpool: {INSTALL}"
        task = envpool_task(spec.env_id)
        if task not in envpool.list_all_envs():
            return f"EnvPool has no Atari game {task!r} (for {spec.env_id}); use the ale-vector or gymnasium EnvStep"
        return options_problem(spec.atari or AtariOptions())

    @classmethod
    def build(cls, slot: Slot, algorithm: Any, seed: int, *, num_envs: int, **_: Any) -> EnvStepEnvpool:
        return cls(algorithm.spec.env_id, num_envs, seed, algorithm.spec.atari)

    def __init__(self, env_id: str, num_envs: int, seed: int, options: AtariOptions | None = None,
                 threads: int = 0) -> None:
        """``threads``: EnvPool's threads (0: one per env, at most one per core)."""
        try:
            import envpool
        except ImportError:
            raise HetrlError(f"the envpool EnvStep needs envpool: {INSTALL}") from None
        if not is_ale(env_id):
            raise HetrlError(f"the envpool EnvStep steps Atari (ALE/...) envs only, not {env_id}")
        opts = options or AtariOptions()
        opts.check()
        problem = options_problem(opts)
        if problem:
            raise HetrlError(problem)
        task = envpool_task(env_id)
        if task not in envpool.list_all_envs():
            raise HetrlError(f"unknown environment {env_id!r}: EnvPool has no Atari game {task!r}")
        self.options, self.num_envs, self.seed = opts, num_envs, seed
        self._make = lambda: envpool.make_gymnasium(
            task, num_envs=num_envs, batch_size=num_envs, num_threads=threads or min(num_envs, usable_cores()),
            seed=seed, repeat_action_probability=opts.repeat_action_probability,
            full_action_space=opts.full_action_space, noop_max=opts.noop_max, frame_skip=opts.frame_skip,
            img_height=opts.screen_size, img_width=opts.screen_size, gray_scale=True, stack_num=opts.frame_stack,
            max_episode_steps=-(-opts.max_episode_frames // opts.frame_skip),
            episodic_life=False, reward_clip=False, use_fire_reset=False,
        )
        self.env = self._make()
        self._stepped = False  # EnvPool seeds its envs when the pool is made: a second reset makes a new pool
        self.episode_returns = np.zeros(num_envs, dtype=np.float64)
        self.episode_lengths = np.zeros(num_envs, dtype=np.int64)
        self.lives = np.zeros(num_envs, dtype=np.int64)
        self.finished: list[tuple[float, int]] = []

    def reset(self) -> np.ndarray:
        """First observations; env i is seeded with ``seed + i``."""
        if self._stepped:
            self.env.close()
            self.env = self._make()
            self._stepped = False
        obs, info = self.env.reset()
        self.lives[:] = info["lives"]
        self.episode_returns[:] = 0
        self.episode_lengths[:] = 0
        return obs

    def step(self, actions: np.ndarray) -> dict[str, np.ndarray]:
        self.send(actions)
        return self.recv()

    def send(self, actions: np.ndarray) -> None:
        """Start a step on EnvPool's threads and return at once."""
        self._stepped = True
        self.env.send(np.asarray(actions, dtype=np.int32))

    def recv(self) -> dict[str, np.ndarray]:
        """Wait for the step :meth:`send` started (in env order: the pool runs in sync mode)."""
        obs, raw, _, truncated, info = self.env.recv()
        game_end = info["terminated"].astype(bool)  # the game is over (EnvPool's own terminated: not a time limit)
        truncated = np.asarray(truncated, dtype=bool) & ~game_end
        lives = info["lives"]
        terminated = game_end | (lives < self.lives) if self.options.terminal_on_life_loss else game_end
        self.lives[:] = lives
        raw = np.asarray(raw, dtype=np.float64)
        self.episode_returns += raw
        self.episode_lengths += 1
        self.finished = []
        ended = game_end | truncated
        final_obs = obs
        if ended.any():
            ids = np.flatnonzero(ended)
            for i in ids:
                self.finished.append((float(self.episode_returns[i]), int(self.episode_lengths[i])))
            self.episode_returns[ended] = 0
            self.episode_lengths[ended] = 0
            # same-step autoreset: reset the ended envs now (EnvPool would on the next step, ignoring its action)
            first, reset_info = self.env.reset(ids.astype(np.int32))
            rows = reset_info["env_id"]
            next_obs = obs.copy()
            next_obs[rows] = first
            self.lives[rows] = reset_info["lives"]
        else:
            next_obs = obs
        rewards = np.sign(raw) if self.options.clip_rewards else raw
        return {
            "next_obs": next_obs,
            "rewards": rewards.astype(np.float32),
            "terminated": terminated,
            "truncated": truncated,
            "final_obs": final_obs,
        }

    def close(self) -> None:
        self.env.close()

    def __getstate__(self) -> dict[str, Any]:
        raise TypeError("an EnvPool pool cannot be pickled")
