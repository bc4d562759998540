"""Measure the energy of a span of work on every meter there is, and label every figure.

    with discover_meters() as report, EnergyMeasurement(report) as span:
        train()
    span.result.joules_per_step(steps)   # None when nothing measured
    span.result.describe()               # "1234.5 J measured ... (rapl:package-0 ... J, energy counter ...)" or "energy unavailable: ..."

A result carries one reading per meter (joules, source "measured", meter name, method) and the
reasons for what was not measured. With no working meter it holds reasons and no number at all.
Where no RAPL meter covers the host CPU, the user may give its power (``cpu_watts``), and where no
NVML meter covers a GPU the run uses, the GPU's (``gpu_watts``): :meth:`EnergyResult.with_host_power`
and :meth:`EnergyResult.with_gpu_power` add them as readings of source :data:`USER_FIGURE`, which
every report shows beside the measured ones, never as a measurement. A span shorter than
:data:`MIN_WINDOW_S` gives no number at all: its meters and the user's figure alike are listed
unavailable with that reason, so a report never sets a figure beside a measurement it could not make.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace

from hetrl.energy.discovery import MeterReport
from hetrl.energy.meters import Meter, MeterError, Unavailable

# The shortest span a figure is reported for: NVML's energy counter (and a GPU's power reading)
# updates every 20-100 ms and RAPL's every ~1 ms, so a shorter span's difference is mostly the
# update step. A shorter span reports its meters as unavailable, with this reason, not a number.
MIN_WINDOW_S = 1.0
USER_FIGURE = "user's figure, not measured"  # the source of a reading the user's power figure made
HOST_POWER = "cpu_watts"  # the setting (and the reading's name) of the host CPU's power, in watts
GPU_POWER = "gpu_watts"  # the setting (and the readings' name) of the power of each unmetered GPU a run uses


def device_key(device: str) -> str:
    """One name per device: torch's ``cuda`` (the current GPU, the first in a run) is ``cuda:0``, as NVML's meters name it."""
    return f"{device}:0" if device in ("cuda", "mps", "xpu") else device


def short_span(seconds: float, window_s: float) -> str:
    """Why a span of ``seconds`` gives no figure, for a meter's reading and the user's alike."""
    return f"the span of {seconds:.2f} s is shorter than the {window_s:g} s a reading needs"


@dataclass(frozen=True)
class EnergyReading:
    """Joules one meter measured over the span."""

    meter: str
    device: str
    joules: float
    source: str
    method: str

    def to_dict(self) -> dict[str, object]:
        return {"meter": self.meter, "device": self.device, "joules": self.joules, "source": self.source,
                "method": self.method}


@dataclass(frozen=True)
class EnergyResult:
    """The energy of one span: readings of the meters that worked, reasons for those that did not."""

    seconds: float
    readings: tuple[EnergyReading, ...]
    unavailable: tuple[Unavailable, ...]
    window_s: float = 0.0  # the shortest span a figure is given for (EnergyMeasurement.min_window_s)
    dropped: tuple[str, ...] = ()  # devices whose measured reading the span, shorter than window_s, dropped

    @property
    def short(self) -> bool:
        """Whether the span is shorter than its window: then it has no figure, measured or the user's."""
        return self.seconds < self.window_s

    def _measured_devices(self) -> set[str]:
        """Devices a meter read over this span (those a too-short span dropped included)."""
        return {r.device for r in self.readings if r.source == "measured"} | set(self.dropped)

    def _with_figure(self, name: str, device: str, watts: float) -> EnergyResult:
        """``device`` at the user's ``watts`` (setting ``name``) over the span, labelled :data:`USER_FIGURE`;
        on a span shorter than its window, ``name`` unavailable with the meters' reason instead."""
        if self.short:
            return replace(self, unavailable=(*self.unavailable, Unavailable(name, short_span(self.seconds, self.window_s))))
        figure = EnergyReading(name, device, watts * self.seconds, USER_FIGURE, f"{watts:g} W x {self.seconds:.1f} s")
        return replace(self, readings=(*self.readings, figure))

    @property
    def status(self) -> str:
        """``"measured"`` when meters measured every reading, ``"unavailable"`` with none; where the
        user's figure is a part: "measured, and the user's figure (not measured)" or the figure alone."""
        if not self.readings:
            return "unavailable"
        if all(r.source == "measured" for r in self.readings):
            return "measured"
        if any(r.source == "measured" for r in self.readings):
            return "measured, and the user's figure (not measured)"
        return USER_FIGURE

    def with_host_power(self, watts: float | None) -> EnergyResult:
        """This span with the host CPU's energy at ``watts`` (the user's ``cpu_watts``) for its whole
        length, as a reading of source :data:`USER_FIGURE`; unchanged where a RAPL meter measured
        the CPU (the measurement wins) or no figure was given. A span shorter than its window takes
        no figure either: ``cpu_watts`` is listed unavailable with the meters' reason."""
        if watts is None or any(d.startswith("cpu-") for d in self._measured_devices()):  # RAPL's devices: cpu-package-N
            return self
        return self._with_figure(HOST_POWER, "cpu", watts)

    def with_gpu_power(self, watts: float | None, devices: Iterable[str]) -> EnergyResult:
        """This span with each accelerator of ``devices`` (those the run used; ``cpu`` is passed over)
        that no meter measured at ``watts`` (the user's ``gpu_watts``) for its whole length, as a
        reading of source :data:`USER_FIGURE`; as :meth:`with_host_power` otherwise."""
        result = self
        if watts is not None:
            measured = {device_key(d) for d in self._measured_devices()}
            for device in sorted({device_key(d) for d in devices} - {"cpu"} - measured):
                result = result._with_figure(GPU_POWER, device, watts)
        return result

    @property
    def total_joules(self) -> float | None:
        """Sum over the measured devices only (see :attr:`readings`); None when nothing was measured."""
        return sum(r.joules for r in self.readings) if self.readings else None

    def joules_per_step(self, steps: int) -> float | None:
        """Joules per env step, or per any count of work (gradient updates) over the span."""
        if steps <= 0:
            raise ValueError(f"steps must be > 0 (got {steps})")
        total = self.total_joules
        return None if total is None else total / steps

    @property
    def methods(self) -> str:
        """How each figure was obtained, e.g. "rapl:package-0: energy counter ...; cpu_watts: user's figure ..."."""
        return "; ".join(f"{r.meter}: {r.method if r.source == 'measured' else r.source + ', ' + r.method}"
                         for r in self.readings)

    def describe(self) -> str:
        """Every reading with its meter, device and method (the user's figure labelled), then what was not measured."""
        missing = "; ".join(str(u) for u in self.unavailable)
        if not self.readings:
            return f"energy unavailable: {missing}"
        parts = "; ".join(f"{r.meter} ({r.device}) {r.joules:.1f} J, " + (r.method if r.source == "measured" else f"{r.source}: {r.method}")
                          for r in self.readings)
        text = f"{self.total_joules:.1f} J {self.status} over {self.seconds:.1f} s ({parts})"
        return f"{text}; not measured: {missing}" if missing else text

    def to_dict(self) -> dict[str, object]:
        return {"status": self.status, "seconds": self.seconds, "total_joules": self.total_joules,
                "readings": [r.to_dict() for r in self.readings],
                "unavailable": [{"kind": u.kind, "reason": u.reason} for u in self.unavailable]}


class EnergyMeasurement:
    """Energy per meter between :meth:`start` and :meth:`stop` (or over a ``with`` block: see ``result``),
    less the blocks run under :meth:`paused`.

    The meters stay open (their :class:`MeterReport` owns them). A meter that fails to read is moved
    to the unavailable list with its error, never given a guessed value; so is every meter when the
    span is shorter than ``min_window_s`` (:data:`MIN_WINDOW_S`). ``clock``: seconds, monotonic.
    """

    def __init__(self, report: MeterReport, min_window_s: float | None = None,
                 clock: Callable[[], float] = time.perf_counter) -> None:
        self.min_window_s, self._clock = MIN_WINDOW_S if min_window_s is None else min_window_s, clock
        self._meters = list(report.meters)
        self._unavailable = list(report.unavailable)
        self._begin: dict[Meter, float] = {}
        self._t0: float | None = None
        self._paused_s = 0.0
        self.result: EnergyResult | None = None

    def _read(self, meter: Meter) -> float | None:
        try:
            return meter.read_joules()
        except MeterError as exc:
            self._unavailable.append(Unavailable(meter.kind, f"{meter.name} failed: {exc.__cause__ or exc}"))
            return None

    def start(self) -> None:
        self._t0, self._paused_s = self._clock(), 0.0
        self._begin = {m: j for m in self._meters if (j := self._read(m)) is not None}

    @contextmanager
    def paused(self) -> Iterator[None]:
        """Leave the block's joules and seconds out of the span (a run's evaluation episodes are not
        its training). A meter that fails to read at either edge leaves the span, with its error."""
        if self._t0 is None:
            yield
            return
        t, before = self._clock(), {m: self._read(m) for m in self._begin}
        try:
            yield
        finally:
            for meter, joules in before.items():
                after = self._read(meter) if joules is not None else None
                if after is None:
                    self._begin.pop(meter, None)
                else:
                    self._begin[meter] += after - joules
            self._paused_s += self._clock() - t

    def stop(self) -> EnergyResult:
        if self._t0 is None:
            raise RuntimeError("EnergyMeasurement.stop() before start()")
        readings = []
        for meter, begin in self._begin.items():
            end = self._read(meter)
            if end is not None:
                readings.append(EnergyReading(meter.name, meter.device, end - begin, meter.source, meter.method))
        seconds, dropped = self._clock() - self._t0 - self._paused_s, ()
        if seconds < self.min_window_s:
            self._unavailable += [Unavailable(meter.kind, f"{meter.name}: {short_span(seconds, self.min_window_s)}")
                                  for meter in self._meters if any(r.meter == meter.name for r in readings)]
            readings, dropped = [], tuple(r.device for r in readings)
        self.result = EnergyResult(seconds, tuple(readings), tuple(self._unavailable), self.min_window_s, dropped)
        return self.result

    def __enter__(self) -> EnergyMeasurement:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
