"""The ray executor's transport, measured on the Ray cluster this process is connected to: one
chunk of transitions returned by an actor through the object store and fetched by the learner
(``ChunkTransfer``), as ``RayActorRole.collect`` and ``RayLearnerRole.step`` move them, env stepping
and learning left out. The source actor runs on another node than this process's where the cluster
has one (the transfer crosses the network then), the sink on this process's node, where the learner
stays."""

from __future__ import annotations

import time
from typing import Any

import numpy as np

CHUNK_ROUNDS = 7  # timed blocks; the row's median and spread are over them
CHUNK_CALLS = 5  # chunks per timed block, one after another (as one actor's chunks follow each other)


def cluster_given() -> bool:
    """Whether this process is connected to a Ray cluster (without importing Ray if it is not)."""
    import sys

    ray = sys.modules.get("ray")
    return ray is not None and ray.is_initialized()


class _Source:
    """An actor that returns the same chunk on each call, as a collect would return a fresh one."""

    def __init__(self, chunk: dict[str, np.ndarray]) -> None:
        self.chunk = chunk

    def collect(self) -> dict[str, np.ndarray]:
        return self.chunk

    def node(self) -> str:
        import ray

        return ray.get_runtime_context().get_node_id()


class _Sink:
    """The learner's side: fetch the chunk from the store (its reference arrives unresolved)."""

    def fetch(self, refs: list[Any]) -> int:
        import ray

        return _nbytes(ray.get(refs[0]))


def _nbytes(value: Any) -> int:
    """Bytes of the arrays in a chunk (a dict of arrays; a frame chunk's rows are a dict in it)."""
    if isinstance(value, dict):
        return sum(_nbytes(v) for v in value.values())
    return int(getattr(value, "nbytes", 0))


def measure_chunk_transfer(chunk: dict[str, np.ndarray]) -> tuple[list[float], bool]:
    """Seconds per chunk over ``CHUNK_ROUNDS`` blocks, and whether the chunk crossed to another
    node. The two actors ask for no CPU: a busy cluster still measures (and is barely disturbed)."""
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    here = ray.get_runtime_context().get_node_id()
    others = [n["NodeID"] for n in ray.nodes() if n["Alive"] and n["NodeID"] != here]
    where = NodeAffinitySchedulingStrategy(others[0], soft=False) if others else "DEFAULT"
    source = ray.remote(num_cpus=0, scheduling_strategy=where)(_Source).remote(chunk)
    sink = ray.remote(num_cpus=0, scheduling_strategy=NodeAffinitySchedulingStrategy(here, soft=True))(_Sink).remote()
    try:
        crossed = ray.get(source.node.remote()) != here
        for _ in range(2):  # warm-up: both actors up, the first fetch's connections made
            ray.get(sink.fetch.remote([source.collect.remote()]))
        seconds = []
        for _ in range(CHUNK_ROUNDS):
            start = time.perf_counter()
            for _ in range(CHUNK_CALLS):
                ray.get(sink.fetch.remote([source.collect.remote()]))
            seconds.append((time.perf_counter() - start) / CHUNK_CALLS)
        return seconds, crossed
    finally:
        ray.kill(source)
        ray.kill(sink)
