"""End to end on a CUDA device: training, resuming, profiling, planning and metering with a GPU.

Every test here needs a GPU and skips without one (the unit-level CUDA checks sit beside their
host twins in primitives/test_agreement, primitives/test_replay, primitives/test_learn_cudagraph,
test_hardware and tabular/test_tabular_backends).
"""

import importlib.util
import json

import numpy as np
import pytest
import torch

import hetrl
from hetrl.algos import DQNConfig
from hetrl.planner.plan_file import Plan
from hetrl.planner.search import make_plan
from hetrl.profile import profile_workload
from hetrl.protocol import Placement, Slot

pytestmark = pytest.mark.gpu

SMALL = dict(hidden=(16, 16), learning_starts=200, batch_size=16, buffer_size=1_000, eval_every=0, eval_episodes=2,
             progress=False, log_every=100)


@pytest.fixture(autouse=True)
def _cuda(require_cuda):
    yield


def assert_held_ratio(result):
    """A local run's updates follow the rate limiter: ratio x the env steps after learning starts
    (200 here), within the actors' lead (32 steps) and the updates in flight."""
    assert result.updates == pytest.approx(result.replay_ratio * (result.env_steps - 200), abs=result.replay_ratio * 34 + 2)
    assert result.replay_ratio_measured == pytest.approx(result.replay_ratio, rel=0.1)


@pytest.mark.parametrize("learner", ["rule", "torch"])
@pytest.mark.parametrize("algo, env", [("dqn", "CartPole-v1"), ("ddpg", "Pendulum-v1"), ("sac", "Pendulum-v1")])
def test_a_run_with_the_learner_on_cuda_trains_and_resumes(tmp_path, algo, env, learner):
    """The rule's CUDA placement (the graphed learner fed by the host replay), and the torch learner
    with its replay beside it on the GPU (a plan file)."""
    extra = dict(prioritized=True) if algo == "dqn" else {}
    if learner == "rule":
        plan = "rule"
    else:
        gpu = Slot("torch", "cuda:0")
        plan = str(Plan(algo, env, 1, "throughput", "-", Placement(Slot("gymnasium"), Slot("numpy"), gpu, gpu), None,
                        []).save(tmp_path / "plan.json"))
    first = hetrl.train(algo, env, steps=500, seed=0, device="cuda", plan=plan, run_dir=tmp_path / "run",
                        checkpoint_every=10_000, **SMALL, **extra)
    assert first.updates > 0
    if learner == "rule":
        assert first.placement["Learn"].startswith("cudagraph on cuda")
        assert first.placement["ReplaySample"].startswith("numpy on cpu")  # the graph takes the host batch in one copy
    else:
        assert first.placement["Learn"].startswith("torch on cuda")
        assert first.placement["ReplaySample"].startswith("torch on cuda")  # the replay sits beside the learner
    resumed = hetrl.resume(tmp_path / "run", steps=800, progress=False)
    assert resumed.env_steps == 800 and resumed.updates > first.updates
    evaluated = hetrl.evaluate(tmp_path / "run", episodes=2)
    assert len(evaluated.returns) == 2


def test_actor_processes_feed_a_cuda_learner(tmp_path):
    result = hetrl.train("dqn", "CartPole-v1", steps=1_500, seed=0, device="cuda", plan="rule", executor="local",
                         actors=1, run_dir=tmp_path / "run", **SMALL)
    assert result.executor == "local" and result.actors == 1
    assert result.env_steps >= 1_500 and result.placement["Learn"].startswith("cudagraph on cuda")
    assert_held_ratio(result)


def test_central_inference_acts_on_the_gpu_beside_the_learner(tmp_path):
    """The actors never touch CUDA: the learner's process acts for both on the GPU."""
    gpu = Slot("torch", "cuda:0")
    placement = Placement(Slot("gymnasium"), gpu, gpu, Slot("torch", "cuda:0"))
    path = Plan("dqn", "CartPole-v1", 1, "throughput", "-", placement, None, [], "local", 2,
                inference="central").save(tmp_path / "plan.json")
    result = hetrl.train("dqn", "CartPole-v1", steps=1_500, seed=0, plan=str(path), executor="auto",
                         run_dir=tmp_path / "run", **SMALL)
    assert (result.executor, result.actors) == ("local", 2)
    assert_held_ratio(result)
    assert "torch on cuda:0, learner's process" in result.placement["Act"]
    timers = {row[0]: row[1] for row in result.timers}  # name -> calls
    assert timers["Act"] > 0 and timers["InferenceWait"] >= timers["Act"] and "WeightFetch" not in timers


def test_the_profile_costs_the_gpu_and_the_planner_can_place_on_it():
    agent = DQNConfig(hidden=(16, 16), batch_size=32, buffer_size=2_000, prioritized=True)
    profile = profile_workload("dqn", "CartPole-v1", agent, devices=["cpu", "cuda:0"], threads=[1])
    learn = profile.lookup("Learn", "torch", "cuda:0", 32)
    upload = profile.lookup("Transfer", "numpy->cuda:0", "cuda:0", 32)
    replay = profile.lookup("ReplaySample", "torch", "cuda:0", 32)
    assert learn and upload and replay
    assert learn.median_s > 1e-6 and upload.median_s > 1e-6  # synchronised: a launch alone is faster
    pinned = make_plan(profile, agent, num_envs=1, learn_device="cuda:0")
    assert pinned.placement.learn.device == "cuda:0"
    assert pinned.prediction.env_steps_per_s == pytest.approx(1 / sum(pinned.prediction.per_env_step_s.values()))
    best = make_plan(profile, agent, num_envs=1)
    assert best.prediction.env_steps_per_s >= pinned.prediction.env_steps_per_s


@pytest.mark.skipif(importlib.util.find_spec("pynvml") is None, reason="pynvml not installed")
def test_a_gpu_run_reports_nvml_energy(tmp_path):
    """A figure needs a span of at least MIN_WINDOW_S (1 s): a few hundred CartPole steps on a GPU
    take far less, so the run is long enough to give a measured number, not 'unavailable'."""
    from hetrl.energy.measurement import MIN_WINDOW_S

    result = hetrl.train("dqn", "CartPole-v1", steps=20_000, seed=0, device="cuda", plan="rule",
                         run_dir=tmp_path / "run", **SMALL)
    assert result.wall_s >= MIN_WINDOW_S, f"{result.wall_s:.2f} s is under the window: lengthen the run"
    assert "nvml:gpu" in result.energy and "shorter than" not in result.energy, result.energy
    assert result.energy_status == "measured" and "nvml:gpu" in result.energy_methods
    assert "energy counter" in result.energy_methods or "power samples" in result.energy_methods, result.energy_methods
    assert result.joules_per_env_step is not None and result.joules_per_env_step > 0
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["joules_per_env_step"] == pytest.approx(result.joules_per_env_step)



def test_a_run_with_the_graphed_learner(tmp_path):
    from hetrl.planner.plan_file import Plan
    from hetrl.protocol import Placement, Slot

    placement = Placement(Slot("gymnasium"), Slot("numpy"), Slot("numpy"), Slot("cudagraph", "cuda:0"))
    path = Plan("dqn", "CartPole-v1", 1, "throughput", "-", placement, None, []).save(tmp_path / "plan.json")
    result = hetrl.train("dqn", "CartPole-v1", steps=600, seed=0, plan=str(path), run_dir=tmp_path / "run",
                         checkpoint_every=10_000, **SMALL)
    assert result.placement["Learn"] == "cudagraph on cuda:0" and result.updates > 0
    calls = {name: n for name, n, *_ in result.timers}
    assert calls.get("Transfer", 0) == 0  # the learner reads the host batch itself
    resumed = hetrl.resume(tmp_path / "run", steps=900, progress=False)
    assert resumed.env_steps == 900 and resumed.updates > result.updates


def _config(name, **settings):
    from hetrl.algos import algorithm_class

    return algorithm_class(name).Config(**settings)


def test_a_device_network_is_mirrored_to_the_host_in_one_copy():
    from hetrl.nets.host_mirror import HostMirror

    net = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2)).cuda()
    mirror = HostMirror(net)
    assert not mirror.on_host
    with torch.no_grad():
        net[0].weight.add_(1.0)  # in place, as optimiser steps and graph replays change it
    arrays = mirror.refresh()
    for name, value in net.state_dict().items():
        np.testing.assert_array_equal(arrays[name], value.cpu().numpy(), err_msg=name)
