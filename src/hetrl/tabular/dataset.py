"""Experience datasets for tabular learning: collect from a Gymnasium env, save, load, validate.

File format: a numpy ``.npz`` (a zip of ``.npy`` arrays, readable with
``np.load(path, allow_pickle=False)``), one entry per transition in every array::

    obs          int32   [n]  state s
    action       int32   [n]  action a
    reward       float32 [n]  reward r
    next_obs     int32   [n]  next state s'
    done         bool    [n]  s' is terminal (the episode terminated; a time-limit
                              truncation is not done: learning bootstraps through it)
    next_action  int32   [n]  a', the behaviour policy's action in s' (SARSA's target)
    meta         str     []   JSON object: format "hetrl-tabular", version 1, env_id,
                              env_kwargs, n_states, n_actions, policy, epsilon, seed

Transitions are stored in the order they were collected, episode after episode.
"""

from __future__ import annotations

import json
import os
import zipfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np

from hetrl.errors import HetrlError, check_int, check_seed, did_you_mean
from hetrl.files import write_file

from hetrl.tabular.options import POLICIES

FORMAT = "hetrl-tabular"
VERSION = 1
ARRAYS = ("obs", "action", "reward", "next_obs", "done", "next_action")
EXAMPLE_ENVS = "FrozenLake-v1, FrozenLake8x8-v1, Taxi-v4, CliffWalking-v1"
# The epsilon-greedy behaviour policy acts on a Q-table it learns online while collecting.
COLLECT_ALPHA = 0.1
COLLECT_GAMMA = 0.99


@dataclass(frozen=True, eq=False)
class TabularDataset:
    """Transitions of an env with discrete observation and action spaces (see the module doc)."""

    env_id: str
    n_states: int
    n_actions: int
    obs: np.ndarray
    action: np.ndarray
    reward: np.ndarray
    next_obs: np.ndarray
    done: np.ndarray
    next_action: np.ndarray
    env_kwargs: dict[str, Any] = field(default_factory=dict)
    policy: str = "random"
    epsilon: float = 0.0
    seed: int = 0

    def __post_init__(self) -> None:
        problem = problems({name: np.asarray(getattr(self, name)) for name in ARRAYS}, self.n_states, self.n_actions)
        if problem:
            raise HetrlError(f"invalid tabular dataset of {self.env_id}: {problem}")

    def __len__(self) -> int:
        return len(self.obs)

    def make_env(self) -> gym.Env:
        """A fresh instance of the env the dataset was collected on."""
        return make_env(self.env_id, self.env_kwargs)

    def save(self, path: str | os.PathLike[str]) -> Path:
        """Write the dataset to ``path`` (atomically: a partial file never replaces a good one)."""
        path = Path(path)
        meta = {
            "format": FORMAT,
            "version": VERSION,
            "env_id": self.env_id,
            "env_kwargs": self.env_kwargs,
            "n_states": self.n_states,
            "n_actions": self.n_actions,
            "policy": self.policy,
            "epsilon": self.epsilon,
            "seed": self.seed,
        }
        arrays = {name: getattr(self, name) for name in ARRAYS}
        return write_file(path, lambda f: np.savez(f, meta=np.array(json.dumps(meta)), **arrays),
                          size=sum(np.asarray(a).nbytes for a in arrays.values()))


def problems(arrays: dict[str, np.ndarray], n_states: int, n_actions: int) -> str | None:
    """The first thing wrong with a dataset's arrays, or None.

    The kernels index tables with these values unchecked, so every dataset is checked once.
    """
    n = len(arrays["obs"])
    kinds = dict(obs="iu", action="iu", reward="fiu", next_obs="iu", done="biu", next_action="iu")
    for name in ARRAYS:
        array = arrays[name]
        if array.ndim != 1 or len(array) != n:
            return f"{name} has shape {array.shape}, expected ({n},) like obs"
        if array.dtype.kind not in kinds[name]:
            return f"{name} has dtype {array.dtype}"
    if n == 0:
        return "it holds no transitions"
    for name, bound in (("obs", n_states), ("next_obs", n_states), ("action", n_actions), ("next_action", n_actions)):
        if arrays[name].min() < 0 or arrays[name].max() >= bound:
            return f"{name} has values outside [0, {bound})"
    if not np.isfinite(arrays["reward"]).all():
        return "reward has non-finite values"
    if not np.isin(arrays["done"], (0, 1)).all():
        return "done has values other than 0 and 1"
    return None


def make_env(env_id: str, env_kwargs: dict[str, Any] | None = None) -> gym.Env:
    """``gym.make`` for tabular learning: the env must have Discrete spaces starting at 0."""
    if env_kwargs is not None and not isinstance(env_kwargs, dict):
        raise HetrlError(f"env_kwargs must be a dict of keyword arguments, not {type(env_kwargs).__name__} {env_kwargs!r}")
    try:
        env = gym.make(env_id, **(env_kwargs or {}))
    except (gym.error.Error, TypeError, ValueError, ModuleNotFoundError) as exc:
        reason = str(exc).rstrip(".")
        raise HetrlError(f"cannot make environment {env_id!r}: {reason}; tabular envs include {EXAMPLE_ENVS}") from None
    for what, space in (("observation", env.observation_space), ("action", env.action_space)):
        if not isinstance(space, gym.spaces.Discrete) or space.start != 0:
            env.close()
            shown = str(space) if len(str(space)) <= 60 else f"{type(space).__name__}{space.shape}"
            raise HetrlError(
                f"{env_id} has {what} space {shown}; tabular learning needs Discrete observation and "
                f"action spaces starting at 0 (e.g. {EXAMPLE_ENVS})"
            )
    return env


class _Draws:
    """Random numbers drawn from ``rng`` in blocks (one numpy call per step would dominate)."""

    def __init__(self, rng: np.random.Generator, n_actions: int, block: int = 8192) -> None:
        self._rng, self._n_actions, self._block = rng, n_actions, block
        self._actions: list[int] = []
        self._uniforms: list[float] = []

    def action(self) -> int:
        if not self._actions:
            self._actions = self._rng.integers(0, self._n_actions, self._block).tolist()
        return self._actions.pop()

    def uniform(self) -> float:
        if not self._uniforms:
            self._uniforms = self._rng.random(self._block).tolist()
        return self._uniforms.pop()


def collect(
    env_id: str,
    transitions: int,
    policy: str = "random",
    *,
    epsilon: float = 0.1,
    seed: int = 0,
    env_kwargs: dict[str, Any] | None = None,
    progress: Callable[[int], None] | None = None,
) -> TabularDataset:
    """Step ``env_id`` for ``transitions`` steps under ``policy`` and record every transition.

    ``random`` acts uniformly. ``epsilon-greedy`` acts greedily (random tie-breaking) on a
    Q-table it learns online by Q-learning (alpha 0.1, gamma 0.99), randomly with probability
    ``epsilon``. ``progress`` is called with the number of transitions so far.
    """
    check_int("transitions", transitions, 1)
    check_seed("seed", seed)
    if policy not in POLICIES:
        raise HetrlError(f"unknown policy {policy!r}{did_you_mean(policy, POLICIES)}; choose one of {', '.join(POLICIES)}")
    if not 0.0 <= epsilon <= 1.0:
        raise HetrlError(f"--epsilon must be in [0, 1] (got {epsilon})")
    env = make_env(env_id, env_kwargs)
    n_states, n_actions = int(env.observation_space.n), int(env.action_space.n)
    draws = _Draws(np.random.default_rng(seed), n_actions)
    greedy = policy == "epsilon-greedy"
    q = np.zeros((n_states, n_actions))

    def act(state: int) -> int:
        if greedy and draws.uniform() >= epsilon:
            row = q[state]
            best = np.flatnonzero(row == row.max())
            return int(best[draws.action() % len(best)])
        return draws.action()

    columns: dict[str, list[Any]] = {name: [] for name in ARRAYS}
    obs, actions, rewards = columns["obs"], columns["action"], columns["reward"]
    next_obs, dones, next_actions = columns["next_obs"], columns["done"], columns["next_action"]
    state = int(env.reset(seed=seed)[0])
    action = act(state)
    for i in range(transitions):
        next_state, reward, terminated, truncated, _ = env.step(action)
        next_state = int(next_state)
        next_action = act(next_state)
        obs.append(state)
        actions.append(action)
        rewards.append(reward)
        next_obs.append(next_state)
        dones.append(terminated)
        next_actions.append(next_action)
        if greedy:
            target = reward + (0.0 if terminated else COLLECT_GAMMA * q[next_state].max())
            q[state, action] += COLLECT_ALPHA * (target - q[state, action])
        if terminated or truncated:
            state = int(env.reset()[0])
            action = act(state)
        else:
            state, action = next_state, next_action
        if progress is not None and ((i + 1) % 10_000 == 0 or i + 1 == transitions):
            progress(i + 1)
    env.close()
    dtypes = dict(obs=np.int32, action=np.int32, reward=np.float32, next_obs=np.int32, done=bool, next_action=np.int32)
    return TabularDataset(
        env_id=env_id,
        n_states=n_states,
        n_actions=n_actions,
        env_kwargs=dict(env_kwargs or {}),
        policy=policy,
        epsilon=epsilon if greedy else 0.0,
        seed=seed,
        **{name: np.asarray(columns[name], dtype=dtypes[name]) for name in ARRAYS},
    )


def load(path: str | os.PathLike[str]) -> TabularDataset:
    """Read and validate a dataset; every problem is a :class:`HetrlError` naming the fix."""
    path = Path(path)
    collect_cmd = f"`hetrl tabular collect ENV --transitions N --out {path}`"
    if not path.is_file():
        found = "is a directory, not a file" if path.is_dir() else "does not exist"
        raise HetrlError(f"dataset {path} {found}; create it with {collect_cmd}")

    def malformed(problem: str) -> HetrlError:
        return HetrlError(f"dataset {path} is malformed: {problem}; re-create it with {collect_cmd}")

    with open(path, "rb") as f:
        magic = f.read(6)
    if magic == b"\x93NUMPY":
        raise malformed("it is a single .npy array, not a .npz archive")
    if not magic.startswith(b"PK"):
        raise malformed("it is not a .npz (zip) archive")
    try:
        with np.load(path, allow_pickle=False) as npz:
            missing = [name for name in ("meta",) + ARRAYS if name not in npz.files]
            if missing:
                raise malformed(f"missing arrays {', '.join(missing)}")
            meta = json.loads(str(npz["meta"]))
            arrays = {name: npz[name] for name in ARRAYS}
    except HetrlError:
        raise
    except (OSError, ValueError, EOFError, zipfile.BadZipFile, json.JSONDecodeError) as exc:
        raise malformed(f"not a readable .npz archive ({type(exc).__name__}: {exc})") from None
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        raise malformed(f"its meta is not a {FORMAT!r} header")
    if meta.get("version") != VERSION:
        raise malformed(f"format version {meta.get('version')!r}, this hetrl reads version {VERSION}")
    try:
        env_id, n_states, n_actions = str(meta["env_id"]), int(meta["n_states"]), int(meta["n_actions"])
        env_kwargs = dict(meta.get("env_kwargs") or {})
    except (KeyError, TypeError, ValueError) as exc:
        raise malformed(f"bad meta field {exc}") from None
    problem = problems(arrays, n_states, n_actions)
    if problem:
        raise malformed(problem)
    return TabularDataset(
        env_id=env_id,
        n_states=n_states,
        n_actions=n_actions,
        env_kwargs=env_kwargs,
        policy=str(meta.get("policy", "random")),
        epsilon=float(meta.get("epsilon", 0.0)),
        seed=int(meta.get("seed", 0)),
        obs=arrays["obs"].astype(np.int32),
        action=arrays["action"].astype(np.int32),
        reward=arrays["reward"].astype(np.float32),
        next_obs=arrays["next_obs"].astype(np.int32),
        done=arrays["done"].astype(bool),
        next_action=arrays["next_action"].astype(np.int32),
    )
