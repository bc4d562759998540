"""TabularLearn / ray: one Ray actor per unit, spread over the cluster's nodes (Ray's SPREAD
strategy), for multi-node clusters. Ray is optional (``pip install ray``); it is imported only when
this backend is built."""

from __future__ import annotations

from typing import Any

import numpy as np

from hetrl.errors import HetrlError
from hetrl.protocol import Slot, implements
from hetrl.tabular.units import HostUnit, TabularUnits, UpdateRule


class _RayUnit:
    """A Ray actor wrapping one unit (decorated with ``ray.remote`` when the backend starts)."""

    def __init__(self, rule: UpdateRule, unit: int, shard: np.ndarray) -> None:
        self._table = np.zeros(rule.table_size, dtype=rule.dtype)
        self._unit = HostUnit(rule, unit, shard, self._table)

    def run(self, start: int, stop: int) -> float:
        return self._unit.run(start, stop)

    def node(self) -> str:
        import ray

        return ray.get_runtime_context().get_node_id()

    def table(self) -> np.ndarray:
        return self._table

    def set_table(self, table: np.ndarray) -> None:
        self._table[:] = table


@implements(TabularLearn="run")
class TabularLearnRay(TabularUnits):
    """One actor per unit; connects to the cluster in ``RAY_ADDRESS`` or starts a local Ray."""

    backend = "ray"

    @classmethod
    def build(cls, slot: Slot, algorithm: UpdateRule, seed: int, *, packed: np.ndarray, bounds: np.ndarray,
              **_: Any) -> "TabularLearnRay":
        return cls(algorithm, packed, bounds, slot.device)

    def __init__(self, rule: UpdateRule, packed: np.ndarray, bounds: np.ndarray, device: str | None = None) -> None:
        super().__init__(rule, packed, bounds, device)
        try:
            import ray
        except ImportError:
            raise HetrlError("the ray backend needs Ray, which is not installed; pip install 'ray>=2.9' or pick another --backend") from None
        self._ray = ray
        if not ray.is_initialized():
            ray.init()
        actor = ray.remote(num_cpus=1, scheduling_strategy="SPREAD")(_RayUnit)
        shards = [ray.put(np.ascontiguousarray(packed[bounds[u] : bounds[u + 1]])) for u in range(self.units)]
        self._actors = [actor.remote(rule, u, shards[u]) for u in range(self.units)]
        self._nodes = ray.get([a.node.remote() for a in self._actors])  # and every actor is up

    def nodes(self) -> list[str]:
        """The Ray node id each unit runs on."""
        return list(self._nodes)

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
