"""The fused primitives against the plain ones, in one run: DQN's Learn (numba vs torch) and Act
(numba vs numpy), and DDPG's Learn (blas vs torch), on the same inputs, as calls/s and ratios; and
MKL's product on operands on and off a cache line.

    python bench/fused.py                       # DQN 4-64-64-2 at batch 64 and 256x256; DDPG 256x256 at batch 256; 1 thread
    python bench/fused.py --hidden 64,64 --batch 64 --calls 3000
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch

from hetrl.algos import DDPGConfig, DQNConfig, make_algorithm
from hetrl.envs import env_spec
from hetrl.nets.fused_mlp import aligned_zeros
from hetrl.primitives import build
from hetrl.protocol import Slot


def rate(fn, calls: int, repeats: int = 3) -> float:
    """Calls per second, best of ``repeats`` (after a warm-up that also compiles)."""
    for _ in range(max(20, calls // 20)):
        fn()
    best = 0.0
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        best = max(best, calls / (time.perf_counter() - start))
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--hidden", nargs="+", default=["64,64", "256,256"], help="Q-network widths to measure")
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--ddpg-hidden", default="256,256", help="DDPG actor and critic widths (Pendulum-v1)")
    parser.add_argument("--ddpg-batch", type=int, default=256)
    args = parser.parse_args()
    torch.set_num_threads(1)
    spec, rng = env_spec("CartPole-v1"), np.random.default_rng(0)
    print("| network | Learn torch (updates/s) | Learn numba | ratio | Act numpy (calls/s, 1 env) | Act numba | ratio |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for hidden in args.hidden:
        widths = tuple(int(w) for w in hidden.split(","))
        algo = make_algorithm("dqn", spec, DQNConfig(hidden=widths, batch_size=args.batch, max_grad_norm=10.0))
        b = args.batch
        batch = {"obs": rng.standard_normal((b, 4)).astype(np.float32), "actions": rng.integers(0, 2, b),
                 "rewards": rng.standard_normal(b).astype(np.float32), "next_obs": rng.standard_normal((b, 4)).astype(np.float32),
                 "discounts": np.full(b, 0.99, np.float32), "weights": np.ones(b, np.float32)}
        tensors = {k: torch.as_tensor(v) for k, v in batch.items()}
        learn = {name: build("Learn", Slot(name, "cpu"), algo, 0) for name in ("torch", "numba")}
        learn_rates = {name: rate(lambda impl=impl: impl.learn(**tensors), args.calls) for name, impl in learn.items()}
        network = learn["torch"].learner.policy_network
        obs = rng.standard_normal((1, 4)).astype(np.float32)
        explore, random_actions = algo.draw_exploration(rng, 1)
        act_rates = {}
        for name in ("numpy", "numba"):
            policy = build("Act", Slot(name, "cpu"), algo, 0, source=network)
            act_rates[name] = rate(lambda p=policy: p.act(obs, explore, random_actions, 0.1), 10 * args.calls)
        print(f"| 4-{'-'.join(map(str, widths))}-2, batch {b} | {learn_rates['torch']:,.0f} | {learn_rates['numba']:,.0f} | "
              f"{learn_rates['numba'] / learn_rates['torch']:.2f}x | {act_rates['numpy']:,.0f} | {act_rates['numba']:,.0f} | "
              f"{act_rates['numba'] / act_rates['numpy']:.2f}x |")
    ddpg_learn(tuple(int(w) for w in args.ddpg_hidden.split(",")), args.ddpg_batch, max(100, args.calls // 10), rng)
    product_alignment(args.ddpg_batch, max(100, args.calls // 10))


def product_alignment(n: int, calls: int) -> None:
    """torch.mm of (n x n) operands that start 0, 16 and 32 bytes past a cache line: why Learn/blas
    allocates with aligned_zeros (np.zeros starts arrays 16 bytes past one)."""
    print(f"\n| {n}x{n} product, operands' offset from a cache line | 0 B | 16 B | 32 B |\n|---|---:|---:|---:|")
    times = []
    for offset in (0, 4, 8):  # floats
        a, w, out = (torch.from_numpy(aligned_zeros(n * n + offset)[offset:].reshape(n, n)) for _ in range(3))
        a.normal_(), w.normal_()
        times.append(1e6 / rate(lambda a=a, w=w, out=out: torch.mm(a, w.t(), out=out), calls))
    print(f"| torch.mm (us per call) | {times[0]:.0f} | {times[1]:.0f} | {times[2]:.0f} |")


def ddpg_learn(hidden: tuple[int, ...], b: int, calls: int, rng: np.random.Generator) -> None:
    """DDPG's Learn on Pendulum-v1: the hand-written update (blas) against autograd's (torch)."""
    algo = make_algorithm("ddpg", env_spec("Pendulum-v1"), DDPGConfig(hidden=hidden, batch_size=b))
    batch = {"obs": rng.standard_normal((b, 3)).astype(np.float32), "actions": rng.uniform(-2, 2, (b, 1)).astype(np.float32),
             "rewards": rng.standard_normal(b).astype(np.float32), "next_obs": rng.standard_normal((b, 3)).astype(np.float32),
             "discounts": np.full(b, 0.98, np.float32), "weights": np.ones(b, np.float32)}
    inputs = {"torch": {k: torch.as_tensor(v) for k, v in batch.items()}, "blas": batch}
    rates = {name: rate(lambda impl=build("Learn", Slot(name, "cpu"), algo, 0), x=inputs[name]: impl.learn(**x), calls)
             for name in ("torch", "blas")}
    print("\n| DDPG network | Learn torch (updates/s) | Learn blas | ratio |\n|---|---:|---:|---:|")
    print(f"| 3-{'-'.join(map(str, hidden))}-1 actor and 4-...-1 critic, batch {b} | {rates['torch']:,.0f} | "
          f"{rates['blas']:,.0f} | {rates['blas'] / rates['torch']:.2f}x |")


if __name__ == "__main__":
    main()
