"""Act/numba on hetrl's conv Q-networks and early-exit Q-networks (hetrl.nets.fused_q): the same
Q-values, actions and exits as the torch pass, WeightSync into its flat vector, the capability it
declares, and the profiler timing it."""

import copy

import numpy as np
import pytest
import torch

from hetrl.algos import DQNConfig, make_algorithm
from hetrl.config import make_config
from hetrl.envs import EnvSpec
from hetrl.errors import HetrlError
from hetrl.nets.conv import MinAtarNet, NatureCNN
from hetrl.nets.exits import INPUT, MINATAR_CONVS, ExitQNetwork
from hetrl.primitives import build, get
from hetrl.primitives.act_numba import ActNumba
from hetrl.profile import measure
from hetrl.protocol import Slot


def image_spec(shape=(4, 10, 10), n_actions=3):
    return EnvSpec("Pixels/Fake-v0", shape, True, n_actions, (), (), (), None, False, obs_dtype="uint8")


def exit_algo(spec, **agent):
    cfg = make_config("exit-dqn", "CartPole-v1").agent
    for key, value in agent.items():
        setattr(cfg, key, value)
    return make_algorithm("exit-dqn", spec, cfg)


def images(n, shape=(4, 10, 10), seed=0):
    """MinAtar-like observations: sparse 0/1 channels, uint8."""
    return (np.random.default_rng(seed).random((n, *shape)) < 0.15).astype(np.uint8)


def confident_sometimes(net, obs, threshold=0.5):
    """Input-dependent confidence heads, each branch's logits over ``obs`` shifted so that zero falls
    in the widest gap between them in their middle half: at ``threshold`` 0.5 some half of the rows
    leave at each branch, and no logit lies within rounding of the limit (where float sums in another
    order could decide otherwise)."""
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for branch in net.branches:
            branch.confidence.weight.copy_(torch.randn(branch.confidence.weight.shape, generator=g) * 0.3)
        x = net._input(torch.as_tensor(obs))
        for k in range(INPUT, len(net.blocks)):
            if k != INPUT:
                x = net._block(k, x)
            j = net._branch_at.get(k)
            if j is not None:
                branch = net.branches[j]
                logits = net._linear(branch.confidence, net._branch_features(j, x)).squeeze(1)
                ranked = torch.sort(logits).values
                middle = ranked[len(ranked) // 4:3 * len(ranked) // 4 + 1]
                gap = int(torch.argmax(middle[1:] - middle[:-1]))
                branch.confidence.bias.sub_(0.5 * (middle[gap] + middle[gap + 1]))
    net.set_threshold(threshold)
    return net


def networks():
    """(name, network, observations) for each kind of network Act/numba's fused pass serves."""
    obs = images(64)
    yield "minatar-dqn", MinAtarNet((4, 10, 10), 3), obs
    yield "minatar-scaled", MinAtarNet((4, 10, 10), 3, scale=255.0), obs * np.uint8(200)
    yield "minatar-exit", ExitQNetwork((4, 10, 10), 3, MINATAR_CONVS, (128,)), obs
    yield "minatar-exit-hidden-branch", ExitQNetwork((4, 10, 10), 3, MINATAR_CONVS, (64,), branch_hidden=16), obs
    # a width whose rows do not fill cache lines: each entry of the flat vector starts on one, so
    # no entry may be read as following another
    yield "minatar-exit-9-unit-branch", ExitQNetwork((4, 10, 10), 3, MINATAR_CONVS, (128,), branch_hidden=9), obs
    yield "minatar-exit-on-the-input", ExitQNetwork((4, 10, 10), 3, MINATAR_CONVS, (64,), exits=(INPUT, 0), branch_hidden=16,
                                                    scale=255.0), obs * np.uint8(200)
    # branches on a share of their block's filters or units: the block's rest runs for the rows that go on
    yield "minatar-exit-half-the-filters", ExitQNetwork((4, 10, 10), 3, MINATAR_CONVS, (128,), branch_hidden=24,
                                                        branch_share=0.5), obs
    yield "two-convs-exits-on-shares", ExitQNetwork((4, 10, 10), 3, ((6, 3, 1), (8, 2, 2)), (16, 16), exits=(0, 1, 2),
                                                    branch_hidden=5, branch_share=0.3, scale=255.0), obs * np.uint8(200)
    vectors = np.random.default_rng(2).standard_normal((64, 6)).astype(np.float32)
    yield "mlp-exit", ExitQNetwork((6,), 4, (), (16, 16, 16)), vectors
    yield "mlp-exit-on-a-share-of-the-units", ExitQNetwork((6,), 4, (), (16, 16, 16), branch_share=0.25), vectors
    yield "mlp-exit-on-the-input", ExitQNetwork((6,), 4, (), (16, 16), exits=(INPUT, 0)), vectors


@pytest.mark.parametrize("name, net, obs", list(networks()), ids=[n for n, _, _ in networks()])
@pytest.mark.parametrize("threshold", [0.0, 0.5, 1.0])
def test_q_values_actions_and_exits_equal_torchs(name, net, obs, threshold):
    exits = isinstance(net, ExitQNetwork)
    if exits:
        confident_sometimes(net, obs, threshold)
    elif threshold != 1.0:
        pytest.skip("no exits: one threshold is enough")
    policy = ActNumba(net, lambda q, e, r, level: q.argmax(1), epsilon_greedy=True)
    for batch in (1, 8, 64):
        for start in range(0, 64, batch if batch > 1 else 8):  # batch 1: every 8th row
            rows = obs[start:start + batch]
            with torch.no_grad():
                if exits:
                    want_q, want_exits = (t.numpy() for t in net.act_forward(torch.as_tensor(rows)))
                else:
                    want_q, want_exits = net(torch.as_tensor(rows)).numpy(), np.zeros(len(rows), np.int64)
            q, got_exits = policy.act_forward(rows)
            np.testing.assert_allclose(q, want_q, rtol=1e-5, atol=1e-5, err_msg=f"{name} batch {batch}")
            np.testing.assert_array_equal(got_exits, want_exits)
            np.testing.assert_allclose(policy.forward(rows), want_q, rtol=1e-5, atol=1e-5)
            greedy = policy.act(rows, np.ones(len(rows), np.float32), np.zeros(len(rows), np.int64), 0.0)
            np.testing.assert_array_equal(greedy, want_q.argmax(1))
    if exits:  # the whole batch: the counts per exit, and a mix where the threshold is inside (0, 1)
        with torch.no_grad():
            want = np.bincount(net.act_forward(torch.as_tensor(obs))[1].numpy(), minlength=net.n_exits)
        got = np.bincount(policy.act_forward(obs)[1], minlength=net.n_exits)
        np.testing.assert_array_equal(got, want)
        first, last = got[0], got[-1]
        assert {0.0: first == 64, 1.0: last == 64, 0.5: 0 < first < 64 and last < 64}[threshold], got


def test_epsilon_greedy_runs_in_the_pass_as_numpy_decides():
    net = confident_sometimes(ExitQNetwork((4, 10, 10), 3, MINATAR_CONVS, (128,)), images(64))
    rule = make_algorithm("dqn", image_spec(), DQNConfig()).action_rule
    policy = ActNumba(net, rule, epsilon_greedy=True)
    rng = np.random.default_rng(3)
    obs, explore, random_actions = images(16, seed=4), rng.random(16).astype(np.float32), rng.integers(0, 3, 16)
    with torch.no_grad():
        want = rule(net(torch.as_tensor(obs)).numpy(), explore, random_actions, 0.5)
    got = policy.act(obs, explore, random_actions, 0.5)
    np.testing.assert_array_equal(got, want)
    assert (explore < 0.5).any() and (explore >= 0.5).any()


def test_weight_sync_copies_weights_and_threshold_into_the_flat_vector():
    source = ExitQNetwork((4, 10, 10), 3, MINATAR_CONVS, (128,))
    obs = images(32, seed=5)
    policy = build("Act", Slot("numba"), exit_algo(image_spec()), 0, source=source)
    before = policy.forward(obs)
    with torch.no_grad():
        for p in source.parameters():
            p.add_(0.01)
    # new confidence weights and a threshold (the acting copy has neither yet), set after the change
    # above so that no confidence logit lies within rounding of the limit
    confident_sometimes(source, obs, 0.5)
    with torch.no_grad():
        want_q, want_exits = (t.numpy() for t in source.act_forward(torch.as_tensor(obs)))
    assert not np.allclose(policy.forward(obs), want_q, atol=1e-4)
    np.testing.assert_array_equal(policy.forward(obs), before)
    policy.sync()
    assert np.shares_memory(policy.params["head.weight"], policy.flat)
    assert np.shares_memory(policy.params["exit_threshold"], policy.flat)
    q, exits = policy.act_forward(obs)
    np.testing.assert_allclose(q, want_q, rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(exits, want_exits)
    assert 0 < (exits == 0).sum() < 32
    state = policy.state_dict()  # checkpoints: a copy of every entry, loadable into another backend's policy
    other = build("Act", Slot("numpy"), exit_algo(image_spec()), 0, source=copy.deepcopy(source))
    other.load_state_dict(state)
    np.testing.assert_allclose(other.forward(obs), q, rtol=1e-5, atol=1e-5)


def test_declared_capability():
    numba = get("Act", "numba")
    assert numba.unsupported(make_algorithm("dqn", image_spec(), DQNConfig())) is None  # MinAtar's network
    assert numba.unsupported(exit_algo(image_spec())) is None
    dueling = numba.unsupported(make_algorithm("dqn", image_spec(), DQNConfig(dueling=True)))
    assert dueling and "dueling" in dueling
    nature = numba.unsupported(make_algorithm("dqn", image_spec((4, 84, 84), 6), DQNConfig()))
    assert nature and "nature" in nature and "numpy or torch" in nature
    assert numba.unsupported(exit_algo(image_spec((4, 84, 84), 6)))
    large = numba.unsupported(make_algorithm("dqn", image_spec((4, 84, 84), 6), DQNConfig(network="minatar")))
    assert large and "84x84" in large
    with pytest.raises(HetrlError, match="dueling"):
        ActNumba(MinAtarNet((4, 10, 10), 3, dueling=True), lambda *a: None)
    with pytest.raises(HetrlError, match="small-image"):
        ActNumba(NatureCNN((4, 84, 84), 6), lambda *a: None)


def test_the_profiler_times_it_at_the_validated_exit_rates():
    algo = exit_algo(image_spec(), act_with_exits=True, exit_threshold=0.8, exit_rates=(0.625, 0.375))
    rows = measure(algo, [("Act", "numba", "cpu", n, None) for n in (1, 16)])
    assert sorted(t.size for t in rows if t.primitive == "Act" and t.backend == "numba") == [1, 16]
    assert all(t.median_s > 0 for t in rows)
    torch.manual_seed(0)  # the weights, so that the rows nearest the limit are the same on every run
    net = algo.make_networks()["q"]
    obs = images(256, seed=6)
    profiled = algo.profiled_policy(net, torch.as_tensor(obs))
    with torch.no_grad():  # the calibration is exact on the pass it was made with
        assert np.bincount(profiled.act_forward(torch.as_tensor(obs))[1].numpy(), minlength=2).tolist() == [160, 96]
    policy = build("Act", Slot("numba"), algo, 0, source=profiled)
    # numba's compiled sums (another order than torch's) may put the one row whose confidence logit
    # lies within rounding of the limit on the other side of it: at most that row differs
    assert abs(int(np.bincount(policy.act_forward(obs)[1], minlength=2)[0]) - 160) <= 1


def test_the_fused_conv_kernel_matches_torch_at_stride_one_and_two_and_stores_weights_filter_last():
    """_conv's stride-1 path (an input's k x k window clipped to the map) and its general path
    (stride 2) give torch's outputs; the flat vector holds each conv weight filter-last, and reading
    it back through the views gives torch's layout."""
    from hetrl.nets.exits import ExitQNetwork
    from hetrl.nets.fused_q import FusedQ

    torch.manual_seed(0)
    net = ExitQNetwork((3, 12, 12), 4, ((8, 3, 2), (6, 3, 1)), (16,), exits=(0,), branch_hidden=5)
    fused = FusedQ(net)
    flat = fused.new_flat()
    state = {k: v.detach().numpy() for k, v in net.state_dict().items()}
    for name, view in fused.views(flat).items():
        view[...] = state[name]
    weight, at = state["blocks.0.0.weight"], fused.offsets["blocks.0.0.weight"]
    assert np.array_equal(flat[at:at + weight.size], weight.transpose(1, 2, 3, 0).ravel())  # (C, k, k, F)
    assert all(np.array_equal(v, state[k]) for k, v in fused.views(flat).items())
    obs = images(32, (3, 12, 12), seed=3)
    q, exits = fused.forward(flat, obs)
    with torch.no_grad():
        expected = net.final(torch.as_tensor(obs)).numpy()
    assert np.allclose(q, expected, atol=1e-4) and set(exits.tolist()) == {1}  # threshold 1: the final head


def test_every_entry_of_the_flat_vector_starts_on_a_cache_line():
    """An exit network's one-float ``exit_threshold`` buffer comes first in its state dict; packed
    tight, it would shift every weight row of the pass off its cache line."""
    from hetrl.nets.fused_mlp import CACHE_LINE
    from hetrl.nets.fused_q import FusedQ

    net = ExitQNetwork((4, 10, 10), 3, MINATAR_CONVS, (128,), exits=(0,), branch_hidden=9)
    fused = FusedQ(net)
    flat = fused.new_flat()
    assert flat.ctypes.data % CACHE_LINE == 0
    assert list(fused.offsets)[0] == "exit_threshold"
    assert all(at * 4 % CACHE_LINE == 0 for at in fused.offsets.values()), fused.offsets
    views = fused.views(flat)
    for name, value in net.state_dict().items():  # the views still hold the state dict, entry by entry
        views[name][...] = value.numpy()
    for name, value in net.state_dict().items():
        np.testing.assert_array_equal(views[name], value.numpy())
