"""User-facing errors.

A :class:`HetrlError` is a problem with the user's input or files (unknown algorithm, missing
device, corrupt checkpoint...). Its message is one line that names the problem and the fix; the
CLI prints it without a traceback and exits with code 2. Anything else is a bug in hetrl.

The checks every layer shares are here too (this module imports nothing of hetrl's, so the
tabular workers can use them without torch): a dataclass's field types
(:func:`field_type_problems`), whole numbers in a range (:func:`check_int`), seeds, paths, and the
user's own code failing (:func:`user_code_failed`).
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import numbers
import os
import traceback
import types
import typing
from collections.abc import Iterable
from pathlib import Path
from typing import Any

# Seeds every backend reads alike: numpy, torch, Gymnasium, ALE and EnvPool take them as 32-bit
# (EnvPool: signed) integers, with the offsets hetrl adds (per env, per actor, for evaluation) on top.
MAX_SEED = 2**31 - 1


class HetrlError(Exception):
    """A problem the user can fix; the message says what to change."""

    exit_code = 2


def did_you_mean(name: str, choices: Iterable[str]) -> str:
    """A ' (did you mean X?)' suffix when ``name`` is close to one of ``choices``."""
    close = difflib.get_close_matches(name, list(choices), n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""


def int_problem(name: str, value: object, minimum: int | None = None, maximum: int | None = None) -> str:
    """Why ``value`` is not a whole number in [minimum, maximum] ("" when it is). A bool is not a
    number here; a numpy integer is."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        return f"{name} must be a whole number, not {type(value).__name__} {value!r}"
    if minimum is not None and value < minimum or maximum is not None and value > maximum:
        bounds = (f"between {minimum} and {maximum:,}" if minimum is not None and maximum is not None
                  else f">= {minimum}" if minimum is not None else f"<= {maximum:,}")
        return f"{name} must be {bounds} (got {value})"
    return ""


@functools.cache
def field_types(cls: type) -> dict[str, Any]:
    """A dataclass's fields and their annotated types (resolved)."""
    hints = typing.get_type_hints(cls)
    return {f.name: hints[f.name] for f in dataclasses.fields(cls)}


def has_type(value: object, kind: Any) -> bool:
    """Whether ``value`` is of the annotated type ``kind``: bool, int (not a bool), float (any real
    number but a bool), str, ``tuple[X, ...]``, ``dict[...]``, ``X | None``, or a class."""
    origin, args = typing.get_origin(kind), typing.get_args(kind)
    if origin in (typing.Union, types.UnionType):
        return any(has_type(value, arg) for arg in args)
    if kind is type(None):
        return value is None
    if kind is bool:
        return isinstance(value, bool)
    if kind is int:
        return isinstance(value, numbers.Integral) and not isinstance(value, bool)
    if kind is float:
        return isinstance(value, numbers.Real) and not isinstance(value, bool)
    if origin is tuple:
        return isinstance(value, tuple) and all(has_type(v, args[0]) for v in value)
    if origin is dict:
        return isinstance(value, dict)
    return isinstance(value, origin or kind)


def field_type_problems(obj: object) -> list[str]:
    """One message per field of the dataclass ``obj`` whose value is not of its annotated type."""
    return [f"{name} must be {type_name(kind)} (got {type(getattr(obj, name)).__name__} {getattr(obj, name)!r})"
            for name, kind in field_types(type(obj)).items() if not has_type(getattr(obj, name), kind)]


def type_name(kind: Any) -> str:
    """An annotated type in words, with an example where one helps."""
    origin, args = typing.get_origin(kind), typing.get_args(kind)
    if origin is tuple:
        if args[0] is str:
            return "a comma-separated list of names, e.g. mymodule:MyWrapper,mymodule:Other"
        return "a comma-separated list of integers, e.g. 64,64"
    if origin is dict:
        return 'a JSON object, e.g. {"size": 8}'
    if origin in (typing.Union, types.UnionType):
        return type_name(next(a for a in args if a is not type(None))) + " or none"
    return {bool: "true or false", int: "an integer", float: "a number", str: "a string"}.get(kind, getattr(kind, "__name__", str(kind)))


def check_int(name: str, value: object, minimum: int | None = None, maximum: int | None = None) -> int:
    """``value``, a whole number in [minimum, maximum], as an int; else a HetrlError naming ``name``."""
    problem = int_problem(name, value, minimum, maximum)
    if problem:
        raise HetrlError(problem)
    return int(value)  # type: ignore[call-overload]


def check_seed(name: str, value: object) -> int:
    """A seed in [0, MAX_SEED]."""
    return check_int(name, value, 0, MAX_SEED)


def check_path(name: str, value: object) -> Path:
    """``value`` (a str or os.PathLike) as a Path; anything else is a HetrlError naming ``name``."""
    if not isinstance(value, (str, os.PathLike)):
        raise HetrlError(f"{name} must be a path (a str or pathlib.Path), not {type(value).__name__} {value!r}")
    return Path(value)


def user_code_failed(what: str, exc: BaseException) -> HetrlError:
    """One line for an exception from the user's own code (an env factory, a wrapper, a network
    factory), caught where hetrl called it: what raised it, and the innermost line of the code
    called (none where that is not Python: a builtin given as a factory)."""
    frames = traceback.extract_tb(exc.__traceback__)[1:]  # the first is hetrl's call
    where = f" (at {frames[-1].filename}:{frames[-1].lineno})" if frames else ""
    return HetrlError(f"{what} raised {type(exc).__name__}: {exc}{where}; fix it there")


class ActorsFailed(HetrlError):
    """An actor failed three times right after starting: the run cannot go on as configured. The
    session saves the learner's state first, and says where."""


class LearnerLost(HetrlError):
    """The learner's Ray actor died (its node left the cluster): its state is gone, so nothing can
    be saved; the session keeps the newest checkpoint and says which."""


class CannotRunHere(HetrlError):
    """An implementation found at its first call that this machine cannot run it (torch.compile
    without a C compiler or a working Triton): the profiler leaves it out with a note, and the plan
    takes another; a run that asked for it by name stops with the message."""


class StopRequested(KeyboardInterrupt):
    """A run stopped at once by a signal, without its checkpoint: the third Ctrl-C (or SIGTERM) of
    a run that was already stopping, or one while nothing had started (connecting to a Ray
    cluster). ``signum`` is the signal's number; the CLI exits with 128 + ``signum``."""

    def __init__(self, signum: int, message: str = "") -> None:
        super().__init__(message)
        self.signum = signum
