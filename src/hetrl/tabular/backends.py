"""Backends that run the units of data-parallel tabular learning.

Every backend follows :mod:`hetrl.tabular.schedule` and computes the same tables for the same
shards and order (bit-exact for int32; float32 may differ by rounding):

* ``numba-threads``: one thread per unit running the compiled kernel (the kernels release the
  GIL, so threads run truly in parallel).
* ``numba-processes``: one process per unit; the dataset and the tables live in shared memory.
* ``torch``: all units at once, as batched tensor ops over a ``[units, table]`` tensor; one step
  updates every unit. Runs on any torch device; it pays off with many units on a GPU.
* ``ray``: one Ray actor per unit, for multi-node clusters. Ray is optional
  (``pip install ray``); it is imported only when this backend is chosen.

A backend is built once per training (threads, processes and compilation are set up then, and
not counted as learning time), then asked to ``run`` stream positions ``[start, stop)`` on every
unit, to hand out its ``tables`` and to ``set_tables`` after a merge.
"""

from __future__ import annotations

import multiprocessing as mp
import signal
import time
from abc import ABC, abstractmethod
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from hetrl.errors import HetrlError, did_you_mean
from hetrl.protocol.registry import implements
from hetrl.tabular.fixed_point import COEF_BITS, COEF_HALF, INT32_MAX, INT32_MIN
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


def _table_buffer_entries(units: int, size: int) -> int:
    """Size of a flat buffer that holds ``units`` aligned, padded tables wherever it starts."""
    return units * _table_stride(size) + TABLE_ALIGN // 4


def _aligned_tables(flat: np.ndarray, units: int, size: int) -> np.ndarray:
    """``[units, size]`` views of aligned, padded rows of a buffer of ``_table_buffer_entries``."""
    stride = _table_stride(size)
    offset = (-flat.ctypes.data % TABLE_ALIGN) // 4
    return flat[offset : offset + units * stride].reshape(units, stride)[:, :size]


class _Unit:
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


class Backend(ABC):
    """Runs ``len(bounds) - 1`` units, unit ``u`` on rows ``bounds[u]:bounds[u+1]`` of ``packed``."""

    name: ClassVar[str]
    host_only: ClassVar[bool] = True

    def __init__(self, rule: UpdateRule, packed: np.ndarray, bounds: np.ndarray, device: str | None = None) -> None:
        self.rule, self.bounds, self.units = rule, bounds, len(bounds) - 1
        self.device = "cpu"
        if self.host_only and device not in (None, "cpu"):
            raise HetrlError(f"the {self.name} backend runs on the CPU, not {device!r}; use --backend torch for a GPU")

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

    def __enter__(self) -> Backend:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@implements("numba-threads", TabularLearn="run")
class NumbaThreads(Backend):
    name = "numba-threads"

    def __init__(self, rule: UpdateRule, packed: np.ndarray, bounds: np.ndarray, device: str | None = None) -> None:
        super().__init__(rule, packed, bounds, device)
        flat = np.zeros(_table_buffer_entries(self.units, rule.table_size), dtype=rule.dtype)
        self._tables = _aligned_tables(flat, self.units, rule.table_size)
        shards = [packed[bounds[u] : bounds[u + 1]] for u in range(self.units)]
        self._units = [_Unit(rule, u, shards[u], self._tables[u]) for u in range(self.units)]
        self._pool = ThreadPoolExecutor(self.units, thread_name_prefix="hetrl-unit") if self.units > 1 else None

    def run(self, start: int, stop: int) -> np.ndarray:
        if self._pool is None:
            return np.array([self._units[0].run(start, stop)])
        return np.array(list(self._pool.map(lambda unit: unit.run(start, stop), self._units)))

    def tables(self) -> np.ndarray:
        return self._tables

    def set_tables(self, table: np.ndarray) -> None:
        self._tables[:] = table

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown()


def _process_unit(conn: Any, packed_raw: Any, n: int, tables_raw: Any, rule: UpdateRule, unit: int, bounds: np.ndarray) -> None:
    """A ``numba-processes`` worker: serves ``(start, stop)`` requests until it receives None."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle; it stops us
    try:
        packed = np.frombuffer(packed_raw, dtype=np.int32).reshape(n, 4)
        tables = _aligned_tables(np.frombuffer(tables_raw, dtype=rule.dtype), len(bounds) - 1, rule.table_size)
        worker = _Unit(rule, unit, packed[bounds[unit] : bounds[unit + 1]], tables[unit])
        conn.send(("ready", None))
        while (request := conn.recv()) is not None:
            conn.send(("done", worker.run(*request)))
    except Exception as exc:  # report to the parent instead of dying silently
        conn.send(("error", f"{type(exc).__name__}: {exc}"))


@implements("numba-processes", TabularLearn="run")
class NumbaProcesses(Backend):
    name = "numba-processes"

    def __init__(self, rule: UpdateRule, packed: np.ndarray, bounds: np.ndarray, device: str | None = None) -> None:
        super().__init__(rule, packed, bounds, device)
        # spawn, not fork: the parent may hold torch or BLAS threads, which fork does not survive.
        ctx = mp.get_context("spawn")
        packed_raw = ctx.RawArray("b", packed.nbytes)
        np.frombuffer(packed_raw, dtype=np.int32).reshape(packed.shape)[:] = packed
        tables_raw = ctx.RawArray("b", 4 * _table_buffer_entries(self.units, rule.table_size))
        self._tables = _aligned_tables(np.frombuffer(tables_raw, dtype=rule.dtype), self.units, rule.table_size)
        self._conns, self._procs = [], []
        for unit in range(self.units):
            parent, child = ctx.Pipe()
            args = (child, packed_raw, len(packed), tables_raw, rule, unit, bounds)
            proc = ctx.Process(target=_process_unit, args=args, daemon=True, name=f"hetrl-unit-{unit}")
            proc.start()
            self._conns.append(parent)
            self._procs.append(proc)
        self._replies()

    def _replies(self) -> list[Any]:
        replies = []
        for unit, conn in enumerate(self._conns):
            try:
                kind, value = conn.recv()
            except EOFError:
                self.close()
                raise RuntimeError(f"tabular unit process {unit} died") from None
            if kind == "error":
                self.close()
                raise RuntimeError(f"tabular unit process {unit} failed: {value}")
            replies.append(value)
        return replies

    def run(self, start: int, stop: int) -> np.ndarray:
        for conn in self._conns:
            conn.send((start, stop))
        return np.array(self._replies())

    def tables(self) -> np.ndarray:
        return self._tables

    def set_tables(self, table: np.ndarray) -> None:
        self._tables[:] = table

    def close(self) -> None:
        for conn, proc in zip(self._conns, self._procs):
            if proc.is_alive():
                try:
                    conn.send(None)
                except OSError:
                    pass
        for conn, proc in zip(self._conns, self._procs):
            proc.join(timeout=10)
            if proc.is_alive():
                proc.kill()
            conn.close()
        self._conns, self._procs = [], []


@implements("torch", any_torch_device=True, TabularLearn="run")
class TorchUnits(Backend):
    """All units in lockstep: step ``t`` updates every unit's table with its ``t``-th transition."""

    name = "torch"
    host_only = False
    # Index rows fetched to the device at a time: bounded so units * CHUNK * 16 bytes stays small.
    MAX_CHUNK_ROWS = 1 << 22

    def __init__(self, rule: UpdateRule, packed: np.ndarray, bounds: np.ndarray, device: str | None = None) -> None:
        super().__init__(rule, packed, bounds, device)
        import torch

        self._torch = torch
        if device is None:
            device = "cuda" if torch.cuda.is_available() else "cpu"
        try:
            self._device = torch.device(device)
            self._packed = torch.from_numpy(packed).to(self._device)
        except (RuntimeError, AssertionError) as exc:
            raise HetrlError(f"cannot use torch device {device!r} ({exc}); pass --device cpu or a device that exists") from None
        self.device = str(self._device)
        self._tables = torch.zeros(self.units, rule.table_size, dtype=getattr(torch, np.dtype(rule.dtype).name), device=self._device)
        self._arange = torch.arange(rule.n_actions, device=self._device)
        if rule.int32:
            self._alpha, self._gamma = int(rule.alpha), int(rule.gamma)
        else:
            self._alpha = torch.tensor(rule.alpha, dtype=torch.float32, device=self._device)
            self._gamma = torch.tensor(rule.gamma, dtype=torch.float32, device=self._device)
        self._lengths = [int(n) for n in np.diff(bounds)]
        self._orders = [EpochOrders(rule.order, n, u) for u, n in enumerate(self._lengths)]
        self._chunk = max(1, min(4096, self.MAX_CHUNK_ROWS // self.units))

    def _rows(self, start: int, stop: int) -> np.ndarray:
        """Dataset rows of stream positions ``[start, stop)``, ``[units, stop - start]``; -1 past a stream."""
        rows = np.full((self.units, stop - start), -1, dtype=np.int64)
        for unit, length in enumerate(self._lengths):
            for epoch, k0, k1 in segments(length, self.rule.epochs, start, stop):
                offset = epoch * length + k0 - start
                rows[unit, offset : offset + k1 - k0] = self.bounds[unit] + self._orders[unit](epoch)[k0:k1]
        return rows

    def run(self, start: int, stop: int) -> np.ndarray:
        torch = self._torch
        began = time.perf_counter()
        for c0 in range(start, stop, self._chunk):
            self._run_chunk(self._rows(c0, min(stop, c0 + self._chunk)))
        if self._device.type == "cuda":
            torch.cuda.synchronize(self._device)
        return np.full(self.units, time.perf_counter() - began)

    def _run_chunk(self, host_rows: np.ndarray) -> None:
        torch, rule, q = self._torch, self.rule, self._tables
        rows = torch.from_numpy(host_rows).to(self._device)
        valid = rows >= 0
        everywhere = bool(valid.all())
        data = self._packed[rows.clamp(min=0)]  # [units, steps, 4]
        sa = data[..., 0].long()
        if rule.sarsa:
            nxt = (data[..., 1] + data[..., 2]).long().unsqueeze(-1)
        else:
            nxt = data[..., 1].long().unsqueeze(-1) + self._arange
        reward = data[..., 3].contiguous()
        if not rule.int32:
            reward = reward.view(torch.float32)
        for t in range(host_rows.shape[1]):
            index = sa[:, t : t + 1]
            current = q.gather(1, index)
            best = q.gather(1, nxt[:, t]).amax(dim=1, keepdim=True)
            if rule.int32:
                current64 = current.long()
                target = reward[:, t : t + 1].long() + ((self._gamma * best.long() + COEF_HALF) >> COEF_BITS)
                value = current64 + ((self._alpha * (target - current64) + COEF_HALF) >> COEF_BITS)
                new = value.clamp(INT32_MIN, INT32_MAX).int()
            else:
                target = reward[:, t : t + 1] + self._gamma * best
                new = current + self._alpha * (target - current)
            if not everywhere:
                new = torch.where(valid[:, t : t + 1], new, current)
            q.scatter_(1, index, new)

    def tables(self) -> Any:
        return self._tables

    def set_tables(self, table: Any) -> None:
        self._tables[:] = table


class _RayUnit:
    """A Ray actor wrapping one unit (decorated with ``ray.remote`` when the backend starts)."""

    def __init__(self, rule: UpdateRule, unit: int, shard: np.ndarray) -> None:
        self._table = np.zeros(rule.table_size, dtype=rule.dtype)
        self._unit = _Unit(rule, unit, shard, self._table)

    def run(self, start: int, stop: int) -> float:
        return self._unit.run(start, stop)

    def table(self) -> np.ndarray:
        return self._table

    def set_table(self, table: np.ndarray) -> None:
        self._table[:] = table


@implements("ray", TabularLearn="run")
class RayUnits(Backend):
    """One actor per unit; connects to the cluster in ``RAY_ADDRESS`` or starts a local Ray."""

    name = "ray"

    def __init__(self, rule: UpdateRule, packed: np.ndarray, bounds: np.ndarray, device: str | None = None) -> None:
        super().__init__(rule, packed, bounds, device)
        try:
            import ray
        except ImportError:
            raise HetrlError("the ray backend needs Ray, which is not installed; pip install 'ray>=2.9' or pick another --backend") from None
        self._ray = ray
        if not ray.is_initialized():
            ray.init()
        actor = ray.remote(num_cpus=1)(_RayUnit)
        shards = [ray.put(np.ascontiguousarray(packed[bounds[u] : bounds[u + 1]])) for u in range(self.units)]
        self._actors = [actor.remote(rule, u, shards[u]) for u in range(self.units)]
        ray.get([a.run.remote(0, 0) for a in self._actors])  # wait until every actor is up

    def run(self, start: int, stop: int) -> np.ndarray:
        return np.array(self._ray.get([a.run.remote(start, stop) for a in self._actors]))

    def tables(self) -> np.ndarray:
        return np.stack(self._ray.get([a.table.remote() for a in self._actors]))

    def set_tables(self, table: np.ndarray) -> None:
        ref = self._ray.put(table)
        self._ray.get([a.set_table.remote(ref) for a in self._actors])

    def close(self) -> None:
        for actor in self._actors:
            self._ray.kill(actor)
        self._actors = []


BACKENDS: dict[str, type[Backend]] = {b.name: b for b in (NumbaThreads, NumbaProcesses, TorchUnits, RayUnits)}


def resolve_backend(name: str, units: int, device: str | None = None) -> str:
    """The backend to use: ``name`` itself, or for ``auto`` the placement rule below.

    ``auto``: torch when a non-CPU device is named, or when there are ``AUTO_GPU_UNITS`` units or
    more and a GPU; otherwise numba threads (the fastest per unit on a CPU).
    """
    if name == AUTO:
        if device not in (None, "cpu"):
            return TorchUnits.name
        if units >= AUTO_GPU_UNITS:
            import torch

            if torch.cuda.is_available():
                return TorchUnits.name
        return NumbaThreads.name
    if name not in BACKENDS:
        choices = [AUTO, *BACKENDS]
        raise HetrlError(f"unknown tabular backend {name!r}{did_you_mean(name, choices)}; choose one of {', '.join(choices)}")
    return name
