"""How the local executor starts processes (its actors, and the profiler's round-trip actor)."""

from __future__ import annotations

import multiprocessing as mp
from typing import Any


def actor_context() -> Any:
    """The multiprocessing context actor processes start from: a fork server with the actor code
    imported, so restarts are quick and the learner's threads are never forked."""
    ctx = mp.get_context("forkserver")
    ctx.set_forkserver_preload(["hetrl.runtime.local"])
    return ctx
