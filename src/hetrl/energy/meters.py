"""The meter interface: cumulative measured energy of one device since the meter was opened.

A meter only ever reports what a hardware counter or sensor measured (``source = "measured"``);
``method`` says how (an energy counter, or power samples integrated at a stated interval). Where
nothing can be measured, discovery returns an :class:`Unavailable` entry with the reason instead of
a meter, and nothing downstream makes up a number.
"""

from __future__ import annotations

import threading
from abc import ABC, abstractmethod
from dataclasses import asdict, dataclass


class MeterError(RuntimeError):
    """A meter that worked when opened could not be read any more."""


@dataclass(frozen=True)
class Unavailable:
    """A kind of meter (``"rapl"``, ``"nvml"``) that cannot measure here, and why."""

    kind: str
    reason: str

    def __str__(self) -> str:
        return f"{self.kind}: {self.reason}"


@dataclass(frozen=True)
class MeterStatus:
    """What discovery found, without holding the meter open: one row of ``hetrl devices``."""

    kind: str
    available: bool
    name: str | None = None
    device: str | None = None
    method: str | None = None
    reason: str | None = None

    def to_dict(self) -> dict[str, object]:
        return asdict(self)


class Meter(ABC):
    """Cumulative energy of one device, in joules, since the meter was opened.

    Subclasses implement :meth:`_advance` (joules accrued since its previous call) and call
    :meth:`_start` once their baseline reading is taken. With a ``poll_interval_s`` a daemon thread
    calls :meth:`_advance` that often, so that wrapping counters are never read too rarely and power
    samples are integrated even when nobody reads the meter. An error in that thread is re-raised,
    as a :class:`MeterError`, by the next :meth:`read_joules`.
    """

    kind: str
    source = "measured"

    def __init__(self, name: str, device: str, method: str) -> None:
        self.name = name
        self.device = device
        self.method = method
        self._joules = 0.0
        self._error: BaseException | None = None
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @abstractmethod
    def _advance(self) -> float:
        """Joules accrued since the previous call (or since opening)."""

    def _release(self) -> None:
        """Free what the meter holds (a library handle); nothing by default."""

    def _start(self, poll_interval_s: float | None) -> None:
        if poll_interval_s is not None:
            self._thread = threading.Thread(target=self._poll, args=(poll_interval_s,), name=f"meter {self.name}",
                                            daemon=True)
            self._thread.start()

    def _poll(self, interval_s: float) -> None:
        while not self._stop.wait(interval_s):
            try:
                with self._lock:
                    self._joules += self._advance()
            except Exception as exc:  # re-raised by read_joules
                self._error = exc
                return

    def read_joules(self) -> float:
        """Measured joules since the meter was opened (monotonic)."""
        with self._lock:
            if self._error is not None:
                raise MeterError(f"{self.name}: {self._error}") from self._error
            try:
                self._joules += self._advance()
            except MeterError:
                raise
            except Exception as exc:
                raise MeterError(f"{self.name}: {exc}") from exc
            return self._joules

    def status(self) -> MeterStatus:
        return MeterStatus(self.kind, True, self.name, self.device, self.method)

    def close(self) -> None:
        """Stop polling and release the device; closing twice does nothing."""
        if self._stop.is_set():
            return
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        self._release()

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name} measuring {self.device}: {self.method}>"
