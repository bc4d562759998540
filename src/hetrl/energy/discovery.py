"""Find every energy meter that works here, and say why each kind that does not, does not."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hetrl.energy.meters import Meter, MeterStatus, Unavailable
from hetrl.energy.nvml import DEFAULT_POWER_INTERVAL_S, PciAddress, discover_nvml
from hetrl.energy.rapl import DEFAULT_POLL_S, discover_rapl


@dataclass
class MeterReport:
    """Open meters and the unavailable ones; close it (or use ``with``) to release the meters."""

    meters: list[Meter] = field(default_factory=list)
    unavailable: list[Unavailable] = field(default_factory=list)

    def statuses(self) -> list[MeterStatus]:
        missing = [MeterStatus(u.kind, False, reason=u.reason) for u in self.unavailable]
        return [m.status() for m in self.meters] + missing

    def close(self) -> None:
        for meter in self.meters:
            meter.close()

    def __enter__(self) -> MeterReport:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def discover_meters(root: str | Path = "/", nvml: Any = None, *,
                    cuda_index_by_pci: dict[PciAddress, int] | None = None,
                    rapl_poll_s: float | None = DEFAULT_POLL_S,
                    nvml_power_interval_s: float = DEFAULT_POWER_INTERVAL_S) -> MeterReport:
    """RAPL meters under ``root``/sys/class/powercap and NVML meters (``nvml``: the pynvml module or a fake)."""
    rapl_meters, rapl_missing = discover_rapl(root, rapl_poll_s)
    nvml_meters, nvml_missing = discover_nvml(nvml, cuda_index_by_pci, nvml_power_interval_s)
    return MeterReport(rapl_meters + nvml_meters, rapl_missing + nvml_missing)
