"""A batch's rows on several threads: the host learner's own data parallelism (Learn/blas).

torch's intra-op threads (OpenMP, MKL) meet at every matrix product, and what runs between the
products (hetrl's compiled kernels, numpy) runs on one core; on a 2-core machine that left an
actor-critic update far from twice as fast on two threads (docs/benchmarks.md, the speed grid).
Here the batch is cut into row ranges, one per thread, and each thread runs its whole share of a
phase (forward passes, losses, backward passes) with products on one MKL thread: one hand-off per
thread per phase. A thread waits for the others on a lock, never by spinning.
"""

from __future__ import annotations

import concurrent.futures
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import torch

T = TypeVar("T")
S = TypeVar("S")

MIN_ROWS = 16  # the fewest rows a share gets: below that a thread's hand-off costs more than it saves


class RowShares:
    """Splits a batch into as many row ranges as torch has threads and runs a phase on them."""

    def __init__(self) -> None:
        self._pool: concurrent.futures.ThreadPoolExecutor | None = None

    @staticmethod
    def ranges(batch: int) -> list[tuple[int, int]]:
        """[start, stop) of each share: one per torch thread (each at least MIN_ROWS rows), near-equal."""
        k = max(1, min(torch.get_num_threads(), batch // MIN_ROWS))
        bounds = [batch * i // k for i in range(k + 1)]
        return list(zip(bounds[:-1], bounds[1:]))

    def run(self, fn: Callable[[S], T], shares: Sequence[S]) -> list[T]:
        """``fn(share)`` for every share, in order: the first on this thread, each other on a pool
        thread, with torch at one thread meanwhile (each share's products on one MKL thread) and
        its thread count restored after. One share: ``fn`` here, torch's threads untouched."""
        if len(shares) == 1:
            return [fn(shares[0])]
        if self._pool is None or self._pool._max_workers < len(shares) - 1:
            self._pool = concurrent.futures.ThreadPoolExecutor(len(shares) - 1, thread_name_prefix="hetrl-rows")
        threads = torch.get_num_threads()
        torch.set_num_threads(1)
        try:
            futures = [self._pool.submit(fn, share) for share in shares[1:]]
            try:
                first = fn(shares[0])
            finally:
                concurrent.futures.wait(futures)  # no share still writes when this returns or raises
            return [first, *(f.result() for f in futures)]
        finally:
            torch.set_num_threads(threads)

    def __getstate__(self) -> dict[str, Any]:  # a copied learner makes its own threads
        return {"_pool": None}
