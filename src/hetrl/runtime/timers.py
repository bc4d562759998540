"""Per-primitive wall-clock timers: seconds and calls, cheap enough for every call."""

from __future__ import annotations

import time
from collections import defaultdict


class _Span:
    """One timed block: a plain context manager (a @contextmanager generator costs ~1.4 us a use,
    and the inline loop times some eight blocks per env step)."""

    __slots__ = ("timers", "name", "start")

    def __init__(self, timers: "Timers", name: str) -> None:
        self.timers, self.name = timers, name

    def __enter__(self) -> None:
        self.start = time.perf_counter()

    def __exit__(self, *exc: object) -> None:
        self.timers.seconds[self.name] += time.perf_counter() - self.start
        self.timers.calls[self.name] += 1


class Timers:
    def __init__(self) -> None:
        self.seconds: dict[str, float] = defaultdict(float)
        self.calls: dict[str, int] = defaultdict(int)

    def time(self, name: str) -> _Span:
        return _Span(self, name)

    def add(self, name: str, seconds: float, calls: int = 1) -> None:
        """Time measured elsewhere (an actor's own clock)."""
        self.seconds[name] += seconds
        self.calls[name] += calls

    def totals(self) -> dict[str, tuple[float, int]]:
        """name -> (seconds, calls)."""
        return {name: (seconds, self.calls[name]) for name, seconds in self.seconds.items()}


def merge_timers(own: dict[str, tuple[float, int]], actors: list[dict[str, tuple[float, int]]]) -> dict[str, tuple[float, int, int]]:
    """name -> (seconds, calls, processes): one process's stages, then the actors' summed over them."""
    totals = {name: (seconds, calls, 1) for name, (seconds, calls) in own.items()}
    for timers in actors:
        for name, (seconds, calls) in timers.items():
            s, c, _ = totals.get(name, (0.0, 0, 0))
            totals[name] = (s + seconds, c + calls, len(actors))
    return totals


def timer_table(totals: dict[str, tuple[float, int, int]], wall: float) -> list[tuple[str, int, float, float]]:
    """(name, calls, µs per call, share of its processes' wall time) rows, largest share first."""
    rows = [(k, c, 1e6 * s / max(1, c), s / (wall * p) if wall > 0 else 0.0) for k, (s, c, p) in totals.items()]
    return sorted(rows, key=lambda r: -r[3])
