"""Every backend computes the same tables for the same shards and order."""

import sys

import numpy as np
import pytest
import torch

from hetrl.errors import HetrlError
from hetrl.primitives import implementations
from hetrl.tabular.cli import backend_names
from hetrl.tabular.schedule import Order
from hetrl.tabular.train import TabularConfig, train_tabular
from hetrl.tabular.units import AUTO_GPU_UNITS, TabularUnits, resolve_backend


def learn(data, backend, device=None, **kwargs):
    return train_tabular(data, TabularConfig(backend=backend, device=device, **kwargs))


def assert_same(a, b, number_format):
    if number_format == "int32":
        np.testing.assert_array_equal(a.table, b.table)
    else:
        np.testing.assert_allclose(a.q, b.q, rtol=1e-5, atol=1e-6)
    assert np.abs(a.q).max() > 0.01  # the tables learned something


# 7 units: shards of 428 and 429 transitions, so the units' streams end at different steps.
SETTINGS = dict(units=7, epochs=2, order=Order("random", seed=2), merge_every=300, alpha=0.3, gamma=0.95)


@pytest.mark.parametrize("algo", ["q", "sarsa"])
@pytest.mark.parametrize("number_format", ["fp32", "int32"])
def test_torch_cpu_matches_numba_threads(frozenlake_small, algo, number_format):
    kwargs = dict(algo=algo, number_format=number_format, **SETTINGS)
    threads = learn(frozenlake_small, "numba-threads", **kwargs)
    torch_cpu = learn(frozenlake_small, "torch", device="cpu", **kwargs)
    assert torch_cpu.device == "cpu" and torch_cpu.merges == threads.merges == 3  # after 300, 600 and 858 (the end)
    assert_same(threads, torch_cpu, number_format)


@pytest.mark.parametrize("number_format", ["fp32", "int32"])
def test_processes_match_threads(frozenlake_small, number_format):
    kwargs = dict(algo="q", number_format=number_format, units=2, epochs=3, order=Order("strided", stride=5), merge_every=1000)
    threads = learn(frozenlake_small, "numba-threads", **kwargs)
    processes = learn(frozenlake_small, "numba-processes", **kwargs)
    # the same compiled kernel on the same data: identical even in float32
    np.testing.assert_array_equal(threads.table, processes.table)
    assert np.abs(threads.q).max() > 0.01


@pytest.mark.gpu
@pytest.mark.parametrize("number_format", ["fp32", "int32"])
def test_cuda_matches_numba_threads(require_cuda, frozenlake_small, number_format):
    kwargs = dict(algo="q", number_format=number_format, **SETTINGS)
    assert_same(learn(frozenlake_small, "numba-threads", **kwargs), learn(frozenlake_small, "torch", device="cuda", **kwargs), number_format)


@pytest.mark.slow  # starting a local Ray takes 10-30 s
def test_ray_matches_threads(frozenlake_small):
    ray = pytest.importorskip("ray", reason="Ray is optional (pip install hetrl[ray]); make test installs it")
    ray.init(num_cpus=2, include_dashboard=False, ignore_reinit_error=True)
    try:
        for number_format in ("fp32", "int32"):
            kwargs = dict(algo="sarsa", number_format=number_format, units=2, epochs=2, order=Order("random", seed=4), merge_every=500)
            np.testing.assert_array_equal(learn(frozenlake_small, "numba-threads", **kwargs).table, learn(frozenlake_small, "ray", **kwargs).table)
    finally:
        ray.shutdown()


def test_ray_missing_is_a_clear_error(frozenlake_small, monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)  # what a machine without Ray sees: import fails
    with pytest.raises(HetrlError, match="needs Ray"):
        learn(frozenlake_small, "ray", units=2)


def test_tabular_backends_are_the_registered_implementations():
    from hetrl.primitives.tabular_learn_numba_processes import TabularLearnNumbaProcesses
    from hetrl.primitives.tabular_learn_numba_threads import TabularLearnNumbaThreads
    from hetrl.primitives.tabular_learn_ray import TabularLearnRay
    from hetrl.primitives.tabular_learn_torch import TabularLearnTorch

    classes = (TabularLearnNumbaThreads, TabularLearnNumbaProcesses, TabularLearnTorch, TabularLearnRay)
    assert {cls.backend: cls for cls in classes} == {b: i.cls for b, i in implementations("TabularLearn").items()}
    assert all(issubclass(cls, TabularUnits) for cls in classes)
    assert [b for b, i in implementations("TabularLearn").items() if i.device_types is None] == ["torch"]
    # the CLI's help lists them without loading the library
    assert backend_names() == list(implementations("TabularLearn"))


def test_placement_rule():
    assert resolve_backend("auto", units=2) == "numba-threads"
    assert resolve_backend("auto", units=4, device="cuda") == "torch"
    big = resolve_backend("auto", units=AUTO_GPU_UNITS)
    assert big == ("torch" if torch.cuda.is_available() else "numba-threads")
    assert resolve_backend("numba-processes", units=2) == "numba-processes"
    with pytest.raises(HetrlError, match="did you mean 'numba-threads'"):
        resolve_backend("numba-thread", units=2)


def test_cpu_backends_refuse_a_gpu_device(frozenlake_small):
    with pytest.raises(HetrlError, match="runs on the CPU"):
        learn(frozenlake_small, "numba-threads", device="cuda", units=2)
    with pytest.raises(HetrlError, match="cannot use torch device 'nodevice'"):
        learn(frozenlake_small, "torch", device="nodevice", units=2)


def test_orders_change_the_result_but_not_across_backends(frozenlake_small):
    sequential = learn(frozenlake_small, "numba-threads", units=2, alpha=0.5)
    shuffled = learn(frozenlake_small, "numba-threads", units=2, alpha=0.5, order=Order("random", seed=1))
    reshuffled = learn(frozenlake_small, "numba-threads", units=2, alpha=0.5, order=Order("random", seed=1))
    assert not np.array_equal(sequential.table, shuffled.table)
    np.testing.assert_array_equal(shuffled.table, reshuffled.table)
