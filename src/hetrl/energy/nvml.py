"""NVIDIA GPU energy through NVML (module ``pynvml`` of the package nvidia-ml-py, imported lazily).

Each GPU gets the best meter it supports:

- :class:`NvmlEnergyMeter`: the driver's energy counter (``nvmlDeviceGetTotalEnergyConsumption``,
  millijoules since the driver loaded; Volta and newer).
- :class:`NvmlPowerMeter`, where that counter is not supported: the driver's power reading
  (``nvmlDeviceGetPowerUsage``, milliwatts; on many GPUs itself an average over about a second)
  sampled every ``power_interval_s`` by a background thread and integrated over time (trapezoids).
  It is still measured energy, not a model, but only as fine as its sampling: its ``method`` says
  so, with the interval, wherever it is shown.

A GPU with neither is reported unavailable. NVML numbers GPUs in PCI order, whatever
``CUDA_VISIBLE_DEVICES`` says; meters are matched to torch's ``cuda:N`` by PCI address, and a GPU
torch does not see is named by its NVML index instead. :func:`open_nvml` and :func:`nvml_index`
(the one place that starts NVML and the one that matches a torch device to it) serve the
accelerator's busy share too (``hetrl.energy.busy``).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

from hetrl.energy.meters import Meter, MeterError, Unavailable

DEFAULT_POWER_INTERVAL_S = 0.1
PciAddress = tuple[int, int, int]  # (domain, bus, device)


class _NvmlMeter(Meter):
    """Holds one NVML initialisation (NVML counts them) from opening until :meth:`close`."""

    kind = "nvml"

    def __init__(self, nvml: Any, index: int, device: str, method: str) -> None:
        nvml.nvmlInit()
        try:
            self._handle = nvml.nvmlDeviceGetHandleByIndex(index)
        except BaseException:
            nvml.nvmlShutdown()
            raise
        self._nvml = nvml
        super().__init__(f"nvml:gpu{index}", device, method)

    def _release(self) -> None:
        self._nvml.nvmlShutdown()


class NvmlEnergyMeter(_NvmlMeter):
    """A GPU's energy counter (millijoules, 64-bit: it does not wrap)."""

    def __init__(self, nvml: Any, index: int, device: str) -> None:
        super().__init__(nvml, index, device, "energy counter (nvmlDeviceGetTotalEnergyConsumption)")
        try:
            self._last_mj = nvml.nvmlDeviceGetTotalEnergyConsumption(self._handle)
        except BaseException:
            self._release()
            raise

    def _advance(self) -> float:
        now = self._nvml.nvmlDeviceGetTotalEnergyConsumption(self._handle)
        if now < self._last_mj:
            raise MeterError(f"energy counter went backwards ({self._last_mj} -> {now} mJ; driver reloaded?)")
        delta, self._last_mj = now - self._last_mj, now
        return delta / 1e3


class NvmlPowerMeter(_NvmlMeter):
    """A GPU's power readings, sampled every ``interval_s`` and integrated with the trapezoid rule."""

    def __init__(self, nvml: Any, index: int, device: str, interval_s: float = DEFAULT_POWER_INTERVAL_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__(nvml, index, device,
                         f"power samples (nvmlDeviceGetPowerUsage) integrated every {interval_s:g} s")
        self._clock = clock
        try:
            self._last = (clock(), nvml.nvmlDeviceGetPowerUsage(self._handle))
        except BaseException:
            self._release()
            raise
        self._start(interval_s)

    def _advance(self) -> float:
        now = (self._clock(), self._nvml.nvmlDeviceGetPowerUsage(self._handle))
        (t0, mw0), (t1, mw1) = self._last, now
        self._last = now
        return (mw0 + mw1) / 2 / 1e3 * (t1 - t0)


def torch_cuda_pci_addresses() -> dict[PciAddress, int]:
    """PCI address of each GPU torch sees, to its ``cuda:N`` index (empty without CUDA)."""
    import torch

    if not torch.cuda.is_available():
        return {}
    addresses = {}
    for index in range(torch.cuda.device_count()):
        props = torch.cuda.get_device_properties(index)
        if hasattr(props, "pci_bus_id"):
            addresses[(props.pci_domain_id, props.pci_bus_id, props.pci_device_id)] = index
    return addresses


def _device_label(nvml: Any, index: int, handle: Any, cuda_index_by_pci: Mapping[PciAddress, int]) -> str:
    try:
        pci = nvml.nvmlDeviceGetPciInfo(handle)
    except nvml.NVMLError:
        pci = None
    if pci is not None and (pci.domain, pci.bus, pci.device) in cuda_index_by_pci:
        return f"cuda:{cuda_index_by_pci[(pci.domain, pci.bus, pci.device)]}"
    return f"nvidia-gpu{index} (not a torch device here)"


def _text(name: str | bytes) -> str:
    return name.decode() if isinstance(name, bytes) else name


def open_nvml(nvml: Any = None) -> tuple[Any, Unavailable | None]:
    """``(module, None)`` with NVML initialised once (the caller calls ``nvmlShutdown``), or
    ``(None, why)``. ``nvml`` is the pynvml module (imported here when not given; tests pass a fake)."""
    if nvml is None:
        try:
            import pynvml as nvml
        except ImportError:
            return None, Unavailable("nvml", "pynvml not installed (pip install nvidia-ml-py)")
    try:
        nvml.nvmlInit()
    except nvml.NVMLError as exc:
        no_driver = {getattr(nvml, "NVML_ERROR_LIBRARY_NOT_FOUND", 12),
                     getattr(nvml, "NVML_ERROR_DRIVER_NOT_LOADED", 9)}
        reason = "no NVIDIA driver" if getattr(exc, "value", None) in no_driver else "NVML failed to start"
        return None, Unavailable("nvml", f"{reason} ({exc})")
    return nvml, None


def nvml_index(nvml: Any, device: str, cuda_index_by_pci: Mapping[PciAddress, int] | None = None) -> int | None:
    """NVML's index of torch's ``device`` (``cuda:N``), matched by PCI address; None where no GPU
    NVML lists is that device. NVML must be initialised; ``cuda_index_by_pci`` as in :func:`discover_nvml`."""
    count = nvml.nvmlDeviceGetCount()
    if count and cuda_index_by_pci is None:
        cuda_index_by_pci = torch_cuda_pci_addresses()
    for index in range(count):
        if _device_label(nvml, index, nvml.nvmlDeviceGetHandleByIndex(index), cuda_index_by_pci or {}) == device:
            return index
    return None


def discover_nvml(nvml: Any = None, cuda_index_by_pci: Mapping[PciAddress, int] | None = None,
                  power_interval_s: float = DEFAULT_POWER_INTERVAL_S) -> tuple[list[Meter], list[Unavailable]]:
    """A meter for each NVIDIA GPU that NVML can measure, and the reason for each it cannot.

    ``nvml`` is the pynvml module (imported here when not given; tests pass a fake), and
    ``cuda_index_by_pci`` maps PCI addresses to torch's CUDA indices (asked of torch when not given).
    """
    nvml, missing = open_nvml(nvml)
    if missing is not None:
        return [], [missing]
    meters: list[Meter] = []
    unavailable: list[Unavailable] = []
    try:
        count = nvml.nvmlDeviceGetCount()
        if count == 0:
            unavailable.append(Unavailable("nvml", "no NVIDIA GPU"))
        if count and cuda_index_by_pci is None:
            cuda_index_by_pci = torch_cuda_pci_addresses()
        for index in range(count):
            handle = nvml.nvmlDeviceGetHandleByIndex(index)
            device = _device_label(nvml, index, handle, cuda_index_by_pci or {})
            try:
                meters.append(NvmlEnergyMeter(nvml, index, device))
                continue
            except nvml.NVMLError as exc:
                no_energy = exc
            try:
                meters.append(NvmlPowerMeter(nvml, index, device, power_interval_s))
            except nvml.NVMLError as exc:
                name = _text(nvml.nvmlDeviceGetName(handle))
                unavailable.append(Unavailable("nvml", f"gpu{index} ({name}): no energy counter ({no_energy}) and no "
                                                       f"power reading ({exc})"))
    except nvml.NVMLError as exc:
        for meter in meters:
            meter.close()
        return [], [Unavailable("nvml", f"NVML failed while listing GPUs ({exc})")]
    finally:
        nvml.nvmlShutdown()
    return meters, unavailable
