"""Learn/triton's kernels against the torch learner, update by update, run by Triton's interpreter on
CPU tensors (tests/conftest.py turns it on where there is no GPU; on a GPU machine
tests/primitives/test_learn_cudagraph.py checks the compiled kernels in their graph); which
algorithms the backend refuses, and how."""

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from hetrl.algos import DDPGConfig, DQNConfig, make_algorithm
from hetrl.envs import env_spec
from hetrl.errors import HetrlError
from hetrl.primitives import get
from hetrl.primitives.learn_torch import LearnTorch

triton = pytest.importorskip("triton", reason="Learn/triton's kernels need Triton (pip install triton)")
interpreted = pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") != "1",
                                 reason="Triton's interpreter is off (TRITON_INTERPRET=1: set by conftest without a GPU)")
CPU = torch.device("cpu")


def _learner(algo, seed):
    from hetrl.primitives.learn_triton import DQNTritonLearner

    return DQNTritonLearner(algo, CPU, seed)


def _batch(rng, spec, b=40, obs_dtype=np.float32):
    shape = (b, *spec.obs_shape)
    obs = (rng.integers(0, 2, shape) if obs_dtype == np.uint8 else rng.standard_normal(shape)).astype(obs_dtype)
    next_obs = (rng.integers(0, 2, shape) if obs_dtype == np.uint8 else rng.standard_normal(shape)).astype(obs_dtype)
    return {
        "obs": torch.as_tensor(obs),
        "actions": torch.as_tensor(rng.integers(0, spec.n_actions, b)),
        "rewards": torch.as_tensor(rng.standard_normal(b).astype(np.float32)),
        "next_obs": torch.as_tensor(next_obs),
        "discounts": torch.as_tensor(rng.choice([0.0, 0.99], b).astype(np.float32)),
        "weights": torch.as_tensor(rng.uniform(0.2, 1.0, b).astype(np.float32)),
    }


def _assert_same_params(a, b, atol=2e-5):
    for key in a:
        np.testing.assert_allclose(a[key].numpy(), b[key].numpy(), rtol=1e-4, atol=atol, err_msg=key)


CASES = {  # widths and a batch that fill no tile exactly (tiles of 32 and 64)
    "double, clipped, hard target": ("CartPole-v1", dict(double=True, max_grad_norm=0.5, target_update_every=3)),
    "max target, no clipping, Polyak": ("Acrobot-v1", dict(double=False, max_grad_norm=None, tau=0.05)),
    "three hidden layers, Polyak over half": ("Acrobot-v1", dict(hidden=(40, 16, 72), tau=0.7, target_update_every=2)),
}


@interpreted
@pytest.mark.parametrize("case", CASES)
def test_the_triton_update_matches_the_torch_update(case):
    env_id, settings = CASES[case]
    spec = env_spec(env_id)
    algo = make_algorithm("dqn", spec, DQNConfig(**{"hidden": (48, 72), "lr": 3e-3, **settings}))
    fused, plain = _learner(algo, 3), LearnTorch(algo, "cpu", seed=3)
    _assert_same_params(fused.q.state_dict(), plain.learner.q.state_dict(), atol=0)  # same initial weights
    rng = np.random.default_rng(0)
    for _ in range(6):
        batch = _batch(rng, spec)
        a, b = fused.update(dict(batch)), plain.learn(**batch)
        np.testing.assert_allclose(a["loss"].item(), b["loss"].item(), rtol=1e-4, atol=1e-6)
        np.testing.assert_allclose(a["td_errors"].numpy(), b["td_errors"].numpy(), rtol=1e-4, atol=1e-5)
    assert fused.updates == plain.learner.updates == 6
    assert fused.optimizer.steps == 6  # the kernels' own count
    _assert_same_params(fused.q.state_dict(), plain.learner.q.state_dict())
    _assert_same_params(fused.q_target.state_dict(), plain.learner.q_target.state_dict())


@interpreted
def test_image_observations_through_an_mlp_are_read_as_float():
    """uint8 frames (MinAtar's) flattened by the first layer's kernel, as QNetwork flattens them."""
    spec = env_spec("MinAtar/Breakout-v1")
    algo = make_algorithm("dqn", spec, DQNConfig(network="mlp", hidden=(32,), lr=1e-3))
    fused, plain = _learner(algo, 0), LearnTorch(algo, "cpu", seed=0)
    rng = np.random.default_rng(4)
    for _ in range(1):
        batch = _batch(rng, spec, b=20, obs_dtype=np.uint8)
        a, b = fused.update(dict(batch)), plain.learn(**batch)
        np.testing.assert_allclose(a["td_errors"].numpy(), b["td_errors"].numpy(), rtol=1e-4, atol=1e-5)
    _assert_same_params(fused.q.state_dict(), plain.learner.q.state_dict())


@interpreted
def test_gradient_clipping_is_exercised_and_outputs_are_fresh():
    spec = env_spec("CartPole-v1")
    batch = _batch(np.random.default_rng(1), spec, b=16)
    params = []
    for norm in (1e-3, None):
        learner = _learner(make_algorithm("dqn", spec, DQNConfig(hidden=(16,), max_grad_norm=norm)), 0)
        first = learner.update(dict(batch))
        kept = first["loss"].item()
        learner.update(dict(batch))
        assert first["loss"].item() == kept  # a copy: the second update did not overwrite it
        params.append(learner.params.clone())
    assert not torch.allclose(params[0], params[1])


@interpreted
def test_checkpoints_move_between_the_triton_and_torch_learners():
    spec = env_spec("CartPole-v1")
    algo = make_algorithm("dqn", spec, DQNConfig(hidden=(32, 32), target_update_every=2))
    rng = np.random.default_rng(2)
    batches = [_batch(rng, spec, b=24) for _ in range(6)]
    fused = _learner(algo, 0)
    for batch in batches[:3]:
        fused.update(dict(batch))
    plain = LearnTorch(algo, "cpu", seed=1)  # other initial weights, overwritten by the checkpoint
    plain.learner.load_state_dict(fused.state_dict())
    again = _learner(algo, 2)
    again.load_state_dict(plain.learner.state_dict())
    assert again.optimizer.steps == 3 and again.updates == 3
    for batch in batches[3:]:
        a, b = again.update(dict(batch)), plain.learn(**batch)
        np.testing.assert_allclose(a["td_errors"].numpy(), b["td_errors"].numpy(), rtol=1e-4, atol=1e-5)
    _assert_same_params(again.q_target.state_dict(), plain.learner.q_target.state_dict())


@pytest.mark.parametrize("algo_name,settings,match", [
    ("ddpg", {}, "implements DQN only"),
    ("dqn", {"dueling": True}, "no dueling head"),
    ("dqn", {"network": "minatar"}, "MLP Q-networks only"),
])
def test_the_backend_refuses_what_it_does_not_implement(algo_name, settings, match):
    env_id = "MinAtar/Breakout-v1" if settings.get("network") == "minatar" else ("Pendulum-v1" if algo_name == "ddpg" else "CartPole-v1")
    config = (DDPGConfig if algo_name == "ddpg" else DQNConfig)(**settings)
    reason = get("Learn", "triton").unsupported(make_algorithm(algo_name, env_spec(env_id), config))
    assert reason and match in reason and "backend cudagraph or torch" in reason


def test_the_backend_runs_on_cuda_devices_only():
    algo = make_algorithm("dqn", env_spec("CartPole-v1"), DQNConfig(hidden=(8,)))
    assert get("Learn", "triton").unsupported(algo) is None
    with pytest.raises(HetrlError, match="triton learner runs on CUDA devices, not on cpu"):
        get("Learn", "triton").cls(algo, "cpu", seed=0)


@interpreted
def test_the_graph_captures_the_triton_learner():
    """LearnTriton hands its learner to GraphedLearner, which warms up and captures that one."""
    from hetrl.primitives.learn_cudagraph import GraphedLearner
    from hetrl.primitives.learn_triton import DQNTritonLearner, LearnTriton

    algo = make_algorithm("dqn", env_spec("CartPole-v1"), DQNConfig(hidden=(8,)))
    graphed = GraphedLearner(algo, CPU, 0, make=LearnTriton.make_learner)
    assert isinstance(graphed.inner, DQNTritonLearner) and graphed.inner.optimizers() == []
    assert isinstance(GraphedLearner(algo, CPU, 0).inner, type(algo.build_learner(CPU, 0)))  # the torch learner by default


def test_the_kernels_compile_for_a_hopper_gpu():
    """Triton's compiler (front end, LLVM, the ptxas it ships) builds every kernel variant the learner
    launches for sm_90 with no GPU here: it refuses code the interpreter runs, so this is the check
    that the kernels are valid Triton before a GPU machine sees them."""
    script = Path(__file__).with_name("triton_kernels_compile.py")
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"} | {"TRITON_DEFAULT_FP_FUSION": "1"}
    done = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.splitlines()
    assert len(lines) == 9 and all(int(line.rsplit(" ", 1)[1]) > 0 for line in lines), done.stdout
