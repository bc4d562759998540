"""What an algorithm needs to know about an environment, read once from Gymnasium."""

from __future__ import annotations

from dataclasses import dataclass, field

import gymnasium as gym
import numpy as np

from hetrl.envs.pixels import AtariOptions, is_ale, is_minatar, make_atari, register, wrap_minatar
from hetrl.envs.source import EnvSource, as_source
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
    source: EnvSource | None = field(default=None, compare=False)  # where the envs come from (None: the id env_id)

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

    @property
    def origin(self) -> EnvSource | str:
        """What :func:`make_env` and :func:`env_spec` take to make this spec's envs again."""
        return self.source or self.env_id

    def make(self, training: bool, render_mode: str | None = None) -> gym.Env:
        """One env of this spec (see :func:`make_env`)."""
        return make_env(self.origin, render_mode, training=training, atari=self.atari)


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


def make_env(env: str | EnvSource, render_mode: str | None = None, *, training: bool = False,
             atari: AtariOptions | None = None, **kwargs) -> gym.Env:
    """One env of ``env`` (an id, ``"module:Id"``, ``"module:factory"`` or an :class:`EnvSource`),
    with a one-line error for an unknown id; ``render_mode`` is passed only when one is asked for.
    MinAtar ids give uint8 (C, 10, 10) observations; ALE ids get the DQN preprocessing of ``atari``
    (default :class:`AtariOptions`), with life loss as terminal and clipped rewards only when
    ``training`` (evaluation plays full games with raw scores). Other envs are as Gymnasium or the
    factory makes them, ``training`` or not; the source's wrappers come last."""
    source = as_source(env)
    env_id = source.gym_id
    if env_id is None:
        return source.wrap(source.make_base(render_mode, **kwargs))
    source.import_module()
    register(env_id)
    _check_extras(env_id)
    kwargs = {**source.kwargs, **kwargs}
    try:
        if is_ale(env_id):
            options = atari or AtariOptions()
            options.check()
            made = make_atari(env_id, options, training, render_mode, **kwargs)
        else:
            if render_mode is not None:  # only when asked: an env whose constructor has no render_mode works otherwise
                kwargs["render_mode"] = render_mode
            made = gym.make(env_id, **kwargs)
            made = wrap_minatar(made) if is_minatar(env_id) else made
    except gym.error.NameNotFound as exc:  # also covers an unknown namespace's env
        raise HetrlError(f"unknown environment {source.name!r}{did_you_mean(env_id, gym.registry)}: {exc} "
                         "(an id your own code registers: pass 'module:Id', and hetrl imports that module first)") from None
    except gym.error.VersionNotFound as exc:
        raise HetrlError(f"environment {source.name!r}: {exc}") from None
    except gym.error.Error as exc:
        raise HetrlError(f"cannot make environment {source.name!r}: {exc}") from None
    except TypeError as exc:  # from the env's constructor, e.g. a keyword it does not take (gymnasium names the kwargs)
        raise HetrlError(f"cannot make environment {source.name!r}: {exc}") from None
    except ModuleNotFoundError as exc:
        raise HetrlError(
            f"environment {source.name!r} needs the package {exc.name!r}: install it (pip install {exc.name})"
        ) from None
    return source.wrap(made)


def env_spec(env: str | EnvSource, atari: AtariOptions | None = None) -> EnvSpec:
    """Read spaces and metadata of ``env`` (as :func:`make_env` takes it); only Box observations are
    supported: flat vectors, or images (MinAtar, ALE: uint8, channels first). ``atari``: the
    preprocessing of an ALE id."""
    source = as_source(env)
    env_id, gym_id = source.name, source.gym_id or ""
    atari = (atari or AtariOptions()) if is_ale(gym_id) else None
    env = make_env(source, atari=atari)
    try:
        obs_space, act_space = env.observation_space, env.action_space
        if not isinstance(obs_space, gym.spaces.Box):
            raise HetrlError(
                f"{env_id} has {type(obs_space).__name__} observations; the deep RL algorithms need a Box "
                "(for discrete observations use `hetrl tabular`, or wrap the env in a one-hot wrapper)"
            )
        # byte images stay bytes end to end: MinAtar and Atari, and a user's env with uint8 (C, H, W) frames
        pixels = is_ale(gym_id) or is_minatar(gym_id) or (obs_space.dtype == np.uint8 and len(obs_space.shape) == 3)
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
            source=source,
        )
    finally:
        env.close()
