"""PNG plots of a run's metrics."""

from __future__ import annotations

from pathlib import Path

from hetrl.files import write_file
from hetrl.run.metrics import read_metrics


def plot_returns(csv_path: Path, png_path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = read_metrics(csv_path)
    fig, ax = plt.subplots(figsize=(7, 4))
    train = [(r["env_steps"], r["return_mean"]) for r in rows if r["return_mean"] is not None]
    evals = [(r["env_steps"], r["eval_return_mean"], r["eval_return_std"] or 0.0) for r in rows if r["eval_return_mean"] is not None]
    if train:
        ax.plot(*zip(*train), label="training episodes (mean)", color="tab:blue", alpha=0.7)
    if evals:
        x, y, s = zip(*evals)
        ax.errorbar(x, y, yerr=s, fmt="o-", color="tab:orange", label="greedy evaluation (mean ± std)", capsize=3)
    ax.set_xlabel("env steps")
    ax.set_ylabel("episode return")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    if train or evals:
        ax.legend(loc="best")
    fig.tight_layout()
    write_file(png_path, lambda f: fig.savefig(f, format="png", dpi=100))
    plt.close(fig)
