"""Evaluation curves of several groups of run directories, one panel per group, in one PNG.

    python bench/curves.py --out docs/cartpole_stability.png --title "DQN on CartPole-v1" \\
        "before: old defaults=runs/before/*" "after: tuned defaults=bench_zoo/dqn_CartPole-v1_s*"

Each group is LABEL=GLOB; every run's greedy evaluations (metrics.csv) are one line, and the
caption of the panel counts the runs whose last evaluation reached the env's threshold.
"""

from __future__ import annotations

import argparse
import csv
import glob
from pathlib import Path


def curve(run: Path) -> list[tuple[int, float]]:
    rows = csv.DictReader((run / "metrics.csv").open())
    return [(int(r["env_steps"]), float(r["eval_return_mean"])) for r in rows if r.get("eval_return_mean")]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("groups", nargs="+", metavar="LABEL=GLOB")
    parser.add_argument("--out", required=True)
    parser.add_argument("--title", default="")
    parser.add_argument("--threshold", type=float, default=475.0, help="a run counts as solved at its end from here")
    args = parser.parse_args()
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(args.groups), figsize=(5.2 * len(args.groups), 3.6), sharey=True, squeeze=False)
    for ax, group in zip(axes[0], args.groups):
        label, _, pattern = group.partition("=")
        runs = sorted(Path(p) for p in glob.glob(pattern) if (Path(p) / "metrics.csv").exists())
        solved = 0
        for run in runs:
            points = curve(run)
            steps, returns = zip(*points)
            solved += returns[-1] >= args.threshold
            ax.plot(steps, returns, lw=1, alpha=0.75)
        ax.axhline(args.threshold, color="grey", lw=0.8, ls="--")
        ax.set_title(f"{label}\nfinal policy >= {args.threshold:g}: {solved}/{len(runs)} runs", fontsize=9)
        ax.set_xlabel("env steps")
    axes[0][0].set_ylabel("greedy evaluation return (20 episodes)")
    if args.title:
        fig.suptitle(args.title, fontsize=10)
    fig.tight_layout()
    fig.savefig(args.out, dpi=110)
    print(f"written: {args.out}")


if __name__ == "__main__":
    main()
