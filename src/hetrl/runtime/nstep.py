"""Turns per-step transitions of N envs into n-step transitions for ReplayAdd.

Each emitted transition carries ``discounts`` = gamma**k (k steps actually taken) or 0 if the
episode terminated, so the learner's target is always ``r + discounts * Q(next_obs)``: one rule
for 1-step, n-step, termination and truncation (which bootstraps from the true final obs).
"""

from __future__ import annotations

from collections import deque
from typing import Any

import numpy as np


class NStepAssembler:
    def __init__(self, num_envs: int, n: int, gamma: float) -> None:
        self.n, self.gamma = n, gamma
        self.pending: list[deque] = [deque() for _ in range(num_envs)]

    def __call__(self, obs, actions, rewards, final_obs, terminated, truncated) -> dict[str, np.ndarray] | None:
        """Transitions ready for the replay after one step of every env (None when none is ready)."""
        if self.n == 1:
            discounts = (self.gamma * ~terminated).astype(np.float32)
            return {"obs": obs, "actions": actions, "rewards": rewards, "next_obs": final_obs, "discounts": discounts}
        out: list[tuple] = []
        for i, queue in enumerate(self.pending):
            queue.append((obs[i], actions[i], float(rewards[i])))
            done = bool(terminated[i] or truncated[i])
            while queue and (len(queue) == self.n or done):
                ret = sum(r * self.gamma**k for k, (_, _, r) in enumerate(queue))
                discount = 0.0 if terminated[i] else self.gamma ** len(queue)
                o, a, _ = queue.popleft()
                out.append((o, a, ret, final_obs[i], discount))
        if not out:
            return None
        o, a, r, no, d = zip(*out)
        return {
            "obs": np.stack(o),
            "actions": np.stack(a),
            "rewards": np.asarray(r, dtype=np.float32),
            "next_obs": np.stack(no),
            "discounts": np.asarray(d, dtype=np.float32),
        }

    def state_dict(self) -> dict[str, Any]:
        return {"pending": [list(q) for q in self.pending]}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.pending = [deque(q) for q in state["pending"]]
