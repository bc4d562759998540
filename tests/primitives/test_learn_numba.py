"""Learn/numba: the fused DQN update computes what the torch learner computes, update by update."""

import numpy as np
import pytest
import torch

from hetrl.algos import DDPGConfig, DQNConfig, make_algorithm
from hetrl.primitives.learn_torch import LearnTorch
from hetrl.primitives.learn_numba import LearnNumba
from hetrl.envs import env_spec
from hetrl.errors import HetrlError
from hetrl.primitives import build, get, implementations
from hetrl.protocol import Slot


def _batch(rng, spec, n_actions, b=48):
    obs_dim = spec.obs_shape[0]
    return {
        "obs": torch.as_tensor(rng.standard_normal((b, obs_dim)).astype(np.float32)),
        "actions": torch.as_tensor(rng.integers(0, n_actions, b)),
        "rewards": torch.as_tensor(rng.standard_normal(b).astype(np.float32)),
        "next_obs": torch.as_tensor(rng.standard_normal((b, obs_dim)).astype(np.float32)),
        "discounts": torch.as_tensor(rng.choice([0.0, 0.99], b).astype(np.float32)),
        "weights": torch.as_tensor(rng.uniform(0.2, 1.0, b).astype(np.float32)),
    }


def _assert_same_params(a, b, atol=2e-5):
    for name, (x, y) in {k: (v, b[k]) for k, v in a.items()}.items():
        np.testing.assert_allclose(x.numpy(), y.numpy(), rtol=1e-4, atol=atol, err_msg=name)


CASES = {
    "double, clipped, hard target": dict(double=True, max_grad_norm=0.5, target_update_every=3),
    "max target, no clipping, Polyak": dict(double=False, max_grad_norm=None, tau=0.05),
    "three hidden layers": dict(hidden=(32, 16, 24), double=True, max_grad_norm=10.0, target_update_every=2),
}


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("env_id", ["CartPole-v1", "Acrobot-v1"])
def test_fused_dqn_matches_torch_update_by_update(case, env_id):
    spec = env_spec(env_id)
    cfg = DQNConfig(**{"hidden": (64, 64), "lr": 3e-3, **CASES[case]})
    algo = make_algorithm("dqn", spec, cfg)
    fused, plain = LearnNumba(algo, "cpu", seed=3), LearnTorch(algo, "cpu", seed=3)
    _assert_same_params(fused.learner.q.state_dict(), plain.learner.q.state_dict(), atol=0)  # same initial weights
    rng = np.random.default_rng(0)
    for _ in range(12):
        batch = _batch(rng, spec, spec.n_actions)
        a, b = fused.learn(**batch), plain.learn(**batch)
        np.testing.assert_allclose(a["loss"].item(), b["loss"].item(), rtol=1e-4, atol=1e-6)
        np.testing.assert_allclose(a["td_errors"].numpy(), b["td_errors"].numpy(), rtol=1e-4, atol=1e-5)
    assert fused.learner.updates == plain.learner.updates == 12
    _assert_same_params(fused.learner.q.state_dict(), plain.learner.q.state_dict())
    _assert_same_params(fused.learner.q_target.state_dict(), plain.learner.q_target.state_dict())


def test_gradient_clipping_is_exercised():
    """A tiny max_grad_norm must change the result: the clip path is really taken and matched."""
    spec = env_spec("CartPole-v1")
    batch = _batch(np.random.default_rng(1), spec, 2)
    outs = []
    for norm in (1e-3, None):
        learn = LearnNumba(make_algorithm("dqn", spec, DQNConfig(hidden=(16,), max_grad_norm=norm)), "cpu", seed=0)
        learn.learn(**batch)
        outs.append(learn.learner.params.copy())
    assert not np.allclose(outs[0], outs[1])


def test_checkpoints_move_between_backends():
    """The fused learner's state dict is the torch learner's format: either resumes the other's run."""
    spec = env_spec("CartPole-v1")
    algo = make_algorithm("dqn", spec, DQNConfig(hidden=(32, 32), target_update_every=4))
    rng = np.random.default_rng(2)
    batches = [_batch(rng, spec, 2) for _ in range(10)]
    fused = LearnNumba(algo, "cpu", seed=0)
    for batch in batches[:5]:
        fused.learn(**batch)
    plain = LearnTorch(algo, "cpu", seed=1)  # other initial weights, overwritten by the checkpoint
    plain.learner.load_state_dict(fused.learner.state_dict())
    again = LearnNumba(algo, "cpu", seed=1)
    again.learner.load_state_dict(plain.learner.state_dict())
    for batch in batches[5:]:
        a, b, c = fused.learn(**batch), plain.learn(**batch), again.learn(**batch)
        np.testing.assert_allclose(a["td_errors"].numpy(), b["td_errors"].numpy(), rtol=1e-4, atol=1e-5)
        np.testing.assert_array_equal(a["td_errors"].numpy(), c["td_errors"].numpy())
    _assert_same_params(fused.learner.q.state_dict(), plain.learner.q.state_dict())
    assert fused.learner.updates == plain.learner.updates == again.learner.updates == 10


def test_policy_network_shares_the_kernels_parameters():
    """Acting and evaluation read the torch module; it must see every update the kernel makes."""
    spec = env_spec("CartPole-v1")
    learn = LearnNumba(make_algorithm("dqn", spec, DQNConfig(hidden=(16, 16))), "cpu", seed=0)
    obs = torch.zeros(1, 4)
    before = learn.learner.policy_network(obs).detach().clone()
    learn.learn(**_batch(np.random.default_rng(3), spec, 2))
    assert not torch.equal(before, learn.learner.policy_network(obs).detach())


def test_unsupported_algorithms_are_refused_with_the_fix():
    impl = get("Learn", "numba")
    ddpg = make_algorithm("ddpg", env_spec("Pendulum-v1"), DDPGConfig())
    dueling = make_algorithm("dqn", env_spec("CartPole-v1"), DQNConfig(dueling=True))
    assert "DQN only" in impl.unsupported(ddpg) and "dueling" in impl.unsupported(dueling)
    assert impl.unsupported(make_algorithm("dqn", env_spec("CartPole-v1"), DQNConfig())) is None
    assert implementations("Learn")["torch"].unsupported(ddpg) is None
    with pytest.raises(HetrlError, match="DQN only.*torch learner"):
        LearnNumba(ddpg, "cpu", seed=0)
    with pytest.raises(HetrlError, match="runs on the host"):
        LearnNumba(dueling, "cuda", seed=0)


@pytest.mark.parametrize("algo_name", ["dqn", "ddpg"])
def test_numba_policy_matches_the_numpy_policy(algo_name):
    """Act/numba for the networks it runs (the protocol test covers only the DDPG actor: its DQN is dueling)."""
    spec, cfg = (env_spec("CartPole-v1"), DQNConfig(hidden=(32, 32))) if algo_name == "dqn" else (env_spec("Pendulum-v1"), DDPGConfig(hidden=(32, 32)))
    algo = make_algorithm(algo_name, spec, cfg)
    learn = LearnTorch(algo, "cpu", seed=0)
    fast = build("Act", Slot("numba"), algo, 0, source=learn.learner.policy_network)
    plain = build("Act", Slot("numpy"), algo, 0, source=learn.learner.policy_network)
    rng = np.random.default_rng(5)
    for n in (1, 7):
        obs = rng.standard_normal((n,) + spec.obs_shape).astype(np.float32)
        np.testing.assert_allclose(fast.forward(obs), plain.forward(obs), rtol=1e-5, atol=1e-6)
        explore, random_actions = algo.draw_exploration(rng, n)
        np.testing.assert_allclose(fast.act(obs, explore, random_actions, 0.1), plain.act(obs, explore, random_actions, 0.1), atol=1e-5)
    if algo_name == "dqn":  # epsilon-greedy runs inside the kernel: the same actions at every level
        assert fast._fused_rule
        obs = rng.standard_normal((64,) + spec.obs_shape).astype(np.float32)
        explore, random_actions = algo.draw_exploration(rng, 64)
        for level in (0.0, 0.5, 1.0):
            np.testing.assert_array_equal(fast.act(obs, explore, random_actions, level), plain.act(obs, explore, random_actions, level))
    with torch.no_grad():  # a learner change reaches the copy at sync, not before
        for p in learn.learner.policy_network.parameters():
            p.add_(0.1)
    obs = rng.standard_normal((3,) + spec.obs_shape).astype(np.float32)
    stale = fast.forward(obs)
    fast.sync(), plain.sync()
    assert not np.allclose(stale, fast.forward(obs))
    np.testing.assert_allclose(fast.forward(obs), plain.forward(obs), rtol=1e-5, atol=1e-6)


def test_numba_policy_refuses_a_dueling_network():
    algo = make_algorithm("dqn", env_spec("CartPole-v1"), DQNConfig(hidden=(16,), dueling=True))
    assert "dueling" in get("Act", "numba").unsupported(algo)
    with pytest.raises(HetrlError, match="numpy policy"):
        build("Act", Slot("numba"), algo, 0, source=LearnTorch(algo, "cpu", seed=0).learner.policy_network)


@pytest.mark.parametrize("algo_name", ["dqn", "ddpg"])
def test_act_checkpoints_move_between_backends(algo_name):
    """A run's acting copy saved by one Act backend loads into another (evaluation uses the numpy one)."""
    spec, cfg = (env_spec("CartPole-v1"), DQNConfig(hidden=(16, 16))) if algo_name == "dqn" else (env_spec("Pendulum-v1"), DDPGConfig(hidden=(16, 16)))
    algo = make_algorithm(algo_name, spec, cfg)
    saved = build("Act", Slot("numba"), algo, 0, source=LearnTorch(algo, "cpu", seed=0).learner.policy_network)
    obs = np.random.default_rng(6).standard_normal((4,) + spec.obs_shape).astype(np.float32)
    for backend in ("numpy", "numba"):
        other = build("Act", Slot(backend), algo, 0, source=LearnTorch(algo, "cpu", seed=1).learner.policy_network)
        other.load_state_dict(saved.state_dict())
        np.testing.assert_allclose(other.forward(obs), saved.forward(obs), rtol=1e-5, atol=1e-6)
        saved.load_state_dict(build("Act", Slot("numpy"), algo, 0, source=LearnTorch(algo, "cpu", seed=0).learner.policy_network).state_dict())


def test_the_numba_policy_is_compiled_before_its_first_act():
    """numba's start-up lands in construction, not in the first timed Act."""
    from hetrl.nets.fused_mlp import epsilon_greedy, forward
    from hetrl.primitives.act_numba import ActNumba

    algo = make_algorithm("dqn", env_spec("CartPole-v1"), DQNConfig(hidden=(8,)))
    policy = ActNumba(LearnTorch(algo, "cpu", seed=0).learner.policy_network, algo.action_rule)
    assert forward.signatures and epsilon_greedy.signatures and policy._scratch_for == 1
