"""The ray executor's transport per chunk (the profiler's ChunkTransfer rows) on a two-node Ray
cluster made on this machine (ray.cluster_utils.Cluster: a head and a worker raylet), for a vector
env and a pixel one: `python bench/ray_chunk_transfer.py`. The chunk's bytes are the obs and
next_obs of every transition plus actions, rewards and discounts, as RayActorRole.collect returns them."""

from __future__ import annotations

import numpy as np
import ray
from ray.cluster_utils import Cluster

from hetrl.algos import make_algorithm
from hetrl.config import make_config
from hetrl.envs import env_spec
from hetrl.profile import _jobs, synthetic_transitions

MB = 2**20


def main() -> None:
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "object_store_memory": 100 * MB, "include_dashboard": False})
    try:
        cluster.add_node(num_cpus=1, object_store_memory=100 * MB)
        cluster.wait_for_nodes()
        ray.init(address=cluster.address, include_dashboard=False, logging_level="ERROR", log_to_driver=False)
        print("| env | chunk (transitions) | bytes | where | median µs | p10-p90 µs | µs per transition |")
        print("|---|---:|---:|---|---:|---:|---:|")
        for env in ("CartPole-v1", "hetrl/Bytes-v0"):
            algo = make_algorithm("dqn", env_spec(env), make_config("dqn", env).agent)
            rows = dict(_jobs(algo, ["cpu"], [1]))["ChunkTransfer ray"]()
            for t in rows:
                nbytes = sum(v.nbytes for v in synthetic_transitions(algo, t.size, np.random.default_rng(0)).values())
                print(f"| {env} | {t.size} | {nbytes:,} | {t.backend} | {1e6 * t.median_s:,.0f} | "
                      f"{1e6 * t.p10_s:,.0f}-{1e6 * t.p90_s:,.0f} | {1e6 * t.median_s / t.size:,.1f} |")
    finally:
        ray.shutdown()
        cluster.shutdown()


if __name__ == "__main__":
    main()
