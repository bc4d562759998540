"""What this machine has: CPU, memory, NUMA nodes, torch accelerators and working energy meters.

Files are read under a ``root`` (default ``/``) so that tests can describe a fake ``/proc`` and
``/sys``. A figure that cannot be read is ``None`` (shown as unknown), never a guess.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import re
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from hetrl.devices import cuda_available, mps_available
from hetrl.energy import MeterStatus, discover_meters


def usable_cores() -> int:
    """The cores this process may run on (its affinity: a container's or taskset's share), which
    ``os.cpu_count()`` (every core of the machine) overstates."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


@dataclass(frozen=True)
class Cpu:
    model: str
    physical_cores: int | None
    logical_cores: int


@dataclass(frozen=True)
class NumaNode:
    index: int
    cpus: str  # the kernel's cpulist, e.g. "0-15,32-47"
    memory_bytes: int | None


@dataclass(frozen=True)
class Accelerator:
    kind: str  # "cuda", "mps" or "xpu": the torch device type
    index: int
    name: str
    memory_bytes: int | None
    compute_capability: str | None  # "8.0" for CUDA GPUs

    @property
    def torch_device(self) -> str:
        return f"{self.kind}:{self.index}"


@dataclass(frozen=True)
class Machine:
    cpu: Cpu
    memory_bytes: int | None
    numa_nodes: tuple[NumaNode, ...]
    accelerators: tuple[Accelerator, ...]
    meters: tuple[MeterStatus, ...]
    versions: dict[str, str]  # python, torch, numpy

    def fingerprint(self) -> str:
        """A short hash of what decides performance: profiles measured here are valid where it matches.

        Covers the CPU model and core counts, memory, accelerator names and the python/torch/numpy
        versions; not meters, NUMA details or free memory, which do not change a profile.
        """
        key = {"cpu": [self.cpu.model, self.cpu.physical_cores, self.cpu.logical_cores], "memory": self.memory_bytes,
               "accelerators": [f"{a.kind}:{a.name}" for a in self.accelerators], "versions": self.versions}
        return hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16]

    def to_dict(self) -> dict[str, Any]:
        return {"fingerprint": self.fingerprint(), "cpu": asdict(self.cpu), "memory_bytes": self.memory_bytes,
                "numa_nodes": [asdict(n) for n in self.numa_nodes],
                "accelerators": [asdict(a) for a in self.accelerators],
                "meters": [m.to_dict() for m in self.meters], "versions": dict(self.versions)}


def _read(path: Path) -> str | None:
    try:
        return path.read_text()
    except OSError:
        return None


def read_cpu(root: str | Path = "/") -> Cpu:
    """Model and core counts from /proc/cpuinfo; physical cores from sysfs topology when cpuinfo lacks them."""
    root = Path(root)
    blocks = [b for b in (_read(root / "proc/cpuinfo") or "").split("\n\n") if b.strip()]
    entries = [{k.strip(): v.strip() for k, _, v in (line.partition(":") for line in block.splitlines())}
               for block in blocks]
    processors = [e for e in entries if "processor" in e]
    model = next((e["model name"] for e in processors if e.get("model name")), None) or platform.processor() \
        or platform.machine() or "unknown"
    logical = len(processors) or os.cpu_count() or 1
    cores = {(e["physical id"], e["core id"]) for e in processors if "physical id" in e and "core id" in e}
    if not cores:
        for topology in (root / "sys/devices/system/cpu").glob("cpu[0-9]*/topology"):
            package, core = _read(topology / "physical_package_id"), _read(topology / "core_id")
            if package is not None and core is not None:
                cores.add((package.strip(), core.strip()))
    return Cpu(model, len(cores) or None, logical)


def _meminfo_bytes(text: str | None, pattern: str) -> int | None:
    match = re.search(pattern + r":\s*(\d+)\s*kB", text or "")
    return int(match.group(1)) * 1024 if match else None


def read_memory_bytes(root: str | Path = "/") -> int | None:
    return _meminfo_bytes(_read(Path(root) / "proc/meminfo"), "MemTotal")


def free_memory_bytes(device: str, root: str | Path = "/") -> int | None:
    """Memory a new allocation on ``device`` can take now: the host's MemAvailable, a CUDA GPU's
    free bytes; None where it is not known (not Linux, other devices)."""
    where = torch.device(device)
    if where.type == "cpu":
        return _meminfo_bytes(_read(Path(root) / "proc/meminfo"), "MemAvailable")
    if where.type == "cuda" and cuda_available():
        return int(torch.cuda.mem_get_info(where)[0])
    return None


def gib(n: int | None) -> str:
    """Bytes in GiB, for people."""
    return "unknown" if n is None else f"{n / 2**30:,.1f} GiB"


def read_numa_nodes(root: str | Path = "/") -> tuple[NumaNode, ...]:
    nodes = []
    for path in (Path(root) / "sys/devices/system/node").glob("node[0-9]*"):
        nodes.append(NumaNode(int(path.name[4:]), (_read(path / "cpulist") or "").strip(),
                              _meminfo_bytes(_read(path / "meminfo"), r"MemTotal")))
    return tuple(sorted(nodes, key=lambda n: n.index))


def list_accelerators() -> tuple[Accelerator, ...]:
    """Every accelerator torch can use here: CUDA (or ROCm) GPUs, Apple MPS, Intel XPUs."""
    found = []
    if cuda_available():
        for i in range(torch.cuda.device_count()):
            props = torch.cuda.get_device_properties(i)
            found.append(Accelerator("cuda", i, props.name, props.total_memory, f"{props.major}.{props.minor}"))
    if mps_available():
        memory = torch.mps.recommended_max_memory() if hasattr(torch.mps, "recommended_max_memory") else None
        found.append(Accelerator("mps", 0, "Apple GPU (MPS, memory shared with the CPU)", memory, None))
    if hasattr(torch, "xpu") and torch.xpu.is_available():
        for i in range(torch.xpu.device_count()):
            props = torch.xpu.get_device_properties(i)
            found.append(Accelerator("xpu", i, props.name, props.total_memory, None))
    return tuple(found)


def describe_machine(root: str | Path = "/", nvml: Any = None) -> Machine:
    """The machine under ``root``; ``nvml`` is passed to meter discovery (the pynvml module or a fake)."""
    with discover_meters(root, nvml) as report:
        meters = tuple(report.statuses())
    return Machine(read_cpu(root), read_memory_bytes(root), read_numa_nodes(root), list_accelerators(), meters,
                   {"python": platform.python_version(), "torch": torch.__version__, "numpy": np.__version__})
