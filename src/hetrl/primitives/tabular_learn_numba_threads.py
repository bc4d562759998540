"""TabularLearn / numba-threads: one thread per unit running the compiled kernel (the kernels
release the GIL, so the threads run truly in parallel); the tables are aligned rows of one host
buffer."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

from hetrl.protocol import Slot, implements
from hetrl.tabular.units import HostUnit, TabularUnits, UpdateRule, aligned_tables, table_buffer_entries


@implements(TabularLearn="run")
class TabularLearnNumbaThreads(TabularUnits):
    backend = "numba-threads"

    @classmethod
    def build(cls, slot: Slot, algorithm: UpdateRule, seed: int, *, packed: np.ndarray, bounds: np.ndarray,
              **_: Any) -> "TabularLearnNumbaThreads":
        return cls(algorithm, packed, bounds, slot.device)

    def __init__(self, rule: UpdateRule, packed: np.ndarray, bounds: np.ndarray, device: str | None = None) -> None:
        super().__init__(rule, packed, bounds, device)
        flat = np.zeros(table_buffer_entries(self.units, rule.table_size), dtype=rule.dtype)
        self._tables = aligned_tables(flat, self.units, rule.table_size)
        shards = [packed[bounds[u] : bounds[u + 1]] for u in range(self.units)]
        self._units = [HostUnit(rule, u, shards[u], self._tables[u]) for u in range(self.units)]
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
