"""Which transition each unit learns from, and when.

The dataset is split into ``units`` contiguous shards whose sizes differ by at most one. A unit
runs ``epochs`` passes over its shard; each pass visits the shard in an :class:`Order`. A unit's
*stream* is the concatenation of its passes (``epochs * len(shard)`` updates), and "update ``p``"
is position ``p`` of that stream. Merging every ``K`` updates means after stream positions K, 2K,
... of every unit, so all backends that follow this schedule compute the same tables.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from hetrl.errors import HetrlError, check_int, check_seed, did_you_mean
from hetrl.tabular.kernels import permutation
from hetrl.tabular.options import ORDERS


@dataclass(frozen=True)
class Order:
    """How a unit walks its shard in one epoch.

    ``sequential``: 0, 1, 2, ...; ``strided``: 0, s, 2s, ..., then 1, 1+s, ... (stride ``s``);
    ``random``: a fresh permutation per epoch and unit, reproducible from ``seed``.
    """

    kind: str = "sequential"
    stride: int = 64
    seed: int = 0

    def __post_init__(self) -> None:
        if self.kind not in ORDERS:
            raise HetrlError(
                f"unknown sampling order {self.kind!r}{did_you_mean(self.kind, ORDERS)}; choose one of {', '.join(ORDERS)}"
            )
        check_int("stride", self.stride)
        check_seed("seed", self.seed)
        if self.stride < 1:
            raise HetrlError(f"stride must be >= 1 (got {self.stride}); pass e.g. --stride 64")

    @property
    def changes_each_epoch(self) -> bool:
        return self.kind == "random"

    def indices(self, length: int, unit: int, epoch: int) -> np.ndarray:
        """The int32 visiting order of a shard of ``length`` transitions (local indices)."""
        if self.kind == "sequential":
            return np.arange(length, dtype=np.int32)
        if self.kind == "strided":
            starts = range(min(self.stride, length))
            return np.concatenate([np.arange(s, length, self.stride, dtype=np.int32) for s in starts])
        out = np.empty(length, dtype=np.int32)
        key = np.random.SeedSequence([self.seed, unit, epoch]).generate_state(1, dtype=np.uint64)[0]
        permutation(out, key)
        return out


class EpochOrders:
    """The order of one unit over its shard, computed once per epoch (once in all if it is fixed)."""

    def __init__(self, order: Order, length: int, unit: int) -> None:
        self.order, self.length, self.unit = order, length, unit
        self._cached: tuple[int, np.ndarray] | None = None

    def __call__(self, epoch: int) -> np.ndarray:
        if self._cached is None or (self._cached[0] != epoch and self.order.changes_each_epoch):
            self._cached = (epoch, self.order.indices(self.length, self.unit, epoch))
        return self._cached[1]


def shard_bounds(n: int, units: int) -> np.ndarray:
    """Start offsets of ``units`` contiguous shards of ``n`` transitions, plus ``n`` at the end."""
    if units < 1:
        raise HetrlError(f"units must be >= 1 (got {units})")
    if units > n:
        raise HetrlError(f"cannot split {n} transitions into {units} units; use fewer units or a larger dataset")
    return np.array([u * n // units for u in range(units + 1)], dtype=np.int64)


def segments(length: int, epochs: int, start: int, stop: int) -> Iterator[tuple[int, int, int]]:
    """Split stream positions ``[start, stop)`` of one unit into ``(epoch, k0, k1)`` pieces.

    Positions past the unit's stream (``epochs * length``) are dropped.
    """
    stop = min(stop, epochs * length)
    position = start
    while position < stop:
        epoch, k0 = divmod(position, length)
        k1 = min(length, k0 + stop - position)
        yield epoch, k0, k1
        position += k1 - k0
