"""TabularLearn / torch: all units at once, as batched tensor ops over a ``[units, table]`` tensor;
one step updates every unit. Runs on any torch device; it pays off with many units on a GPU."""

from __future__ import annotations

import time
from typing import Any

import numpy as np
import torch

from hetrl.errors import HetrlError
from hetrl.protocol import Slot, implements
from hetrl.tabular.fixed_point import COEF_BITS, COEF_HALF, INT32_MAX, INT32_MIN
from hetrl.tabular.schedule import EpochOrders, segments
from hetrl.tabular.units import TabularUnits, UpdateRule


@implements(TabularLearn="run")
class TabularLearnTorch(TabularUnits):
    """All units in lockstep: step ``t`` updates every unit's table with its ``t``-th transition."""

    backend = "torch"
    device_types = None  # any torch device
    # Index rows fetched to the device at a time: bounded so units * CHUNK * 16 bytes stays small.
    MAX_CHUNK_ROWS = 1 << 22

    @classmethod
    def build(cls, slot: Slot, algorithm: UpdateRule, seed: int, *, packed: np.ndarray, bounds: np.ndarray,
              **_: Any) -> "TabularLearnTorch":
        return cls(algorithm, packed, bounds, slot.device)

    @classmethod
    def place(cls, device: str | None) -> str:
        """``device`` if torch has it here; by default cuda where there is one, else the CPU."""
        from hetrl.devices import resolve_device

        if device is None:
            return "cuda" if torch.cuda.is_available() else "cpu"
        try:
            return str(resolve_device(device))
        except HetrlError as exc:
            raise HetrlError(f"cannot use torch device {device!r}: {exc}") from None

    def __init__(self, rule: UpdateRule, packed: np.ndarray, bounds: np.ndarray, device: str | None = None) -> None:
        super().__init__(rule, packed, bounds, device)
        try:
            self._device = torch.device(self.device)
            self._packed = torch.from_numpy(packed).to(self._device)
        except (RuntimeError, AssertionError) as exc:
            raise HetrlError(f"cannot use torch device {self.device!r} ({exc}); pass --device cpu or a device that exists") from None
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
        began = time.perf_counter()
        for c0 in range(start, stop, self._chunk):
            self._run_chunk(self._rows(c0, min(stop, c0 + self._chunk)))
        if self._device.type == "cuda":
            torch.cuda.synchronize(self._device)
        return np.full(self.units, time.perf_counter() - began)

    def _run_chunk(self, host_rows: np.ndarray) -> None:
        rule, q = self.rule, self._tables
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

    def tables(self) -> torch.Tensor:
        return self._tables

    def set_tables(self, table: Any) -> None:
        self._tables[:] = table
