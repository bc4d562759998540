"""A uniformly random policy's return on MinAtar games over 100 episodes (hetrl's env, seeds 0..99):
the floor a learned policy's score is read against.

    python bench/minatar_random.py                                  # Breakout-v1
    python bench/minatar_random.py SpaceInvaders-v1 Asterix-v1
"""

import sys

import numpy as np

from hetrl.envs import make_env


def random_returns(game: str, episodes: int = 100) -> list[float]:
    env = make_env(game if game.startswith("MinAtar/") else f"MinAtar/{game}")
    rng = np.random.default_rng(0)
    returns = []
    for ep in range(episodes):
        env.reset(seed=ep)
        done, total = False, 0.0
        while not done:
            _, r, term, trunc, _ = env.step(int(rng.integers(env.action_space.n)))
            total += r
            done = term or trunc
        returns.append(total)
    return returns


if __name__ == "__main__":
    for game in sys.argv[1:] or ["Breakout-v1"]:
        returns = random_returns(game)
        print(f"{game}: random policy, {len(returns)} episodes: mean {np.mean(returns):.3f} std {np.std(returns):.3f} "
              f"max {max(returns)}")
