"""Env steps/s of every EnvStep backend on an Atari game with the default preprocessing (uniformly
random actions; agent steps, i.e. 4 emulator frames each): gymnasium, ale-vector and envpool (a
backend that cannot run here is named with its reason).

    python bench/envstep_atari.py [--env ALE/Breakout-v5] [--envs 1,4,8] [--steps 2000]
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from hetrl.algos import DQNConfig, make_algorithm
from hetrl.envs import env_spec
from hetrl.primitives import build, implementations
from hetrl.protocol import Slot


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--env", default="ALE/Breakout-v5")
    parser.add_argument("--envs", default="1,4,8")
    parser.add_argument("--steps", type=int, default=2000, help="env steps per measurement (all envs together)")
    args = parser.parse_args()
    algo = make_algorithm("dqn", env_spec(args.env), DQNConfig())
    for backend, impl in sorted(implementations("EnvStep").items()):
        reason = impl.unsupported(algo)
        if reason:
            print(f"{backend:>11} skipped: {reason}")
            continue
        for n in (int(x) for x in args.envs.split(",")):
            env = build("EnvStep", Slot(backend, "cpu"), algo, 0, num_envs=n)
            env.reset()
            rng = np.random.default_rng(0)
            actions = [algo.random_actions(rng, n) for _ in range(max(1, args.steps // n))]
            for a in actions[:20]:  # warm-up
                env.step(a)
            start = time.perf_counter()
            for a in actions:
                env.step(a)
            seconds = time.perf_counter() - start
            env.close()
            print(f"{backend:>11} envs={n:<3} {len(actions) * n / seconds:8.0f} env steps/s")


if __name__ == "__main__":
    main()
