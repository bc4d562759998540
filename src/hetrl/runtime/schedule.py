"""The replay ratio's schedule: gradient updates per env step, in bursts, after a warm-up. Every
executor and the model ask this one object.

In one process (the inline executor) updates accrue at ``ratio`` per env step and are run every
``burst`` iterations (``train_every``), as Stable-Baselines3's ``train_freq``/``gradient_steps``.

When actors and learner run concurrently it is a rate limiter (in the spirit of Reverb's
samples-per-insert limiter). The learner may not run ahead: it updates only while
``updates < ratio * (env_steps - learning_starts)``.
The actors may not run ahead by more than ``lead`` env steps: they step only while
``env_steps <= learning_starts + updates / ratio + lead``. Over any window of W env steps the
updates done therefore differ from ``ratio * W`` by at most ``ratio * (lead + overshoot) + 1``,
where ``overshoot`` is the steps the actors may take at once (one step of every env of every actor).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

DEFAULT_LEAD = 32  # env steps; +-3.4% of a 1,000-step window for up to 2 actors of 1 env


def default_lead(actors: int, envs_per_actor: int) -> int:
    """Room for every actor to take two steps ahead, and at least DEFAULT_LEAD env steps."""
    return max(DEFAULT_LEAD, 2 * actors * envs_per_actor)


@dataclass(frozen=True)
class ReplaySchedule:
    ratio: float  # gradient updates per env step
    learning_starts: int  # env steps of random actions before any update
    burst: int = 1  # inline: iterations between bursts of updates (train_every)
    lead: int = DEFAULT_LEAD  # concurrent executors: env steps the actors may run ahead

    def __post_init__(self) -> None:
        if self.ratio < 0 or self.lead < 0 or self.burst < 1:
            raise ValueError(f"ratio and lead must be >= 0 and burst >= 1, got {self.ratio}, {self.lead}, {self.burst}")

    @classmethod
    def of(cls, agent: Any, actors: int = 0, envs_per_actor: int = 1) -> "ReplaySchedule":
        """The schedule of an agent config; with ``actors``, the rate limiter for that many actors.
        A limiter counts from when the replay can give a batch, as the inline loop waits for one:
        held at ``learning_starts + lead`` while the learner waits for ``batch_size`` transitions,
        actors and learner would wait for each other (SAC: 100 random steps, batches of 256)."""
        if not actors:
            return cls(agent.replay_ratio, agent.learning_starts, agent.train_every, DEFAULT_LEAD)
        starts = max(agent.learning_starts, agent.batch_size)
        return cls(agent.replay_ratio, starts, agent.train_every, default_lead(actors, envs_per_actor))

    # --- in one process --------------------------------------------------------------------
    def accrue(self, due: float, env_steps: int) -> float:
        """Updates owed after ``env_steps`` more env steps (fractions carry over)."""
        return due + env_steps * self.ratio

    def burst_now(self, iterations: int) -> bool:
        """Whether the owed updates run after this iteration."""
        return iterations % self.burst == 0

    def syncs_per_iteration(self, num_envs: int) -> float:
        """How often the learner has moved since the last iteration (WeightSync before an Act):
        after every burst, or every iteration that owes an update."""
        if self.ratio == 0:
            return 0.0
        return min(1.0, self.ratio * num_envs) if self.burst == 1 else 1.0 / self.burst

    # --- concurrent: a rate limiter ----------------------------------------------------------

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
