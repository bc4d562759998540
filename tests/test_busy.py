"""The accelerator's busy share (hetrl.energy.busy) against the fake NVML module of test_energy."""

from __future__ import annotations

import sys
import threading
import time

import numpy as np
import pytest

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
