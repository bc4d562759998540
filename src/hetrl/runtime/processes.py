"""How hetrl starts processes: the local executor's actors, the profiler's round-trip actor and
tabular learning's unit processes; and what a fresh interpreter it starts with ``subprocess`` sees."""

from __future__ import annotations

import multiprocessing as mp
import os
import signal
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


def actor_context(preload: Sequence[str] = ()) -> Any:
    """The multiprocessing context actor processes start from: a fork server with the actor code
    imported, so restarts are quick and the learner's threads are never forked. ``preload``: more
    modules the server imports once for every actor it forks (an env's package), when this call
    starts it (it is one per process: a later call's list is not imported); a module that is not
    installed is skipped there (the actor's own import then reports it).

    The fork server is started here with SIGINT and SIGTERM blocked, as multiprocessing starts its
    resource tracker: a Ctrl-C or a SIGTERM sent to the whole process group (a terminal, Slurm)
    would otherwise kill it while it imports the actor code, failing the actors' start, or later,
    leaving the learner unable to restart an actor while it writes its checkpoint. It stays until
    the learner's process is gone. Its children inherit the mask: an actor unblocks SIGTERM
    itself (``hetrl.runtime.local.actor_process``), so it can be terminated."""
    from multiprocessing import forkserver, resource_tracker

    ctx = mp.get_context("forkserver")
    ctx.set_forkserver_preload(["hetrl.runtime.local", *preload])
    resource_tracker.ensure_running()  # first: it unblocks both signals once it has started its own process
    blocked = signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS) if hasattr(signal, "pthread_sigmask") else None
    try:
        forkserver.ensure_running()  # only starts it: the import happens in the server, no wait here
    finally:
        if blocked is not None:
            signal.pthread_sigmask(signal.SIG_SETMASK, blocked)
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
