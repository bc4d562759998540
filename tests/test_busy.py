"""The accelerator's busy share (hetrl.energy.busy) against the fake NVML module of test_energy,
in a run's summary, and in hetrl sweep's table and plot."""

from __future__ import annotations

import io
import json
import re
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from rich.console import Console

from hetrl.energy.busy import BusyMeasurement
from test_energy import FakeGpu, FakeNvml

CUDA0 = {(0, 0x3B, 0): 0}  # torch's cuda:0 is the GPU on bus 0x3B


def sampler_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("accelerator busy")]


def wait_for(condition, timeout_s: float = 10.0) -> None:
    """Until ``condition()`` holds (the machine may be busy: a sampling thread can be late)."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


def test_the_sampler_averages_the_readings_of_the_learners_gpu_and_stops() -> None:
    """Two GPUs, listed by NVML in the other order than torch's: cuda:0 is NVML's gpu1, and only it is read."""
    other, learner = FakeGpu("Fake H100", bus=0x86, utilisation=[100]), FakeGpu("Fake H100", bus=0x3B, utilisation=[10, 30, 50, 90])
    nvml = FakeNvml([other, learner])
    with BusyMeasurement("cuda", nvml, CUDA0, interval_s=0.01) as busy:  # torch's "cuda": the first GPU
        assert nvml.inits == 1 and busy.reason == ""
        busy.start()
        wait_for(lambda: len(learner.utilisation_read) >= 6)
        assert sampler_threads()
        result = busy.stop()
    assert not sampler_threads() and nvml.inits == 0
    readings = np.array(learner.utilisation_read[1:]) / 100  # the first one checked, when opening, that it can be read
    assert result.samples == len(readings) >= 5 and other.utilisation_read == []
    assert result.share == pytest.approx(readings.mean()) and 0.1 <= result.share <= 0.9
    assert (result.p10, result.p90) == (pytest.approx(np.percentile(readings, 10)), pytest.approx(np.percentile(readings, 90)))
    assert result.device == "cuda:0"
    assert result.method == "NVML utilisation (nvmlDeviceGetUtilizationRates) of nvml:gpu1, read every 0.01 s"
    assert result.describe().startswith(f"{result.share:.0%} busy on cuda:0 (p10 ")
    assert busy.stop() is result  # stopping again: the same result


def test_no_reading_is_taken_while_paused() -> None:
    gpu = FakeGpu("Fake H100", bus=0x3B, utilisation=[100, 100, 100, 0])
    with BusyMeasurement("cuda:0", FakeNvml([gpu]), CUDA0, interval_s=0.01) as busy:
        busy.start()
        wait_for(lambda: len(gpu.utilisation_read) >= 3)
        with busy.paused():
            before = len(gpu.utilisation_read)
            time.sleep(0.2)
            assert len(gpu.utilisation_read) <= before + 1  # a reading under way when the pause began may still land
            during = len(gpu.utilisation_read)
        wait_for(lambda: len(gpu.utilisation_read) > during + 1)  # and reading goes on after it
        result = busy.stop()
    assert result.samples == len(gpu.utilisation_read) - 1


@pytest.mark.parametrize(("device", "reason"), [
    ("cpu", "the learner is on the host (cpu), not on an accelerator"),
    ("mps", "NVML reads NVIDIA GPUs only, and the learner is on mps:0"),
])
def test_a_learner_off_nvidias_gpus_is_unavailable_and_nvml_is_not_touched(device: str, reason: str) -> None:
    with BusyMeasurement(device, nvml=object()) as busy:  # any use of NVML would fail
        busy.start()
        result = busy.stop()
    assert (result.share, result.p10, result.p90, result.reason) == (None, None, None, reason)
    assert result.describe() == f"unavailable: {reason}" and not sampler_threads()


def test_without_nvml_or_the_gpu_the_share_is_unavailable_with_the_reason(monkeypatch: pytest.MonkeyPatch) -> None:
    def measured(device: str, nvml: object = None, **kw: object) -> str:
        with BusyMeasurement(device, nvml, **kw) as busy:
            busy.start()
            result = busy.stop()
        assert result.share is None and result.samples == 0 and not sampler_threads()
        return result.reason

    assert measured("cuda:0", FakeNvml([], init_error=12)) == "nvml: no NVIDIA driver (NVML Shared Library Not Found)"
    nvml = FakeNvml([FakeGpu("Fake H100", bus=0x3B, utilisation=[50])])
    assert measured("cuda:1", nvml, cuda_index_by_pci=CUDA0) == "nvml: no GPU NVML lists is torch's cuda:1"
    assert nvml.inits == 0
    no_rates = FakeNvml([FakeGpu("Fake K80", bus=0x3B)])
    assert measured("cuda:0", no_rates, cuda_index_by_pci=CUDA0) == "nvml: no utilisation reading for cuda:0 (Not Supported)"
    assert no_rates.inits == 0
    assert measured("cuda:0", nvml, cuda_index_by_pci=CUDA0, skip="the learner is elsewhere") == "the learner is elsewhere"
    assert measured("cuda:0", nvml, cuda_index_by_pci=CUDA0, interval_s=3600).startswith("no reading: the span of ")
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import pynvml now raises ImportError
    assert measured("cuda:0") == "nvml: pynvml not installed (pip install nvidia-ml-py)"


def test_a_reading_that_fails_leaves_no_figure() -> None:
    gpu = FakeGpu("Fake H100", bus=0x3B, utilisation=[70])
    nvml = FakeNvml([gpu])
    with BusyMeasurement("cuda:0", nvml, CUDA0, interval_s=0.01) as busy:
        busy.start()
        wait_for(lambda: len(gpu.utilisation_read) >= 3)
        gpu.utilisation = None  # the driver stops answering
        wait_for(lambda: busy._thread is not None and not busy._thread.is_alive())  # the sampler ends on the failure
        result = busy.stop()
    assert result.share is None and result.reason == "nvml:gpu0: a utilisation reading failed (Not Supported)"
    gpu.utilisation = [70]
    with BusyMeasurement("cuda:0", nvml, CUDA0) as never:
        assert never.stop().reason == "not sampled: the span never started"
    assert nvml.inits == 0


def test_a_run_reports_its_learners_busy_share_and_leaves_no_sampler(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The run samples over its learning phase (here a fake GPU stands for the learner's) and says
    so in summary.json and the summary table; the sampler's thread and NVML are gone after it."""
    import hetrl
    from hetrl.energy import busy
    from hetrl.run.report import summary_table

    gpu = FakeGpu("Fake H100", bus=0x3B, utilisation=[60])
    nvml = FakeNvml([gpu])
    asked: list[str] = []

    def fake_gpu(device: str, skip: str = "") -> BusyMeasurement:
        asked.append(device)
        return BusyMeasurement("cuda:0", nvml, CUDA0, interval_s=0.005, skip=skip)

    monkeypatch.setattr(busy, "BusyMeasurement", fake_gpu)
    result = hetrl.train("dqn", "CartPole-v1", 600, run_dir=tmp_path / "run", progress=False, plan="rule", hidden=(16, 16),
                         learning_starts=100, batch_size=16, eval_episodes=2, log_every=200, eval_every=0)
    assert asked == ["cpu"]  # the learner's device, as placed
    assert not sampler_threads() and nvml.inits == 0
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["accelerator_utilisation"] == result.accelerator_utilisation == pytest.approx(0.6)
    assert summary["accelerator_utilisation_p10"] == summary["accelerator_utilisation_p90"] == pytest.approx(0.6)
    assert summary["accelerator_busy_method"] == "NVML utilisation (nvmlDeviceGetUtilizationRates) of nvml:gpu0, read every 0.005 s"
    assert summary["accelerator_busy"].startswith("60% busy on cuda:0 (p10 60%, p90 60%; mean of ")
    shown = io.StringIO()
    Console(file=shown, width=2000).print(summary_table(result))
    assert "accelerator busy, learning phase" in shown.getvalue() and "60% busy on cuda:0" in shown.getvalue()


def test_a_host_learners_run_says_unavailable(tmp_path: Path) -> None:
    import hetrl

    result = hetrl.train("dqn", "CartPole-v1", 300, run_dir=tmp_path / "run", progress=False, plan="rule", hidden=(16, 16),
                         device="cpu", learning_starts=50, batch_size=16, eval_episodes=1, log_every=100, eval_every=0)
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["accelerator_utilisation"] is None and result.accelerator_utilisation is None
    assert summary["accelerator_busy"] == "unavailable: the learner is on the host (cpu), not on an accelerator"
    assert not sampler_threads()


# --- hetrl sweep ----------------------------------------------------------------------------------


def points():
    from hetrl.sweep import SweepPoint

    method = "NVML utilisation (nvmlDeviceGetUtilizationRates) of nvml:gpu0, read every 0.1 s"
    return [SweepPoint(1, 1000.0, 0.4, 0.0, None, None, "energy unavailable: test", "", 0.35, "35% busy on cuda:0 ...", method),
            SweepPoint(2, 1900.0, 0.8, 0.1, None, None, "energy unavailable: test", "", 0.72, "72% busy on cuda:0 ...", method),
            SweepPoint(3, 1950.0, 0.9, 0.3, None, None, "energy unavailable: test", "", None,
                       "unavailable: nvml:gpu0: a utilisation reading failed (GPU is lost)")]


def test_the_sweep_table_shows_accelerator_busy_or_unavailable_and_says_how() -> None:
    from hetrl.sweep import table

    shown = io.StringIO()
    t = table(points())
    Console(file=shown, width=300).print(t)
    cells = [[c.strip() for c in re.split("[│┃]", line)[1:-1]] for line in shown.getvalue().splitlines() if re.search("[│┃]", line)]
    header, rows = cells[0], [row for row in cells if row[0][:1].isdigit()]
    column = header.index("accelerator busy")
    assert [row[column] for row in rows] == ["35%", "72%", "unavailable"]  # never 0% for a point without a figure
    assert t.caption.splitlines()[1:] == [
        "1, 2 actors: accelerator busy: NVML utilisation (nvmlDeviceGetUtilizationRates) of nvml:gpu0, read every 0.1 s",
        "3 actors: accelerator busy: unavailable: nvml:gpu0: a utilisation reading failed (GPU is lost)"]


def test_the_sweep_plot_leaves_unavailable_points_out(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import matplotlib.pyplot as plt

    from hetrl.sweep import knee, plot

    figures, close = [], plt.close
    monkeypatch.setattr(plt, "close", figures.append)
    for chosen in (points(), [replace_busy(p) for p in points()]):
        plot(chosen, knee(chosen), tmp_path / f"{len(figures)}.png", "test")
    lines = [{line.get_label(): list(line.get_xdata()) for ax in fig.axes for line in ax.get_lines()} for fig in figures]
    assert lines[0]["accelerator busy (%, NVML)"] == [1, 2]  # the third point has none: not drawn, not 0
    assert "accelerator busy (%, NVML)" not in lines[1] and "learner busy (%)" in lines[1]
    for fig in figures:
        close(fig)


def replace_busy(point):
    from dataclasses import replace

    return replace(point, accelerator_busy=None, accelerator_busy_note="unavailable: the learner is on the host (cpu), not on an accelerator")
