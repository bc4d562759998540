"""What the TabularLearn implementations share: the update rule, a unit on the host, aligned
tables, their base class, and the choice of backend.

The implementations are in ``hetrl.primitives`` (``tabular_learn_numba_threads``,
``tabular_learn_numba_processes``, ``tabular_learn_torch``, ``tabular_learn_ray``). Every one
follows :mod:`hetrl.tabular.schedule` and computes the same tables for the same shards and order
(bit-exact for int32; float32 may differ by rounding).

An implementation is built once per training (threads, processes and compilation are set up then,
and not counted as learning time), through ``hetrl.primitives.build("TabularLearn", slot, rule,
seed, packed=..., bounds=...)``, then asked to ``run`` stream positions ``[start, stop)`` on every
unit, to hand out its ``tables`` and to ``set_tables`` after a merge.

This module imports neither torch nor an implementation: ``numba-processes`` workers import it.
"""

from __future__ import annotations

import time
from abc import abstractmethod
from dataclasses import dataclass
from typing import Any

import numpy as np

from hetrl.errors import HetrlError, did_you_mean
from hetrl.protocol import TabularLearn
from hetrl.tabular.kernels import learn_fp32, learn_int32
from hetrl.tabular.schedule import EpochOrders, Order, segments

AUTO = "auto"
# Host tables start 128 bytes apart and on 128-byte boundaries: units writing to one cache line
# (or to an adjacent-line prefetch pair) from different cores would stall each other.
TABLE_ALIGN = 128
# "auto" puts this many units or more on the GPU, when there is one: a kernel launch per step
# is only worth it when a step updates many tables.
AUTO_GPU_UNITS = 256


@dataclass(frozen=True)
class UpdateRule:
    """What every unit computes, independent of where it runs."""

    sarsa: bool
    int32: bool
    alpha: float | int  # float (fp32) or a 16-fractional-bit coefficient (int32)
    gamma: float | int
    n_states: int
    n_actions: int
    epochs: int
    order: Order

    @property
    def table_size(self) -> int:
        """Entries of a flat table: ``n_states`` rows plus the all-zero terminal row."""
        return (self.n_states + 1) * self.n_actions

    @property
    def dtype(self) -> type:
        return np.int32 if self.int32 else np.float32


def _table_stride(size: int) -> int:
    """Entries from one unit's (4-byte) table to the next: ``size`` rounded up, plus a gap."""
    per_align = TABLE_ALIGN // 4
    return -(-size // per_align) * per_align + per_align


def table_buffer_entries(units: int, size: int) -> int:
    """Size of a flat buffer that holds ``units`` aligned, padded tables wherever it starts."""
    return units * _table_stride(size) + TABLE_ALIGN // 4


def aligned_tables(flat: np.ndarray, units: int, size: int) -> np.ndarray:
    """``[units, size]`` views of aligned, padded rows of a buffer of ``table_buffer_entries``."""
    stride = _table_stride(size)
    offset = (-flat.ctypes.data % TABLE_ALIGN) // 4
    return flat[offset : offset + units * stride].reshape(units, stride)[:, :size]


class HostUnit:
    """One unit on the host: its shard, its flat table and its position in the schedule."""

    def __init__(self, rule: UpdateRule, unit: int, shard: np.ndarray, table: np.ndarray) -> None:
        self.rule, self.unit, self.shard, self.table = rule, unit, shard, table
        self._kernel = learn_int32 if rule.int32 else learn_fp32
        scalar = np.int64 if rule.int32 else np.float32
        self._alpha, self._gamma = scalar(rule.alpha), scalar(rule.gamma)
        self._orders = EpochOrders(rule.order, len(shard), unit)
        self._gather = rule.order.kind == "random"
        # Compile (or load from numba's cache) now, not while timing: an empty range of epoch 0.
        self._call(self._orders(0), 0, 0)

    def _call(self, order: np.ndarray, k0: int, k1: int) -> None:
        rule = self.rule
        self._kernel(self.table, self.shard, order, k0, k1, self._alpha, self._gamma, rule.n_actions, rule.sarsa, self._gather)

    def run(self, start: int, stop: int) -> float:
        """Run stream positions ``[start, stop)``; returns the seconds it took."""
        began = time.perf_counter()
        for epoch, k0, k1 in segments(len(self.shard), self.rule.epochs, start, stop):
            self._call(self._orders(epoch), k0, k1)
        return time.perf_counter() - began


class TabularUnits(TabularLearn):
    """Runs ``len(bounds) - 1`` units, unit ``u`` on rows ``bounds[u]:bounds[u+1]`` of ``packed``.

    Built by ``build(slot, rule, seed, packed=..., bounds=...)`` (the :class:`UpdateRule` is the
    algorithm; the seed is unused: the orders carry theirs)."""

    device: str  # where the tables live

    def __init__(self, rule: UpdateRule, packed: np.ndarray, bounds: np.ndarray, device: str | None = None) -> None:
        self.rule, self.bounds, self.units = rule, bounds, len(bounds) - 1
        self.device = self.place(device)

    @classmethod
    def place(cls, device: str | None) -> str:
        """The device the units run on: ``device`` checked, or where this backend runs by default
        (host-only backends: the CPU). A one-line HetrlError with the fix for one it cannot use."""
        if device not in (None, "cpu"):
            raise HetrlError(f"the {cls.backend} backend runs on the CPU, not {device!r}; use --backend torch for a GPU")
        return "cpu"

    @abstractmethod
    def run(self, start: int, stop: int) -> np.ndarray:
        """Run stream positions ``[start, stop)`` on every unit; returns each unit's busy seconds."""

    @abstractmethod
    def tables(self) -> Any:
        """The units' tables, ``[units, table_size]`` (numpy, or torch for the torch backend)."""

    @abstractmethod
    def set_tables(self, table: Any) -> None:
        """Give every unit a copy of ``table`` (a merged table)."""

    def close(self) -> None:
        """Release threads, processes or actors."""

    def __enter__(self) -> TabularUnits:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def resolve_backend(name: str, units: int, device: str | None = None) -> str:
    """The backend to use: ``name`` itself (a registered TabularLearn backend), or for ``auto``
    the placement rule below.

    ``auto``: torch when a non-CPU device is named, or when there are ``AUTO_GPU_UNITS`` units or
    more and a GPU; otherwise numba threads (the fastest per unit on a CPU).
    """
    if name == AUTO:
        if device not in (None, "cpu"):
            return "torch"
        if units >= AUTO_GPU_UNITS:
            import torch

            if torch.cuda.is_available():
                return "torch"
        return "numba-threads"
    from hetrl.primitives import implementations  # loads the library: not in worker processes

    choices = [AUTO, *implementations("TabularLearn")]
    if name not in choices:
        raise HetrlError(f"unknown tabular backend {name!r}{did_you_mean(name, choices)}; choose one of {', '.join(choices)}")
    return name
