"""The protocol: contracts, the registry, and every implementation of a primitive agreeing."""

import gymnasium as gym
import numpy as np
import pytest
import torch

from hetrl.algos import DDPGConfig, DQNConfig, SACConfig, make_algorithm
from hetrl.primitives.learn_torch import LearnTorch
from hetrl.envs import env_spec
from hetrl.primitives.env_step_gymnasium import EnvStepGymnasium
from hetrl.errors import HetrlError
from hetrl.primitives import build, check_placement, get, implementations
from hetrl.protocol import Slot
from hetrl.protocol import PRIMITIVES, contract_dims

from hetrl.devices import available_devices as torch_devices


def dims(spec, n=None, b=None):
    return contract_dims(spec, N=n, B=b)


def test_every_primitive_has_an_implementation():
    expected = {
        "EnvStep": {"gymnasium"}, "Act": {"numpy", "torch", "numba"}, "WeightSync": {"numpy", "torch", "numba"},
        "ReplayAdd": {"numpy", "torch"}, "ReplaySample": {"numpy", "torch"}, "PriorityUpdate": {"numpy", "torch"},
        "Learn": {"torch", "numba", "blas"}, "TabularLearn": {"numba-threads", "numba-processes", "torch", "ray"},
    }
    assert set(PRIMITIVES) == set(expected)
    for name, backends in expected.items():
        assert backends <= set(implementations(name)), name


def test_unknown_backend_is_a_clear_error():
    with pytest.raises(HetrlError, match="no 'nmupy' implementation of Act.*did you mean 'numpy'"):
        get("Act", "nmupy")


def test_contract_check_catches_shape_and_dtype():
    spec = env_spec("CartPole-v1")
    contract = PRIMITIVES["PriorityUpdate"]
    contract.check("inputs", {"indices": np.zeros(4, np.int64), "td_errors": np.zeros(4, np.float32)}, dims(spec, b=4))
    with pytest.raises(TypeError, match="shape"):
        contract.check("inputs", {"indices": np.zeros(3, np.int64), "td_errors": np.zeros(4, np.float32)}, dims(spec, b=4))
    with pytest.raises(TypeError, match="dtype"):
        contract.check("inputs", {"indices": np.zeros(4, np.int32), "td_errors": np.zeros(4, np.float32)}, dims(spec, b=4))


def test_env_step_matches_gymnasium_vector_env():
    """EnvStep/gymnasium against Gymnasium's own SyncVectorEnv (same-step autoreset) as reference."""
    n, seed = 3, 7
    ours = EnvStepGymnasium("CartPole-v1", n, seed)
    ref = gym.vector.SyncVectorEnv([lambda: gym.make("CartPole-v1")] * n, autoreset_mode=gym.vector.AutoresetMode.SAME_STEP)
    obs_ours, (obs_ref, _) = ours.reset(), ref.reset(seed=[seed + i for i in range(n)])
    np.testing.assert_array_equal(obs_ours, obs_ref.astype(np.float32))
    rng = np.random.default_rng(0)
    spec = env_spec("CartPole-v1")
    ended = 0
    for _ in range(300):
        actions = rng.integers(0, 2, n)
        out = ours.step(actions)
        PRIMITIVES["EnvStep"].check("outputs", out, dims(spec, n=n))
        o, r, term, trunc, info = ref.step(actions)
        np.testing.assert_array_equal(out["next_obs"], o.astype(np.float32))
        np.testing.assert_array_equal(out["rewards"], r.astype(np.float32))
        np.testing.assert_array_equal(out["terminated"], term)
        np.testing.assert_array_equal(out["truncated"], trunc)
        for i in np.flatnonzero(term | trunc):
            np.testing.assert_array_equal(out["final_obs"][i], info["final_obs"][i].astype(np.float32))
            ended += 1
    assert ended > 5  # the comparison covered auto-resets


@pytest.fixture(params=["dqn", "ddpg", "sac"])
def algo(request):
    if request.param == "dqn":
        return make_algorithm("dqn", env_spec("CartPole-v1"), DQNConfig(hidden=(32, 32), dueling=True))
    if request.param == "sac":
        return make_algorithm("sac", env_spec("Pendulum-v1"), SACConfig(hidden=(32, 32)))
    return make_algorithm("ddpg", env_spec("Pendulum-v1"), DDPGConfig(hidden=(32, 32)))


def _act_impls(algo, network):
    for backend, impl in implementations("Act").items():
        if impl.unsupported(algo):
            continue
        for device in [d for d in torch_devices() if impl.runs_on(d)]:
            yield f"{backend}/{device}", build("Act", Slot(backend, device), algo, 0, source=network)


def test_act_implementations_agree(algo):
    learner = LearnTorch(algo, "cpu", seed=0).learner
    rng = np.random.default_rng(1)
    obs = rng.standard_normal((16,) + algo.spec.obs_shape).astype(np.float32)
    explore, random_actions = algo.draw_exploration(rng, 16)
    outputs = {}
    for name, policy in _act_impls(algo, learner.policy_network):
        actions = policy.act(obs, explore, random_actions, algo.exploration(5_000))
        PRIMITIVES["Act"].check("outputs", {"actions": actions}, dims(algo.spec, n=16))
        outputs[name] = actions
    assert len(outputs) >= 2
    first = next(iter(outputs.values()))
    for name, actions in outputs.items():
        np.testing.assert_allclose(actions, first, rtol=1e-5, atol=1e-5, err_msg=name)


def test_weight_sync_implementations_copy_the_learner(algo):
    learn = LearnTorch(algo, "cpu", seed=0)
    policies = dict(_act_impls(algo, learn.learner.policy_network))
    obs = np.random.default_rng(2).standard_normal((8,) + algo.spec.obs_shape).astype(np.float32)
    before = {name: p.forward(obs).copy() for name, p in policies.items()}
    batch = _learn_batch(algo, b=32, seed=3)
    for _ in range(5):
        learn.learn(**{k: torch.as_tensor(v) for k, v in batch.items()})
    with torch.no_grad():
        want = learn.learner.policy_network(torch.as_tensor(obs)).numpy()
    for name, p in policies.items():
        assert not np.allclose(p.forward(obs), want, atol=1e-6), f"{name} changed before WeightSync"
        p.sync()
        np.testing.assert_allclose(p.forward(obs), want, rtol=1e-5, atol=1e-6, err_msg=name)
        assert not np.allclose(before[name], want, atol=1e-6)


def test_weight_sync_follows_a_loaded_checkpoint(algo):
    """The numpy policy reads the learner's tensors through views taken once; loading a checkpoint
    into the learner (an in-place copy) must still reach the policy at the next sync."""
    learn, other = LearnTorch(algo, "cpu", seed=0), LearnTorch(algo, "cpu", seed=1)
    policy = build("Act", Slot("numpy"), algo, 0, source=learn.learner.policy_network)
    learn.learner.load_state_dict(other.learner.state_dict())
    policy.sync()
    obs = np.random.default_rng(2).standard_normal((8,) + algo.spec.obs_shape).astype(np.float32)
    with torch.no_grad():
        want = other.learner.policy_network(torch.as_tensor(obs)).numpy()
    np.testing.assert_allclose(policy.forward(obs), want, rtol=1e-5, atol=1e-6)


def _learn_batch(algo, b, seed):
    rng = np.random.default_rng(seed)
    spec = algo.spec
    actions = algo.random_actions(rng, b)
    return {
        "obs": rng.standard_normal((b,) + spec.obs_shape).astype(np.float32),
        "actions": actions,
        "rewards": rng.standard_normal(b).astype(np.float32),
        "next_obs": rng.standard_normal((b,) + spec.obs_shape).astype(np.float32),
        "discounts": np.full(b, 0.99, np.float32),
        "weights": rng.uniform(0.5, 1, b).astype(np.float32),
    }


def test_learn_outputs_conform_and_are_deterministic(algo):
    batch = _learn_batch(algo, b=32, seed=4)
    runs = []
    for _ in range(2):
        learn = LearnTorch(algo, "cpu", seed=0)
        out = [learn.learn(**{k: torch.as_tensor(v) for k, v in batch.items()}) for _ in range(3)][-1]
        PRIMITIVES["Learn"].check("outputs", {"td_errors": out["td_errors"]}, dims(algo.spec, b=32))
        runs.append(out["td_errors"].numpy())
        # the loss is the weighted mean of each sample's loss of its TD error (tests/test_update_rules.py
        # derives both by hand on a tiny network; here on the full-size ones, dueling head included)
        td, w, loss = out["td_errors"].numpy().astype(np.float64), batch["weights"], out["loss"].item()
        assert (td >= 0).all() and td.max() > 0
        if algo.name == "dqn":  # Huber
            np.testing.assert_allclose(loss, np.mean(w * np.where(td < 1, 0.5 * td**2, td - 0.5)), rtol=1e-5)
        elif algo.name == "ddpg":  # squared error, one critic
            np.testing.assert_allclose(loss, np.mean(w * td**2), rtol=1e-5)
        else:  # SAC: half the squared errors of both critics; the TD errors are the first's
            assert loss >= 0.5 * np.mean(w * td**2) * (1 - 1e-6)
    np.testing.assert_array_equal(runs[0], runs[1])


@pytest.mark.gpu
def test_learn_agrees_across_devices(algo, require_cuda):
    """The same updates on either device. An update's random draws (SAC's noise) come from a
    generator of the learner's device, and CPU and CUDA generators give different numbers for one
    seed: here both learners read the same draws, made on the host."""
    batch = _learn_batch(algo, b=32, seed=5)
    results = []
    for device in ("cpu", "cuda"):
        learn = LearnTorch(algo, device, seed=0)
        draws = np.random.default_rng(9)
        own_draws = learn.learner.draw_inputs

        def host_draws(inputs, own_draws=own_draws, draws=draws, device=device):
            return {k: torch.as_tensor(draws.standard_normal(v.shape).astype(np.float32), device=device)
                    for k, v in own_draws(inputs).items()}

        learn.learner.draw_inputs = host_draws
        for _ in range(3):
            out = learn.learn(**{k: torch.as_tensor(v, device=device) for k, v in batch.items()})
        results.append(out["td_errors"].cpu().numpy())
    np.testing.assert_allclose(results[0], results[1], rtol=1e-4, atol=1e-5)


def test_replay_implementations_agree():
    spec = env_spec("CartPole-v1")
    rng = np.random.default_rng(6)
    data = {
        "obs": rng.standard_normal((300, 4)).astype(np.float32), "actions": rng.integers(0, 2, 300),
        "rewards": rng.standard_normal(300).astype(np.float32), "next_obs": rng.standard_normal((300, 4)).astype(np.float32),
        "discounts": np.full(300, 0.99, np.float32),
    }
    uniform = rng.random(64)
    td = rng.uniform(0, 3, 64).astype(np.float32)
    samples = {}
    algo = make_algorithm("dqn", spec, DQNConfig())
    for backend, impl in implementations("ReplayAdd").items():
        if impl.unsupported(algo):  # the frame replays: image observations only (tests/primitives/test_replay_frames.py)
            continue
        for device in [d for d in torch_devices() if impl.runs_on(d)]:
            replay = impl.cls(256, spec.obs_shape, spec.action_shape, spec.action_dtype, prioritized=True, device=device)
            replay.add(**data)
            first = replay.sample(uniform, 0.5)
            replay.update_priorities(first["indices"], td)
            out = {k: (v.cpu().numpy() if torch.is_tensor(v) else v) for k, v in replay.sample(uniform, 0.5).items()}
            PRIMITIVES["ReplaySample"].check("outputs", out, dims(spec, b=64))
            samples[f"{backend}/{device}"] = out
    assert len(samples) >= 2
    ref = next(iter(samples.values()))
    for name, out in samples.items():
        for key in ref:
            np.testing.assert_allclose(out[key], ref[key], rtol=1e-6, err_msg=f"{name} {key}")


def test_algorithms_never_name_a_device():
    import inspect

    import hetrl.algos.ddpg as ddpg
    import hetrl.algos.dqn as dqn
    import hetrl.algos.sac as sac

    for module in (dqn, ddpg, sac):
        source = inspect.getsource(module)
        for word in ('"cpu"', '"cuda"', "'cpu'", "'cuda'", ".cuda(", ".cpu()", '"mps"'):
            assert word not in source, f"{module.__name__} names a device: {word}"


def test_cuda_only_backends_are_refused_elsewhere():
    from hetrl.primitives.learn_cudagraph import LearnCudagraph
    from hetrl.protocol import Placement, Slot

    impl = get("Learn", "cudagraph")
    assert impl.device_types == ("cuda",) and impl.runs_on("cuda:1") and not impl.runs_on("cpu")
    assert get("Learn", "torch").runs_on("mps") and not get("Learn", "numba").runs_on("cuda:0")
    with pytest.raises(HetrlError, match="runs on cuda devices only, not on cpu"):
        check_placement(Placement(Slot("gymnasium"), Slot("numpy"), Slot("numpy"), Slot("cudagraph", "cpu")))
    algo = make_algorithm("dqn", env_spec("CartPole-v1"), DQNConfig(hidden=(8,)))
    with pytest.raises(HetrlError, match="runs on CUDA devices, not on cpu"):
        LearnCudagraph(algo, "cpu", seed=0)


def test_dqn_exploration_draws_are_uniform_and_typed():
    algo = make_algorithm("dqn", env_spec("Acrobot-v1"), DQNConfig(hidden=(8,)))  # 3 actions
    rng = np.random.default_rng(0)
    explore, actions = algo.draw_exploration(rng, 30_000)
    assert explore.dtype == np.float32 and actions.dtype == np.int64 and explore.shape == actions.shape == (30_000,)
    assert 0 <= explore.min() and explore.max() < 1 and abs(explore.mean() - 0.5) < 0.01
    np.testing.assert_allclose(np.bincount(actions, minlength=3) / 30_000, 1 / 3, atol=0.01)
    random = algo.random_actions(rng, 30_000)
    assert random.dtype == np.int64 and set(np.unique(random)) == {0, 1, 2}
    np.testing.assert_allclose(np.bincount(random) / 30_000, 1 / 3, atol=0.01)


def test_graph_inputs_pack_into_one_aligned_buffer():
    """The cudagraph learner's staging and device buffers share one layout (packed here on the host)."""
    from hetrl.primitives.learn_cudagraph import _ALIGN, pack_like

    like = {"obs": torch.zeros(5, 3), "actions": torch.zeros(5, dtype=torch.int64), "done": torch.zeros(7, dtype=torch.bool),
            "weights": torch.zeros(5, dtype=torch.float64)}
    buffer, views = pack_like(like)
    again, twins = pack_like(like)
    assert buffer.dtype == torch.uint8 and buffer.numel() == again.numel()
    for key, view in views.items():
        assert view.shape == like[key].shape and view.dtype == like[key].dtype, key
        assert view.untyped_storage().data_ptr() == buffer.untyped_storage().data_ptr()
        assert view.storage_offset() * view.element_size() % _ALIGN == 0, key
    for i, view in enumerate(views.values()):
        view.fill_(i + 1)
    again.copy_(buffer)  # one copy moves every input
    for i, (key, twin) in enumerate(twins.items()):
        assert torch.equal(twin, torch.full_like(like[key], i + 1)), key  # and no two inputs overlap


def test_the_actor_step_takes_no_critic_weight_gradients():
    """DDPG's actor loss backpropagates through the critic for the action's gradient only: the
    critic's weight gradients (which its next step would discard) are not computed, and its
    parameters take gradients again afterwards."""
    algo = make_algorithm("ddpg", env_spec("Pendulum-v1"), DDPGConfig(hidden=(16, 16), batch_size=8))
    learner = LearnTorch(algo, "cpu", seed=0).learner
    rng = np.random.default_rng(0)
    batch = {"obs": torch.as_tensor(rng.standard_normal((8, 3)), dtype=torch.float32)}
    learner.critic.zero_grad(set_to_none=True)
    before = [p.detach().clone() for p in learner.actor.parameters()]
    learner.periodic(batch)
    assert all(p.grad is None and p.requires_grad for p in learner.critic.parameters())
    assert all(p.grad is not None for p in learner.actor.parameters())
    assert any(not torch.equal(b, p) for b, p in zip(before, learner.actor.parameters()))  # the actor stepped
