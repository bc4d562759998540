"""What the parallel executors (local, ray) share: the bookkeeping of actors running beside a
learner — finished episodes, the (env steps, updates) trace the replay-ratio bound is measured on,
policy staleness, restarts — and the checks of a checkpoint's executor."""

from __future__ import annotations

from typing import Any

import numpy as np

from hetrl.algos import Algorithm
from hetrl.runtime import check_written_by
from hetrl.runtime.schedule import worst_window_error


class ParallelBookkeeping:
    name: str
    algo: Algorithm
    actors: int

    def _init_bookkeeping(self) -> None:
        self.finished: list[tuple[float, int]] = []
        self.trace: list[tuple[int, int]] = []  # (env steps, updates), after every learning step
        self.restarts = 0
        self.actors_lost = 0  # actors gone for good (ray: their node left and no other had room)
        self.staleness_max, self.staleness_sum, self.staleness_count = 0, 0, 0
        self._interval_staleness: list[int] = []

    def drain_episodes(self) -> list[tuple[float, int]]:
        done, self.finished = self.finished, []
        return done

    def drain_staleness(self) -> tuple[float | None, int | None]:
        """Mean and max policy staleness (learner updates the acting weights were behind) of the
        transitions received since the last call."""
        lags, self._interval_staleness = self._interval_staleness, []
        if not lags:
            return None, None
        self.staleness_max = max(self.staleness_max, max(lags))
        self.staleness_sum += sum(lags)
        self.staleness_count += len(lags)
        return float(np.mean(lags)), int(max(lags))

    def run_staleness(self) -> tuple[float | None, int]:
        """Mean (None before any transition) and max staleness over the run so far."""
        mean = self.staleness_sum / self.staleness_count if self.staleness_count else None
        return mean, self.staleness_max

    def ratio_error(self) -> float | None:
        cfg = self.algo.config
        return worst_window_error(self.trace, cfg.replay_ratio, cfg.learning_starts)

    def _check_checkpoint(self, state: dict[str, Any], started: bool) -> None:
        check_written_by(state.get("executor", "inline"), self.name)
        if started:
            raise RuntimeError("load a checkpoint before the first iteration")

