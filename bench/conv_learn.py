"""The DQN learners for conv networks on the host: Learn/torch, Learn/torch-channels-last and
Learn/blas on the MinAtar network (10x10 images) and the Nature CNN (84x84 frames), one thread,
batch 32, microseconds per update (median of repeated blocks, the profiler's `time_calls`); and the
two ways of writing a linear layer's product that Learn/blas chooses between (``H @ W^T`` as torch's
nn.Linear computes it, against ``W @ H`` on feature-major activations). Markdown on stdout.

    python bench/conv_learn.py            # about two minutes on 2 cores
    python bench/conv_learn.py --threads 2
"""

from __future__ import annotations

import argparse
import datetime
import platform

import numpy as np
import torch

from hetrl.algos import make_algorithm
from hetrl.algos.dqn import DQNConfig
from hetrl.envs.spec import EnvSpec
from hetrl.hardware import read_cpu
from hetrl.primitives import build
from hetrl.profile import time_calls
from hetrl.protocol import Slot

WORKLOADS = {
    "MinAtar network, (4, 10, 10) 0/1 images, 6 actions": (EnvSpec("MinAtar/Breakout-v1", (4, 10, 10), True, 6, (), (), (), None,
                                                                   False, obs_dtype="uint8"), "minatar", 2),
    "Nature CNN, (4, 84, 84) frames, 4 actions": (EnvSpec("Bench/Frames-v0", (4, 84, 84), True, 4, (), (), (), None, False,
                                                          obs_dtype="uint8"), "nature", 256),
}
BACKENDS = ("torch", "torch-channels-last", "blas")


def learn_us(spec: EnvSpec, network: str, high: int, backend: str, threads: int, batch: int) -> float:
    algo = make_algorithm("dqn", spec, DQNConfig(network=network, batch_size=batch, double=False, max_grad_norm=None, lr=1e-4))
    learn = build("Learn", Slot(backend, "cpu", threads), algo, 0)
    rng = np.random.default_rng(0)
    host = {"obs": rng.integers(0, high, (batch, *spec.obs_shape), dtype=np.uint8),
            "next_obs": rng.integers(0, high, (batch, *spec.obs_shape), dtype=np.uint8),
            "actions": rng.integers(0, spec.n_actions, batch), "rewards": rng.standard_normal(batch).astype(np.float32),
            "discounts": np.full(batch, 0.99, np.float32), "weights": np.ones(batch, np.float32)}
    batch_in = host if type(learn).input_kind == "host" else {k: torch.as_tensor(v) for k, v in host.items()}
    median, _, _, _ = time_calls(lambda: learn.learn(**batch_in), lambda: None)
    return median * 1e6


def products_us(batch: int, n_in: int, n_out: int) -> tuple[float, float]:
    w, h, ht = torch.randn(n_out, n_in), torch.randn(batch, n_in), torch.randn(n_in, batch)
    out, out_t = torch.empty(batch, n_out), torch.empty(n_out, batch)
    a = time_calls(lambda: torch.mm(h, w.t(), out=out), lambda: None)[0]
    b = time_calls(lambda: torch.mm(w, ht, out=out_t), lambda: None)[0]
    return a * 1e6, b * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--batch", type=int, default=32)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    print(f"`python bench/conv_learn.py --threads {args.threads} --batch {args.batch}` on {datetime.date.today()}, "
          f"{read_cpu().model}, torch {torch.__version__}, Python {platform.python_version()}\n")
    print("| workload | " + " | ".join(f"Learn/{b} (µs per update)" for b in BACKENDS) + " | fastest against Learn/torch |")
    print("|---|" + "---:|" * (len(BACKENDS) + 1))
    for title, (spec, network, high) in WORKLOADS.items():
        times = {b: learn_us(spec, network, high, b, args.threads, args.batch) for b in BACKENDS}
        best = min(times, key=times.get)
        print(f"| {title} | " + " | ".join(f"{times[b]:,.0f}" for b in BACKENDS)
              + f" | {best}: {times['torch'] / times[best]:.2f}x |")
    print("\n| linear layer, batch x in -> out | H @ W^T (µs) | W @ H, feature-major (µs) |\n|---|---:|---:|")
    for n_in, n_out in ((1024, 128), (3136, 512), (256, 256)):
        a, b = products_us(args.batch, n_in, n_out)
        print(f"| {args.batch} x {n_in} -> {n_out} | {a:,.1f} | {b:,.1f} |")


if __name__ == "__main__":
    main()
