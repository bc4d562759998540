"""Random policy's return on MinAtar/Breakout-v1 over 100 episodes (hetrl's env, seeds 0..99)."""
import numpy as np
from hetrl.envs import make_env
env = make_env("MinAtar/Breakout-v1")
rng = np.random.default_rng(0)
returns = []
for ep in range(100):
    env.reset(seed=ep)
    done, total = False, 0.0
    while not done:
        _, r, term, trunc, _ = env.step(int(rng.integers(env.action_space.n)))
        total += r
        done = term or trunc
    returns.append(total)
print(f"random policy, 100 episodes: mean {np.mean(returns):.3f} std {np.std(returns):.3f} max {max(returns)}")
