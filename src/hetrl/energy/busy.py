"""The accelerator's busy share over a span: NVML's utilisation of one GPU, sampled.

``nvmlDeviceGetUtilizationRates(handle).gpu`` is the percent of the driver's last sample period
(1/6 s to 1 s, by product) in which a kernel ran on the GPU, whichever process ran it (central
inference on the learner's GPU counts; so would another program's). A daemon thread reads it every
``interval_s`` between :meth:`BusyMeasurement.start` and :meth:`BusyMeasurement.stop`, skipping
the time spent inside :meth:`BusyMeasurement.paused` (a run's evaluations), and the result is the
readings' mean with their p10 and p90, labelled with that method. The GPU is the one torch calls
``device``, found in NVML by PCI address (``hetrl.energy.nvml``). Where nothing can be read (a
device on the host or not NVIDIA's, no pynvml or driver, no such GPU in NVML, no reading before
the span ended, a reading that failed) the result has no number, only the reason.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from hetrl.energy.measurement import device_key
from hetrl.energy.nvml import PciAddress, nvml_index, open_nvml

DEFAULT_INTERVAL_S = 0.1


@dataclass(frozen=True)
class BusyResult:
    """The busy share of ``device`` over a span (0..1, measured), or why there is none."""

    device: str
    share: float | None  # mean of the readings; None: unavailable (``reason`` says why)
    p10: float | None = None
    p90: float | None = None
    samples: int = 0
    method: str = ""  # how the readings were taken (empty without a figure)
    reason: str = ""  # why there is no figure (empty with one)

    def describe(self) -> str:
        """``"87% busy on cuda:0 (p10 80%, p90 95%; mean of 50 readings: METHOD)"`` or ``"unavailable: REASON"``."""
        if self.share is None:
            return f"unavailable: {self.reason}"
        return (f"{self.share:.0%} busy on {self.device} (p10 {self.p10:.0%}, p90 {self.p90:.0%}; "
                f"mean of {self.samples} readings: {self.method})")

    def to_dict(self) -> dict[str, object]:
        return asdict(self)


class BusyMeasurement:
    """Samples the busy share of torch's ``device`` (``cuda``, ``cuda:N``; anything else is unavailable).

    Holds one NVML initialisation from opening until :meth:`close` (or the end of a ``with`` block).
    ``nvml``: the pynvml module (imported when not given; tests pass a fake); ``cuda_index_by_pci``
    as in ``discover_nvml``; ``skip``: a reason not to sample at all (the device is another
    process's: a Ray learner's GPU is Ray's choice), which becomes the result's reason.
    """

    def __init__(self, device: str, nvml: Any = None, cuda_index_by_pci: Mapping[PciAddress, int] | None = None,
                 interval_s: float = DEFAULT_INTERVAL_S, skip: str = "") -> None:
        self.device, self.interval_s = device_key(device), interval_s
        self._nvml: Any = None
        self._handle: Any = None
        self._index: int | None = None
        self._readings: list[float] = []
        self._error: BaseException | None = None
        self._paused = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._started: float | None = None
        self.result: BusyResult | None = None
        self.reason = skip or self._open(nvml, cuda_index_by_pci)

    def _open(self, nvml: Any, cuda_index_by_pci: Mapping[PciAddress, int] | None) -> str:
        """Finds and opens the GPU; returns "" when it can be read, else why not."""
        if self.device == "cpu":
            return "the learner is on the host (cpu), not on an accelerator"
        if not self.device.startswith("cuda"):
            return f"NVML reads NVIDIA GPUs only, and the learner is on {self.device}"
        nvml, missing = open_nvml(nvml)
        if missing is not None:
            return str(missing)
        try:
            index = nvml_index(nvml, self.device, cuda_index_by_pci)
            if index is None:
                nvml.nvmlShutdown()
                return f"nvml: no GPU NVML lists is torch's {self.device}"
            handle = nvml.nvmlDeviceGetHandleByIndex(index)
            nvml.nvmlDeviceGetUtilizationRates(handle)  # supported here?
        except nvml.NVMLError as exc:
            nvml.nvmlShutdown()
            return f"nvml: no utilisation reading for {self.device} ({exc})"
        self._nvml, self._handle, self._index = nvml, handle, index
        return ""

    def start(self) -> None:
        """Start sampling (once; nothing to do where the device cannot be read)."""
        if self._started is not None:
            raise RuntimeError("BusyMeasurement.start() twice")
        self._started = time.monotonic()
        if self._handle is not None:
            self._thread = threading.Thread(target=self._poll, name=f"accelerator busy {self.device}", daemon=True)
            self._thread.start()

    def _poll(self) -> None:
        while not self._stop.wait(self.interval_s):
            if self._paused.is_set():
                continue
            try:
                self._readings.append(self._nvml.nvmlDeviceGetUtilizationRates(self._handle).gpu / 100)
            except Exception as exc:  # the result says so, with no figure
                self._error = exc
                return

    @contextmanager
    def paused(self) -> Iterator[None]:
        """No reading is taken inside the block."""
        self._paused.set()
        try:
            yield
        finally:
            self._paused.clear()

    def stop(self) -> BusyResult:
        """Stop sampling and summarise the readings (again: the same result)."""
        if self.result is not None:
            return self.result
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        self.result = self._summary()
        return self.result

    def _summary(self) -> BusyResult:
        if self.reason:
            return BusyResult(self.device, None, reason=self.reason)
        if self._started is None:
            return BusyResult(self.device, None, reason="not sampled: the span never started")
        if self._error is not None:
            return BusyResult(self.device, None, reason=f"nvml:gpu{self._index}: a utilisation reading failed ({self._error})")
        if not self._readings:
            seconds = time.monotonic() - self._started
            return BusyResult(self.device, None, reason=f"no reading: the span of {seconds:.2f} s (pauses included) "
                                                        f"ended before the first, due every {self.interval_s:g} s")
        readings = np.array(self._readings)
        method = f"NVML utilisation (nvmlDeviceGetUtilizationRates) of nvml:gpu{self._index}, read every {self.interval_s:g} s"
        return BusyResult(self.device, float(readings.mean()), float(np.percentile(readings, 10)),
                          float(np.percentile(readings, 90)), len(readings), method)

    def close(self) -> None:
        """Stop sampling and release NVML; closing twice does nothing."""
        self.stop()
        if self._nvml is not None:
            self._nvml.nvmlShutdown()
            self._nvml = self._handle = None

    def __enter__(self) -> BusyMeasurement:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
