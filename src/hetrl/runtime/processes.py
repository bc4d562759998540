"""How hetrl starts processes: the local executor's actors, the profiler's round-trip actor and
tabular learning's unit processes; and what a fresh interpreter it starts with ``subprocess`` sees."""

from __future__ import annotations

import multiprocessing as mp
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any


def actor_context() -> Any:
    """The multiprocessing context actor processes start from: a fork server with the actor code
    imported, so restarts are quick and the learner's threads are never forked."""
    ctx = mp.get_context("forkserver")
    ctx.set_forkserver_preload(["hetrl.runtime.local"])
    return ctx


@contextmanager
def without_main() -> Iterator[None]:
    """Inside the block, processes start without importing the parent's ``__main__``.

    multiprocessing's fork server and spawn children import the parent's main script (or module)
    before they run their target, so a user's unguarded ``hetrl.train(...)`` would run again in
    every child. hetrl's children need only hetrl's own modules, so while one starts the main
    module looks like an interactive session's (no ``__file__``, no ``__spec__``), which
    multiprocessing leaves alone.
    """
    main = sys.modules.get("__main__")
    if main is None:
        yield
        return
    saved = {key: main.__dict__[key] for key in ("__file__", "__spec__") if key in main.__dict__}
    main.__dict__.pop("__file__", None)
    main.__dict__["__spec__"] = None
    try:
        yield
    finally:
        main.__dict__.pop("__spec__", None)
        main.__dict__.update(saved)


def fresh_python_env() -> dict[str, str]:
    """The environment for a fresh interpreter (``subprocess``) that should import what this process
    imports: this hetrl first, then this process's ``sys.path`` as PYTHONPATH, so a user's module
    beside the script being run (or on a path the script added) is found as the actors find it
    (multiprocessing hands them ``sys.path`` too)."""
    import hetrl

    source_root = os.path.dirname(os.path.dirname(os.path.abspath(hetrl.__file__)))
    paths = [source_root, *(p or os.getcwd() for p in sys.path)]
    return {**os.environ, "PYTHONPATH": os.pathsep.join(dict.fromkeys(paths))}
