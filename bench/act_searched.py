"""Greedy decisions per second at batch 1 of the hand-designed MinAtar network and of searched
networks on each host Act backend (torch, numpy, numba), one torch and BLAS thread (issue 19).

The networks: DQN's MinAtar network (network=auto) and four architectures of the game's default
search space (fresh weights: the time of a pass does not depend on their values, apart from the
zeros a ReLU gives, which the numba convolutions skip). The states: observations a uniformly random
policy meets in the game. Each (network, backend) is timed ``--rounds`` times, the backends
alternating within a round; the table gives the median over rounds of ``profile.time_calls``'s
median block, as ``bench/cosearch.py`` measures an agent's CPU decisions/s.

    python bench/act_searched.py                        # MinAtar/Breakout-v1, 5 rounds
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from pathlib import Path

import numpy as np
import torch

from hetrl.algos import DQNConfig, make_algorithm
from hetrl.algos.base import seeded_init
from hetrl.cosearch.supernet import search_space
from hetrl.envs import env_spec, make_env
from hetrl.primitives import build
from hetrl.profile import time_calls, torch_threads
from hetrl.protocol import Slot
from hetrl.runtime.host_blas import one_blas_thread

BACKENDS = ("torch", "numpy", "numba")
SEARCHED = (("conv3x3-16", "sep3x3-16", "dense-128"), ("sep3x3-8", "skip", "dense-64"),
            ("conv5x5-16", "conv3x3-32", "dense-256"), ("sep3x3-32", "sep3x3-32", "dense-128"))


def random_states(env_id: str, n: int = 256) -> np.ndarray:
    env, rng, seen = make_env(env_id), np.random.default_rng(0), []
    obs, _ = env.reset(seed=0)
    while len(seen) < n:
        seen.append(obs)
        obs, _, term, trunc, _ = env.step(int(rng.integers(env.action_space.n)))
        if term or trunc:
            obs, _ = env.reset()
    return np.stack(seen)


def decisions_per_s(act, states: np.ndarray, repeats: int) -> float:
    batches, k = [s[None] for s in states], 0
    greedy, none = np.ones(1, np.float32), np.zeros(1, np.int64)

    def decide() -> None:
        nonlocal k
        act.act(batches[k], greedy, none, 0.0)
        k = (k + 1) % len(batches)

    return 1.0 / time_calls(decide, lambda: None, repeats=repeats)[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("env", nargs="?", default="MinAtar/Breakout-v1")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--repeats", type=int, default=21, help="time_calls blocks per measurement")
    args = parser.parse_args()
    spec, states = env_spec(args.env), random_states(args.env)
    space = search_space(spec.obs_shape, spec.n_actions, spec.pixel_scale)
    folder = Path(tempfile.mkdtemp())
    agents = {"hand-designed (minatar)": make_algorithm("dqn", spec, DQNConfig())}
    for k, names in enumerate(SEARCHED):
        choice = [[op.name for op in layer.candidates].index(name) for layer, name in zip(space.layers, names)]
        path = space.architecture(choice).save(folder / f"arch{k}.json")
        agents["searched " + " / ".join(names)] = make_algorithm("dqn", spec, DQNConfig(network=str(path)))
    acts = {}
    for name, algo in agents.items():
        with seeded_init(0):
            net = algo.make_networks()["q"]
        params = sum(p.numel() for p in net.parameters())
        acts[name] = (params, {b: build("Act", Slot(b, "cpu"), algo, 0, source=net) for b in BACKENDS})
    rates: dict[tuple[str, str], list[float]] = {}
    with torch_threads(1), one_blas_thread(), torch.no_grad():
        for r in range(args.rounds):
            for name, (_, by_backend) in acts.items():
                order = BACKENDS if r % 2 == 0 else BACKENDS[::-1]  # alternate which backend goes first
                for b in order:
                    rates.setdefault((name, b), []).append(decisions_per_s(by_backend[b], states, args.repeats))
    print(f"{args.env}, batch 1, 1 thread, median of {args.rounds} rounds (decisions/s)")
    print("| network | parameters | torch | numpy | numba | numba / numpy |")
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    for name, (params, _) in acts.items():
        med = {b: statistics.median(rates[(name, b)]) for b in BACKENDS}
        print(f"| {name} | {params:,} | {med['torch']:,.0f} | {med['numpy']:,.0f} | {med['numba']:,.0f} | "
              f"{med['numba'] / med['numpy']:.1f}x |")


if __name__ == "__main__":
    main()
