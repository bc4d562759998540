"""Full-size learning check: the default configs (the networks the CI tests shrink) over seeds.

Each seed is a real `hetrl train` run in its own process, two at a time with one torch thread
each, stopping once a greedy evaluation (20 episodes) reaches the threshold. Prints a markdown
table: per seed, the env step at which the threshold was reached, the last evaluation, and the
measured env steps/s and updates/s of that run.

    python bench/learning.py                       # dqn CartPole-v1, ddpg and td3 Pendulum-v1, 5 seeds
    python bench/learning.py --algos ddpg --seeds 3
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

TASKS = {  # algo: (env, step budget, threshold, evaluation interval)
    "dqn": ("CartPole-v1", 100_000, 475.0, 2_500),
    "ddpg": ("Pendulum-v1", 20_000, -200.0, 1_000),
    "td3": ("Pendulum-v1", 20_000, -200.0, 1_000),
}


def run_seed(algo: str, seed: int, root: Path) -> dict:
    env, steps, threshold, every = TASKS[algo]
    run = root / f"{algo}_{seed}"
    cmd = [sys.executable, "-m", "hetrl", "train", algo, env, "--steps", str(steps), "--seed", str(seed),
           "--stop-at-return", str(threshold), "--set", f"eval_every={every}", "--run-dir", str(run), "--no-progress"]
    proc = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "OMP_NUM_THREADS": "1"})
    if proc.returncode != 0:
        raise RuntimeError(f"{algo} seed {seed} failed:\n{proc.stderr[-2000:]}")
    return {"algo": algo, "seed": seed, **json.loads((run / "summary.json").read_text())}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--algos", nargs="+", default=list(TASKS), choices=list(TASKS))
    parser.add_argument("--seeds", type=int, default=5)
    args = parser.parse_args()
    print("| algo | env | seed | solved at env step | last eval return | env steps/s | updates/s |")
    print("|---|---|---:|---:|---:|---:|---:|")
    with tempfile.TemporaryDirectory() as tmp, ThreadPoolExecutor(2) as pool:
        for algo in args.algos:
            env, steps, threshold, _ = TASKS[algo]
            results = list(pool.map(lambda s: run_seed(algo, s, Path(tmp)), range(args.seeds)))
            for r in results:
                solved = f"{r['solved_at']:,}" if r["solved_at"] else f"not within {steps:,}"
                print(f"| {algo} | {env} | {r['seed']} | {solved} | {r['eval_return_mean']:.1f} | "
                      f"{r['env_steps_per_s']:,.0f} | {r['updates_per_s']:,.0f} |", flush=True)
            solved = sum(1 for r in results if r["solved_at"])
            print(f"| **{algo}** | | | **{solved}/{args.seeds} seeds reach {threshold:g}** | | | |", flush=True)


if __name__ == "__main__":
    main()
