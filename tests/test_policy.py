"""A policy to ship: hetrl.load gives the run's greedy actions; the exported TorchScript and ONNX
files give the same actions and carry the observation and action spec."""

import json

import numpy as np
import pytest
import torch

import hetrl
from hetrl.cli import main
from hetrl.errors import HetrlError
from hetrl.run.rundir import RunDir
from hetrl.training import Session, greedy_policy

SMALL = dict(hidden=(16, 16), learning_starts=200, batch_size=16, buffer_size=1_000, eval_every=0, eval_episodes=2,
             progress=False, log_every=500, plan="rule")


@pytest.fixture(scope="module", params=[("dqn", "CartPole-v1"), ("td3", "Pendulum-v1"), ("sac", "Pendulum-v1"), ("dqn", "hetrl/Bytes-v0")],
                ids=["dqn", "td3", "sac", "dqn-conv-uint8"])
def run(request, tmp_path_factory):
    algo, env = request.param
    result = hetrl.train(algo, env, steps=600, run_dir=tmp_path_factory.mktemp("runs") / algo.replace("/", "_"), **SMALL)
    return result.run_dir


def _run_actions(run_dir, obs):
    """The greedy actions the run itself evaluates with (Session's greedy policy on its checkpoint)."""
    rundir = RunDir.open(run_dir)
    cfg = rundir.load_config()
    session = Session.open(rundir, cfg, keep_plan=False)
    session.restore()
    act = greedy_policy(session.algo, session.executor.policy_network)(obs)
    session.executor.close()
    return act


def _observations(policy, n=64):
    rng = np.random.default_rng(0)
    if policy.spec.obs_dtype == "uint8":  # image frames: bytes, as the env gives them
        return rng.integers(0, 256, (n, *policy.spec.obs_shape), dtype=np.uint8)
    return rng.standard_normal((n, *policy.spec.obs_shape)).astype(np.float32)


def test_load_predicts_the_runs_greedy_actions(run):
    policy = hetrl.load(run)
    obs = _observations(policy)
    np.testing.assert_array_equal(policy.predict(obs), _run_actions(run, obs))
    one = policy.predict(obs[0])
    np.testing.assert_array_equal(one, policy.predict(obs[:1])[0])
    explored = policy.predict(obs, deterministic=False)
    assert explored.shape == policy.predict(obs).shape
    with pytest.raises(HetrlError, match="observations of shape"):
        policy.predict(np.zeros((3, 7), np.float32))


def test_torchscript_export_acts_like_the_run(run, tmp_path):
    assert main(["export", str(run), "--out", str(tmp_path / "p.pt")]) == 0
    extra = {"hetrl_spec.json": ""}
    module = torch.jit.load(str(tmp_path / "p.pt"), _extra_files=extra)
    spec = json.loads(extra["hetrl_spec.json"])
    policy = hetrl.load(run)
    obs = _observations(policy)
    with torch.no_grad():
        out = module(torch.from_numpy(obs)).numpy()
    np.testing.assert_allclose(out, _run_actions(run, obs), rtol=1e-5, atol=1e-6)
    assert spec["observation"]["shape"] == list(policy.spec.obs_shape) and spec["algo"] == policy.algo.name


def test_onnx_export_acts_like_the_run(run, tmp_path):
    onnxruntime = pytest.importorskip("onnxruntime")
    onnx = pytest.importorskip("onnx")
    assert main(["export", str(run), "--format", "onnx", "--out", str(tmp_path / "p.onnx")]) == 0
    policy = hetrl.load(run)
    obs = _observations(policy)
    session = onnxruntime.InferenceSession(str(tmp_path / "p.onnx"))
    (out,) = session.run(None, {"obs": obs})
    np.testing.assert_allclose(out, _run_actions(run, obs), rtol=1e-5, atol=1e-5)
    meta = {p.key: p.value for p in onnx.load(str(tmp_path / "p.onnx")).metadata_props}
    assert json.loads(meta["hetrl_spec"])["action"]["shape"] == list(policy.spec.action_shape)


def test_export_names_the_format_it_cannot_tell(run, tmp_path):
    with pytest.raises(HetrlError, match="name it .pt"):
        hetrl.load(run).export(tmp_path / "policy.bin")
