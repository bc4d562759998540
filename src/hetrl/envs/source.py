"""Where a run's envs come from (:class:`EnvSource`): a Gymnasium id, ``"module:Id"`` (importing the
module registers the id), or a factory (a callable returning a ``gym.Env``); with keyword arguments
for ``gym.make`` or the factory (``env_kwargs``) and wrappers applied after it, in order.

config.json keeps a source as names (the ``env``, ``env_kwargs`` and ``wrappers`` settings), and
every other process that makes the run's envs (the local executor's actors, Ray actors, the
profiler's fresh interpreter, ``hetrl resume`` and ``hetrl eval``) makes them from those names. A
source that only this process can make -- a factory or wrapper that is a lambda, a nested function
or defined in the script being run, or an id that this process registered -- is *in-process*
(:attr:`EnvSource.in_process` says why and what to do): its run keeps to the inline executor.
"""

from __future__ import annotations

import importlib
import inspect
import json
import os
import subprocess
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import cache, cached_property
from typing import Any

import gymnasium as gym

from hetrl.envs.pixels import is_ale, is_minatar
from hetrl.errors import HetrlError, did_you_mean, user_code_failed
from hetrl.importable import MAIN, load, name_of, not_importable

EnvFactory = Callable[..., gym.Env]
Wrapper = Callable[[gym.Env], gym.Env]
FIX = "define it at the top level of an importable module (not the script being run) and pass it, or its 'module:name'"
PROBE_TIMEOUT_S = 120


@dataclass(frozen=True)
class EnvSource:
    """Build with :func:`env_source`. Pickled to actor processes as it is: its callables by
    reference, which is why only a source that is not :attr:`in_process` goes there."""

    name: str  # the ``env`` setting: an id, "module:Id", or a factory's "module:qualname"
    kwargs: dict[str, Any] = field(default_factory=dict, hash=False)  # env_kwargs: to gym.make or the factory
    wrappers: tuple[str, ...] = ()  # each wrapper's "module:qualname"
    gym_id: str | None = None  # the registered id gym.make gets; None: ``factory`` makes the env
    factory: EnvFactory | None = field(default=None, compare=False, repr=False)
    wrapper_fns: tuple[Wrapper, ...] = field(default=(), compare=False, repr=False)

    @property
    def module(self) -> str | None:
        """The module a ``"module:Id"`` source imports to register its id."""
        return self.name.partition(":")[0] if self.gym_id is not None and ":" in self.name else None

    def settings(self) -> dict[str, Any]:
        """The source as config.json keeps it; ``env_source(**settings)`` makes it again."""
        return {"env": self.name, "env_kwargs": dict(self.kwargs), "wrappers": list(self.wrappers)}

    def make_base(self, render_mode: str | None, **kwargs: Any) -> gym.Env:
        """The factory's env (``render_mode`` passed only when one is asked for), before the wrappers."""
        if self.factory is None:
            raise ValueError(f"{self.name} is a Gymnasium id, made by hetrl.envs.make_env")
        asked = {**self.kwargs, **kwargs, **({"render_mode": render_mode} if render_mode is not None else {})}
        try:
            inspect.signature(self.factory).bind(**asked)
        except TypeError as exc:
            raise HetrlError(f"env factory {self.name} cannot take {sorted(asked)}: {exc}; "
                             f"fix env_kwargs or the factory's parameters") from None
        except ValueError:  # no signature to read (a builtin): let the call say
            pass
        try:
            made = self.factory(**asked)
        except HetrlError:
            raise
        except Exception as exc:  # the user's code: one line saying where
            raise user_code_failed(f"env factory {self.name}", exc) from None
        return _checked(made, f"env factory {self.name}")

    def import_module(self) -> None:
        """Register a ``"module:Id"`` id in this process (a no-op once imported, or for other sources)."""
        if self.module is not None:
            _import(self.module, f"env {self.name!r}")

    def wrap(self, env: gym.Env) -> gym.Env:
        for name, wrapper in zip(self.wrappers, self.wrapper_fns):
            try:
                wrapped = wrapper(env)
            except HetrlError:
                raise
            except Exception as exc:  # the user's code (or a name that is not a wrapper: math:sqrt)
                raise user_code_failed(f"wrapper {name}", exc) from None
            env = _checked(wrapped, f"wrapper {name}")
        return env

    @cached_property
    def in_process(self) -> str:
        """Why only this process can make these envs, and the fix ("" when any process can make
        them from the names). A plain id that neither Gymnasium nor hetrl registers is looked up
        once in a fresh interpreter."""
        problems = []
        if self.factory is not None and (why := not_importable(self.factory)):
            problems.append(f"the env factory {self.name} is {why}")
        for name, wrapper in zip(self.wrappers, self.wrapper_fns):
            if why := not_importable(wrapper):
                problems.append(f"the wrapper {name} is {why}")
        if problems:
            return "; ".join(problems) + f": {FIX}"
        if self.module == MAIN:
            return f"the id {self.gym_id!r} is registered by the script being run: {FIX}"
        if self.gym_id is not None and self.module is None and not _known_to_a_fresh_interpreter(self.gym_id):
            entry = gym.registry[self.gym_id].entry_point
            home = entry.partition(":")[0] if isinstance(entry, str) else getattr(entry, "__module__", MAIN)
            hint = f" (if {home} registers it when imported: '{home}:{self.gym_id}')" if home != MAIN else ""
            return (f"the id {self.gym_id!r} was registered in this process, and a fresh interpreter does not know it: "
                    f"register it in an importable module and pass 'module:{self.gym_id}'{hint}")
        return ""

    def check_portable(self, needs: str) -> None:
        """Refuse, in one line, ``needs`` (what would make the envs in other processes) for an in-process source."""
        if self.in_process:
            raise HetrlError(f"{needs} makes the envs in other processes, which cannot make {self.name}: {self.in_process} "
                             "(or keep the run in this process: executor=inline)")


def env_source(env: str | EnvFactory | EnvSource, env_kwargs: dict[str, Any] | None = None,
               wrappers: Sequence[str | Wrapper] = ()) -> EnvSource:
    """The source of ``env``: an id, ``"module:Id"`` (the module is imported; a module that is not
    there is a one-line error), ``"module:factory"``, or a callable returning a ``gym.Env``;
    ``env_kwargs`` go to ``gym.make`` or the factory (JSON values: config.json keeps them);
    ``wrappers`` (callables ``env -> env``, or their ``"module:qualname"``) wrap each env."""
    if isinstance(env, EnvSource):
        return env
    if env_kwargs is not None and not isinstance(env_kwargs, dict):
        raise HetrlError(f"env_kwargs must be a dict of keyword arguments, not {type(env_kwargs).__name__} {env_kwargs!r}")
    if not isinstance(wrappers, (list, tuple)):
        raise HetrlError(f"wrappers must be a list of callables env -> env (or their 'module:name'), not "
                         f"{type(wrappers).__name__} {wrappers!r}")
    kwargs = dict(env_kwargs or {})
    try:
        json.dumps(kwargs)
    except (TypeError, ValueError) as exc:
        raise HetrlError(f"env_kwargs must be JSON values (config.json keeps them): {exc}; "
                         "pass other objects through an env factory") from None
    names, fns = [], []
    for wrapper in wrappers:
        fn = _load(wrapper, "wrapper") if isinstance(wrapper, str) else wrapper
        if not callable(fn):
            raise HetrlError(f"wrapper {wrapper!r} is not callable; give a callable env -> env (a gym.Wrapper class, say)")
        names.append(wrapper if isinstance(wrapper, str) else name_of(wrapper))
        fns.append(fn)
    common = {"kwargs": kwargs, "wrappers": tuple(names), "wrapper_fns": tuple(fns)}
    if callable(env):
        return EnvSource(name_of(env), factory=env, **common)
    if not isinstance(env, str):
        raise HetrlError(f"env must be a Gymnasium id, 'module:Id' or a callable returning a gym.Env, not {type(env).__name__}")
    if ":" not in env:
        return EnvSource(env, gym_id=env, **common)
    module, _, attr = env.partition(":")
    _import(module, f"env {env!r}")
    if attr in gym.registry:
        return EnvSource(env, gym_id=attr, **common)
    factory = _load(env, "env", quiet=True)
    if not callable(factory):
        raise HetrlError(f"env {env!r}: importing {module} registered no Gymnasium id {attr!r}"
                         f"{did_you_mean(attr, gym.registry)}, and {module} has no factory {attr!r}; "
                         f"register the id when {module} is imported, or name a callable returning a gym.Env")
    return EnvSource(env, factory=factory, **common)


def as_source(env: str | EnvSource) -> EnvSource:
    return env if isinstance(env, EnvSource) else env_source(env)


def _import(module: str, where: str) -> None:
    """Import ``module``; one not found on ``sys.path`` is looked for in the working directory too
    (last, so it shadows nothing), as ``python -m`` would, which the ``hetrl`` command does not."""
    try:
        try:
            importlib.import_module(module)
        except ModuleNotFoundError as exc:
            here = os.getcwd()
            if exc.name != module.split(".")[0] or here in sys.path or "" in sys.path:
                raise
            sys.path.append(here)  # actor processes inherit it with the rest of sys.path
            importlib.import_module(module)
    except ModuleNotFoundError as exc:
        if exc.name is not None and module.startswith(exc.name):
            raise HetrlError(f"{where}: no module named {module!r} here; install the package that holds it, or run "
                             f"from the folder that holds it (or add that folder to PYTHONPATH)") from None
        raise HetrlError(f"{where}: importing {module} needs the package {exc.name!r}: pip install {exc.name}") from None


def _load(name: str, what: str, quiet: bool = False) -> Any:
    """The object a ``"module:qualname"`` setting names. A name that cannot be found again because
    it named something only its run's process had (a lambda, a nested function, the script's own)
    is an error even when ``quiet``; another missing name is None with ``quiet``."""
    if ":" not in name:
        raise HetrlError(f"{what} {name!r}: give 'module:name' of an importable module")
    module, _, qualname = name.partition(":")
    _import(module, f"{what} {name!r}")
    try:
        return load(name)
    except AttributeError as exc:
        if "<" in qualname or module == MAIN:
            kind = "a lambda or a nested function" if "<" in qualname else "defined in the script its run was started from"
            raise HetrlError(f"{what} {name!r} was {kind}, which only the process of that run could make: {FIX}") from None
        if quiet:
            return None
        raise HetrlError(f"{what} {name!r} cannot be found ({exc}): {FIX}") from None


def _checked(env: Any, what: str) -> gym.Env:
    if not isinstance(env, gym.Env):
        raise HetrlError(f"{what} returned {type(env).__name__}, not a gymnasium.Env")
    return env


def _known_to_a_fresh_interpreter(env_id: str) -> bool:
    """Gymnasium's own ids and the ids hetrl registers on demand (pixels, its synthetic env) are; an id whose entry point
    is defined in the script being run is not; any other is looked up in a fresh interpreter."""
    spec = gym.registry.get(env_id)
    if spec is None or is_ale(env_id) or is_minatar(env_id):
        return True  # an unknown id is reported when it is made
    entry = spec.entry_point
    if isinstance(entry, str):
        if entry.startswith(("gymnasium.", "hetrl.")):
            return True
    elif getattr(entry, "__module__", None) == MAIN:
        return False
    elif str(getattr(entry, "__module__", "")).startswith("hetrl."):  # hetrl's own envs (hetrl/Bytes-v0): make_env registers them
        return True
    return _fresh_registry_has(env_id)


@cache
def _fresh_registry_has(env_id: str) -> bool:
    from hetrl.runtime.processes import fresh_python_env

    code = "import sys, gymnasium; print(sys.argv[1] in gymnasium.registry)"
    try:
        done = subprocess.run([sys.executable, "-c", code, env_id], capture_output=True, text=True,
                              timeout=PROBE_TIMEOUT_S, env=fresh_python_env(), check=False)
    except subprocess.TimeoutExpired:
        return False
    return done.stdout.strip().endswith("True")
