"""Where a host learner's update spends its time, per kernel, at 1 and at more torch threads: the
BLAS products (torch.mm and torch.bmm), each compiled kernel hetrl's modules call (the thin-layer
kernels, Adam's ``clip_and_adam``, the learner's own) and the rest (Python and numpy between
them), in microseconds per update.

    python bench/learner_breakdown.py                                  # TD3 400x300, batch 256, Learn/blas
    python bench/learner_breakdown.py --algo sac --hidden 256,256 --threads 1 2

Every kernel is wrapped by a timer, which adds about a microsecond per call to the totals. The
denormal mode is the one a run computes in (hetrl.runtime.denormals). Run it on a quiet machine.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections import defaultdict
from collections.abc import Callable
from typing import Any

import numba
import numpy as np
import torch

from learner_threads import CONFIGS, batch_of
from hetrl.algos import make_algorithm
from hetrl.envs import env_spec
from hetrl.primitives import build
from hetrl.protocol import Slot
from hetrl.runtime.denormals import set_flushing


def timed(spent: dict[str, float], label: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        start = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            spent[label] += time.perf_counter() - start
    return wrapper


def wrap_kernels(spent: dict[str, float]) -> None:
    """Replace every compiled kernel that hetrl's imported modules call by name, and torch.mm and
    torch.bmm, by a timed wrapper (labelled by the module that defines the kernel). Kernels that
    other kernels call are compiled into them and count as their caller's time."""
    for module in [m for name, m in sys.modules.items() if name.startswith("hetrl.")]:
        for name, value in list(vars(module).items()):
            if isinstance(value, numba.core.registry.CPUDispatcher):
                home = value.py_func.__module__.rsplit(".", 1)[-1]
                setattr(module, name, timed(spent, f"{home}.{value.py_func.__name__}", value))
    torch.mm = timed(spent, "torch.mm, torch.bmm (BLAS products)", torch.mm)
    torch.bmm = timed(spent, "torch.mm, torch.bmm (BLAS products)", torch.bmm)


def update_of(algo_name: str, hidden: tuple[int, ...], batch_size: int, backend: str, threads: int = 1) -> Callable[[int], None]:
    """A fresh learner of that shape: a function that runs it for n updates on one synthetic batch."""
    config, env = CONFIGS[algo_name]
    algo = make_algorithm(algo_name, env_spec(env), config(hidden=hidden, batch_size=batch_size))
    learner = build("Learn", Slot(backend, "cpu", threads=threads), algo, 0).learner
    batch = {k: torch.from_numpy(np.asarray(v)) for k, v in batch_of(algo, batch_size, np.random.default_rng(0)).items()}

    def run(n: int) -> None:
        for _ in range(n):
            learner.update(batch)
    return run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--algo", default="td3", choices=list(CONFIGS))
    parser.add_argument("--hidden", default="400,300")
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--backend", default="blas", help="the Learn backend (default blas)")
    parser.add_argument("--threads", type=int, nargs="+", default=sorted({1, os.cpu_count() or 1}))
    parser.add_argument("--calls", type=int, default=100)
    args = parser.parse_args()
    set_flushing(True)  # before torch's thread pool starts, as a run sets it
    hidden = tuple(int(w) for w in args.hidden.split(","))
    # a few updates first: they import the learner's modules and compile its kernels, which must not
    # meet a wrapper where they call each other (numba types the callee when it compiles the caller)
    update_of(args.algo, hidden, args.batch, args.backend)(3)
    spent: dict[str, float] = defaultdict(float)
    wrap_kernels(spent)
    print(f"load average before: {os.getloadavg()[0]:.2f}")
    print(f"\n| {args.algo.upper()} {args.hidden.replace(',', 'x')}, batch {args.batch}, Learn/{args.backend} | "
          + " | ".join(f"{t} thread(s), µs per update" for t in args.threads) + " |")
    print("|---|" + "---:|" * len(args.threads))
    columns = []
    for threads in args.threads:
        torch.set_num_threads(threads)
        updates = update_of(args.algo, hidden, args.batch, args.backend, threads)
        updates(max(10, args.calls // 3))  # warm-up: buffers, Adam's state, the thread pool
        spent.clear()
        start = time.perf_counter()
        updates(args.calls)
        total = (time.perf_counter() - start) / args.calls * 1e6
        per_call = {label: seconds / args.calls * 1e6 for label, seconds in spent.items()}
        per_call["the rest (Python, numpy)"] = total - sum(per_call.values())
        per_call["whole update"] = total
        columns.append(per_call)
    labels = sorted({label for column in columns for label in column}, key=lambda k: (k == "whole update", -columns[0].get(k, 0.0)))
    for label in labels:
        print(f"| {label} | " + " | ".join(f"{column.get(label, 0.0):,.0f}" for column in columns) + " |")
    print(f"\nload average after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
