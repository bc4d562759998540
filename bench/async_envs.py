"""Async env stepping (``async_envs``) against sync stepping, in a DQN actor's loop on Atari: an
acting role steps N envs (EnvStep ale-vector or envpool) and acts on every observation with the
Nature CNN on the host (one torch thread, as an actor process runs; epsilon 0.05), and the figure
is env steps/s over a timed window. Sync and async alternate within each repeat, in one run, so
load from other work on the machine falls on both alike; the table gives each one's median over
the repeats, its spread (min-max), and the median of the per-repeat ratios async/sync, with where
the time went (Act, EnvStep wait) per env step. ``--stand-in-ms`` replaces the host CNN by a stand-in
for central inference on an accelerator (a fixed wait per call that holds no core, labelled so in
the output): where acting leaves the actor's core idle, which is where async stepping should pay.

    python bench/async_envs.py [--env ALE/Breakout-v5] [--backend ale-vector] [--envs 4,8,16]
                               [--repeats 5] [--seconds 3] [--act torch] [--env-threads 0] [--stand-in-ms 0]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import time

import numpy as np
import torch

from hetrl.algos import make_algorithm
from hetrl.config import make_config
from hetrl.envs import env_spec
from hetrl.planner.rule import default_placement
from hetrl.primitives import implementations
from hetrl.protocol import Slot
from hetrl.runtime.acting_role import ActingRole
from hetrl.runtime.timers import Timers


def stand_in(ms: float):
    """Central inference as a fixed wait of ``ms`` per call that holds no core (as a round trip to an
    accelerator or an inference server would), answering with the draw's random actions."""
    def remote(obs: np.ndarray, explore: np.ndarray, random_actions: np.ndarray) -> np.ndarray:
        time.sleep(ms / 1e3)
        return random_actions

    return remote


def measure(env_id: str, backend: str, act: str, n: int, async_envs: bool, seconds: float,
            stand_in_ms: float = 0.0) -> dict[str, float]:
    """Env steps/s of one acting role over ``seconds`` (after a warm-up), and its time per env step."""
    cfg = make_config("dqn", env_id, overrides=["learning_starts=0", "eps_start=0.05", "eps_end=0.05"]).agent
    algo = make_algorithm("dqn", env_spec(env_id), cfg)
    placement = default_placement(torch.device("cpu"), (1, 1), threads=1, mlp_policy=False, frames=True)
    placement = dataclasses.replace(placement, env=Slot(backend), act=Slot(act))
    timers = Timers()
    role = ActingRole(algo, placement, n, 0, np.random.default_rng(0), timers, algo.make_policy_network(),
                      stand_in(stand_in_ms) if stand_in_ms else None, frames=True, async_envs=async_envs)
    try:
        for i in range(10):  # warm-up: threads started, first games under way
            role.step(i * n)
            role.new_frames()
        before = dict(timers.seconds)
        steps, start = 0, time.perf_counter()
        while time.perf_counter() - start < seconds:
            role.step(steps)
            role.new_frames()
            steps += n
        wall = time.perf_counter() - start
        after = dict(timers.seconds)
    finally:
        role.close()
    per_step = {name: (after.get(name, 0.0) - before.get(name, 0.0)) / steps * 1e6
                for name in ("Act", "InferenceWait", "EnvStep")}
    return {"steps_per_s": steps / wall, "act_us": per_step["Act"] + per_step["InferenceWait"],
            "env_wait_us": per_step["EnvStep"]}


def fixed_threads(backend: str, threads: int) -> None:
    """Make ``backend``'s EnvStep with ``threads`` emulator threads (its build takes none from the slot)."""
    cls = implementations("EnvStep")[backend].cls

    def build(c, slot, algorithm, seed, *, num_envs, **_):
        return c(algorithm.spec.env_id, num_envs, seed, algorithm.spec.atari, threads=threads)

    cls.build = classmethod(build)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--env", default="ALE/Breakout-v5")
    parser.add_argument("--backend", default="ale-vector", help="ale-vector or envpool")
    parser.add_argument("--act", default="torch", help="the Act backend (torch; numba where it serves conv nets)")
    parser.add_argument("--envs", default="4,8,16")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--seconds", type=float, default=3.0, help="timed window per measurement")
    parser.add_argument("--env-threads", type=int, default=0,
                        help="emulator threads of each EnvStep (each half's, async); 0: the backend's own (one per env, at most one per core)")
    parser.add_argument("--stand-in-ms", type=float, default=0.0,
                        help="act through a stand-in for central inference on an accelerator: a wait of this many ms "
                             "per call that holds no core (not a measured inference; 0: the Nature CNN on the host)")
    parser.add_argument("--json", default=None, help="also write every measurement here")
    args = parser.parse_args()
    if args.env_threads:
        fixed_threads(args.backend, args.env_threads)
    torch.set_num_threads(1)  # as an actor process acts
    counts = [int(x) for x in args.envs.split(",")]
    runs: dict[tuple[int, bool], list[dict[str, float]]] = {(n, a): [] for n in counts for a in (False, True)}
    for repeat in range(args.repeats):
        for n in counts:
            for async_envs in ((False, True) if repeat % 2 == 0 else (True, False)):  # alternate which goes first
                runs[n, async_envs].append(measure(args.env, args.backend, args.act, n, async_envs, args.seconds,
                                                           args.stand_in_ms))
    threads = f"{args.env_threads} emulator thread(s) per EnvStep" if args.env_threads else "the backend's emulator threads"
    acting = (f"acting through a stand-in for central inference: a {args.stand_in_ms:g} ms wait per call holding no core, "
              "not a measured inference" if args.stand_in_ms else f"Act {args.act} (1 torch thread)")
    print(f"{args.env}, EnvStep {args.backend} ({threads}), {acting}, {os.cpu_count()} cores; "
          f"{args.repeats} repeats of {args.seconds:g} s each, sync and async alternating")
    print(f"{'envs':>4} {'mode':>5} {'steps/s median':>14} {'min-max':>13} {'Act (or wait) us/step':>21} {'EnvStep wait us/step':>20}"
          f" {'async/sync (median of repeats)':>30}")
    for n in counts:
        for async_envs in (False, True):
            rows = runs[n, async_envs]
            rates = [r["steps_per_s"] for r in rows]
            ratio = ""
            if async_envs:
                ratios = [a["steps_per_s"] / s["steps_per_s"] for a, s in zip(rows, runs[n, False])]
                ratio = f"{statistics.median(ratios):.2f} ({min(ratios):.2f}-{max(ratios):.2f})"
            print(f"{n:>4} {'async' if async_envs else 'sync':>5} {statistics.median(rates):>14.0f} "
                  f"{min(rates):>6.0f}-{max(rates):<6.0f} {statistics.median(r['act_us'] for r in rows):>21.0f} "
                  f"{statistics.median(r['env_wait_us'] for r in rows):>20.0f} {ratio:>30}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({f"{n}-{'async' if a else 'sync'}": rows for (n, a), rows in runs.items()}, f, indent=1)


if __name__ == "__main__":
    main()
