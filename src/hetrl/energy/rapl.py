"""CPU package energy from RAPL counters, read through Linux powercap.

The kernel's RAPL driver exposes ``/sys/class/powercap/intel-rapl:N`` for each CPU package, on Intel
and on AMD (Zen) alike, with ``energy_uj`` (a wrapping microjoule counter), ``max_energy_range_uj``
(its range) and ``name`` (``package-N``). Only these top-level package domains are metered:
subdomains (``intel-rapl:N:M``: core, uncore) are part of their package, and a top-level ``psys``
domain (platform, on some laptops) contains the packages, so metering either would count energy
twice. DRAM subdomains are not part of package energy and are not metered: the figures are
CPU-package energy and labelled so. Many distributions let only root read ``energy_uj``; such a
package is reported unavailable with that reason.
"""

from __future__ import annotations

import re
from pathlib import Path

from hetrl.energy.meters import Meter, Unavailable

POWERCAP = Path("sys/class/powercap")
# A counter is read at least this often (seconds) so that it never wraps twice between reads: the
# shortest wrap period in practice (a 32-bit AMD counter at full package power) is a few minutes.
DEFAULT_POLL_S = 10.0
_PACKAGE_DOMAIN = re.compile(r"intel-rapl:(\d+)")


class RaplMeter(Meter):
    """Energy of one CPU package from its powercap domain directory."""

    kind = "rapl"

    def __init__(self, domain: Path, poll_interval_s: float | None = DEFAULT_POLL_S) -> None:
        label = (domain / "name").read_text().strip()
        super().__init__(f"rapl:{label}", f"cpu-{label}", "energy counter (powercap energy_uj)")
        self._energy_file = domain / "energy_uj"
        self._range_uj = int((domain / "max_energy_range_uj").read_text())
        self._last_uj = self._read_uj()
        self._start(poll_interval_s)

    def _read_uj(self) -> int:
        return int(self._energy_file.read_text())

    def _advance(self) -> float:
        now = self._read_uj()
        if now >= self._last_uj:
            delta = now - self._last_uj
        else:  # the counter wrapped past max_energy_range_uj back to 0
            delta = self._range_uj + 1 - self._last_uj + now
        self._last_uj = now
        return delta / 1e6


def _shown(path: Path, root: Path) -> str:
    """``path`` as it is on the machine being described (without the test root)."""
    return "/" + str(path.relative_to(root)) if path.is_relative_to(root) else str(path)


def discover_rapl(root: str | Path = "/", poll_interval_s: float | None = DEFAULT_POLL_S,
                  ) -> tuple[list[Meter], list[Unavailable]]:
    """A meter for each readable CPU package domain, and the reason for each that cannot be read."""
    root = Path(root)
    powercap = root / POWERCAP
    if not powercap.is_dir():
        return [], [Unavailable("rapl", f"{_shown(powercap, root)} not present (no powercap RAPL driver here)")]
    try:
        entries = list(powercap.iterdir())
    except OSError as exc:
        return [], [Unavailable("rapl", f"{_shown(powercap, root)} cannot be listed ({exc.strerror})")]
    domains = sorted((d for d in entries if _PACKAGE_DOMAIN.fullmatch(d.name)),
                     key=lambda d: int(_PACKAGE_DOMAIN.fullmatch(d.name).group(1)))
    meters: list[Meter] = []
    unavailable: list[Unavailable] = []
    for domain in domains:
        try:
            if not (domain / "name").read_text().strip().startswith("package"):
                continue  # psys: the whole platform, packages included
            meters.append(RaplMeter(domain, poll_interval_s))
        except PermissionError as exc:
            unavailable.append(Unavailable("rapl", f"{_shown(Path(exc.filename), root)} is not readable (permission "
                                                   "denied; on many systems only root may read RAPL counters)"))
        except OSError as exc:
            where = _shown(Path(exc.filename), root) if exc.filename else _shown(domain, root)
            unavailable.append(Unavailable("rapl", f"{where}: {exc.strerror}"))
        except ValueError as exc:
            unavailable.append(Unavailable("rapl", f"{_shown(domain, root)}: unreadable counter ({exc})"))
    if not meters and not unavailable:
        unavailable.append(Unavailable("rapl", f"no RAPL package domain under {_shown(powercap, root)}"))
    return meters, unavailable
