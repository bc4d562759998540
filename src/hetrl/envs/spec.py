"""What an algorithm needs to know about an environment, read once from Gymnasium."""

from __future__ import annotations

from dataclasses import dataclass

import gymnasium as gym
import numpy as np

from hetrl.envs.pixels import AtariOptions, is_ale, is_minatar, make_atari, register, wrap_minatar
from hetrl.errors import HetrlError, did_you_mean


@dataclass(frozen=True)
class EnvSpec:
    env_id: str
    obs_shape: tuple[int, ...]
    discrete: bool
    n_actions: int  # discrete: number of actions; continuous: 0
    action_shape: tuple[int, ...]  # () for discrete
    action_low: tuple[float, ...]  # continuous bounds (empty for discrete)
    action_high: tuple[float, ...]
    reward_threshold: float | None  # Gymnasium's "solved" return, where it defines one
    supports_rgb_array: bool
    obs_dtype: str = "float32"  # what EnvStep returns: "uint8" for pixel envs (MinAtar, Atari), else "float32"
    atari: AtariOptions | None = None  # the preprocessing of an ALE id (None for other envs)

    @property
    def action_dtype(self) -> str:
        return "int64" if self.discrete else "float32"

    @property
    def is_image(self) -> bool:
        """Observations are images, channels first: (C, H, W)."""
        return len(self.obs_shape) == 3

    @property
    def pixel_scale(self) -> float:
        """What a network divides uint8 observations by to bring them to [0, 1]: 255 for camera-like
        frames (Atari), 1 for MinAtar's 0/1 channels (and for float observations)."""
        return 255.0 if self.obs_dtype == "uint8" and not is_minatar(self.env_id) else 1.0

    @property
    def is_atari(self) -> bool:
        return self.atari is not None

    def make(self, training: bool, render_mode: str | None = None) -> gym.Env:
        """One env of this spec (see :func:`make_env`)."""
        return make_env(self.env_id, render_mode, training=training, atari=self.atari)


def _check_extras(env_id: str) -> None:
    """Box2D envs need hetrl's ``box2d`` extra; say so in one line before Gymnasium's longer message."""
    try:
        entry_point = str(gym.spec(env_id).entry_point)
    except gym.error.Error:
        return  # unknown ids are reported by make_env below
    if entry_point.startswith("gymnasium.envs.box2d"):
        try:
            import Box2D  # noqa: F401
        except ImportError:
            raise HetrlError(f"environment {env_id!r} needs Box2D: pip install 'hetrl[box2d]'") from None


def make_env(env_id: str, render_mode: str | None = None, *, training: bool = False,
             atari: AtariOptions | None = None, **kwargs) -> gym.Env:
    """``gym.make`` with a one-line error for an unknown id. MinAtar ids give uint8 (C, 10, 10)
    observations; ALE ids get the DQN preprocessing of ``atari`` (default :class:`AtariOptions`),
    with life loss as terminal and clipped rewards only when ``training`` (evaluation plays full
    games with raw scores). Other envs are as Gymnasium makes them, ``training`` or not."""
    register(env_id)
    _check_extras(env_id)
    try:
        if is_ale(env_id):
            options = atari or AtariOptions()
            options.check()
            return make_atari(env_id, options, training, render_mode, **kwargs)
        if render_mode is not None:  # only when asked: an env whose constructor has no render_mode works otherwise
            kwargs["render_mode"] = render_mode
        env = gym.make(env_id, **kwargs)
        return wrap_minatar(env) if is_minatar(env_id) else env
    except gym.error.NameNotFound as exc:  # also covers an unknown namespace's env
        raise HetrlError(f"unknown environment {env_id!r}{did_you_mean(env_id, gym.registry)}: {exc}") from None
    except gym.error.VersionNotFound as exc:
        raise HetrlError(f"environment {env_id!r}: {exc}") from None
    except gym.error.Error as exc:
        raise HetrlError(f"cannot make environment {env_id!r}: {exc}") from None
    except ModuleNotFoundError as exc:
        raise HetrlError(
            f"environment {env_id!r} needs the package {exc.name!r}: install it (pip install {exc.name})"
        ) from None


def env_spec(env_id: str, atari: AtariOptions | None = None) -> EnvSpec:
    """Read spaces and metadata of ``env_id``; only Box observations are supported: flat vectors,
    or images (MinAtar, ALE: uint8, channels first). ``atari``: the preprocessing of an ALE id."""
    atari = (atari or AtariOptions()) if is_ale(env_id) else None
    env = make_env(env_id, atari=atari)
    try:
        obs_space, act_space = env.observation_space, env.action_space
        if not isinstance(obs_space, gym.spaces.Box):
            raise HetrlError(
                f"{env_id} has {type(obs_space).__name__} observations; the deep RL algorithms need a Box "
                "(for discrete observations use `hetrl tabular`, or wrap the env in a one-hot wrapper)"
            )
        # byte images stay bytes end to end: MinAtar and Atari, and a user's env with uint8 (C, H, W) frames
        pixels = is_ale(env_id) or is_minatar(env_id) or (obs_space.dtype == np.uint8 and len(obs_space.shape) == 3)
        if isinstance(act_space, gym.spaces.Discrete):
            discrete, n, shape, low, high = True, int(act_space.n), (), (), ()
        elif isinstance(act_space, gym.spaces.Box) and len(act_space.shape) == 1:
            if not (np.all(np.isfinite(act_space.low)) and np.all(np.isfinite(act_space.high))):
                raise HetrlError(f"{env_id} has an unbounded action space; DDPG/TD3 need finite bounds")
            discrete, n, shape = False, 0, tuple(act_space.shape)
            low, high = tuple(map(float, act_space.low)), tuple(map(float, act_space.high))
        else:
            raise HetrlError(f"{env_id} has a {act_space} action space; hetrl supports Discrete and 1-D Box")
        spec = env.spec
        return EnvSpec(
            env_id=env_id,
            obs_shape=tuple(int(d) for d in obs_space.shape),
            discrete=discrete,
            n_actions=n,
            action_shape=shape,
            action_low=low,
            action_high=high,
            reward_threshold=spec.reward_threshold if spec is not None else None,
            supports_rgb_array="rgb_array" in env.metadata.get("render_modes", []),
            obs_dtype="uint8" if pixels else "float32",
            atari=atari,
        )
    finally:
        env.close()
