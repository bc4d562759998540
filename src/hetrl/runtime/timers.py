"""Per-primitive wall-clock timers: seconds and calls, cheap enough for every call."""

from __future__ import annotations

import time


class _Span:
    """One name's timer: a plain context manager that keeps its own totals. One per name, reused
    (timed blocks of a name never nest): the inline loop times some six blocks per env step, and
    a fresh object and two dict updates per block cost a visible share of a small DQN loop, and a
    @contextmanager generator costs more per use still (docs/benchmarks.md, 'Measurements behind
    the code')."""

    __slots__ = ("start", "seconds", "calls")

    def __init__(self) -> None:
        self.start, self.seconds, self.calls = 0.0, 0.0, 0

    def __enter__(self) -> None:
        self.start = time.perf_counter()

    def __exit__(self, *exc: object) -> None:
        self.seconds += time.perf_counter() - self.start
        self.calls += 1


class Timers:
    def __init__(self) -> None:
        self._spans: dict[str, _Span] = {}

    def time(self, name: str) -> _Span:
        span = self._spans.get(name)
        if span is None:
            span = self._spans[name] = _Span()
        return span

    def add(self, name: str, seconds: float, calls: int = 1) -> None:
        """Time measured elsewhere (an actor's own clock)."""
        span = self.time(name)
        span.seconds += seconds
        span.calls += calls

    @property
    def seconds(self) -> dict[str, float]:
        return {name: span.seconds for name, span in self._spans.items()}

    @property
    def calls(self) -> dict[str, int]:
        return {name: span.calls for name, span in self._spans.items()}

    def totals(self) -> dict[str, tuple[float, int]]:
        """name -> (seconds, calls)."""
        return {name: (span.seconds, span.calls) for name, span in self._spans.items()}


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
