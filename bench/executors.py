"""Env steps/s of the inline, local and ray executors on the same workloads, in one run.

Each run is a real `hetrl train` in its own process (one at a time: the executors use every core),
executors alternating within each repeat. The figure is the learning-phase rate (after
learning_starts, evaluations excluded) that the run's summary.json reports; the table gives the
median over repeats and each executor's ratio to inline.

    python bench/executors.py                 # DQN CartPole-v1 at replay ratio 1 and 0.25, DDPG Pendulum-v1 at 1
    python bench/executors.py --repeats 3 --dqn-steps 20000
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

# the settings of the peer benchmark (issue 5): DQN 64x64, batch 64; DDPG 256x256, batch 256
WORKLOADS = {
    "DQN CartPole-v1, ratio 1": ("dqn", "CartPole-v1", ["hidden=64,64", "batch_size=64", "buffer_size=50000",
                                                         "replay_ratio=1", "train_every=1", "learning_starts=1000"]),
    "DQN CartPole-v1, ratio 0.25": ("dqn", "CartPole-v1", ["hidden=64,64", "batch_size=64", "buffer_size=50000",
                                                            "replay_ratio=0.25", "train_every=1", "learning_starts=1000"]),
    "DDPG Pendulum-v1, ratio 1": ("ddpg", "Pendulum-v1", ["hidden=256,256", "batch_size=256", "replay_ratio=1",
                                                           "train_every=1", "learning_starts=1000"]),
}


def run(algo: str, env: str, settings: list[str], executor: str, actors: int, steps: int, root: Path, tag: str) -> dict:
    run_dir = root / tag
    cmd = [sys.executable, "-m", "hetrl", "train", algo, env, "--steps", str(steps), "--executor", executor,
           "--plan", "rule", "--device", "cpu", "--run-dir", str(run_dir), "--no-progress",
           "--set", "eval_every=0", "--set", "eval_episodes=1", "--set", "threads=1"]
    if executor != "inline":
        cmd += ["--actors", str(actors)]
    for item in settings:
        cmd += ["--set", item]
    proc = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "OMP_NUM_THREADS": "1"})
    if proc.returncode != 0:
        raise RuntimeError(f"{tag} failed:\n{proc.stderr[-3000:]}")
    return json.loads((run_dir / "summary.json").read_text())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--dqn-steps", type=int, default=12_000)
    parser.add_argument("--ddpg-steps", type=int, default=4_000)
    parser.add_argument("--executors", default="inline,local:1,local:2,ray:1",
                        help="comma-separated EXECUTOR[:ACTORS] (default: inline,local:1,local:2,ray:1)")
    parser.add_argument("--workloads", default=",".join(str(i) for i in range(len(WORKLOADS))),
                        help="indices into the workload list (default: all)")
    args = parser.parse_args()
    executors = [(e.split(":")[0], int(e.split(":")[1]) if ":" in e else 0) for e in args.executors.split(",")]
    chosen = [list(WORKLOADS)[int(i)] for i in args.workloads.split(",")]
    rates: dict[tuple[str, str], list[float]] = {}
    errors: dict[tuple[str, str], list[float]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name in chosen:
            algo, env, settings = WORKLOADS[name]
            steps = args.dqn_steps if algo == "dqn" else args.ddpg_steps
            for repeat in range(args.repeats):
                for executor, actors in executors:
                    label = executor + (f" ({actors} actor{'s' if actors > 1 else ''})" if actors else "")
                    tag = f"{algo}_{name.split()[-1]}_{executor}{actors}_{repeat}"
                    summary = run(algo, env, settings, executor, actors, steps, Path(tmp), tag)
                    rates.setdefault((name, label), []).append(summary["learning_env_steps_per_s"])
                    if summary.get("replay_ratio_window_error") is not None:
                        errors.setdefault((name, label), []).append(summary["replay_ratio_window_error"])
                    print(f"{name:30s} {label:20s} repeat {repeat}: {summary['learning_env_steps_per_s']:8.0f} env steps/s",
                          file=sys.stderr, flush=True)
    print(f"\nmachine: {os.cpu_count()} logical CPUs; {args.repeats} repeats, executors alternating; "
          f"learning-phase env steps/s, median [min-max]\n")
    print("| workload | executor | env steps/s | vs inline | worst 1,000-step ratio error |")
    print("| --- | --- | --- | --- | --- |")
    for name in chosen:
        base = statistics.median(rates[(name, "inline")]) if (name, "inline") in rates else None
        for (workload, label), values in rates.items():
            if workload != name:
                continue
            med = statistics.median(values)
            ratio = f"{med / base:.2f}x" if base else "-"
            err = errors.get((workload, label))
            err_text = f"{100 * max(err):.1f}%" if err else "-"
            print(f"| {name} | {label} | {med:,.0f} [{min(values):,.0f}-{max(values):,.0f}] | {ratio} | {err_text} |")


if __name__ == "__main__":
    main()
