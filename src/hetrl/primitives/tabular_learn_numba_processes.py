"""TabularLearn / numba-processes: one spawned process per unit running the compiled kernel; the
dataset and the tables live in shared memory.

A worker imports this module, :mod:`hetrl.tabular.units` and what they import (numpy, numba, the
protocol), never torch: keep it so."""

from __future__ import annotations

import multiprocessing as mp
import signal
from typing import Any

import numpy as np

from hetrl.protocol import Slot, implements
from hetrl.runtime.processes import without_main
from hetrl.tabular.units import HostUnit, TabularUnits, UpdateRule, aligned_tables, table_buffer_entries


def _process_unit(conn: Any, packed_raw: Any, n: int, tables_raw: Any, rule: UpdateRule, unit: int, bounds: np.ndarray) -> None:
    """A worker: serves ``(start, stop)`` requests until it receives None."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle; it stops us
    try:
        packed = np.frombuffer(packed_raw, dtype=np.int32).reshape(n, 4)
        tables = aligned_tables(np.frombuffer(tables_raw, dtype=rule.dtype), len(bounds) - 1, rule.table_size)
        worker = HostUnit(rule, unit, packed[bounds[unit] : bounds[unit + 1]], tables[unit])
        conn.send(("ready", None))
        while (request := conn.recv()) is not None:
            conn.send(("done", worker.run(*request)))
    except Exception as exc:  # report to the parent instead of dying silently
        conn.send(("error", f"{type(exc).__name__}: {exc}"))


@implements(TabularLearn="run")
class TabularLearnNumbaProcesses(TabularUnits):
    backend = "numba-processes"

    @classmethod
    def build(cls, slot: Slot, algorithm: UpdateRule, seed: int, *, packed: np.ndarray, bounds: np.ndarray,
              **_: Any) -> "TabularLearnNumbaProcesses":
        return cls(algorithm, packed, bounds, slot.device)

    def __init__(self, rule: UpdateRule, packed: np.ndarray, bounds: np.ndarray, device: str | None = None) -> None:
        super().__init__(rule, packed, bounds, device)
        # spawn, not fork: the parent may hold torch or BLAS threads, which fork does not survive.
        ctx = mp.get_context("spawn")
        packed_raw = ctx.RawArray("b", packed.nbytes)
        np.frombuffer(packed_raw, dtype=np.int32).reshape(packed.shape)[:] = packed
        tables_raw = ctx.RawArray("b", 4 * table_buffer_entries(self.units, rule.table_size))
        self._tables = aligned_tables(np.frombuffer(tables_raw, dtype=rule.dtype), self.units, rule.table_size)
        self._conns, self._procs = [], []
        for unit in range(self.units):
            parent, child = ctx.Pipe()
            args = (child, packed_raw, len(packed), tables_raw, rule, unit, bounds)
            proc = ctx.Process(target=_process_unit, args=args, daemon=True, name=f"hetrl-unit-{unit}")
            with without_main():
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
