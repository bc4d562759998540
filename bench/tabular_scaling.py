"""Strong scaling of data-parallel tabular Q-learning (hetrl.tabular) on this machine.

Collects one random-policy dataset per env, then prints markdown tables:

1. numba-threads, 1 and 2 units on the same dataset (strong scaling): updates/s, each unit's own
   updates/s, and the speedup, per env, number format and sampling order;
2. per core: the compiled kernel (1 unit) against a plain Python loop and a numpy loop;
3. the other backends: numba-processes, torch on the CPU, and torch on the GPU where there is one.

Compilation and thread/process start-up are not timed (they happen when a backend is built and
are reported separately as setup); each number is the best of --repeats runs.

    python bench/tabular_scaling.py                 # 1M transitions, four envs
    python bench/tabular_scaling.py --quick         # 100k transitions, FrozenLake only
"""

from __future__ import annotations

import argparse
import os
import platform
import time
from dataclasses import replace

import numba
import numpy as np
import torch

from hetrl.tabular.cli import count
from hetrl.tabular.dataset import TabularDataset, collect
from hetrl.tabular.schedule import Order
from hetrl.tabular.train import TabularConfig, TabularResult, train_tabular

ENVS = ("FrozenLake-v1", "FrozenLake8x8-v1", "Taxi-v4", "CliffWalking-v1")
ALPHA, GAMMA = 0.1, 0.99


class Quiet:
    """Waits, before each measurement, until the machine's cores are idle (Linux /proc/stat), for
    at most ``patience`` seconds; counts the measurements that had to start on a busy machine."""

    def __init__(self, patience: float) -> None:
        self.patience, self.busy_starts, self.starts = patience, 0, 0

    @staticmethod
    def idle_fraction(interval: float = 0.3) -> float:
        def ticks() -> tuple[int, int]:
            with open("/proc/stat") as f:
                values = [int(v) for v in f.readline().split()[1:]]
            return values[3] + values[4], sum(values)

        try:
            idle0, total0 = ticks()
            time.sleep(interval)
            idle1, total1 = ticks()
        except (OSError, ValueError, IndexError):
            return 1.0
        return (idle1 - idle0) / max(1, total1 - total0)

    def wait(self) -> None:
        self.starts += 1
        deadline = time.monotonic() + self.patience
        while self.idle_fraction() < 0.9:
            if time.monotonic() > deadline:
                self.busy_starts += 1
                return


def best_of(quiet: Quiet, dataset: TabularDataset, repeats: int, *configs: dict) -> list[TabularResult]:
    """The fastest of ``repeats`` runs of each config; the configs take turns, so that a burst of
    other work on the machine hits them alike."""
    runs = [[] for _ in configs]
    for _ in range(repeats):
        quiet.wait()
        for config, results in zip(configs, runs):
            results.append(train_tabular(dataset, TabularConfig(alpha=ALPHA, gamma=GAMMA, **config)))
    return [max(results, key=lambda r: r.updates_per_second) for results in runs]


def python_loop(dataset: TabularDataset, n: int) -> float:
    """Q-learning in plain Python (lists of floats); returns updates/s."""
    q = [[0.0] * dataset.n_actions for _ in range(dataset.n_states)]
    data = zip(*(getattr(dataset, k)[:n].tolist() for k in ("obs", "action", "reward", "next_obs", "done")))
    began = time.perf_counter()
    for s, a, r, s2, done in data:
        target = r if done else r + GAMMA * max(q[s2])
        q[s][a] += ALPHA * (target - q[s][a])
    return n / (time.perf_counter() - began)


def numpy_loop(dataset: TabularDataset, n: int) -> float:
    """Q-learning one transition at a time on numpy arrays (float32 table); returns updates/s."""
    q = np.zeros((dataset.n_states, dataset.n_actions), dtype=np.float32)
    obs, act, rew, nxt, done = dataset.obs, dataset.action, dataset.reward, dataset.next_obs, dataset.done
    began = time.perf_counter()
    for i in range(n):
        target = rew[i] if done[i] else rew[i] + GAMMA * q[nxt[i]].max()
        q[obs[i], act[i]] += ALPHA * (target - q[obs[i], act[i]])
    return n / (time.perf_counter() - began)


def mups(value: float) -> str:
    return f"{value / 1e6:,.1f}" if value >= 1e5 else f"{value / 1e6:,.3f}"


def cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            return next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        return platform.processor() or "unknown CPU"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--transitions", type=count, default=None, help="dataset size (default 1M; --quick: 100k)")
    parser.add_argument("--quick", action="store_true", help="100k transitions, FrozenLake-v1 only, fewer repeats")
    parser.add_argument("--envs", nargs="+", default=None, help=f"default: {' '.join(ENVS)}")
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--repeats", type=int, default=None, help="runs per measurement, the best is kept (default 3; --quick: 1)")
    parser.add_argument("--wait-idle", type=float, default=30.0, metavar="SECONDS",
                        help="before each measurement wait up to this long for other work on the machine to stop (default 30)")
    parser.add_argument("--baseline-updates", type=count, default=None, help="updates timed for the Python/numpy loops (default 200k)")
    args = parser.parse_args()
    transitions = args.transitions or (100_000 if args.quick else 1_000_000)
    envs = args.envs or (["FrozenLake-v1"] if args.quick else list(ENVS))
    repeats = args.repeats or (1 if args.quick else 3)
    baseline_n = min(transitions, args.baseline_updates or (50_000 if args.quick else 200_000))
    cores = os.cpu_count()
    quiet = Quiet(args.wait_idle)

    print(f"# hetrl tabular scaling: {transitions:,} transitions, {args.epochs} epochs, best of {repeats}\n")
    print(f"{cpu_name()}, {cores} cores; Python {platform.python_version()}, numpy {np.__version__}, "
          f"numba {numba.__version__}, torch {torch.__version__}\n")

    datasets = {}
    for env in envs:
        began = time.perf_counter()
        datasets[env] = collect(env, transitions, "random", seed=0)
        print(f"- collected {env}: {time.perf_counter() - began:.1f} s ({transitions / (time.perf_counter() - began):,.0f} steps/s)")
    print()

    print("## Strong scaling, numba-threads (M Q-updates/s; per unit = each unit's updates over its own busy time)\n")
    print("| env | algo | format | order | 1 unit | 2 units | per unit (2 units) | speedup 1→2 |")
    print("|---|---|---|---|---:|---:|---:|---:|")
    speedups, per_core = [], {}
    cases = [("q", "fp32", "sequential"), ("q", "int32", "sequential"), ("q", "fp32", "strided"),
             ("q", "fp32", "random"), ("q", "int32", "random"), ("sarsa", "fp32", "sequential")]
    for env, dataset in datasets.items():
        for algo, fmt, order in cases:
            common = dict(algo=algo, number_format=fmt, order=Order(order), epochs=args.epochs, backend="numba-threads")
            one, two = best_of(quiet, dataset, repeats, dict(units=1, **common), dict(units=2, **common))
            speedup = two.updates_per_second / one.updates_per_second
            speedups.append(speedup)
            per_core[(env, algo, fmt, order)] = one.updates_per_second
            print(f"| {env} | {algo} | {fmt} | {order} | {mups(one.updates_per_second)} | {mups(two.updates_per_second)} "
                  f"| {mups(two.unit_updates_per_second)} | {speedup:.2f}x |")
    print()

    first = envs[0]
    data = datasets[first]
    print(f"## Per core: Q-learning, fp32, sequential on {first} (M Q-updates/s)\n")
    print("| implementation | updates/s per core | vs Python loop |")
    print("|---|---:|---:|")
    quiet.wait()
    py = python_loop(data, baseline_n)
    quiet.wait()
    npy = numpy_loop(data, baseline_n)
    kernel = per_core[(first, "q", "fp32", "sequential")]
    for name, rate in (("plain Python loop (lists)", py), ("numpy, one transition at a time", npy),
                       ("hetrl numba kernel, 1 unit", kernel), ("hetrl numba kernel, int32, 1 unit", per_core[(first, "q", "int32", "sequential")])):
        print(f"| {name} | {mups(rate)} | {rate / py:,.{0 if rate >= 10 * py else 2}f}x |")
    print(f"\n(Python and numpy loops timed over the first {baseline_n:,} transitions.)\n")

    print(f"## Backends on {first}: Q-learning, fp32, sequential (M Q-updates/s)\n")
    print("| backend | device | units | epochs | updates/s | per unit | setup (s) |")
    print("|---|---|---:|---:|---:|---:|---:|")
    rows = []
    for units in (1, 2):
        rows.append(("numba-threads", None, units, args.epochs, data))
        rows.append(("numba-processes", None, units, args.epochs, data))
    small = min(len(data), 20_000)
    subset = replace(data, **{k: getattr(data, k)[:small] for k in ("obs", "action", "reward", "next_obs", "done", "next_action")})
    rows.append(("torch", "cpu", 2, 1, subset))
    rows.append(("torch", "cpu", 1024, 1, data))
    if torch.cuda.is_available():
        for units in (1024, 16384):
            rows.append(("torch", "cuda", units, args.epochs, data))
    for backend, device, units, epochs, dataset in rows:
        config = dict(units=units, epochs=epochs, backend=backend, device=device)
        (result,) = best_of(quiet, dataset, repeats if backend == "numba-threads" else 1, config)
        print(f"| {backend} | {result.device} | {units} | {epochs} | {mups(result.updates_per_second)} "
              f"| {mups(result.unit_updates_per_second)} | {result.setup_seconds:.2f} |")
    print(f"\n(torch on the CPU with 2 units runs on the first {small:,} transitions: one small tensor op per step.)\n")

    fp32_seq = [rate for (env, algo, fmt, order), rate in per_core.items() if (algo, fmt, order) == ("q", "fp32", "sequential")]
    print("## Against the aims\n")
    print(f"- per core (1 unit, Q-learning fp32 sequential): {min(fp32_seq) / 1e6:.0f}-{max(fp32_seq) / 1e6:.0f} M updates/s (aim >= 50)")
    print(f"- strong scaling 1→2 units: median {np.median(speedups):.2f}x, range {min(speedups):.2f}-{max(speedups):.2f}x (aim >= 1.8x)")
    print(f"- {quiet.busy_starts} of {quiet.starts} measurement rounds started while other work was using the "
          f"machine (waited up to {quiet.patience:.0f} s for idle cores each time)")


if __name__ == "__main__":
    main()
