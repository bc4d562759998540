"""Act/numba on searched Q-networks (hetrl.nets.fused_q's searched blocks): for architectures from the
default search spaces, covering every kind of layer, the same Q-values as the torch module and as
``forward_numpy`` and the same actions at batch 1 and 32; WeightSync into the flat vector; the
capability the registry declares and the profiler's row."""

import numpy as np
import pytest
import torch

from hetrl.algos import DQNConfig, make_algorithm
from hetrl.algos.base import seeded_init
from hetrl.cosearch.supernet import search_space
from hetrl.envs import EnvSpec
from hetrl.errors import HetrlError
from hetrl.nets import numpy_params
from hetrl.nets.fused_q import FusedQ, supports
from hetrl.nets.searched import SKIP, Architecture, Op
from hetrl.primitives import build, get
from hetrl.primitives.act_numba import ActNumba
from hetrl.profile import measure
from hetrl.protocol import Slot

MINATAR = (4, 10, 10)


def named(space, *names):
    """The architecture of ``space`` whose layer k is the candidate named ``names[k]``."""
    return space.architecture([[op.name for op in layer.candidates].index(name) for layer, name in zip(space.layers, names)])


def architectures():
    """(id, architecture): every kind of layer of the default spaces (3x3 and 5x5 convolutions,
    depthwise-separable ones, a skip in either conv layer, dense layers, a dense skip, the output
    layer alone), and camera bytes on a non-square map."""
    image, vector = search_space(MINATAR, 3), search_space((7,), 3, dense_widths=(16, 32, 64))
    yield "conv3-sep3-dense", named(image, "conv3x3-16", "sep3x3-32", "dense-128")
    yield "conv5-skip-dense", named(image, "conv5x5-8", "skip", "dense-64")
    yield "sep3-conv5-dense", named(image, "sep3x3-8", "conv5x5-32", "dense-256")
    yield "skip-skip-dense", named(image, "skip", "skip", "dense-64")
    yield "mlp-dense-skip-dense", named(vector, "dense-32", "skip", "dense-16")
    yield "mlp-output-only", named(vector, "skip", "skip", "skip")
    yield "camera-9x7", Architecture((3, 9, 7), 4, (Op("conv", 8, 5), Op("sepconv", 8, 3)), (Op("dense", 32), SKIP),
                                     scale=255.0)


def observations(arch, n, seed=0):
    rng = np.random.default_rng(seed)
    if len(arch.obs_shape) == 1:
        return rng.standard_normal((n, *arch.obs_shape)).astype(np.float32)
    high = 256 if arch.scale != 1.0 else 2  # camera bytes, or MinAtar's sparse 0/1 channels
    return rng.integers(0, high, (n, *arch.obs_shape), dtype=np.uint8)


def bold(arch, seed=0):
    """The architecture's network with weights large enough that the greedy action varies by state,
    and Q-values of order 1 (at 4x, Q-values reach 30 and float32 rounding alone, in torch's and
    numpy's passes too, reaches 1e-5)."""
    with seeded_init(seed):
        net = arch.build()
    with torch.no_grad():
        for p in net.parameters():
            p.mul_(2.0)
    return net


def test_the_architectures_cover_every_kind_of_layer():
    kinds = {op.kind for _, arch in architectures() for op in (*arch.convs, *arch.dense)}
    kernels = {(op.kind, op.kernel) for _, arch in architectures() for op in arch.convs if op.is_conv}
    assert kinds == {"conv", "sepconv", "dense", "skip"} and {("conv", 3), ("conv", 5), ("sepconv", 3)} <= kernels


def test_the_action_comparisons_see_several_actions():
    """The greedy actions compared below are not one action for every state (all but one network)."""
    varied = []
    for _, arch in architectures():
        with torch.no_grad():
            varied.append(len(set(bold(arch)(torch.as_tensor(observations(arch, 32, seed=1))).argmax(1).tolist())) > 1)
    assert sum(varied) >= len(varied) - 1, varied


@pytest.mark.parametrize("name, arch", list(architectures()), ids=[n for n, _ in architectures()])
def test_q_values_and_actions_equal_torchs_and_numpys(name, arch):
    net = bold(arch)
    assert supports(net) is None
    policy = ActNumba(net, lambda q, e, r, level: q.argmax(1), epsilon_greedy=True)
    obs = observations(arch, 32, seed=1)
    params = numpy_params(net)
    for batch in (1, 32):
        for start in range(0, 32, batch if batch > 1 else 4):  # batch 1: every 4th row
            rows = obs[start:start + batch]
            with torch.no_grad():
                want = net(torch.as_tensor(rows)).numpy()
            got = policy.forward(rows)
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5, err_msg=f"{name} batch {batch}")
            np.testing.assert_allclose(got, net.forward_numpy(params, rows), rtol=1e-5, atol=1e-5)
            greedy = policy.act(rows, np.ones(len(rows), np.float32), np.zeros(len(rows), np.int64), 0.0)
            np.testing.assert_array_equal(greedy, want.argmax(1))


def test_epsilon_greedy_runs_in_the_pass_as_numpy_decides():
    arch = dict(architectures())["sep3-conv5-dense"]
    net = bold(arch)
    rule = make_algorithm("dqn", minatar_spec(), DQNConfig()).action_rule
    policy = ActNumba(net, rule, epsilon_greedy=True)
    rng = np.random.default_rng(3)
    obs, explore, random_actions = observations(arch, 32, seed=4), rng.random(32).astype(np.float32), rng.integers(0, 3, 32)
    with torch.no_grad():
        want = rule(net(torch.as_tensor(obs)).numpy(), explore, random_actions, 0.5)
    np.testing.assert_array_equal(policy.act(obs, explore, random_actions, 0.5), want)
    assert (explore < 0.5).any() and (explore >= 0.5).any()


def test_the_program_has_a_block_per_layer_and_two_per_separable_convolution():
    arch = dict(architectures())["conv3-sep3-dense"]  # conv, depthwise + pointwise, dense; the output layer is the head
    fused = FusedQ(arch.build())
    assert fused.program[0] == 4 and fused.n_actions == 3 and fused.in_size == 400
    assert FusedQ(dict(architectures())["mlp-output-only"].build()).program[0] == 0


def minatar_spec(obs_shape=MINATAR, n_actions=3):
    return EnvSpec("MinAtar/Fake-v0", obs_shape, True, n_actions, (), (), (), None, False, obs_dtype="uint8")


def searched_algo(tmp_path, arch, **config):
    spec = minatar_spec(arch.obs_shape, arch.n_actions)
    return make_algorithm("dqn", spec, DQNConfig(network=str(arch.save(tmp_path / "arch.json")), **config))


def test_weight_sync_copies_new_weights_into_the_flat_vector(tmp_path):
    arch = dict(architectures())["conv3-sep3-dense"]
    algo = searched_algo(tmp_path, arch)
    source = algo.make_networks()["q"]
    policy = build("Act", Slot("numba"), algo, 0, source=source)
    assert isinstance(policy, ActNumba) and policy.fused is not None
    obs = observations(arch, 16, seed=5)
    before = policy.forward(obs)
    with torch.no_grad():
        for p in source.parameters():
            p.add_(torch.randn_like(p) * 0.1)
        want = source(torch.as_tensor(obs)).numpy()
    np.testing.assert_array_equal(policy.forward(obs), before)  # not before the sync
    assert not np.allclose(before, want, atol=1e-4)
    policy.sync()
    for name in ("blocks.0.0.weight", "blocks.1.0.weight", "blocks.1.1.bias", "blocks.3.0.weight"):
        assert np.shares_memory(policy.params[name], policy.flat), name
    np.testing.assert_allclose(policy.forward(obs), want, rtol=1e-5, atol=1e-5)
    other = build("Act", Slot("numpy"), algo, 0, source=algo.make_networks()["q"])  # a checkpoint loads into numpy's
    other.load_state_dict(policy.state_dict())
    np.testing.assert_allclose(other.forward(obs), want, rtol=1e-5, atol=1e-5)


def test_declared_capability(tmp_path):
    numba = get("Act", "numba")
    arch = dict(architectures())["sep3-conv5-dense"]
    assert numba.unsupported(searched_algo(tmp_path, arch)) is None
    assert numba.unsupported(searched_algo(tmp_path, arch, dueling=True)) is None  # a searched network has no dueling head
    assert numba.unsupported(searched_algo(tmp_path, dict(architectures())["mlp-dense-skip-dense"])) is None
    large = Architecture((4, 84, 84), 6, (Op("conv", 8, 3), SKIP), (Op("dense", 32),))
    refused = numba.unsupported(searched_algo(tmp_path, large))
    assert refused and "84x84" in refused and "numpy or torch" in refused
    with pytest.raises(HetrlError, match="small-image"):
        ActNumba(large.build(), lambda *a: None)
    assert "not Linear" in supports(torch.nn.Linear(3, 3))


def test_the_profiler_times_it(tmp_path):
    algo = searched_algo(tmp_path, dict(architectures())["conv5-skip-dense"])
    rows = measure(algo, [("Act", "numba", "cpu", n, None) for n in (1, 16)])
    assert sorted(t.size for t in rows if t.primitive == "Act" and t.backend == "numba") == [1, 16]
    assert all(t.median_s > 0 for t in rows)
