"""Holds gradient updates per env step at the configured replay ratio when actors and learner run
concurrently (in the spirit of Reverb's samples-per-insert limiter).

The learner may not run ahead: it updates only while ``updates < ratio * (env_steps - learning_starts)``.
The actors may not run ahead by more than ``lead`` env steps: they step only while
``env_steps <= learning_starts + updates / ratio + lead``. Over any window of W env steps the
updates done therefore differ from ``ratio * W`` by at most ``ratio * (lead + overshoot) + 1``,
where ``overshoot`` is the steps the actors may take at once (one step of every env of every actor).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

DEFAULT_LEAD = 32  # env steps; +-3.4% of a 1,000-step window for up to 2 actors of 1 env


def default_lead(actors: int, envs_per_actor: int) -> int:
    """Room for every actor to take two steps ahead, and at least DEFAULT_LEAD env steps."""
    return max(DEFAULT_LEAD, 2 * actors * envs_per_actor)


class RateLimiter:
    def __init__(self, ratio: float, learning_starts: int, lead: int) -> None:
        if ratio < 0 or lead < 0:
            raise ValueError(f"ratio and lead must be >= 0, got {ratio} and {lead}")
        self.ratio, self.learning_starts, self.lead = ratio, learning_starts, lead

    def updates_owed(self, env_steps: int, updates: int) -> int:
        """Updates the learner may do now without running ahead of the data."""
        target = math.floor(self.ratio * max(0, env_steps - self.learning_starts))
        return max(0, target - updates)

    def allowed_env_steps(self, updates: int) -> int:
        """The most env steps the actors may have taken, given the updates done (-1: no limit)."""
        if self.ratio == 0:
            return -1
        return self.learning_starts + math.ceil(updates / self.ratio) + self.lead


def worst_window_error(trace: Sequence[tuple[int, int]], ratio: float, learning_starts: int, window: int = 1_000) -> float | None:
    """The largest relative error of updates per env step over any ``window`` of env steps after
    learning starts, from (env_steps, updates) pairs in time order; None if the run is too short."""
    data = np.asarray([(e, u) for e, u in trace if e >= learning_starts], dtype=np.float64)
    if ratio == 0 or len(data) < 2 or data[-1, 0] - data[0, 0] < window:
        return None
    steps, updates = data[:, 0], data[:, 1]
    ends = steps + window
    usable = ends <= steps[-1]
    # updates done by the time the actors had taken `end` steps: interpolate the monotone trace
    done_at_end = np.interp(ends[usable], steps, updates)
    rates = (done_at_end - updates[usable]) / window
    return float(np.max(np.abs(rates / ratio - 1.0)))
