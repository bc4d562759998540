"""Checkpoints restore the whole state: train N, save, resume to N+M == train N+M, bit for bit."""

from pathlib import Path

import numpy as np
import pytest
import torch

import hetrl
from hetrl.run.rundir import RunDir

SMALL = {
    "dqn": dict(hidden=(16, 16), learning_starts=200, batch_size=16, train_every=4, replay_ratio=0.5,
                target_update_every=16, prioritized=True, n_step=3, buffer_size=500),
    "ddpg": dict(hidden=(16, 16), learning_starts=200, batch_size=16, buffer_size=500),
    "td3": dict(hidden=(16, 16), learning_starts=200, batch_size=16, buffer_size=500),
    "sac": dict(hidden=(16, 16), learning_starts=100, batch_size=16, buffer_size=500, policy_delay=2),
    # exploration that remembers between steps: held gSDE matrices (redrawn every 7 steps, so a
    # checkpoint falls inside a hold) and Ornstein-Uhlenbeck noise
    "sac-gsde": dict(hidden=(16, 16), learning_starts=100, batch_size=16, buffer_size=500, use_sde=True, sde_sample_freq=7,
                     use_expln=True),
    "td3-ou": dict(hidden=(16, 16), learning_starts=200, batch_size=16, buffer_size=500, noise_type="ornstein-uhlenbeck",
                   action_noise=0.5),
}
ENV = {"dqn": "CartPole-v1", "ddpg": "Pendulum-v1", "td3": "Pendulum-v1", "sac": "Pendulum-v1", "sac-gsde": "Pendulum-v1",
       "td3-ou": "Pendulum-v1"}


def _state(run_dir):
    _, state = RunDir.open(run_dir).load_checkpoint()
    return state["executor"]


def _env_state(pickled):
    """What an env batch's future depends on: physics state, RNG state, time-limit counters, returns."""
    import pickle

    batch = pickle.loads(pickled)
    return {
        "returns": batch.episode_returns,
        "lengths": batch.episode_lengths,
        "envs": [
            (np.asarray(env.unwrapped.state), env.unwrapped.np_random.bit_generator.state, env._elapsed_steps)
            for env in batch.envs
        ],
    }


def _assert_identical(a, b, path="state"):
    if isinstance(a, dict):
        assert a.keys() == b.keys(), path
        for k in a:
            _assert_identical(a[k], b[k], f"{path}.{k}")
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), path
        for i, (x, y) in enumerate(zip(a, b)):
            _assert_identical(x, y, f"{path}[{i}]")
    elif torch.is_tensor(a):
        assert torch.equal(a, b), path
    elif isinstance(a, np.ndarray):
        np.testing.assert_array_equal(a, b, err_msg=path)
    else:
        assert a == b, path


@pytest.mark.parametrize("variant", ["dqn", "ddpg", "td3", "sac", "sac-gsde", "td3-ou"])
def test_resume_is_bit_exact(tmp_path, variant):
    algo = variant.split("-")[0]
    # the fixed placement rule: an automatic plan may pick another learner backend or thread count
    # for each call when the machine's load moves, and those agree to float tolerance, not bit for bit
    common = dict(seed=3, progress=False, eval_every=0, eval_episodes=2, log_every=100, checkpoint_every=10_000,
                  plan="rule", **SMALL[variant])
    straight = hetrl.train(algo, ENV[variant], steps=900, run_dir=tmp_path / "straight", **common)
    first = hetrl.train(algo, ENV[variant], steps=500, run_dir=tmp_path / "split", **common)
    assert first.env_steps == 500 and first.updates > 0
    resumed = hetrl.resume(tmp_path / "split", steps=900, progress=False)
    assert resumed.env_steps == straight.env_steps == 900
    assert resumed.updates == straight.updates
    a, b = _state(tmp_path / "straight"), _state(tmp_path / "split")
    _assert_identical(_env_state(a.pop("envs")), _env_state(b.pop("envs")))
    _assert_identical(a, b)
    assert RunDir.open(tmp_path / "split").load_config().steps == 900


def test_a_run_differs_with_the_seed(tmp_path):
    common = dict(steps=400, progress=False, eval_every=0, eval_episodes=2, **SMALL["dqn"])
    hetrl.train("dqn", "CartPole-v1", seed=1, run_dir=tmp_path / "a", **common)
    hetrl.train("dqn", "CartPole-v1", seed=2, run_dir=tmp_path / "b", **common)
    qa, qb = _state(tmp_path / "a")["learner"]["q"], _state(tmp_path / "b")["learner"]["q"]
    assert not torch.equal(qa["trunk.0.weight"], qb["trunk.0.weight"])


def test_a_checkpoint_from_another_device_type_loads(tmp_path):
    """A GPU run's learner state (its noise generator is a CUDA one) loads into a host learner: the
    generator is reseeded from the saved state, the same way each time, instead of failing."""
    from hetrl.algos import TD3Config, make_algorithm
    from hetrl.envs import env_spec

    algo = make_algorithm("td3", env_spec("Pendulum-v1"), TD3Config(hidden=(8, 8)))
    state = algo.build_learner(torch.device("cpu"), seed=0).state_dict()
    state["generator"], state["generator_device"] = torch.arange(16, dtype=torch.uint8), "cuda"  # a CUDA state's shape
    draws = []
    for _ in range(2):
        learner = algo.build_learner(torch.device("cpu"), seed=1)
        learner.load_state_dict(state)
        draws.append(torch.randn(4, generator=learner.generator))
    assert torch.equal(draws[0], draws[1])
    fresh = algo.build_learner(torch.device("cpu"), seed=1)
    assert not torch.equal(draws[0], torch.randn(4, generator=fresh.generator))


OLD = Path(__file__).parent / "data" / "checkpoints_0.1.0"


@pytest.mark.parametrize("run", ["dqn_inline", "td3_inline", "dqn_local"])
def test_checkpoints_and_plans_written_before_the_primitives_package_still_load(tmp_path, run):
    """Runs written at 73806bf (tests/data/checkpoints_0.1.0/make_fixtures.py): the plan file loads,
    the policy network comes back with the same outputs, and the run resumes where it stopped."""
    import json
    import shutil

    from hetrl.planner.plan_file import Plan
    from hetrl.training import Session

    expected = json.loads((OLD / "expected.json").read_text())[run]
    copy = tmp_path / run
    shutil.copytree(OLD / run, copy)
    plan = Plan.load(copy / "plan.json")
    assert plan.placement.act.backend == "numpy"
    rundir = RunDir.open(copy)
    cfg = rundir.load_config()
    cfg.device, cfg.plan = "cpu", "rule"
    session = Session.open(rundir, cfg, keep_plan=False)
    session.restore()
    with torch.no_grad():
        out = session.executor.policy_network(torch.tensor(expected["obs"])).numpy()
    np.testing.assert_allclose(out, np.array(expected["policy_out"], np.float32), rtol=1e-6)
    assert session.executor.env_steps == expected["env_steps"]
    session.executor.close()
    resumed = hetrl.resume(copy, steps=expected["env_steps"] + 200, progress=False)
    assert resumed.env_steps >= expected["env_steps"] + 200
