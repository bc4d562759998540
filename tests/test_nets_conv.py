"""Conv Q-networks: shapes and parameter counts of the published networks, DQN's choice of network,
a user's factory and its checks, and the host backends' refusals."""

import numpy as np
import pytest
import torch
from torch import nn

from hetrl.algos import DQNConfig, make_algorithm
from hetrl.algos.dqn import factory_name
from hetrl.config import apply_values, make_config
from hetrl.envs import EnvSpec, env_spec
from hetrl.errors import HetrlError
from hetrl.nets import QNetwork
from hetrl.nets.conv import MinAtarNet, NatureCNN, parameter_count
from hetrl.planner.rule import default_placement
from hetrl.primitives import build, get
from hetrl.protocol import Slot


def image_spec(shape, n_actions=4, env_id="Pixels/Fake-v0", dtype="uint8"):
    return EnvSpec(env_id, shape, True, n_actions, (), (), (), None, False, obs_dtype=dtype)


def test_nature_cnn_has_the_papers_size():
    net = NatureCNN((4, 84, 84), 4)
    # conv 4->32 8x8 (8,224) + 32->64 4x4 (32,832) + 64->64 3x3 (36,928) + 3136->512 (1,606,144) + 512->4 (2,052)
    assert parameter_count(net) == 1_686_180
    obs = torch.randint(0, 256, (3, 4, 84, 84), dtype=torch.uint8)
    out = net(obs)
    assert out.shape == (3, 4) and out.dtype == torch.float32
    torch.testing.assert_close(net(obs.float()), out)  # float input holding the same values: the same output


def test_inputs_are_scaled_inside_forward():
    net = NatureCNN((4, 84, 84), 4)
    unscaled = NatureCNN((4, 84, 84), 4, scale=1.0)
    unscaled.load_state_dict(net.state_dict())
    obs = torch.randint(0, 256, (2, 4, 84, 84), dtype=torch.uint8)
    torch.testing.assert_close(net(obs), unscaled(obs.float() / 255))


def test_minatar_net_has_the_papers_size():
    net = MinAtarNet((4, 10, 10), 3)
    # conv 4->16 3x3 (592) + 1024->128 (131,200) + 128->3 (387)
    assert parameter_count(net) == 132_179
    assert net(torch.ones(5, 4, 10, 10, dtype=torch.uint8)).shape == (5, 3)


@pytest.mark.parametrize("cls, shape, hidden", [(NatureCNN, (4, 84, 84), 512), (MinAtarNet, (6, 10, 10), 128)])
def test_dueling_variants(cls, shape, hidden):
    plain, dueling = cls(shape, 5), cls(shape, 5, dueling=True)
    flat = plain.head[0].in_features
    # a second hidden layer for the value stream, and the value output
    assert parameter_count(dueling) - parameter_count(plain) == flat * hidden + hidden + hidden + 1
    obs = torch.randint(0, 2, (4, *shape), dtype=torch.uint8)
    q = dueling(obs)
    assert q.shape == (4, 5)
    a = dueling.advantage(dueling.features(obs.float() / dueling.scale))
    v = dueling.value(dueling.features(obs.float() / dueling.scale))
    torch.testing.assert_close(q, v + a - a.mean(dim=1, keepdim=True))


def test_a_conv_network_on_a_too_small_image_is_a_clear_error():
    with pytest.raises(ValueError, match="does not fit"):
        NatureCNN((4, 10, 10), 3)
    with pytest.raises(HetrlError, match="network=nature on .*does not fit"):
        make_algorithm("dqn", image_spec((4, 10, 10)), DQNConfig(network="nature")).make_networks()


# --- DQN's choice ------------------------------------------------------------------------------------
@pytest.mark.parametrize("shape, kind, cls", [((4, 10, 10), "minatar", MinAtarNet), ((4, 84, 84), "nature", NatureCNN),
                                              ((4, 16, 16), "minatar", MinAtarNet), ((1, 36, 36), "nature", NatureCNN)])
def test_dqn_picks_the_network_by_the_observations(shape, kind, cls):
    algo = make_algorithm("dqn", image_spec(shape), DQNConfig())
    assert algo.network_kind == kind and type(algo.make_networks()["q"]) is cls and not algo.mlp_networks()


def test_vector_observations_keep_the_mlp():
    algo = make_algorithm("dqn", env_spec("CartPole-v1"), DQNConfig())
    assert algo.network_kind == "mlp" and isinstance(algo.make_networks()["q"], QNetwork) and algo.mlp_networks()


def test_conv_network_on_vector_observations_is_a_clear_error():
    with pytest.raises(HetrlError, match="network=minatar is a conv network.*not images.*network=mlp"):
        make_algorithm("dqn", env_spec("CartPole-v1"), DQNConfig(network="minatar"))


def test_network_setting_is_validated():
    with pytest.raises(HetrlError, match="network must be one of"):
        make_algorithm("dqn", env_spec("CartPole-v1"), DQNConfig(network="resnet"))


def test_an_mlp_on_images_flattens_them():
    algo = make_algorithm("dqn", image_spec((4, 10, 10), 3), DQNConfig(network="mlp", hidden=(32,)))
    q = algo.make_networks()["q"]
    obs = np.random.default_rng(0).integers(0, 2, (5, 4, 10, 10)).astype(np.uint8)
    out = q(torch.as_tensor(obs))
    assert out.shape == (5, 3)
    params = {k: v.detach().numpy() for k, v in q.state_dict().items()}
    np.testing.assert_allclose(q.forward_numpy(params, obs), out.detach().numpy(), rtol=1e-5, atol=1e-5)


# --- a user's factory ----------------------------------------------------------------------------------
class Flat(nn.Module):
    def forward(self, x):
        return x.flatten(1).float()


def tiny_q(obs_shape, n_actions):
    return nn.Sequential(Flat(), nn.Linear(int(np.prod(obs_shape)), n_actions))


def wrong_q(obs_shape, n_actions):
    return nn.Sequential(Flat(), nn.Linear(int(np.prod(obs_shape)), n_actions + 1))


def bytes_unread(obs_shape, n_actions):  # forgets that observations are uint8
    return nn.Sequential(nn.Flatten(), nn.Linear(int(np.prod(obs_shape)), n_actions))


def test_a_factory_is_kept_by_its_import_name_and_used():
    cfg = apply_values(make_config("dqn", "CartPole-v1"), {"network": tiny_q})
    assert cfg.agent.network.endswith("test_nets_conv:tiny_q")
    algo = make_algorithm("dqn", image_spec((2, 8, 8), 3), cfg.agent)
    q = algo.make_networks()["q"]
    assert algo.network_kind == "custom" and not algo.mlp_networks()
    assert q(torch.zeros(4, 2, 8, 8, dtype=torch.uint8).float()).shape == (4, 3)


def test_a_factory_with_the_wrong_output_shape_is_a_clear_error():
    cfg = apply_values(make_config("dqn", "CartPole-v1"), {"network": wrong_q})
    algo = make_algorithm("dqn", image_spec((2, 8, 8), 3, dtype="float32"), cfg.agent)
    with pytest.raises(HetrlError, match=r"maps a batch of 2 .* to \(2, 4\); a Q-network must give \(2, 3\)"):
        algo.make_networks()
    cfg = apply_values(make_config("dqn", "CartPole-v1"), {"network": bytes_unread})
    with pytest.raises(HetrlError, match=r"fails on a batch of .* \(2, 2, 8, 8\) uint8: RuntimeError"):
        make_algorithm("dqn", image_spec((2, 8, 8), 3), cfg.agent).make_networks()


def test_a_lambda_cannot_be_a_factory():
    with pytest.raises(HetrlError, match="cannot be imported by that name"):
        factory_name(lambda shape, n: tiny_q(shape, n))
    with pytest.raises(HetrlError, match="network=nowhere.module:f: cannot import it"):
        make_algorithm("dqn", image_spec((2, 8, 8)), DQNConfig(network="nowhere.module:f")).make_networks()


# --- which host backends serve conv networks; the rule acts with torch ---------------------------------
def test_mlp_only_backends_refuse_conv_networks():
    algo = make_algorithm("dqn", image_spec((4, 10, 10), 3), DQNConfig())
    reason = get("Learn", "numba").unsupported(algo)
    assert reason and "torch" in reason and "MLP" in reason
    net = algo.make_networks()["q"]
    with pytest.raises(HetrlError, match="MLP"):
        build("Learn", Slot("numba", "cpu"), algo, 0, source=net)


def test_numba_act_serves_small_image_conv_networks_only():
    """Act/numba runs MinAtar's network (hetrl.nets.fused_q; tests/primitives/test_act_numba_conv.py),
    not the Nature CNN, whose 84x84 convolutions want a matrix library."""
    act = get("Act", "numba")
    assert act.unsupported(make_algorithm("dqn", image_spec((4, 10, 10), 3), DQNConfig())) is None
    nature = make_algorithm("dqn", image_spec((4, 84, 84), 3), DQNConfig())
    reason = act.unsupported(nature)
    assert reason and "torch" in reason and "nature" in reason
    with pytest.raises(HetrlError, match="small-image"):
        build("Act", Slot("numba", "cpu"), nature, 0, source=nature.make_networks()["q"])


@pytest.mark.parametrize("primitive, backend", [("Act", "numpy"), ("Learn", "blas")])
def test_numpy_act_and_blas_learn_serve_hetrls_conv_networks_only(primitive, backend):
    """Act/numpy (ConvQNetwork.forward_numpy) and Learn/blas (hetrl.nets.flat_q) write out hetrl's conv
    networks; a user's module has neither, so they refuse it with the fix."""
    impl = get(primitive, backend)
    for network in ("minatar", "auto"):
        assert impl.unsupported(make_algorithm("dqn", image_spec((4, 10, 10), 3), DQNConfig(network=network))) is None
    mine = make_algorithm("dqn", image_spec((4, 10, 10), 3), DQNConfig(network=factory_name(tiny_q)))
    reason = impl.unsupported(mine)
    assert reason and "torch" in reason and "own" in reason or "user's module" in reason
    with pytest.raises(HetrlError, match="torch"):
        build(primitive, Slot(backend, "cpu"), mine, 0, source=mine.make_networks()["q"])


@pytest.mark.parametrize("network", ["minatar", "nature"])
@pytest.mark.parametrize("dueling", [False, True])
def test_numpy_forward_of_conv_networks_matches_torch(network, dueling):
    shape, high = ((4, 10, 10), 2) if network == "minatar" else ((4, 44, 40), 256)
    net = (MinAtarNet if network == "minatar" else NatureCNN)(shape, 5, dueling=dueling)
    params = {k: v.numpy() for k, v in net.state_dict().items()}
    obs = np.random.default_rng(0).integers(0, high, (3, *shape), dtype=np.uint8)
    with torch.no_grad():
        expected = net(torch.as_tensor(obs)).numpy()
    np.testing.assert_allclose(net.forward_numpy(params, obs), expected, rtol=1e-4, atol=1e-5)


def test_the_rule_acts_with_torch_for_conv_networks():
    assert default_placement(torch.device("cpu"), (1, 1)).act == Slot("numpy", "cpu")
    assert default_placement(torch.device("cpu"), (1, 1), mlp_policy=False).act == Slot("torch", "cpu")
    algo = make_algorithm("dqn", image_spec((4, 10, 10), 3), DQNConfig())
    act = build("Act", Slot("torch", "cpu"), algo, 0, source=algo.make_networks()["q"])
    obs = np.zeros((2, 4, 10, 10), np.uint8)
    actions = act.act(obs, np.ones(2, np.float32), np.zeros(2, np.int64), 0.0)
    assert actions.shape == (2,) and actions.dtype == np.int64


def test_the_channels_last_learner_is_the_torch_learner_in_another_memory_order():
    """Learn/torch-channels-last: the same updates as Learn/torch (to float tolerance), weights in
    NHWC; checkpoints move between the two; vectors and a user's module are refused."""
    spec = image_spec((4, 36, 36), 4, env_id="Nature-v0")
    algo = make_algorithm("dqn", spec, DQNConfig(network="nature", lr=1e-3))
    plain, nhwc = build("Learn", Slot("torch", "cpu", 1), algo, 3), build("Learn", Slot("torch-channels-last", "cpu", 1), algo, 3)
    assert nhwc.learner.q.features[0].weight.is_contiguous(memory_format=torch.channels_last)
    assert nhwc.learner.q_target.features[0].weight.is_contiguous(memory_format=torch.channels_last)
    rng = np.random.default_rng(0)
    for _ in range(4):
        batch = {"obs": torch.as_tensor(rng.integers(0, 256, (6, 4, 36, 36), dtype=np.uint8)),
                 "next_obs": torch.as_tensor(rng.integers(0, 256, (6, 4, 36, 36), dtype=np.uint8)),
                 "actions": torch.as_tensor(rng.integers(0, 4, 6)), "rewards": torch.randn(6),
                 "discounts": torch.full((6,), 0.99), "weights": torch.ones(6)}
        a, b = plain.learn(**batch), nhwc.learn(**batch)
        torch.testing.assert_close(a["td_errors"], b["td_errors"], rtol=1e-4, atol=1e-5)
    for name, value in plain.learner.q.state_dict().items():  # four Adam steps: float rounding may flip a tiny gradient's sign
        torch.testing.assert_close(value, nhwc.learner.q.state_dict()[name], rtol=1e-3, atol=1e-4)
    again = build("Learn", Slot("torch", "cpu", 1), algo, 9)
    again.learner.load_state_dict(nhwc.learner.state_dict())
    torch.testing.assert_close(again.learner.q(batch["obs"]), nhwc.learner.q(batch["obs"]), rtol=1e-4, atol=1e-5)
    impl = get("Learn", "torch-channels-last")
    assert "conv Q-networks" in impl.unsupported(make_algorithm("dqn", env_spec("CartPole-v1"), DQNConfig()))
    mine = make_algorithm("dqn", image_spec((4, 10, 10), 3), DQNConfig(network=factory_name(tiny_q)))
    assert "conv Q-networks" in impl.unsupported(mine)
