"""Searched networks on host arrays: ``SearchedQNetwork.forward_numpy`` computes the torch module's
Q-values for every kind of layer a search space offers, Act/numpy serves them (actions and
WeightSync equal to Act/torch's), and a trained, saved searched network loads and acts with it; each
operation's numpy forward alone (``NumpyOp``) is its torch module's, and the co-search's numpy cost
table times it."""

import numpy as np
import pytest
import torch

import hetrl
from hetrl.algos import DQNConfig, make_algorithm
from hetrl.algos.base import seeded_init
from hetrl.cosearch.cost import measure_op_latency
from hetrl.cosearch.supernet import search_space
from hetrl.envs import EnvSpec
from hetrl.nets import numpy_params
from hetrl.nets.searched import SKIP, Architecture, Layer, NumpyOp, Op
from hetrl.planner.plan_file import Plan
from hetrl.primitives import build, get
from hetrl.protocol import Placement, Slot

from test_cosearch_supernet import one_thread  # noqa: F401 (an autouse fixture)

MINATAR = (4, 10, 10)


def drawn(space, seed):
    """The architecture of one random choice per layer of ``space``."""
    rng = np.random.default_rng(seed)
    return space.architecture([int(rng.integers(len(layer.candidates))) for layer in space.layers[:-1]])


def image_obs(shape, n, scale, seed=0):
    high = 256 if scale != 1.0 else 2  # camera bytes, or MinAtar's 0/1 channels
    return np.random.default_rng(seed).integers(0, high, (n, *shape), dtype=np.uint8)


def assert_numpy_equals_torch(arch, obs):
    with seeded_init(0):
        net = arch.build()
    with torch.no_grad():
        want = net(torch.as_tensor(obs)).numpy()
    before = obs.copy()
    got = net.forward_numpy(numpy_params(net), obs)
    assert got.dtype == np.float32 and got.shape == want.shape == (len(obs), arch.n_actions)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5, err_msg=", ".join(arch.names))
    np.testing.assert_array_equal(obs, before)  # the input is left as it was (scaled on a copy)


# Every kind of layer the image space offers, in both positions, and two skips; widths of each layer chosen
# to differ from the one before (a 1x1 pointwise that changes the channel count).
EXPLICIT = [(Op("sepconv", 8, 3), Op("conv", 16, 5)), (Op("conv", 32, 3), Op("sepconv", 16, 3)),
            (SKIP, Op("sepconv", 32, 3)), (Op("conv", 8, 5), SKIP), (SKIP, SKIP), (Op("sepconv", 16, 5), Op("sepconv", 8, 3))]


@pytest.mark.parametrize("n", [1, 5])
@pytest.mark.parametrize("convs", EXPLICIT, ids=lambda convs: "+".join(op.name for op in convs))
def test_every_image_layer_kind_computes_what_torch_does(convs, n):
    arch = Architecture(MINATAR, 5, convs, (Op("dense", 64),))
    assert_numpy_equals_torch(arch, image_obs(MINATAR, n, 1.0, seed=n))


@pytest.mark.parametrize("n", [1, 5])
@pytest.mark.parametrize("seed", range(6))
def test_architectures_drawn_from_the_default_space_compute_what_torch_does(seed, n):
    arch = drawn(search_space(MINATAR, 6), seed)
    assert_numpy_equals_torch(arch, image_obs(MINATAR, n, 1.0, seed=seed))


def test_the_draws_cover_every_kind_of_layer():
    kinds = {op.kind for seed in range(6) for op in drawn(search_space(MINATAR, 6), seed).convs}
    assert kinds == {"conv", "sepconv", "skip"}


@pytest.mark.parametrize("n", [1, 5])
def test_camera_bytes_on_a_non_square_map_are_scaled_as_torch_scales_them(n):
    shape = (3, 9, 7)  # rows and columns differ: a padded border read the wrong way round would show
    arch = Architecture(shape, 4, (Op("conv", 8, 5), Op("sepconv", 8, 3)), (Op("dense", 32), SKIP), scale=255.0)
    obs = image_obs(shape, n, 255.0, seed=n)
    assert_numpy_equals_torch(arch, obs)
    with seeded_init(0):
        net = arch.build()
    params = numpy_params(net)
    np.testing.assert_allclose(net.forward_numpy(params, obs.astype(np.float32)), net.forward_numpy(params, obs),
                               rtol=0, atol=0)  # float inputs of the same values: the same Q-values


@pytest.mark.parametrize("n", [1, 5])
@pytest.mark.parametrize("seed", range(4))
def test_searched_mlps_compute_what_torch_does(seed, n):
    arch = drawn(search_space((7,), 3, dense_widths=(16, 32, 64)), seed)
    obs = np.random.default_rng(seed).standard_normal((n, 7)).astype(np.float32)
    assert_numpy_equals_torch(arch, obs)


def test_a_searched_mlp_of_skips_only_is_the_output_layer():
    assert_numpy_equals_torch(Architecture((7,), 3, (), (SKIP, SKIP)), np.ones((2, 7), np.float32))


# --- one operation alone: what the numpy cost table times -------------------------------------------
def spaces_ops():
    """Every candidate of the default image and vector spaces at every input width it can get."""
    for space in (search_space(MINATAR, 6), search_space((7,), 3, dense_widths=(16, 32))):
        for layer in space.layers:
            for op in layer.candidates:
                for w in layer.in_widths:
                    if op.kind != "skip":
                        yield op, Layer(op, w, layer.height, layer.width)


@pytest.mark.parametrize("n", [1, 3])
def test_each_operation_s_numpy_forward_is_its_torch_module_s(n):
    seen, negative = set(), False
    for op, layer in spaces_ops():
        with seeded_init(len(seen)):
            module = op.module(layer.in_width).eval()
        for p in module.parameters():  # a fresh module's small biases would hide a mistake in the ReLU's place
            torch.nn.init.normal_(p)
        x = torch.randn(n, layer.in_width, layer.height, layer.width) if op.is_conv else torch.randn(n, layer.in_width)
        with torch.no_grad():
            want = module(x).flatten(1).numpy()
        params = {f"op.{k}": v for k, v in numpy_params(module).items()}
        got = NumpyOp(layer, "op")(params, x.flatten(1).numpy())
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4, err_msg=f"{op.name} on {layer.in_width}")
        assert (got >= 0).all() or not op.relu
        seen.add(op.kind if op.relu else "output")
        negative = negative or (not op.relu and bool((got < 0).any()))
    assert seen == {"conv", "sepconv", "dense", "output"} and negative  # an output layer's negatives kept


def test_a_skip_has_no_numpy_forward():
    with pytest.raises(ValueError, match="a skip has no forward"):
        NumpyOp(Layer(SKIP, 4), "op")


def test_the_numpy_cost_table_measures_each_operation_and_ranks_a_larger_one_above():
    """Positive, finite seconds for every operation, and one of over 100x the MACs of another in its
    layer, on the same input, costs more."""
    # an input and widths where the large one's arithmetic, not a call's fixed overhead, sets its time: a small
    # image left both near the overhead, and a loaded CI machine ranked them either way
    space = search_space((32, 16, 16), 3, conv_layers=1, conv_ops=(("conv", 3), ("conv", 5)), conv_widths=(2, 128),
                         dense_widths=(8, 1024))
    table = measure_op_latency(space, backend="numpy", repeats=5)
    assert table.backend == "numpy" and "with numpy" in table.label
    for layer, values in zip(space.layers, table.values):
        for op, row in zip(layer.candidates, values):
            assert bool(torch.isfinite(row).all()) and ((row == 0) if op.kind == "skip" else (row > 0)).all(), (op, row)
    convs, dense = space.layers[0].candidates, space.layers[1].candidates
    small, large = table.values[0][convs.index(Op("conv", 2, 3)), 0], table.values[0][convs.index(Op("conv", 128, 5)), 0]
    assert large > small, (small, large)  # ranked above: a margin would be a timing assertion on a shared machine
    rows = table.values[1][dense.index(Op("dense", 8))], table.values[1][dense.index(Op("dense", 1024))]
    assert (rows[1] > rows[0]).all(), (space.layers[1].in_widths, rows)


# --- Act/numpy serves them ----------------------------------------------------------------------------
def fake_minatar(obs_shape=MINATAR, n_actions=5):
    return EnvSpec("MinAtar/Fake-v0", obs_shape, True, n_actions, (), (), (), None, False, obs_dtype="uint8")


@pytest.mark.parametrize("seed", [0, 3])
def test_act_numpy_serves_a_searched_network_and_acts_as_act_torch(tmp_path, seed):
    arch = drawn(search_space(MINATAR, 5), seed)
    algo = make_algorithm("dqn", fake_minatar(), DQNConfig(network=str(arch.save(tmp_path / "arch.json"))))
    assert algo.numpy_policy() and get("Act", "numpy").unsupported(algo) is None
    assert get("Act", "numba").unsupported(algo) is None  # tests/primitives/test_act_numba_searched.py
    with seeded_init(seed), torch.no_grad():
        source = algo.make_networks()["q"]
        for p in source.parameters():  # a fresh network's biases pick one action for every state; bolder weights
            p.mul_(4.0)
    policies = {b: build("Act", Slot(b, "cpu"), algo, 0, source=source) for b in ("numpy", "torch")}
    rng = np.random.default_rng(seed)
    obs = image_obs(MINATAR, 64, 1.0, seed=seed)
    for level in (0.0, 0.3):
        explore, random_actions = algo.draw_exploration(rng, len(obs))
        actions = {b: p.act(obs, explore, random_actions, level) for b, p in policies.items()}
        np.testing.assert_array_equal(actions["numpy"], actions["torch"])
        for i in range(3):  # batch 1, as an actor of one env calls it
            one = {b: p.act(obs[i:i + 1], explore[i:i + 1], random_actions[i:i + 1], level) for b, p in policies.items()}
            np.testing.assert_array_equal(one["numpy"], one["torch"])
    greedy = policies["numpy"].act(obs, np.ones(len(obs), np.float32), np.zeros(len(obs), np.int64), 0.0)
    assert len(set(greedy.tolist())) > 1  # the comparison above saw more than one action


def test_weight_sync_brings_a_searched_network_s_new_weights_to_act_numpy(tmp_path):
    arch = Architecture(MINATAR, 5, (Op("sepconv", 8, 3), SKIP), (Op("dense", 32),))
    algo = make_algorithm("dqn", fake_minatar(), DQNConfig(network=str(arch.save(tmp_path / "arch.json"))))
    source = algo.make_networks()["q"]
    policy = build("Act", Slot("numpy", "cpu"), algo, 0, source=source)
    obs = image_obs(MINATAR, 8, 1.0)
    before = policy.forward(obs).copy()
    with torch.no_grad():
        for p in source.parameters():
            p.add_(torch.randn_like(p) * 0.1)
        want = source(torch.as_tensor(obs)).numpy()
    np.testing.assert_array_equal(policy.forward(obs), before)  # not before the sync
    policy.sync()
    np.testing.assert_allclose(policy.forward(obs), want, rtol=1e-5, atol=1e-5)
    assert not np.allclose(before, want, atol=1e-4)


def test_a_searched_network_trained_acting_with_numpy_loads_and_acts_with_numpy(tmp_path):
    """A run that acts with Act/numpy throughout (WeightSync every few steps), saved, loaded again:
    the checkpoint's network acts with numpy as torch does."""
    env = "MinAtar/Breakout-v1"
    spec = hetrl.envs.env_spec(env)
    arch = Architecture(spec.obs_shape, spec.n_actions, (Op("sepconv", 8, 3), Op("conv", 8, 3)), (Op("dense", 32),))
    path = arch.save(tmp_path / "arch.json")
    placement = Placement(Slot("gymnasium"), Slot("numpy"), Slot("numpy"), Slot("torch"))
    plan = Plan("dqn", env, 1, "throughput", "-", placement, None, []).save(tmp_path / "plan.json")
    result = hetrl.train("dqn", env, steps=400, seed=0, plan=str(plan), run_dir=tmp_path / "run", network=str(path),
                         learning_starts=100, batch_size=16, eval_every=0, eval_episodes=1, progress=False)
    assert result.placement["Act"].startswith("numpy") and result.updates > 0
    policy = hetrl.load(tmp_path / "run", "final")
    assert policy.network.architecture == arch.for_env(spec.obs_shape, spec.n_actions, spec.pixel_scale)
    states = image_obs(spec.obs_shape, 32, spec.pixel_scale, seed=1)
    acts = {b: build("Act", Slot(b, "cpu"), policy.algo, 0, source=policy.network) for b in ("numpy", "torch")}
    greedy, none = np.ones(1, np.float32), np.zeros(1, np.int64)
    for s in states:
        np.testing.assert_array_equal(acts["numpy"].act(s[None], greedy, none, 0.0), acts["torch"].act(s[None], greedy, none, 0.0))
    np.testing.assert_allclose(acts["numpy"].forward(states), acts["torch"].forward(states), rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(policy.predict(states), acts["torch"].act(states, np.ones(32, np.float32), np.zeros(32, np.int64), 0.0))


def test_the_profiler_times_act_numpy_on_a_searched_network(tmp_path):
    """What the planner chooses from: an Act+WeightSync row of Act/numpy beside Act/torch's."""
    from hetrl.profile import ENV_COUNTS, _jobs

    arch = Architecture(MINATAR, 5, (Op("conv", 8, 3), Op("sepconv", 8, 3)), (Op("dense", 32),))
    algo = make_algorithm("dqn", fake_minatar(), DQNConfig(network=str(arch.save(tmp_path / "arch.json")), batch_size=16))
    jobs = dict(_jobs(algo, ["cpu"], [1]))
    assert {"Act+WeightSync numpy on cpu", "Act+WeightSync torch on cpu"} <= set(jobs)
    rows = jobs["Act+WeightSync numpy on cpu"]()
    assert [(r.primitive, r.size) for r in rows] == [*(("Act", n) for n in ENV_COUNTS), ("WeightSync", 1)]
    assert all(r.backend == "numpy" and 0 < r.median_s for r in rows), rows
