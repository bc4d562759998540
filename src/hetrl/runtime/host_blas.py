"""numpy's BLAS on one thread while a run acts and learns on the host.

Acting multiplies small matrices (a batch of 1 to 16 observations). OpenBLAS, numpy's BLAS, splits
the larger of them (the Nature CNN's layers) over every core, and its threads then wait for cores
that env stepping, the learner or another program hold: in a DQN run on Atari frames on 2 cores,
Act/numpy took tens of milliseconds per call instead of under one (docs/benchmarks.md,
'Measurements behind the code'). Nothing hetrl computes with numpy gains from those threads; the
learner's intra-op threads are torch's own (MKL and OpenMP inside torch), which the plan sets.
"""

from __future__ import annotations

from contextlib import AbstractContextManager, nullcontext
from typing import Any


def one_blas_thread() -> AbstractContextManager[Any]:
    """Limit numpy's BLAS to one thread now (until the returned context exits, where used as one).
    Without threadpoolctl nothing changes."""
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:  # pragma: no cover - a dependency; kept optional so that a missing wheel degrades, not breaks
        return nullcontext()
    return threadpool_limits(limits=1, user_api="blas")
