"""Bytes through the local executor's rings per env step, and env steps/s, for DQN on an Atari id
with the frame replay (the fixed rule's placement), learning held off so the actors, the rings and
ReplayAdd are what is measured (the learner's ReplayAdd time and CPU time per env step too). Run it against two trees to compare the ring formats:

    PYTHONPATH=/path/to/tree/src python bench/frames_rings.py --env ALE/Pong-v5 --actors 2 --steps 3000

Before frames went through the rings (a tree without ``TransitionRing.bytes_written``) the bytes are
counted the same way from the rings' counters and layouts: rows written x bytes per row.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch

from hetrl.algos import make_algorithm
from hetrl.config import make_config
from hetrl.envs import env_spec
from hetrl.planner.rule import default_placement
from hetrl.runtime.local import LocalExecutor
from hetrl.runtime.shared import WRITTEN


def ring_bytes(ring) -> int:
    if hasattr(ring, "bytes_written"):
        return ring.bytes_written()
    fields = ("obs", "actions", "rewards", "next_obs", "discounts")
    return int(ring.header[WRITTEN]) * sum(ring.block[key][0].nbytes for key in fields)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env", default="ALE/Pong-v5")
    parser.add_argument("--actors", type=int, default=2)
    parser.add_argument("--envs", type=int, default=1, help="envs per actor")
    parser.add_argument("--steps", type=int, default=3000)
    args = parser.parse_args()
    cfg = make_config("dqn", args.env, overrides=["learning_starts=100000000"])
    algo = make_algorithm("dqn", env_spec(args.env), cfg.agent)
    placement = default_placement(torch.device("cpu"), (1, 1), threads=1, mlp_policy=False, frames=True)
    ex = LocalExecutor(algo, placement, args.envs, seed=0, actors=args.actors, log=lambda m: None)
    try:
        ex.iteration()  # starts the actors
        while int(ex.control["actor_steps"].sum()) < args.envs * args.actors:  # every actor built and stepping
            ex.iteration()
        start_steps, start_bytes = int(ex.control["actor_steps"].sum()), sum(ring_bytes(r) for r in ex.rings)
        start_add = ex.timers.totals().get("ReplayAdd", (0.0, 0))[0]
        start, start_cpu = time.perf_counter(), time.process_time()
        while int(ex.control["actor_steps"].sum()) - start_steps < args.steps:
            ex.iteration()
        seconds, cpu = time.perf_counter() - start, time.process_time() - start_cpu
        add = ex.timers.totals()["ReplayAdd"][0] - start_add
        steps = int(ex.control["actor_steps"].sum()) - start_steps
        moved = sum(ring_bytes(r) for r in ex.rings) - start_bytes
        layout = sorted(k for k in ex.rings[0].block.arrays if k not in ("header", "timer_seconds", "timer_calls"))
    finally:
        ex.close()
    print(f"{args.env}, {args.actors} actors x {args.envs} envs, replay {placement.replay.backend}, ring fields {layout}")
    print(f"env steps/s {steps / seconds:,.0f} ({steps} steps in {seconds:.1f} s); "
          f"ring bytes per env step {moved / steps:,.0f}; replay {len(ex.replay)} transitions, "
          f"{np.round(ex.replay.nbytes / 2**20, 1)} MiB")
    print(f"learner: ReplayAdd {1e6 * add / steps:.1f} us per env step, its process's CPU {1e6 * cpu / steps:.1f} us "
          "per env step (draining, adding, waiting)")


if __name__ == "__main__":
    main()
