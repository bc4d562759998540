"""Pixel environments: MinAtar and Atari (ALE), both from the ``hetrl[pixels]`` extra.

MinAtar (``MinAtar/<Game>-v0|v1``, Young and Tian 2019): the ``minatar`` package's Gymnasium
envs, whose boolean 10x10xC observations are presented as uint8 (C, 10, 10), channels first, 0/1.

Atari (``ALE/<Game>-v5``, through ``ale-py``): the standard DQN preprocessing of Mnih et al. 2015,
built from Gymnasium's own wrappers where one exists. Each piece is a field of
:class:`AtariOptions` (the run config's ``atari``), whose defaults say where they come from:

    ale-py env (frameskip=1, sticky actions)   the emulator; a base frame skip would double the one below
    AtariPreprocessing                          no-op starts, frame skip with max-pool of the last two
                                                frames, 84x84 grayscale (Gymnasium's wrapper)
    RecordEpisodeStatistics                     the real game's raw return and length (info["episode"])
    EpisodicLife            (training only)     a lost life ends the episode for the learner; the game
                                                goes on (Mnih et al. 2015; OpenAI baselines' wrapper)
    TransformReward(sign)   (training only)     rewards clipped to their sign
    FrameStackObservation                       the last 4 frames, uint8 (4, 84, 84)

Evaluation (``training=False``) plays full games and reports raw scores, with the same
observations and sticky actions as training (Machado et al. 2018's protocol).

Why EpisodicLife is ours: Gymnasium's ``AtariPreprocessing(terminal_on_life_loss=True)`` resets the
whole game after a life is lost (so a game never goes past its first life), and ale-py's vector
env with ``episodic_life=True`` does the same; the paper's protocol ends the learner's episode and
continues the game, which is what baselines' ``EpisodicLifeEnv`` and ale-py's ``life_loss_info``
do. Fire-on-reset (baselines' ``FireResetEnv``) is not applied: it is not in the paper.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, fields
from typing import Any

import gymnasium as gym
import numpy as np

from hetrl.errors import HetrlError, field_type_problems

PIXELS_EXTRA = "pip install 'hetrl[pixels]'"
MINATAR_PREFIX = "MinAtar/"
ALE_PREFIX = "ALE/"


@dataclass
class AtariOptions:
    """The Atari preprocessing (``--set frame_skip=4`` or ``--set atari.frame_skip=4``); ignored by
    other envs."""

    repeat_action_probability: float = 0.25  # sticky actions: Machado et al. 2018 (ALE v5's default); 0 as in Mnih et al. 2015
    noop_max: int = 30  # up to 30 no-op actions at the start of a game: Mnih et al. 2015
    frame_skip: int = 4  # each action repeated 4 frames, max-pool of the last two: Mnih et al. 2015
    screen_size: int = 84  # 84x84 grayscale frames: Mnih et al. 2015
    frame_stack: int = 4  # the last 4 frames as the observation: Mnih et al. 2015
    clip_rewards: bool = True  # training rewards clipped to their sign: Mnih et al. 2015 (evaluation: raw scores)
    terminal_on_life_loss: bool = True  # a lost life ends a training episode: Mnih et al. 2015 (evaluation: full games)
    full_action_space: bool = False  # the game's minimal action set, as Mnih et al. 2015 (Machado et al. 2018 use all 18)
    max_episode_frames: int = 108_000  # a game is truncated after 30 minutes of play (60 Hz): Machado et al. 2018, ALE v5

    def validate(self) -> list[str]:
        problems = field_type_problems(self)
        if problems:
            return problems
        if not 0 <= self.repeat_action_probability < 1:
            problems.append(f"repeat_action_probability must be in [0, 1) (got {self.repeat_action_probability})")
        for name in ("frame_skip", "screen_size", "frame_stack", "max_episode_frames"):
            if getattr(self, name) <= 0:
                problems.append(f"{name} must be > 0 (got {getattr(self, name)})")
        if self.noop_max < 0:
            problems.append(f"noop_max must be >= 0 (got {self.noop_max})")
        return problems

    def check(self) -> None:
        problems = self.validate()
        if problems:
            raise HetrlError("invalid atari settings: " + "; ".join(problems))


ATARI_SETTINGS = tuple(f.name for f in fields(AtariOptions))


def is_minatar(env_id: str) -> bool:
    return env_id.startswith(MINATAR_PREFIX)


def is_ale(env_id: str) -> bool:
    return env_id.startswith(ALE_PREFIX)


def _extra(module: str, env_id: str) -> Any:
    """``module`` imported, or a one-line error naming the extra that installs it."""
    try:
        return importlib.import_module(module)
    except ImportError:
        raise HetrlError(f"{env_id} needs the package {module.split('.')[0]!r}, which is not installed: {PIXELS_EXTRA}") from None


_registered: set[str] = set()


def packages(env_id: str) -> tuple[str, ...]:
    """The packages :func:`register` imports for ``env_id``, in its order (none for Gymnasium's own
    envs; ALE's cv2 is what AtariPreprocessing resizes with). MinAtar's takes seconds to import (it
    loads seaborn and scipy for its display): a process that starts actors imports them once, in
    its fork server."""
    if is_minatar(env_id):
        return ("minatar", "minatar.gym")
    if is_ale(env_id):
        return ("ale_py", "cv2")
    return ()


def register(env_id: str) -> None:
    """Register the pixel envs ``env_id`` belongs to with Gymnasium (importing their package)."""
    if env_id.startswith("hetrl/"):  # the synthetic image env (hetrl.envs.synthetic)
        from hetrl.envs.synthetic import register_bytes

        register_bytes()
    elif is_minatar(env_id) and "minatar" not in _registered:
        _, minatar_gym = (_extra(module, env_id) for module in packages(env_id))
        if not any(key.startswith(MINATAR_PREFIX) for key in gym.registry):  # Gymnasium 1.x loads no plugins
            minatar_gym.register_envs()
        _registered.add("minatar")
    elif is_ale(env_id) and "ale" not in _registered:
        ale_py, _ = (_extra(module, env_id) for module in packages(env_id))  # cv2: AtariPreprocessing resizes with it
        gym.register_envs(ale_py)
        _registered.add("ale")


# --- MinAtar ----------------------------------------------------------------------------------
def channels_first_uint8(obs: np.ndarray) -> np.ndarray:
    """MinAtar's (10, 10, C) booleans as (C, 10, 10) uint8 0/1 (module level: the env pickles)."""
    return np.ascontiguousarray(np.moveaxis(obs, -1, 0), dtype=np.uint8)


def wrap_minatar(env: gym.Env) -> gym.Env:
    h, w, c = env.observation_space.shape
    space = gym.spaces.Box(0, 1, (c, h, w), np.uint8)
    return gym.wrappers.TransformObservation(env, channels_first_uint8, space)


# --- Atari ------------------------------------------------------------------------------------
class EpisodicLife(gym.Wrapper):
    """A lost life ends the episode (``terminated``) while the game goes on: the next ``reset``
    continues it with one no-op step, and only a real game end resets the emulator (the wrapper of
    OpenAI baselines, ``EpisodicLifeEnv``). ``info["game_over"]`` says which it was."""

    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        self.lives = 0
        self.game_over = True

    def step(self, action: Any) -> tuple[Any, Any, bool, bool, dict[str, Any]]:
        obs, reward, terminated, truncated, info = self.env.step(action)
        self.game_over = terminated or truncated
        lives = self.env.unwrapped.ale.lives()
        if 0 < lives < self.lives:
            terminated = True
        self.lives = lives
        info["game_over"] = self.game_over
        return obs, reward, terminated, truncated, info

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Any, dict[str, Any]]:
        if self.game_over or seed is not None:
            obs, info = self.env.reset(seed=seed, options=options)
        else:  # the game goes on after a lost life
            obs, _, terminated, truncated, info = self.env.step(0)
            if terminated or truncated:  # the no-op ended the game
                obs, info = self.env.reset(options=options)
        self.game_over = False
        self.lives = self.env.unwrapped.ale.lives()
        return obs, info


def make_atari(env_id: str, options: AtariOptions, training: bool, render_mode: str | None = None, **kwargs: Any) -> gym.Env:
    """``env_id`` with the preprocessing of :class:`AtariOptions` (training: also life loss as
    terminal and clipped rewards, as the options say)."""
    env = gym.make(env_id, render_mode=render_mode, frameskip=1,
                   repeat_action_probability=options.repeat_action_probability,
                   full_action_space=options.full_action_space,
                   max_num_frames_per_episode=options.max_episode_frames, **kwargs)
    env = gym.wrappers.AtariPreprocessing(env, noop_max=options.noop_max, frame_skip=options.frame_skip,
                                          screen_size=options.screen_size, terminal_on_life_loss=False,
                                          grayscale_obs=True, scale_obs=False)
    env = gym.wrappers.RecordEpisodeStatistics(env)  # the raw game: below life loss and clipping
    if training and options.terminal_on_life_loss:
        env = EpisodicLife(env)
    if training and options.clip_rewards:
        env = gym.wrappers.TransformReward(env, np.sign)
    return gym.wrappers.FrameStackObservation(env, options.frame_stack)


def ale_game(env_id: str) -> str:
    """The ROM name of an ALE id (``ALE/Breakout-v5`` -> ``breakout``)."""
    return gym.spec(env_id).kwargs["game"]
