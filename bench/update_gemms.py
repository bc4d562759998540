"""Each matrix product of an MLP Q-network's update, timed alone inside a CUDA graph.

A graphed DQN update is some 50 kernels (bench/cudagraph_update.py); this says what each of its
products costs on its own, and what a kernel costs at the least, so the update's time can be
read kernel by kernel. For a Q-network obs -> hidden -> hidden -> actions at a batch, it times the
forward products (with and without the bias in the product, as ``addmm``, which is what
``nn.Linear`` runs), the backward ones (input and weight gradients, in autograd's layouts), the
output layer written as a broadcast multiply and sum, and an elementwise add (the floor: a kernel
that does next to nothing). Each is captured 20 times back to back in one graph, the graph
replayed 100 times; the figure is GPU time per product (CUDA events), TF32 off.

    python bench/update_gemms.py                       # DQN CartPole at 256x256, batch 64
    python bench/update_gemms.py --obs 6 --hidden 128 --actions 3 --batch 128
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable

import torch

REPEATS, REPLAYS = 20, 100


def products(batch: int, obs: int, hidden: int, actions: int) -> dict[str, Callable[[], torch.Tensor]]:
    r = lambda *shape: torch.randn(*shape, device="cuda")  # noqa: E731
    x, h, dq, dh = r(batch, obs), r(batch, hidden), r(batch, actions), r(batch, hidden)
    w1, w2, w3, b3 = r(hidden, obs), r(hidden, hidden), r(actions, hidden), r(actions)
    b, o, n, a = batch, obs, hidden, actions
    return {
        f"forward, first layer ({b}x{o} @ {o}x{n})": lambda: x @ w1.t(),
        f"forward, hidden layer ({b}x{n} @ {n}x{n})": lambda: h @ w2.t(),
        f"forward, output layer ({b}x{n} @ {n}x{a})": lambda: h @ w3.t(),
        f"forward, output layer with its bias (addmm, as nn.Linear)": lambda: torch.addmm(b3, h, w3.t()),
        f"forward, output layer as multiply and sum": lambda: (h.unsqueeze(1) * w3.unsqueeze(0)).sum(-1),
        f"backward, output layer's input gradient ({b}x{a} @ {a}x{n})": lambda: dq @ w3,
        f"backward, hidden layer's input gradient ({b}x{n} @ {n}x{n})": lambda: dh @ w2,
        f"backward, output layer's weight gradient ({a}x{b} @ {b}x{n})": lambda: dq.t() @ h,
        f"backward, hidden layer's weight gradient ({n}x{b} @ {b}x{n})": lambda: dh.t() @ h,
        f"backward, first layer's weight gradient ({n}x{b} @ {b}x{o})": lambda: dh.t() @ x,
        f"an elementwise add ({b}x{a}): the least a kernel costs": lambda: dq + 1.0,
    }


def graphed_us(fn: Callable[[], torch.Tensor]) -> float:
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # cuBLAS's workspace and handles exist before capture
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(REPEATS):
            fn()
    for _ in range(20):
        graph.replay()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(REPLAYS):
        graph.replay()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) * 1000 / (REPEATS * REPLAYS)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--obs", type=int, default=4)
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--actions", type=int, default=2)
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print("update_gemms.py: needs CUDA, and torch.cuda.is_available() is False here", file=sys.stderr)
        return 2
    torch.backends.cuda.matmul.allow_tf32 = False
    print(f"{torch.cuda.get_device_name(0)}, torch {torch.__version__}; GPU us per product inside a CUDA graph")
    for name, fn in products(args.batch, args.obs, args.hidden, args.actions).items():
        print(f"{graphed_us(fn):8.2f} us  {name}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
