"""A user's Python objects by name: how a run keeps a function it was given (an env factory, a
wrapper, a Q-network factory) in config.json as ``"module:qualname"``, and finds it again.

A name finds its object again in another process only when the object is defined at the top level
of a module that process can import: not a lambda, not a nested function, and not the script being
run (``__main__``: hetrl's child processes never import it, and another run's ``__main__`` is
another script).
"""

from __future__ import annotations

import importlib
from typing import Any

MAIN = "__main__"


def name_of(obj: Any) -> str:
    """``"module:qualname"`` of ``obj`` (what config.json keeps)."""
    return f"{getattr(obj, '__module__', None) or '?'}:{getattr(obj, '__qualname__', None) or type(obj).__name__}"


def load(name: str) -> Any:
    """The object ``"module:qualname"`` names. Raises ImportError or AttributeError."""
    module, _, qualname = name.partition(":")
    obj: Any = importlib.import_module(module)
    for part in qualname.split("."):
        obj = getattr(obj, part)
    return obj


def not_importable(obj: Any) -> str:
    """Why another process cannot find ``obj`` by :func:`name_of` ("" when it can)."""
    module = getattr(obj, "__module__", None)
    qualname = getattr(obj, "__qualname__", "") or ""
    if module is None or not qualname:
        return f"a {type(obj).__name__} object, not a function or class with a name"
    if "<lambda>" in qualname:
        return "a lambda"
    if "<locals>" in qualname:
        return "a nested function"
    if module == MAIN:
        return "defined in the script being run (__main__)"
    try:
        found = load(name_of(obj))
    except (ImportError, AttributeError):
        found = None
    return "" if found is obj else f"not found again by its name {name_of(obj)}"
