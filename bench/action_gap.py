"""Q-values and action gaps of a DQN run's periodic checkpoints on CartPole-like envs.

For each checkpoint: the greedy return over 5 episodes (seeds 1000-1004), the mean max-Q along
those episodes, and the median gap between the two actions' Q-values (absolute and relative to
max-Q). A greedy policy rests on the gap; with reward 1 per step and episodes that are truncated,
not ended, every balanced state is worth about 1 / (1 - gamma), so the gap is a tiny fraction of Q.

    python bench/action_gap.py runs/dqn_CartPole-v1_s0_* [more run directories]

A run keeps its newest ``keep_checkpoints`` (3 by default): train with ``--set keep_checkpoints=0``
to keep every one for this table.
"""

from __future__ import annotations

import sys

import numpy as np
import torch

from hetrl.algos import make_algorithm
from hetrl.envs import env_spec, make_env
from hetrl.run.rundir import RunDir


def main() -> None:
    print("| run | checkpoint | greedy return (5 episodes) | mean max-Q | median action gap | gap / Q |")
    print("|---|---|---:|---:|---:|---:|")
    for path in sys.argv[1:]:
        run = RunDir.open(path)
        cfg = run.load_config()
        for checkpoint in run.checkpoints():
            _, state = run.load_checkpoint(checkpoint, replay=False)
            algo = make_algorithm(cfg.algo, env_spec(cfg.env), cfg.agent)
            net = algo.make_policy_network()
            net.load_state_dict(state["executor"]["learner"]["q"])
            env, returns, max_q, gaps = make_env(cfg.env), [], [], []
            for episode in range(5):
                obs, _ = env.reset(seed=1000 + episode)
                done, total = False, 0.0
                while not done:
                    with torch.no_grad():
                        q = net(torch.as_tensor(obs, dtype=torch.float32)[None]).numpy()[0]
                    top = np.sort(q)
                    max_q.append(top[-1])
                    gaps.append(top[-1] - top[-2])
                    obs, reward, terminated, truncated, _ = env.step(int(q.argmax()))
                    total += float(reward)
                    done = terminated or truncated
                returns.append(total)
            gap, q_mean = float(np.median(gaps)), float(np.mean(max_q))
            print(f"| {path} | {checkpoint.name} | {np.mean(returns):.1f} | {q_mean:.1f} | {gap:.3f} | {gap / q_mean:.2%} |")


if __name__ == "__main__":
    main()
