"""Energy meters against fake powercap trees and a fake NVML module, and on this machine."""

from __future__ import annotations

import importlib.util
import io
import json
import os
import sys
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import SimpleNamespace

import pytest
from rich.console import Console

from hetrl.energy import (
    EnergyMeasurement,
    MeterError,
    MeterReport,
    NvmlEnergyMeter,
    NvmlPowerMeter,
    RaplMeter,
    discover_meters,
    discover_nvml,
    discover_rapl,
)

# --- a fake powercap tree -------------------------------------------------------------------------


def write(path: Path, value: object) -> None:
    """Replace a file atomically, so that a polling meter never reads it half written."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(f"{value}\n")
    os.replace(tmp, path)


def domain(powercap: Path, dirname: str, name: str, energy_uj: int | None = 0, range_uj: int = 262143328850) -> Path:
    d = powercap / dirname
    d.mkdir(parents=True)
    write(d / "name", name)
    write(d / "max_energy_range_uj", range_uj)
    if energy_uj is not None:
        write(d / "energy_uj", energy_uj)
    return d


@pytest.fixture
def powercap(tmp_path: Path) -> Path:
    """Two packages with core/uncore/dram subdomains, a psys domain and an MMIO duplicate of package 0."""
    pc = tmp_path / "sys/class/powercap"
    domain(pc, "intel-rapl:0", "package-0", 1_000_000)
    domain(pc, "intel-rapl:0:0", "core", 5)
    domain(pc, "intel-rapl:0:1", "uncore", 5)
    domain(pc, "intel-rapl:1", "package-1", 2_000_000)
    domain(pc, "intel-rapl:1:0", "dram", 5)
    domain(pc, "intel-rapl:2", "psys", 5)
    domain(pc, "intel-rapl-mmio:0", "package-0", 5)
    return pc


def test_rapl_meters_only_packages_in_joules(tmp_path: Path, powercap: Path) -> None:
    meters, unavailable = discover_rapl(tmp_path, poll_interval_s=None)
    try:
        assert unavailable == []
        assert [(m.name, m.device, m.source) for m in meters] == [
            ("rapl:package-0", "cpu-package-0", "measured"), ("rapl:package-1", "cpu-package-1", "measured")]
        assert all(isinstance(m, RaplMeter) and m.kind == "rapl" for m in meters)
        assert [m.read_joules() for m in meters] == [0.0, 0.0]
        write(powercap / "intel-rapl:0/energy_uj", 3_500_000)
        write(powercap / "intel-rapl:0:0/energy_uj", 999_999_999)  # a subdomain: not metered
        write(powercap / "intel-rapl:1/energy_uj", 2_250_000)
        assert [m.read_joules() for m in meters] == [pytest.approx(2.5), pytest.approx(0.25)]
        write(powercap / "intel-rapl:0/energy_uj", 4_500_000)
        assert meters[0].read_joules() == pytest.approx(3.5)
    finally:
        for m in meters:
            m.close()


def test_rapl_wraparound_is_exact(tmp_path: Path) -> None:
    d = domain(tmp_path / "sys/class/powercap", "intel-rapl:0", "package-0", 900, range_uj=999)
    meter = RaplMeter(d, poll_interval_s=None)
    total_uj = 0
    for raw, delta in ((950, 50), (10, 1000 - 950 + 10), (5, 1000 - 10 + 5), (5, 0), (999, 994), (0, 1)):
        write(d / "energy_uj", raw)
        total_uj += delta
        assert meter.read_joules() == pytest.approx(total_uj / 1e6, rel=1e-12, abs=0)
    assert total_uj == 2100
    meter.close()


def test_rapl_poll_thread_catches_every_wrap(tmp_path: Path) -> None:
    d = domain(tmp_path / "sys/class/powercap", "intel-rapl:0", "package-0", 0, range_uj=999)
    meter = RaplMeter(d, poll_interval_s=0.01)
    try:
        for raw in (600, 200, 800):  # 0 -> 600 -> (wrap) 200 -> 800: 1800 uJ; read only at the end: 800
            write(d / "energy_uj", raw)
            time.sleep(0.25)
        assert meter.read_joules() == pytest.approx(1800e-6, rel=1e-12)
    finally:
        meter.close()


def test_rapl_permission_denied_is_unavailable_with_reason(tmp_path: Path, powercap: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    denied = powercap / "intel-rapl:1/energy_uj"
    real_read_text = Path.read_text

    def read_text(self: Path, *args: object, **kwargs: object) -> str:
        if self == denied:
            raise PermissionError(13, "Permission denied", str(self))
        return real_read_text(self, *args, **kwargs)

    monkeypatch.setattr(Path, "read_text", read_text)
    meters, unavailable = discover_rapl(tmp_path, poll_interval_s=None)
    assert [m.name for m in meters] == ["rapl:package-0"]
    assert [u.kind for u in unavailable] == ["rapl"]
    assert "/sys/class/powercap/intel-rapl:1/energy_uj is not readable (permission denied" in unavailable[0].reason
    assert str(tmp_path) not in unavailable[0].reason
    meters[0].close()


def test_rapl_missing_counter_and_missing_powercap(tmp_path: Path) -> None:
    assert discover_rapl(tmp_path)[1][0].reason == "/sys/class/powercap not present (no powercap RAPL driver here)"
    pc = tmp_path / "sys/class/powercap"
    pc.mkdir(parents=True)
    assert discover_rapl(tmp_path)[1][0].reason == "no RAPL package domain under /sys/class/powercap"
    domain(pc, "intel-rapl:0", "package-0", energy_uj=None)
    meters, unavailable = discover_rapl(tmp_path)
    assert meters == []
    assert unavailable[0].reason == "/sys/class/powercap/intel-rapl:0/energy_uj: No such file or directory"


def test_rapl_counter_vanishing_after_open_raises_meter_error(tmp_path: Path) -> None:
    d = domain(tmp_path / "sys/class/powercap", "intel-rapl:0", "package-0", 10)
    meter = RaplMeter(d, poll_interval_s=None)
    (d / "energy_uj").unlink()
    with pytest.raises(MeterError, match="rapl:package-0"):
        meter.read_joules()
    meter.close()


# --- a fake NVML module ---------------------------------------------------------------------------


class FakeNVMLError(Exception):
    _names = {3: "Not Supported", 9: "Driver Not Loaded", 12: "NVML Shared Library Not Found"}

    def __init__(self, value: int) -> None:
        super().__init__(value)
        self.value = value

    def __str__(self) -> str:
        return self._names.get(self.value, f"NVML error {self.value}")


@dataclass
class FakeGpu:
    name: str
    bus: int
    energy_mj: int | None = None  # None: the energy counter is not supported
    power_mw: int | None = None  # None: power readings are not supported
    power_reads: int = 0
    utilisation: list[int] | None = None  # percent busy, read in turn (cycling); None: not supported
    utilisation_read: list[int] = field(default_factory=list)  # what each utilisation reading returned


class FakeNvml:
    """The pynvml functions hetrl uses; it counts initialisations like NVML does."""

    NVMLError = FakeNVMLError
    NVML_ERROR_NOT_SUPPORTED = 3
    NVML_ERROR_DRIVER_NOT_LOADED = 9
    NVML_ERROR_LIBRARY_NOT_FOUND = 12

    def __init__(self, gpus: list[FakeGpu], init_error: int | None = None) -> None:
        self.gpus = gpus
        self.init_error = init_error
        self.inits = 0

    def _initialised(self) -> None:
        if self.inits <= 0:
            raise FakeNVMLError(1)

    def nvmlInit(self) -> None:
        if self.init_error is not None:
            raise FakeNVMLError(self.init_error)
        self.inits += 1

    def nvmlShutdown(self) -> None:
        self._initialised()
        self.inits -= 1

    def nvmlDeviceGetCount(self) -> int:
        self._initialised()
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> FakeGpu:
        self._initialised()
        return self.gpus[index]

    def nvmlDeviceGetName(self, gpu: FakeGpu) -> bytes:
        return gpu.name.encode()  # older pynvml returns bytes

    def nvmlDeviceGetPciInfo(self, gpu: FakeGpu) -> SimpleNamespace:
        return SimpleNamespace(domain=0, bus=gpu.bus, device=0)

    def nvmlDeviceGetTotalEnergyConsumption(self, gpu: FakeGpu) -> int:
        self._initialised()
        if gpu.energy_mj is None:
            raise FakeNVMLError(3)
        return gpu.energy_mj

    def nvmlDeviceGetPowerUsage(self, gpu: FakeGpu) -> int:
        self._initialised()
        if gpu.power_mw is None:
            raise FakeNVMLError(3)
        gpu.power_reads += 1
        return gpu.power_mw

    def nvmlDeviceGetUtilizationRates(self, gpu: FakeGpu) -> SimpleNamespace:
        self._initialised()
        if gpu.utilisation is None:
            raise FakeNVMLError(3)
        gpu.utilisation_read.append(gpu.utilisation[len(gpu.utilisation_read) % len(gpu.utilisation)])
        return SimpleNamespace(gpu=gpu.utilisation_read[-1], memory=0)


def test_nvml_energy_counter_meters_and_cuda_labels() -> None:
    gpus = [FakeGpu("Fake A100", bus=0x3B, energy_mj=5_000_000), FakeGpu("Fake A100", bus=0x86, energy_mj=7)]
    nvml = FakeNvml(gpus)
    meters, unavailable = discover_nvml(nvml, cuda_index_by_pci={(0, 0x3B, 0): 0})
    assert unavailable == []
    assert all(isinstance(m, NvmlEnergyMeter) for m in meters)
    assert [(m.name, m.device, m.source) for m in meters] == [
        ("nvml:gpu0", "cuda:0", "measured"), ("nvml:gpu1", "nvidia-gpu1 (not a torch device here)", "measured")]
    assert nvml.inits == 2  # one per open meter; discovery's own is released
    gpus[0].energy_mj += 1500
    gpus[1].energy_mj += 250_000
    assert [m.read_joules() for m in meters] == [pytest.approx(1.5), pytest.approx(250.0)]
    gpus[0].energy_mj -= 1
    with pytest.raises(MeterError, match="went backwards"):
        meters[0].read_joules()
    for m in meters:
        m.close()
        m.close()
    assert nvml.inits == 0


def test_nvml_without_energy_counter_integrates_sampled_power() -> None:
    gpu = FakeGpu("Fake P100", bus=1, power_mw=100_000)
    nvml = FakeNvml([gpu])
    now = [10.0]
    nvml.nvmlInit()
    meter = NvmlPowerMeter(nvml, 0, "cuda:0", interval_s=3600, clock=lambda: now[0])
    nvml.nvmlShutdown()
    gpu.power_mw, now[0] = 200_000, 12.0
    assert meter.read_joules() == pytest.approx((100 + 200) / 2 * 2.0)  # trapezoid: 300 J
    gpu.power_mw, now[0] = 200_000, 12.5
    assert meter.read_joules() == pytest.approx(400.0)
    meter.close()
    assert nvml.inits == 0

    opened = time.monotonic()
    meters, unavailable = discover_nvml(nvml, cuda_index_by_pci={}, power_interval_s=0.01)
    assert unavailable == [] and isinstance(meters[0], NvmlPowerMeter)
    assert meters[0].source == "measured"
    assert meters[0].method == "power samples (nvmlDeviceGetPowerUsage) integrated every 0.01 s"
    reads = gpu.power_reads
    time.sleep(0.2)
    assert gpu.power_reads - reads >= 3  # the sampling thread runs without anyone reading
    joules = meters[0].read_joules()
    assert 200 * 0.2 <= joules <= 200 * (time.monotonic() - opened)  # constant 200 W over the meter's life
    meters[0].close()
    assert nvml.inits == 0


def test_nvml_unavailable_reasons(monkeypatch: pytest.MonkeyPatch) -> None:
    nvml = FakeNvml([FakeGpu("Fake K80", bus=1)])
    meters, unavailable = discover_nvml(nvml, cuda_index_by_pci={})
    assert meters == []
    assert unavailable[0].reason == ("gpu0 (Fake K80): no energy counter (Not Supported) and no power reading "
                                     "(Not Supported)")
    assert nvml.inits == 0
    assert discover_nvml(FakeNvml([]))[1][0].reason == "no NVIDIA GPU"
    no_driver = FakeNvml([], init_error=12)
    assert discover_nvml(no_driver)[1][0].reason == "no NVIDIA driver (NVML Shared Library Not Found)"
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import pynvml now raises ImportError
    assert discover_nvml()[1][0].reason == "pynvml not installed (pip install nvidia-ml-py)"


def test_this_machine_reports_why_meters_are_unavailable() -> None:
    with discover_meters() as report:
        kinds = {m.kind for m in report.meters}
        reasons = {u.kind: u.reason for u in report.unavailable}
        if not os.access("/sys/class/powercap/intel-rapl:0/energy_uj", os.R_OK):
            assert "rapl" not in kinds and reasons["rapl"]
        if importlib.util.find_spec("pynvml") is None:
            assert "nvml" not in kinds
            assert reasons["nvml"] == "pynvml not installed (pip install nvidia-ml-py)"
        assert {s.kind for s in report.statuses()} == {"rapl", "nvml"}


# --- measurement spans ----------------------------------------------------------------------------


def test_measurement_without_meters_gives_reasons_never_a_number(tmp_path: Path) -> None:
    with discover_meters(tmp_path, FakeNvml([])) as report, EnergyMeasurement(report) as span:
        sum(range(1000))
    result = span.result
    assert result.status == "unavailable"
    assert result.readings == ()
    assert result.total_joules is None and result.joules_per_step(100) is None
    assert result.describe() == ("energy unavailable: rapl: /sys/class/powercap not present (no powercap RAPL driver "
                                 "here); nvml: no NVIDIA GPU")
    assert result.to_dict()["total_joules"] is None


def test_measurement_with_meters_labels_every_figure(tmp_path: Path, powercap: Path) -> None:
    gpu = FakeGpu("Fake H100", bus=0x3B, energy_mj=0)
    nvml = FakeNvml([gpu])
    with discover_meters(tmp_path, nvml, cuda_index_by_pci={(0, 0x3B, 0): 0}, rapl_poll_s=None) as report:
        span = EnergyMeasurement(report, min_window_s=0)  # labels here; the window: below
        span.start()
        write(powercap / "intel-rapl:0/energy_uj", 1_000_000 + 30_000_000)
        write(powercap / "intel-rapl:1/energy_uj", 2_000_000 + 10_000_000)
        gpu.energy_mj = 60_000
        result = span.stop()
    assert nvml.inits == 0
    assert result.status == "measured"
    assert [(r.meter, r.device, r.source) for r in result.readings] == [
        ("rapl:package-0", "cpu-package-0", "measured"), ("rapl:package-1", "cpu-package-1", "measured"),
        ("nvml:gpu0", "cuda:0", "measured")]
    assert [r.joules for r in result.readings] == [pytest.approx(30.0), pytest.approx(10.0), pytest.approx(60.0)]
    assert result.total_joules == pytest.approx(100.0)
    assert result.joules_per_step(50) == pytest.approx(2.0)
    assert result.unavailable == ()
    assert result.describe().startswith("100.0 J measured over ")
    assert all(r["source"] == "measured" and r["method"] for r in result.to_dict()["readings"])
    # each figure says how it was measured, in the line every report prints and in methods
    described = result.describe()
    assert "rapl:package-0 (cpu-package-0) 30.0 J, energy counter (powercap energy_uj); " in described
    assert "nvml:gpu0 (cuda:0) 60.0 J, energy counter (nvmlDeviceGetTotalEnergyConsumption))" in described
    assert result.methods == ("rapl:package-0: energy counter (powercap energy_uj); rapl:package-1: energy counter "
                              "(powercap energy_uj); nvml:gpu0: energy counter (nvmlDeviceGetTotalEnergyConsumption)")


def test_power_samples_integrated_are_named_so_beside_their_joules() -> None:
    """A GPU without the energy counter: its joules say they are power samples integrated, and how often."""
    gpu = FakeGpu("Fake P100", bus=1, power_mw=100_000)
    nvml = FakeNvml([gpu])
    meters, _ = discover_nvml(nvml, cuda_index_by_pci={(0, 1, 0): 0}, power_interval_s=3600)
    report = MeterReport(meters, [])
    span = EnergyMeasurement(report, min_window_s=0)
    span.start()
    result = span.stop()
    report.close()
    assert "nvml:gpu0 (cuda:0) " in result.describe()
    assert " J, power samples (nvmlDeviceGetPowerUsage) integrated every 3600 s)" in result.describe()
    assert result.methods == "nvml:gpu0: power samples (nvmlDeviceGetPowerUsage) integrated every 3600 s"


def test_a_meter_failing_mid_span_becomes_unavailable(tmp_path: Path, powercap: Path) -> None:
    with discover_meters(tmp_path, FakeNvml([]), rapl_poll_s=None) as report:
        span = EnergyMeasurement(report, min_window_s=0)  # labels here; the window: below
        span.start()
        write(powercap / "intel-rapl:0/energy_uj", 3_000_000)
        (powercap / "intel-rapl:1/energy_uj").unlink()
        result = span.stop()
    assert [r.meter for r in result.readings] == ["rapl:package-0"]
    assert result.total_joules == pytest.approx(2.0)
    assert any(u.kind == "rapl" and u.reason.startswith("rapl:package-1 failed: [Errno 2]") for u in result.unavailable)
    assert "not measured: " in result.describe()


def test_a_span_shorter_than_the_window_reports_no_number_and_says_why(tmp_path: Path, powercap: Path) -> None:
    """NVML's counter updates every 20-100 ms: under MIN_WINDOW_S a difference is mostly the update
    step, so the span names the meters unavailable, with the span's length, instead of a figure."""
    from hetrl.energy.measurement import MIN_WINDOW_S

    now = [100.0]
    gpu = FakeGpu("Fake H100", bus=0x3B, energy_mj=0)
    with discover_meters(tmp_path, FakeNvml([gpu]), cuda_index_by_pci={(0, 0x3B, 0): 0}, rapl_poll_s=None) as report:
        for seconds, reported in ((0.4, False), (MIN_WINDOW_S, True)):
            span = EnergyMeasurement(report, clock=lambda: now[0])
            span.start()
            write(powercap / "intel-rapl:0/energy_uj", 1_000_000 + int(seconds * 30e6))
            gpu.energy_mj += 60_000
            now[0] += seconds
            result = span.stop()
            assert bool(result.readings) is reported and result.seconds == pytest.approx(seconds)
        # a 0.4 s span's reasons: each meter, the span's length, the window
        span = EnergyMeasurement(report, clock=iter([0.0, 0.4]).__next__)
        span.start()
        too_short = span.stop()
    assert result.total_joules is not None and "rapl:package-0: energy counter" in result.methods
    assert too_short.status == "unavailable" and too_short.joules_per_step(10) is None
    assert "nvml:gpu0: the span of 0.40 s is shorter than the 1 s a reading needs" in too_short.describe()


def test_a_span_shorter_than_the_window_takes_no_users_figure_either(tmp_path: Path, powercap: Path) -> None:
    """Watts x seconds needs no counter, but a report that set a figure beside a measurement it
    could not make would mix the two: the user's figure of a too-short span is unavailable with
    the meters' reason, and a long enough span takes it as before."""
    gpu = FakeGpu("Fake H100", bus=0x3B, energy_mj=0)
    with discover_meters(tmp_path / "no-rapl", FakeNvml([gpu]), cuda_index_by_pci={(0, 0x3B, 0): 0}) as report:
        short = EnergyMeasurement(report, clock=iter([0.0, 0.4]).__next__)
        short.start()
        too_short = short.stop().with_host_power(50.0)
        long = EnergyMeasurement(report, clock=iter([0.0, 2.0]).__next__)
        long.start()
        gpu.energy_mj += 500_000
        enough = long.stop().with_host_power(50.0)
    assert too_short.readings == () and too_short.total_joules is None and too_short.status == "unavailable"
    assert too_short.joules_per_step(10) is None
    reason = "the span of 0.40 s is shorter than the 1 s a reading needs"
    assert f"nvml:gpu0: {reason}" in too_short.describe() and f"cpu_watts: {reason}" in too_short.describe()
    assert {"kind": "cpu_watts", "reason": reason} in too_short.to_dict()["unavailable"]
    assert enough.total_joules == pytest.approx(500.0 + 50.0 * 2.0) and "cpu_watts" not in str(enough.unavailable)
    # a RAPL meter the short span dropped still covers the CPU: the figure is not listed as wanted
    with discover_meters(tmp_path, FakeNvml([]), rapl_poll_s=None) as report:
        span = EnergyMeasurement(report, clock=iter([0.0, 0.4]).__next__)
        span.start()
        rapl_short = span.stop()
    assert rapl_short.with_host_power(50.0) is rapl_short and rapl_short.dropped == ("cpu-package-0", "cpu-package-1")


def test_stop_before_start_is_an_error() -> None:
    with pytest.raises(RuntimeError):
        EnergyMeasurement(MeterReport()).stop()


# --- the host CPU unmetered: the user's power figure (cpu_watts) ----------------------------------


def test_a_gpu_meter_alone_takes_the_users_cpu_figure_labelled_as_such(tmp_path: Path) -> None:
    """No powercap tree (no RAPL), one GPU with NVML: the span is the GPU's measured joules plus the
    user's watts over its length, which every figure labels as the user's, not measured."""
    gpu = FakeGpu("Fake H100", bus=0x3B, energy_mj=0)
    with discover_meters(tmp_path, FakeNvml([gpu]), cuda_index_by_pci={(0, 0x3B, 0): 0}) as report:
        span = EnergyMeasurement(report, min_window_s=0)  # labels here; the window: below
        span.start()
        gpu.energy_mj = 40_000
        measured = span.stop()
    assert measured.with_host_power(None) is measured
    result = measured.with_host_power(50.0)
    assert [(r.meter, r.device, r.source) for r in result.readings] == [
        ("nvml:gpu0", "cuda:0", "measured"), ("cpu_watts", "cpu", "user's figure, not measured")]
    assert result.total_joules == pytest.approx(40.0 + 50.0 * measured.seconds)
    assert result.joules_per_step(10) == pytest.approx((40.0 + 50.0 * measured.seconds) / 10)
    assert result.status == "measured, and the user's figure (not measured)"
    assert "cpu_watts (cpu) " in result.describe() and "user's figure, not measured: 50 W x " in result.describe()
    assert result.to_dict()["readings"][1]["source"] == "user's figure, not measured"


def test_a_rapl_meter_wins_over_the_users_figure(tmp_path: Path, powercap: Path) -> None:
    with discover_meters(tmp_path, FakeNvml([]), rapl_poll_s=None) as report:
        span = EnergyMeasurement(report, min_window_s=0)  # labels here; the window: below
        span.start()
        write(powercap / "intel-rapl:0/energy_uj", 3_000_000)
        measured = span.stop()
    assert measured.with_host_power(50.0) is measured and measured.status == "measured"


def gpu_metered_profile(gpu_watts: float = 600.0, idle_watts: float = 70.0):
    """A profile whose rows only an NVML meter measured: the GPU's power while each primitive ran
    (its idle power during host work); a GPU learner 5x faster than the host's."""
    from test_plan import GPU, synthetic

    profile = synthetic(GPU + [("Transfer", "numpy->cuda", "cuda", 64, None, 20)], watts={"cpu": idle_watts, "cuda": gpu_watts})
    profile.timings = [replace(t, energy_meters="nvml:gpu0" if t.energy_meters else None) for t in profile.timings]
    return profile


def test_efficiency_with_an_unmetered_cpu_needs_the_users_figure_and_labels_it(tmp_path: Path) -> None:
    from hetrl.algos import DQNConfig
    from hetrl.errors import HetrlError
    from hetrl.planner.model import predict
    from hetrl.planner.plan_file import Plan
    from hetrl.planner.search import make_plan
    from hetrl.planner.tables import plan_tables

    agent = DQNConfig(batch_size=64, replay_ratio=1.0, train_every=1)
    profile = gpu_metered_profile()
    with pytest.raises(HetrlError, match=r"only nvml:gpu0 measured .* give the CPU's power with --set cpu_watts=WATTS") as info:
        make_plan(profile, agent, 1, objective="efficiency")
    assert "\n" not in str(info.value)
    # the CPU's figure is what decides: a frugal CPU keeps the learner there, a hungry one sends it to the GPU
    frugal = make_plan(profile, agent, 1, objective="efficiency", cpu_watts=5.0)
    hungry = make_plan(profile, agent, 1, objective="efficiency", cpu_watts=400.0)
    assert frugal.placement.learn.device == "cpu" and hungry.placement.learn.device == "cuda"
    # each primitive's measured joules, plus the CPU at 400 W for its time: 400 W x every second of work per env step
    alone = predict(hungry.placement, profile, agent, 1)
    assert hungry.prediction.joules_per_env_step == pytest.approx(alone.joules_per_env_step + 400.0 * sum(alone.per_env_step_s.values()))
    label = "cpu_watts=400 W (user's figure, not measured)"
    assert hungry.meters == ["nvml:gpu0", label]
    assert f"measured by nvml:gpu0; the host CPU at {label}" in plan_tables(hungry)[0].caption
    assert json.loads(hungry.save(tmp_path / "hungry.json").read_text())["energy_meters"] == ["nvml:gpu0", label]
    frugal_label = "cpu_watts=5 W (user's figure, not measured)"
    assert Plan.load(frugal.save(tmp_path / "frugal.json")).meters == ["nvml:gpu0", frugal_label]  # a host plan loads here
    # a RAPL meter measured the host: the measurement wins and the figure is not used
    both = replace(profile, timings=[replace(t, energy_meters="nvml:gpu0, rapl:package-0" if t.energy_meters else None)
                                     for t in profile.timings])
    measured = make_plan(both, agent, 1, objective="efficiency", cpu_watts=400.0)
    assert measured.meters == ["nvml:gpu0", "rapl:package-0"] and measured.placement.learn.device == "cpu"


# --- a GPU the plan uses, unmetered: the user's power figure (gpu_watts) ----------------------------


def rapl_metered_profile(machine_meters: list[dict] | None = None, gpu_slowdown: float = 1.0):
    """A profile only a RAPL meter measured (the host's 70 W while each primitive ran, a GPU's energy
    missing), with a GPU learner 5x faster than the host's (``gpu_slowdown``: every GPU row that
    many times slower); ``machine_meters``: the meters its machine lists (hardware.Machine.to_dict)."""
    from test_plan import GPU, synthetic

    rows = [r if r[2] != "cuda" else (*r[:5], r[5] * gpu_slowdown) for r in GPU]
    profile = synthetic(rows + [("Transfer", "numpy->cuda", "cuda", 64, None, 20)], watts={"cpu": 70.0, "cuda": 70.0})
    profile.timings = [replace(t, energy_meters="rapl:package-0" if t.energy_meters else None) for t in profile.timings]
    if machine_meters is not None:
        profile.machine = {**profile.machine, "meters": machine_meters}
    return profile


def test_efficiency_refuses_a_plan_on_an_unmetered_gpu_unless_the_user_gives_its_power(tmp_path: Path) -> None:
    """RAPL measured the host, nothing the GPU: the GPU learner's work would look free and its plan
    frugal. Without gpu_watts the efficiency objective refuses it, naming the fix; with the figure it
    costs the GPU's plans with it, labelled the user's, and the figure decides."""
    from hetrl.algos import DQNConfig
    from hetrl.errors import HetrlError
    from hetrl.planner.model import predict
    from hetrl.planner.search import make_plan
    from hetrl.planner.tables import plan_tables

    agent = DQNConfig(batch_size=64, replay_ratio=1.0, train_every=1)
    profile = rapl_metered_profile()
    with pytest.raises(HetrlError, match=r"no meter measured cuda:0 \(only rapl:package-0 measured this profile; .* "
                                         r"give its power with --set gpu_watts=WATTS") as info:
        make_plan(profile, agent, 1, objective="efficiency")
    assert "\n" not in str(info.value)
    frugal = make_plan(profile, agent, 1, objective="efficiency", gpu_watts=5.0)
    hungry = make_plan(profile, agent, 1, objective="efficiency", gpu_watts=2_000.0)
    assert frugal.placement.learn.device == "cuda" and hungry.placement.learn.device == "cpu"
    label = "gpu_watts=5 W (user's figure, not measured)"
    assert frugal.meters == ["rapl:package-0", label] and hungry.meters == ["rapl:package-0"]  # the host plan uses no GPU
    alone = predict(frugal.placement, profile, agent, 1)
    assert frugal.prediction.joules_per_env_step == pytest.approx(alone.joules_per_env_step + 5.0 * sum(alone.per_env_step_s.values()))
    assert f"measured by rapl:package-0; a GPU at {label}" in plan_tables(frugal)[0].caption
    assert json.loads(frugal.save(tmp_path / "frugal.json").read_text())["energy_meters"] == ["rapl:package-0", label]
    # the throughput objective is not refused: energy does not choose its plan
    assert make_plan(profile, agent, 1).placement.learn.device == "cuda"


def test_efficiency_takes_a_host_plan_that_beats_the_unmetered_gpu_and_hides_the_gpus(tmp_path: Path) -> None:
    """A GPU plan costed without the GPU's energy is a lower bound: where the host plan beats it even
    so, the host plan is the honest choice, and the GPU plans are not shown as runner-ups."""
    from hetrl.algos import DQNConfig
    from hetrl.planner.search import make_plan

    agent = DQNConfig(batch_size=64, replay_ratio=1.0, train_every=1)
    profile = rapl_metered_profile(gpu_slowdown=25)
    plan = make_plan(profile, agent, 1, objective="efficiency")
    assert plan.placement.devices() == {"cpu"} and plan.meters == ["rapl:package-0"]
    assert plan.runner_ups == []  # the only host plan won; every other uses the GPU
    costed = make_plan(profile, agent, 1, objective="efficiency", gpu_watts=1.0)  # with the figure they are costed and shown
    assert costed.placement == plan.placement and costed.runner_ups
    assert all("cuda" in c.placement.devices() for c, _ in costed.runner_ups)


def test_which_gpu_a_meter_measured_comes_from_the_profiles_machine() -> None:
    """The profile's machine lists each meter's device: an NVML meter on cuda:0 covers the rows run
    on ``cuda`` (torch's current GPU); one on another GPU does not."""
    from hetrl.algos import DQNConfig
    from hetrl.errors import HetrlError
    from hetrl.planner.search import make_plan, unmetered_accelerators

    rapl = {"kind": "rapl", "available": True, "name": "rapl:package-0", "device": "cpu-package-0"}
    nvml = {"kind": "nvml", "available": True, "name": "nvml:gpu0", "device": "cuda:0"}
    other = {"kind": "nvml", "available": True, "name": "nvml:gpu1", "device": "nvidia-gpu1 (not a torch device here)"}
    agent = DQNConfig(batch_size=64, replay_ratio=1.0, train_every=1)
    both = rapl_metered_profile([rapl, nvml, {"kind": "nvml", "available": False, "reason": "x"}])
    both.timings = [replace(t, energy_meters="nvml:gpu0, rapl:package-0" if t.energy_meters else None) for t in both.timings]
    assert unmetered_accelerators(both, ["nvml:gpu0", "rapl:package-0"]) == set()
    assert make_plan(both, agent, 1, objective="efficiency").placement.learn.device == "cuda"
    elsewhere = rapl_metered_profile([rapl, other])
    elsewhere.timings = [replace(t, energy_meters="nvml:gpu1, rapl:package-0" if t.energy_meters else None) for t in elsewhere.timings]
    assert unmetered_accelerators(elsewhere, ["nvml:gpu1", "rapl:package-0"]) == {"cuda:0"}
    with pytest.raises(HetrlError, match="no meter measured cuda:0"):
        make_plan(elsewhere, agent, 1, objective="efficiency")


def test_the_profile_and_plan_tables_name_each_meters_method() -> None:
    """The profile's mJ/call and the plan's predicted joules say how their energy was measured: each
    meter's method, as the profile's machine lists its meters."""
    from hetrl.algos import DQNConfig
    from hetrl.planner.search import make_plan
    from hetrl.planner.tables import plan_tables
    from hetrl.profile import profile_table

    counter = "energy counter (nvmlDeviceGetTotalEnergyConsumption)"
    rapl = {"kind": "rapl", "available": True, "name": "rapl:package-0", "device": "cpu-package-0",
            "method": "energy counter (powercap energy_uj)"}
    nvml = {"kind": "nvml", "available": True, "name": "nvml:gpu0", "device": "cuda:0", "method": counter}
    profile = rapl_metered_profile([rapl, nvml])
    profile.timings = [replace(t, energy_meters="nvml:gpu0, rapl:package-0" if t.energy_meters else None) for t in profile.timings]
    methods = f"nvml:gpu0: {counter}; rapl:package-0: energy counter (powercap energy_uj)"
    assert f"mJ/call: measured, the sum over {methods}" in profile_table(profile).caption
    plan = make_plan(profile, DQNConfig(batch_size=64, replay_ratio=1.0, train_every=1), 1, objective="efficiency")
    assert plan.meters == [f"nvml:gpu0: {counter}", "rapl:package-0: energy counter (powercap energy_uj)"]
    assert f"J per env step (from energy per call measured by {methods})" in plan_tables(plan)[0].caption
    # a profile whose machine does not list its meters (a synthetic one): the caption says so
    assert "mJ/call: measured, the sum over rapl:package-0: method not recorded" in profile_table(rapl_metered_profile()).caption


def test_a_runs_energy_takes_the_users_gpu_figure_for_each_unmetered_gpu_it_used(tmp_path: Path, powercap: Path) -> None:
    """RAPL measures the host, NVML nothing: each GPU of the run's placement gets gpu_watts x the
    span, labelled the user's; a GPU NVML measured, the host and a too-short span take none."""
    from hetrl.energy.measurement import EnergyResult

    with discover_meters(tmp_path, FakeNvml([]), rapl_poll_s=None) as report:
        span = EnergyMeasurement(report, clock=iter([0.0, 2.0]).__next__)
        span.start()
        write(powercap / "intel-rapl:0/energy_uj", 3_000_000)
        measured = span.stop()
    assert measured.with_gpu_power(None, {"cpu", "cuda"}) is measured
    assert measured.with_gpu_power(300.0, {"cpu"}) is measured
    result = measured.with_gpu_power(300.0, {"cpu", "cuda"})
    assert [(r.meter, r.device, r.source) for r in result.readings] == [
        ("rapl:package-0", "cpu-package-0", "measured"), ("rapl:package-1", "cpu-package-1", "measured"),
        ("gpu_watts", "cuda:0", "user's figure, not measured")]
    assert result.total_joules == pytest.approx(2.0 + 300.0 * 2.0)
    assert result.status == "measured, and the user's figure (not measured)"
    assert "gpu_watts (cuda:0) 600.0 J, user's figure, not measured: 300 W x 2.0 s" in result.describe()
    gpu = FakeGpu("Fake H100", bus=0x3B, energy_mj=0)
    with discover_meters(tmp_path / "no-rapl", FakeNvml([gpu]), cuda_index_by_pci={(0, 0x3B, 0): 0}) as report:
        span = EnergyMeasurement(report, clock=iter([0.0, 2.0]).__next__)
        span.start()
        gpu.energy_mj = 400_000
        on_gpu = span.stop()
    assert on_gpu.with_gpu_power(300.0, {"cuda:0", "cpu"}) is on_gpu  # the measurement wins
    short = EnergyResult(0.5, (), (), window_s=1.0).with_gpu_power(300.0, {"cuda"})
    assert short.total_joules is None and str(short.unavailable[0]) == "gpu_watts: the span of 0.50 s is shorter than the 1 s a reading needs"


def test_the_runs_summary_labels_the_users_figure(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A run with cpu_watts on a machine whose only meter is a GPU's (fake NVML, no RAPL): its energy
    is the GPU's measured joules and the user's figure, and the summary says which is which."""
    import functools

    import hetrl
    from hetrl.energy import discovery

    from hetrl.energy import measurement

    monkeypatch.setattr(measurement, "MIN_WINDOW_S", 0.0)  # a run this short is under the window: the labels are the point here
    gpu = FakeGpu("Fake H100", bus=0x3B, energy_mj=0)
    monkeypatch.setattr(discovery, "discover_meters", functools.partial(discovery.discover_meters, tmp_path / "root", FakeNvml([gpu]),
                                                                        cuda_index_by_pci={(0, 0x3B, 0): 0}))
    result = hetrl.train("dqn", "CartPole-v1", 300, run_dir=tmp_path / "run", progress=False, plan="rule", hidden=(16, 16),
                         learning_starts=50, batch_size=16, eval_episodes=2, log_every=100, eval_every=0, cpu_watts=40.0)
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["energy_status"] == "measured, and the user's figure (not measured)"
    assert "nvml:gpu0 (cuda:0) 0.0 J, energy counter (nvmlDeviceGetTotalEnergyConsumption)" in summary["energy"]
    assert "cpu_watts (cpu) " in summary["energy"]
    assert summary["energy_methods"] == result.energy_methods
    assert summary["energy_methods"].startswith("nvml:gpu0: energy counter (nvmlDeviceGetTotalEnergyConsumption); "
                                                "cpu_watts: user's figure, not measured, 40 W x ")
    assert "user's figure, not measured: 40 W x " in summary["energy"]
    assert summary["joules_per_env_step"] == pytest.approx(result.joules_per_env_step) and result.joules_per_env_step > 0
    # the same joules per gradient update
    assert result.joules_per_update == pytest.approx(result.joules_per_env_step * result.env_steps / result.updates)
    assert summary["joules_per_update"] == pytest.approx(result.joules_per_update)
    from hetrl.run.report import summary_table

    shown = io.StringIO()
    Console(file=shown, width=2000).print(summary_table(result))  # one line per row
    assert "J per env step measured, and the user's figure (not measured)" in shown.getvalue()
    assert "energy counter (nvmlDeviceGetTotalEnergyConsumption)" in shown.getvalue()
    assert "J per gradient update" in shown.getvalue()


def test_a_paused_block_is_left_out_of_the_span(tmp_path: Path) -> None:
    """A run's evaluation episodes run under ``paused``: their joules and seconds are not the
    training's, so J per env step counts training alone."""
    now = [0.0]
    gpu = FakeGpu("Fake H100", bus=0x3B, energy_mj=0)
    with discover_meters(tmp_path / "no-rapl", FakeNvml([gpu]), cuda_index_by_pci={(0, 0x3B, 0): 0}) as report:
        span = EnergyMeasurement(report, clock=lambda: now[0])
        span.start()
        gpu.energy_mj += 100_000  # 100 J over 1 s of training
        now[0] += 1.0
        with span.paused():
            gpu.energy_mj += 500_000  # 500 J over 5 s of evaluation: left out
            now[0] += 5.0
        gpu.energy_mj += 200_000
        now[0] += 1.0
        result = span.stop()
    assert result.seconds == pytest.approx(2.0)
    assert result.total_joules == pytest.approx(300.0)
    assert result.joules_per_step(100) == pytest.approx(3.0)
