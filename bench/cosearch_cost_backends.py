"""The co-search's CPU cost table timed on torch, numpy and numba, side by side (issue 19).

``hetrl cosearch --hardware cpu`` times each candidate operation alone (``measure_op_latency``); on
the host the derived network is served fastest by Act/numba, so the table is timed on numba by
default (numpy before). This script measures the three tables for one MinAtar game's default search
space at batch 1 (torch: 1 thread; numpy: 1 BLAS thread, as Act/numpy runs; numba: each operation a
one-layer program of Act/numba's pass), ``--rounds`` times each, alternating, and prints:

- per operation and input width, the median over rounds of each backend's seconds per call;
- the Spearman rank correlation between each pair of tables over every distinct entry, and within each
  layer at each input width (the candidates a layer's choice is made among): of the medians, and
  of one round's tables (what one search uses) beside the same between two rounds of one backend
  (how far timing noise alone moves the ranks);
- for ``--networks`` architectures drawn from the space, each whole network's measured forward at
  batch 1 on each backend (``SearchedQNetwork.forward``, ``forward_numpy`` and ``FusedQ``'s
  compiled pass, the same thread settings) against each table's sum over its layers.

    python bench/cosearch_cost_backends.py                   # MinAtar/Breakout-v1, 5 rounds, 8 networks
"""

from __future__ import annotations

import argparse
import statistics
import sys

import numpy as np
import torch
from scipy.stats import spearmanr

from hetrl.algos.base import seeded_init
from hetrl.cosearch.cost import CostTable, measure_op_latency
from hetrl.cosearch.supernet import search_space
from hetrl.envs import env_spec
from hetrl.nets import numpy_params
from hetrl.nets.fused_q import FusedQ
from hetrl.profile import time_calls, torch_threads
from hetrl.runtime.host_blas import one_blas_thread

BACKENDS = ("torch", "numpy", "numba")
NET_REPEATS = 21  # time_calls blocks per whole network (the tables take measure_op_latency's default, as a search does)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--env", default="MinAtar/Breakout-v1")
    p.add_argument("--rounds", type=int, default=5, help="tables per backend (default 5; >= 2 for the noise lines)")
    p.add_argument("--networks", type=int, default=8, help="drawn architectures timed whole (default 8)")
    args = p.parse_args()
    spec = env_spec(args.env)
    space = search_space(spec.obs_shape, spec.n_actions, spec.pixel_scale)

    rounds: dict[str, list[list[torch.Tensor]]] = {b: [] for b in BACKENDS}
    with torch_threads(1):
        for _ in range(args.rounds):
            for backend in BACKENDS:
                rounds[backend].append(measure_op_latency(space, "cpu", backend=backend).values)
    median = {b: [torch.stack([r[k] for r in rs]).median(0).values for k in range(len(space.layers))] for b, rs in rounds.items()}

    # every (layer, candidate, input width) but skips, an operation met in two layers at the same input counted once
    seen, entries = set(), []
    for k, layer in enumerate(space.layers):
        for i, op in enumerate(layer.candidates):
            for j, w in enumerate(layer.in_widths):
                if op.kind != "skip" and (op, w) not in seen:
                    seen.add((op, w))
                    entries.append((k, i, j))
    print(f"{args.env}: {len(entries)} distinct (operation, input width) entries; median of {args.rounds} rounds, "
          "microseconds per call at batch 1")
    print(f"{'layer':>5} {'operation':<12} {'input':>6} {'torch':>9} {'numpy':>9} {'numba':>9} {'torch/numpy':>11} "
          f"{'numpy/numba':>11}")
    for k, i, j in entries:
        layer = space.layers[k]
        t, n, c = (median[b][k][i, j].item() * 1e6 for b in BACKENDS)
        print(f"{k:>5} {layer.candidates[i].name:<12} {layer.in_widths[j]:>6} {t:>9.1f} {n:>9.1f} {c:>9.1f} "
              f"{t / n:>11.2f} {n / c:>11.2f}")

    def rho(a: list[torch.Tensor], b: list[torch.Tensor], subset: list[tuple[int, int, int]]) -> float:
        return float(spearmanr([a[k][i, j].item() for k, i, j in subset], [b[k][i, j].item() for k, i, j in subset]).statistic)

    # the ranking a layer's choice is made on: its candidates at one input width
    groups = [[(k, i, j) for i, op in enumerate(layer.candidates) if op.kind != "skip"]
              for k, layer in enumerate(space.layers) for j in range(len(layer.in_widths))]
    groups = [g for g in groups if len(g) > 2]

    def line(a: list[torch.Tensor], b: list[torch.Tensor]) -> tuple[float, float]:
        return rho(a, b, entries), statistics.median(rho(a, b, g) for g in groups)

    def pairs(x: str, y: str) -> str:
        got = [line(a, b) for ia, a in enumerate(rounds[x]) for ib, b in enumerate(rounds[y]) if x != y or ia < ib]
        return (f"{x} against {y}: all entries {statistics.fmean(r[0] for r in got):.2f}, within a layer "
                f"{statistics.fmean(r[1] for r in got):.2f} ({len(got)} pairs)")

    print(f"\nSpearman rank correlation between tables (medians over rounds); within a layer at one input width: "
          f"the median over {len(groups)} groups")
    for x, y in (("torch", "numpy"), ("numba", "numpy"), ("numba", "torch")):
        every, within = line(median[x], median[y])
        print(f"  {x} against {y}: all entries {every:.2f}, within a layer {within:.2f}")
    if args.rounds >= 2:
        print("One round's table against another's (what one search uses), mean over pairs of rounds:")
        for x, y in (("torch", "numpy"), ("numba", "numpy"), ("numba", "torch"), ("torch", "torch"), ("numpy", "numpy"),
                     ("numba", "numba")):
            print(f"  {pairs(x, y)}")

    print(f"\n{args.networks} architectures drawn from the space, whole network at batch 1, microseconds per call "
          "(measured forward; the table's sum over the layers, predicted):")
    print(f"{'architecture':<40} {'torch':>8} {'numpy':>8} {'numba':>8} {'torch table':>12} {'numpy table':>12} "
          f"{'numba table':>12}")
    rng, fastest = np.random.default_rng(0), {b: 0 for b in BACKENDS}
    for _ in range(args.networks):
        choice = [int(rng.integers(len(layer.candidates))) for layer in space.layers]
        arch = space.architecture(choice)
        with seeded_init(0):
            net = arch.build().eval()
        params = numpy_params(net)
        obs = np.random.default_rng(1).integers(0, 2, (1, *spec.obs_shape)).astype(np.uint8)
        x = torch.as_tensor(obs)
        fused = FusedQ(net)
        flat = fused.new_flat()
        for name, view in fused.views(flat).items():
            view[...] = net.state_dict()[name].numpy()
        with torch.no_grad(), torch_threads(1), one_blas_thread():
            t = time_calls(lambda: net(x), lambda: None, repeats=NET_REPEATS)[0]
            n = time_calls(lambda: net.forward_numpy(params, obs), lambda: None, repeats=NET_REPEATS)[0]
            c = time_calls(lambda: fused.q_values(flat, obs), lambda: None, repeats=NET_REPEATS)[0]
        one_hot = [torch.nn.functional.one_hot(torch.tensor(c), len(layer.candidates)).double()
                   for c, layer in zip(choice, space.layers)]
        predicted = {b: CostTable(space, median[b], "s", f"{b} table")(one_hot).item() for b in BACKENDS}
        fastest[min(zip((t, n, c), BACKENDS))[1]] += 1
        print(f"{' '.join(arch.names):<40} {t * 1e6:>8.1f} {n * 1e6:>8.1f} {c * 1e6:>8.1f} "
              + " ".join(f"{predicted[b] * 1e6:>12.1f}" for b in BACKENDS))
    print("fastest whole network: " + ", ".join(f"{b} on {v} of {args.networks}" for b, v in fastest.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
