"""A host learner's update at 1 and at every thread count up to this machine's cores: microseconds
per update and GFLOP/s (linear layers, bench/peer_runners.py ``update_flops``) against the fp32
matmul peak at the same thread count, measured in the same run.

    python bench/learner_threads.py                                   # DQN, DDPG, TD3, SAC at 256x256 and 400x300, batch 256
    python bench/learner_threads.py --algos td3 --hidden 400,300 --backend torch

Each figure is the best of --repeats blocks of --calls updates after a warm-up, by the wall clock: a
thread count's cost includes its threads waiting for each other (and for a core another program
holds, which is why the machine should be quiet: the load average is printed before and after).
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np
import torch

import peer_runners as pr
from hetrl.algos import DDPGConfig, DQNConfig, SACConfig, TD3Config, make_algorithm
from hetrl.envs import env_spec
from hetrl.primitives import get

CONFIGS = {"dqn": (DQNConfig, "Acrobot-v1"), "ddpg": (DDPGConfig, "Pendulum-v1"), "td3": (TD3Config, "Pendulum-v1"),
           "sac": (SACConfig, "Pendulum-v1")}


def batch_of(algo, b: int, rng: np.random.Generator) -> dict[str, np.ndarray]:
    spec = algo.spec
    return {"obs": rng.standard_normal((b, *spec.obs_shape)).astype(np.float32), "actions": algo.random_actions(rng, b),
            "rewards": rng.standard_normal(b).astype(np.float32),
            "next_obs": rng.standard_normal((b, *spec.obs_shape)).astype(np.float32),
            "discounts": np.full(b, 0.99, np.float32), "weights": np.ones(b, np.float32)}


def best_us(fn, calls: int, repeats: int) -> float:
    for _ in range(max(10, calls // 2)):
        fn()
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        best = min(best, (time.perf_counter() - start) / calls)
    return best * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--algos", nargs="+", default=list(CONFIGS), choices=list(CONFIGS))
    parser.add_argument("--hidden", nargs="+", default=["256,256", "400,300"])
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--backend", default="blas", help="the Learn backend (default blas)")
    parser.add_argument("--calls", type=int, default=20)
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    threads = list(range(1, (os.cpu_count() or 1) + 1))
    print(f"load average before: {os.getloadavg()[0]:.2f}")
    peaks = {}
    for t in threads:
        torch.set_num_threads(t)
        peaks[t] = max(pr.matmul_peak((1024, 2048)).values())
    print("fp32 matmul peak: " + ", ".join(f"{peaks[t]:,.0f} GFLOP/s at {t} thread(s)" for t in threads) + "\n")
    print(f"| update (Learn/{args.backend}, batch {args.batch}) | " + " | ".join(f"{t} thread(s): us (GFLOP/s, of peak)" for t in threads) + " |")
    print("|---|" + "---:|" * len(threads))
    rng = np.random.default_rng(0)
    for hidden_text in args.hidden:
        hidden = tuple(int(w) for w in hidden_text.split(","))
        for name in args.algos:
            config, env = CONFIGS[name]
            algo = make_algorithm(name, env_spec(env), config(hidden=hidden, batch_size=args.batch))
            batch = batch_of(algo, args.batch, rng)
            out_dim = algo.spec.n_actions if name == "dqn" else algo.spec.action_shape[0]
            flops = pr.update_flops(name, algo.spec.obs_shape[0], out_dim, hidden, args.batch)
            cells = []
            for t in threads:
                torch.set_num_threads(t)
                learn = get("Learn", args.backend).cls(algo, "cpu", seed=0)
                us = best_us(lambda: learn.learn(**batch), args.calls, args.repeats)
                g = flops / us / 1e3
                cells.append(f"{us:,.0f} ({g:,.0f}, {g / peaks[t]:.0%})")
            print(f"| {name.upper()} {hidden_text.replace(',', 'x')} | " + " | ".join(cells) + " |", flush=True)
    print(f"\nload average after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
