"""Measured energy: RAPL (CPU packages) and NVML (NVIDIA GPUs) meters, discovery, measurement spans;
and, through the same NVML access, the accelerator's busy share over a span (``busy.py``).

Every figure is labelled with its source and the meter that measured it; where no meter works the
result says ``unavailable`` with the reasons, and no number is estimated in its place.
"""

from hetrl.energy.busy import BusyMeasurement, BusyResult
from hetrl.energy.discovery import MeterReport, discover_meters
from hetrl.energy.measurement import EnergyMeasurement, EnergyReading, EnergyResult
from hetrl.energy.meters import Meter, MeterError, MeterStatus, Unavailable
from hetrl.energy.nvml import NvmlEnergyMeter, NvmlPowerMeter, discover_nvml
from hetrl.energy.rapl import RaplMeter, discover_rapl

__all__ = [
    "BusyMeasurement", "BusyResult", "EnergyMeasurement", "EnergyReading", "EnergyResult", "Meter", "MeterError",
    "MeterReport", "MeterStatus", "NvmlEnergyMeter", "NvmlPowerMeter", "RaplMeter", "Unavailable", "discover_meters", "discover_nvml",
    "discover_rapl",
]
