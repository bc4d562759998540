"""describe_machine against a fake /proc and /sys, the devices report, and (marked gpu) a real GPU."""

from __future__ import annotations

import argparse
import importlib.util
import io
import json
import time
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from rich.console import Console

import hetrl.hardware as hardware
from hetrl.devices_report import devices_command, render_machine
from hetrl.energy import discover_nvml
from hetrl.hardware import Accelerator, describe_machine, list_accelerators, read_cpu

MODEL = "Fake Xeon 9000 [ES] @ 3.00GHz"


class NoGpuNvml:
    """pynvml on a machine with an NVIDIA driver and no GPU."""

    class NVMLError(Exception):
        pass

    def nvmlInit(self) -> None:
        pass

    def nvmlShutdown(self) -> None:
        pass

    def nvmlDeviceGetCount(self) -> int:
        return 0


def cpuinfo(sockets: int, cores: int, threads: int, topology: bool = True) -> str:
    blocks = []
    for cpu in range(sockets * cores * threads):
        socket, core = divmod(cpu // threads, cores)
        lines = [f"processor\t: {cpu}", "vendor_id\t: GenuineFake", f"model name\t: {MODEL}"]
        if topology:
            lines += [f"physical id\t: {socket}", f"siblings\t: {cores * threads}", f"core id\t\t: {core}"]
        blocks.append("\n".join(lines + ["flags\t\t: fpu sse2 avx2"]))
    return "\n\n".join(blocks) + "\n\n"


@pytest.fixture
def fake_root(tmp_path: Path) -> Path:
    """Two sockets x 4 cores x 2 threads, 64 GiB, two NUMA nodes; no powercap."""
    (tmp_path / "proc").mkdir()
    (tmp_path / "proc/cpuinfo").write_text(cpuinfo(2, 4, 2))
    (tmp_path / "proc/meminfo").write_text("MemTotal:       67108864 kB\nMemFree:        1000 kB\n")
    for node, cpus in ((0, "0-7"), (1, "8-15")):
        d = tmp_path / f"sys/devices/system/node/node{node}"
        d.mkdir(parents=True)
        (d / "cpulist").write_text(cpus + "\n")
        (d / "meminfo").write_text(f"Node {node} MemTotal:       33554432 kB\nNode {node} MemFree:  1 kB\n")
    (tmp_path / "sys/devices/system/node/online").write_text("0-1\n")  # not a node directory
    return tmp_path


def test_describe_machine_reads_the_fake_tree(fake_root: Path) -> None:
    machine = describe_machine(fake_root, nvml=NoGpuNvml())
    assert machine.cpu.model == MODEL
    assert (machine.cpu.physical_cores, machine.cpu.logical_cores) == (8, 16)
    assert machine.memory_bytes == 64 * 2**30
    assert [(n.index, n.cpus, n.memory_bytes) for n in machine.numa_nodes] == [
        (0, "0-7", 32 * 2**30), (1, "8-15", 32 * 2**30)]
    assert [(m.kind, m.available, m.reason) for m in machine.meters] == [
        ("rapl", False, "/sys/class/powercap not present (no powercap RAPL driver here)"),
        ("nvml", False, "no NVIDIA GPU")]
    assert set(machine.versions) == {"python", "torch", "numpy"}


def test_physical_cores_from_sysfs_topology_or_unknown(tmp_path: Path) -> None:
    (tmp_path / "proc").mkdir()
    (tmp_path / "proc/cpuinfo").write_text(cpuinfo(1, 2, 2, topology=False))
    assert read_cpu(tmp_path).physical_cores is None  # never guessed from the logical count
    for cpu in range(4):
        d = tmp_path / f"sys/devices/system/cpu/cpu{cpu}/topology"
        d.mkdir(parents=True)
        (d / "physical_package_id").write_text("0\n")
        (d / "core_id").write_text(f"{cpu // 2}\n")
    assert (read_cpu(tmp_path).physical_cores, read_cpu(tmp_path).logical_cores) == (2, 4)


def test_fingerprint_is_stable_and_tracks_the_hardware(fake_root: Path) -> None:
    machine = describe_machine(fake_root, nvml=NoGpuNvml())
    again = describe_machine(fake_root, nvml=NoGpuNvml())
    assert machine.fingerprint() == again.fingerprint()
    assert len(machine.fingerprint()) == 16 and int(machine.fingerprint(), 16) >= 0
    gpu = Accelerator("cuda", 0, "Fake H100", 80 * 2**30, "9.0")
    for changed in (replace(machine, memory_bytes=32 * 2**30), replace(machine, accelerators=(gpu,)),
                    replace(machine, cpu=replace(machine.cpu, model="Other")),
                    replace(machine, versions={**machine.versions, "torch": "0.0"})):
        assert changed.fingerprint() != machine.fingerprint()
    assert replace(machine, meters=()).fingerprint() == machine.fingerprint()
    data = json.loads(json.dumps(machine.to_dict()))
    assert data["fingerprint"] == machine.fingerprint()
    assert data["cpu"] == {"model": MODEL, "physical_cores": 8, "logical_cores": 16}
    assert data["meters"][1]["reason"] == "no NVIDIA GPU"


def test_cuda_gpus_are_listed(monkeypatch: pytest.MonkeyPatch) -> None:
    props = [SimpleNamespace(name="Fake H100", total_memory=80 * 2**30, major=9, minor=0),
             SimpleNamespace(name="Fake L4", total_memory=24 * 2**30, major=8, minor=9)]
    monkeypatch.setattr(hardware, "cuda_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda i: props[i])
    cuda = [a for a in list_accelerators() if a.kind == "cuda"]
    assert cuda == [Accelerator("cuda", 0, "Fake H100", 80 * 2**30, "9.0"),
                    Accelerator("cuda", 1, "Fake L4", 24 * 2**30, "8.9")]
    assert cuda[1].torch_device == "cuda:1"


def render(machine: hardware.Machine) -> str:
    console = Console(file=io.StringIO(), width=200)
    console.print(render_machine(machine))
    return console.file.getvalue()


def test_render_shows_cpu_accelerators_and_meter_statuses(fake_root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(hardware, "list_accelerators", lambda: ())  # a CPU-only machine, on a GPU one too
    pc = fake_root / "sys/class/powercap/intel-rapl:0"
    pc.mkdir(parents=True)
    for name, value in (("name", "package-0"), ("energy_uj", "5"), ("max_energy_range_uj", "1000")):
        (pc / name).write_text(value + "\n")
    machine = describe_machine(fake_root, nvml=NoGpuNvml())
    text = render(machine)
    assert MODEL in text  # brackets in the model are not taken for markup
    assert "8 physical, 16 logical" in text and "64.0 GiB" in text
    assert "node1: cpus 8-15" in text
    assert "none: torch sees only the CPU" in text
    assert "rapl:package-0" in text and "cpu-package-0" in text and "measured: energy counter" in text
    assert "unavailable: no NVIDIA GPU" in text
    gpu = Accelerator("cuda", 0, "Fake H100", 80 * 2**30, "9.0")
    text = render(replace(machine, accelerators=(gpu,)))
    assert "cuda:0" in text and "Fake H100" in text and "80.0 GiB" in text and "9.0" in text


def test_devices_command_on_this_machine(capsys: pytest.CaptureFixture[str]) -> None:
    assert devices_command(argparse.Namespace(json=True)) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["cpu"]["logical_cores"] >= 1
    assert {m["kind"] for m in data["meters"]} == {"rapl", "nvml"}
    assert all(m["available"] or m["reason"] for m in data["meters"])
    assert devices_command(argparse.Namespace(json=False)) == 0
    assert "energy meters" in capsys.readouterr().out


@pytest.mark.gpu
def test_real_gpu_is_listed_and_metered() -> None:
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device on this machine")
    gpus = [a for a in list_accelerators() if a.kind == "cuda"]
    assert [a.name for a in gpus] == [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
    assert gpus[0].memory_bytes == torch.cuda.get_device_properties(0).total_memory > 0
    if importlib.util.find_spec("pynvml") is None:
        pytest.skip("pynvml not installed: NVML discovery not checked")
    meters, unavailable = discover_nvml()
    try:
        assert "cuda:0" in [m.device for m in meters], unavailable
        meter = next(m for m in meters if m.device == "cuda:0")
        x = torch.randn(4096, 4096, device="cuda:0")
        for _ in range(50):
            x = x @ x.T / 4096
        torch.cuda.synchronize()
        time.sleep(0.5)  # NVML refreshes its counter every few tens of ms
        assert meter.read_joules() > 0
    finally:
        for m in meters:
            m.close()
