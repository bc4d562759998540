"""Per-primitive wall-clock timers: seconds and calls, cheap enough for every call."""

from __future__ import annotations

import time
from collections import defaultdict
from contextlib import contextmanager
from typing import Iterator


class Timers:
    def __init__(self) -> None:
        self.seconds: dict[str, float] = defaultdict(float)
        self.calls: dict[str, int] = defaultdict(int)

    @contextmanager
    def time(self, name: str) -> Iterator[None]:
        start = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[name] += time.perf_counter() - start
            self.calls[name] += 1

    def table(self, wall: float) -> list[tuple[str, int, float, float]]:
        """(name, calls, microseconds per call, share of ``wall``) rows, largest share first."""
        rows = [(k, self.calls[k], 1e6 * s / max(1, self.calls[k]), s / wall if wall > 0 else 0.0) for k, s in self.seconds.items()]
        return sorted(rows, key=lambda r: -r[3])
