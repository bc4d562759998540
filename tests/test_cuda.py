"""End to end on a CUDA device: training, resuming, profiling, planning and metering with a GPU.

Every test here needs a GPU and skips without one (the unit-level CUDA checks sit beside their
host twins in test_protocol, test_replay, test_hardware and tabular/test_tabular_backends).
"""

import copy
import importlib.util
import json

import numpy as np
import pytest
import torch

import hetrl
from hetrl.algos import DQNConfig
from hetrl.plan import Plan, make_plan
from hetrl.profile import profile_workload
from hetrl.runtime.placement import Placement, Slot

pytestmark = pytest.mark.gpu

SMALL = dict(hidden=(16, 16), learning_starts=200, batch_size=16, buffer_size=1_000, eval_every=0, eval_episodes=2,
             progress=False, log_every=100)


@pytest.fixture(autouse=True)
def _cuda(require_cuda):
    yield


@pytest.mark.parametrize("algo, env", [("dqn", "CartPole-v1"), ("ddpg", "Pendulum-v1"), ("sac", "Pendulum-v1")])
def test_a_run_with_the_learner_on_cuda_trains_and_resumes(tmp_path, algo, env):
    extra = dict(prioritized=True) if algo == "dqn" else {}
    first = hetrl.train(algo, env, steps=500, seed=0, device="cuda", plan="rule", run_dir=tmp_path / "run",
                        checkpoint_every=10_000, **SMALL, **extra)
    assert first.updates > 0
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
    assert result.env_steps >= 1_500 and result.updates > 0
    assert result.placement["Learn"].startswith("torch on cuda")


def test_central_inference_acts_on_the_gpu_beside_the_learner(tmp_path):
    """The actors never touch CUDA: the learner's process acts for both on the GPU."""
    gpu = Slot("torch", "cuda:0")
    placement = Placement(Slot("gymnasium"), gpu, gpu, Slot("torch", "cuda:0"))
    path = Plan("dqn", "CartPole-v1", 1, "throughput", "-", placement, None, [], "local", 2,
                inference="central").save(tmp_path / "plan.json")
    result = hetrl.train("dqn", "CartPole-v1", steps=1_500, seed=0, plan=str(path), executor="auto",
                         run_dir=tmp_path / "run", **SMALL)
    assert (result.executor, result.actors) == ("local", 2) and result.updates > 0
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
    assert pinned.prediction.env_steps_per_s > 0
    best = make_plan(profile, agent, num_envs=1)
    assert best.prediction.env_steps_per_s >= pinned.prediction.env_steps_per_s


@pytest.mark.skipif(importlib.util.find_spec("pynvml") is None, reason="pynvml not installed")
def test_a_gpu_run_reports_nvml_energy(tmp_path):
    result = hetrl.train("dqn", "CartPole-v1", steps=1_500, seed=0, device="cuda", plan="rule",
                         run_dir=tmp_path / "run", **SMALL)
    assert "nvml" in result.energy, result.energy
    assert result.joules_per_env_step is not None and result.joules_per_env_step > 0
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["joules_per_env_step"] == pytest.approx(result.joules_per_env_step)



# ---------------------------------------------------------------------------------------------
# Learn/cudagraph against Learn/torch on the same GPU

GRAPH_CASES = {
    "dqn double, clipped, hard target": ("dqn", "CartPole-v1", dict(double=True, max_grad_norm=0.5, target_update_every=3)),
    "dqn max target, Polyak": ("dqn", "Acrobot-v1", dict(double=False, tau=0.05, hidden=(32, 16, 24))),
    "ddpg": ("ddpg", "Pendulum-v1", dict()),
    "td3 (noise drawn outside the graph, delayed actor)": ("td3", "Pendulum-v1", dict(policy_delay=2)),
    "sac (two noise draws, tuned temperature, its own Adam)": ("sac", "Pendulum-v1", dict()),
    "sac, delayed actor and temperature, clipped": ("sac", "MountainCarContinuous-v0", dict(policy_delay=2, max_grad_norm=1.0)),
    "sac, fixed temperature": ("sac", "Pendulum-v1", dict(ent_coef="0.3")),
}


def _host_batch(rng, algo, b=48):
    spec = algo.spec
    return {
        "obs": rng.standard_normal((b,) + spec.obs_shape).astype(np.float32),
        "actions": algo.random_actions(rng, b),
        "rewards": rng.standard_normal(b).astype(np.float32),
        "next_obs": rng.standard_normal((b,) + spec.obs_shape).astype(np.float32),
        "discounts": rng.choice([0.0, 0.99], b).astype(np.float32),
        "weights": rng.uniform(0.2, 1.0, b).astype(np.float32),
    }


def _learner_states_close(a, b):
    for name in a:
        if isinstance(a[name], dict) and "param_groups" not in a[name]:  # networks
            for key in a[name]:
                torch.testing.assert_close(a[name][key].cpu(), b[name][key].cpu(), rtol=1e-4, atol=2e-5, msg=f"{name}.{key}")
    if "log_alpha" in a:  # SAC's temperature
        torch.testing.assert_close(a["log_alpha"].cpu(), b["log_alpha"].cpu(), rtol=1e-4, atol=1e-6, msg="log_alpha")


@pytest.mark.parametrize("case", GRAPH_CASES)
def test_the_graphed_update_matches_the_torch_update(case):
    from hetrl.algos import TorchLearn, make_algorithm
    from hetrl.algos.graphed import CudaGraphLearn
    from hetrl.envs import env_spec

    name, env_id, settings = GRAPH_CASES[case]
    algo = make_algorithm(name, env_spec(env_id), _config(name, **{"hidden": (64, 64), "lr": 3e-3, "batch_size": 48, **settings}))
    graphed, plain = CudaGraphLearn(algo, "cuda", seed=3), TorchLearn(algo, "cuda", seed=3)
    rng = np.random.default_rng(0)
    for _ in range(9):
        batch = _host_batch(rng, algo)
        a = graphed.learn(**batch)  # host arrays, as from a numpy replay
        b = plain.learn(**{k: torch.as_tensor(v, device="cuda") for k, v in batch.items()})
        torch.testing.assert_close(a["loss"], b["loss"], rtol=1e-4, atol=1e-6)
        torch.testing.assert_close(a["td_errors"], b["td_errors"], rtol=1e-4, atol=1e-5)
    assert graphed.learner.updates == plain.learner.updates == 9
    _learner_states_close(graphed.learner.state_dict(), plain.learner.state_dict())
    # inputs already on the device (a torch replay on the GPU) go the same way
    batch = {k: torch.as_tensor(v, device="cuda") for k, v in _host_batch(rng, algo).items()}
    torch.testing.assert_close(graphed.learn(**batch)["td_errors"], plain.learn(**batch)["td_errors"], rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("name", ["td3", "sac"])
def test_graphed_checkpoints_resume_on_the_host_and_back(name):
    from hetrl.algos import TorchLearn, make_algorithm
    from hetrl.algos.graphed import CudaGraphLearn
    from hetrl.envs import env_spec

    algo = make_algorithm(name, env_spec("Pendulum-v1"), _config(name, hidden=(32, 32), batch_size=32))
    rng = np.random.default_rng(1)
    batches = [_host_batch(rng, algo, 32) for _ in range(8)]
    graphed = CudaGraphLearn(algo, "cuda", seed=0)
    for batch in batches[:4]:
        graphed.learn(**batch)
    state = graphed.learner.state_dict()
    assert all(not g["capturable"] for g in state["actor_optimizer"]["param_groups"])  # the torch learner's format
    host = TorchLearn(algo, "cpu", seed=1)
    host.learner.load_state_dict(state)  # the generator is reseeded (cuda -> cpu), the rest carries over
    host.learn(**{k: torch.as_tensor(v) for k, v in batches[4].items()})
    # each its own copy, as from a file: torch's optimizers keep loaded tensors of the right device as they are
    again = CudaGraphLearn(algo, "cuda", seed=1)
    again.learner.load_state_dict(copy.deepcopy(state))
    plain = TorchLearn(algo, "cuda", seed=1)
    plain.learner.load_state_dict(copy.deepcopy(state))
    for batch in batches[4:]:  # a loaded graphed learner captures anew and goes on as the torch one does
        a = again.learn(**batch)
        b = plain.learn(**{k: torch.as_tensor(v, device="cuda") for k, v in batch.items()})
        torch.testing.assert_close(a["td_errors"], b["td_errors"], rtol=1e-4, atol=1e-5)


def test_a_run_with_the_graphed_learner(tmp_path):
    from hetrl.plan import Plan
    from hetrl.runtime.placement import Placement, Slot

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
