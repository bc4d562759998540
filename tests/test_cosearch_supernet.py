"""Co-search (A3C-S): the supernet samples and derives plain networks that compute what it computes,
the counts and expected costs are exact, distillation learns, the hardware weight steers the
choice, both search modes run, and a derived architecture trains with DQN."""

import itertools
import json
import math

import numpy as np

import pytest
import torch

from hetrl.algos import DQNConfig, make_algorithm
from hetrl.algos.base import seeded_init
from hetrl.algos.exit_dqn import ExitDQNConfig
from hetrl.cli import main
from hetrl.cosearch import cost as cost_module
from hetrl.cosearch.cost import hardware_cost, macs_table, measure_op_latency
from hetrl.algos.distillation import distillation_loss
from hetrl.cosearch.search import SearchConfig, Searcher, search
from hetrl.cosearch.supernet import SuperNet, search_space
from hetrl.cosearch.teacher import Teacher, TeacherData
from hetrl.envs import EnvSpec, env_spec
from hetrl.errors import HetrlError
from hetrl.nets import QNetwork, numpy_params
from hetrl.nets.conv import MinAtarNet
from hetrl.nets.fused_q import FusedOp
from hetrl.nets.searched import SKIP, Architecture, Layer, NumpyOp, Op, SearchedQNetwork
from hetrl.profile import torch_threads

OBS = (2, 5, 5)


@pytest.fixture(autouse=True)
def one_thread():
    """Tiny networks: one torch thread is faster than two on a shared machine."""
    with torch_threads(1):
        yield


def tiny_space(**options):
    return search_space(OBS, 3, conv_layers=2, conv_widths=(2, 4), conv_ops=(("conv", 3), ("sepconv", 3)),
                        dense_widths=(8, 16), **options)


def vector_space():
    return search_space((5,), 2, dense_layers=2, dense_widths=(4, 8))


def teacher_data(n=256, seed=0, shape=OBS, n_actions=3):
    """Transitions of random observations, and the Q-values of a random network of hetrl's on them."""
    g = torch.Generator().manual_seed(seed)
    if len(shape) == 3:
        obs = torch.randint(0, 2, (n, *shape), generator=g, dtype=torch.uint8)
    else:
        obs = torch.randn((n, *shape), generator=g)
    with seeded_init(seed):
        teacher = MinAtarNet(shape, n_actions) if len(shape) == 3 else QNetwork(shape[0], n_actions, (16,))
    with torch.no_grad():
        q = teacher(obs)
    return TeacherData(obs, torch.randint(0, n_actions, (n,), generator=g), torch.randn(n, generator=g), obs.flip(0),
                       torch.full((n,), 0.9), q, f"a random {type(teacher).__name__}")


def all_choices(space):
    return itertools.product(*(range(len(layer.candidates)) for layer in space.layers))


# --- the supernet ------------------------------------------------------------------------------------
@pytest.mark.parametrize("space, obs", [(tiny_space(), torch.randint(0, 2, (6, *OBS), dtype=torch.uint8)),
                                        (vector_space(), torch.randn(6, 5))])
def test_sampled_architectures_derive_plain_networks_that_compute_what_the_supernet_does(space, obs):
    torch.manual_seed(0)
    with seeded_init(0):
        net = SuperNet(space)
    seen = set()
    for _ in range(40):
        gates = net.sample()
        assert all(g.sum().item() == 1 and g.max().item() == 1 for g in gates)  # one-hot in value
        choice = [int(g.argmax()) for g in gates]
        seen.add(tuple(choice))
        derived = net.derive(choice)
        assert isinstance(derived, SearchedQNetwork) and not isinstance(derived, SuperNet)
        assert derived.architecture == space.architecture(choice)
        kept = [op for op in (*derived.architecture.convs, *derived.architecture.dense) if op.kind != "skip"]
        assert len(derived.blocks) == len(kept) + 1  # only the chosen operations, and the output layer
        with torch.no_grad():
            expected = net(obs, net.gates(choice))
            assert torch.equal(derived(obs), expected)
            torch.testing.assert_close(net(obs, gates), expected)  # the sample's straight-through weights are 1
        restored = Architecture.from_dict(json.loads(json.dumps(derived.architecture.to_dict())))
        assert restored == derived.architecture
    assert len(seen) >= min(10, len(list(all_choices(space))))  # it samples many architectures
    net.eval()
    torch.testing.assert_close(net(obs), net.derive()(obs))  # eval mode runs the argmax choice


def test_the_sample_s_gradient_reaches_every_logit_of_a_layer():
    torch.manual_seed(0)
    net = SuperNet(tiny_space())
    net(torch.rand(4, *OBS)).square().sum().backward()
    searched = [a for a in net.alphas if len(a) > 1]
    assert all(a.grad is not None and (a.grad != 0).all() for a in searched)


def test_macs_of_a_derived_network_match_a_hand_count():
    arch = Architecture(OBS, 3, (Op("conv", 2, 3), Op("sepconv", 3, 3)), (Op("dense", 5),))
    # 5x5 map, 'same' padding: 25 positions
    conv = 25 * 2 * (2 * 3 * 3)  # 2 filters of 2x3x3 = 900
    depthwise = 25 * 2 * (1 * 3 * 3)  # one 3x3 filter per input channel = 450
    pointwise = 25 * 3 * 2  # 3 filters of 2x1x1 = 150
    dense = (3 * 25) * 5  # flattened 3x5x5 -> 5 = 375
    out = 5 * 3  # 15
    assert arch.macs == conv + depthwise + pointwise + dense + out == 1890
    assert [d.kind for d in arch.describe()] == ["conv", "dwconv", "conv", "linear", "linear"]
    net = arch.build()
    assert sum(p.numel() for p in net.parameters()) == sum(d.params for d in arch.describe())
    skipped = Architecture(OBS, 3, (Op("skip"), Op("conv", 4, 5)), (Op("dense", 5),))
    assert skipped.macs == 25 * 4 * (2 * 5 * 5) + (4 * 25) * 5 + 5 * 3


def test_the_expected_cost_is_the_cost_averaged_over_every_architecture():
    space = tiny_space()
    table = macs_table(space)
    torch.manual_seed(1)
    probs = [torch.randn(len(layer.candidates)).softmax(0).double() for layer in space.layers]
    total = 0.0
    for choice in all_choices(space):
        weight = torch.prod(torch.stack([p[c] for p, c in zip(probs, choice)]))
        total += weight * space.architecture(choice).macs
    torch.testing.assert_close(table(probs), total)
    net = SuperNet(space)
    for choice in [(0, 0, 0, 0), (4, 2, 1, 0), (1, 4, 0, 0)]:
        assert table(net.gates(choice)).item() == space.architecture(choice).macs  # one-hot: that network's


def test_measured_latency_times_each_candidate_here():
    space = search_space((1, 3, 3), 2, conv_layers=1, conv_widths=(2,), conv_ops=(("conv", 3),), dense_widths=(4,))
    for backend, where in (("torch", "on cpu with torch (1 thread), batch 1"),
                           ("numpy", "on cpu with numpy (Act/numpy's per-layer forward, 1 BLAS thread), batch 1"),
                           ("numba", "on cpu with numba (Act/numba's compiled pass, each operation a one-layer program, "
                                     "1 thread), batch 1")):
        table = measure_op_latency(space, repeats=2, backend=backend)
        assert where in table.label and table.unit == "s" and table.backend == table.to_dict()["backend"] == backend
        for layer, values in zip(space.layers, table.values):
            for op, row in zip(layer.candidates, values):
                assert ((row == 0) if op.kind == "skip" else (row > 0)).all() and row.isfinite().all()
        assert table(SuperNet(space).probs()).item() > 0
    assert measure_op_latency(space, repeats=2).backend == "numba"  # the host's default: what serves searched nets fastest
    assert "backend" not in macs_table(space).to_dict()  # counted, not timed


def test_without_numba_the_host_s_table_is_timed_on_numpy_and_says_why(monkeypatch):
    monkeypatch.setattr(cost_module, "numba_missing", lambda: "No module named 'numba'")
    space = search_space((3,), 2, dense_layers=1, dense_widths=(4,))
    table = measure_op_latency(space, repeats=2)
    assert table.backend == "numpy" and "numpy because numba does not import here: No module named 'numba'" in table.label
    assert "numba does not import" not in measure_op_latency(space, repeats=2, backend="numpy").label  # asked for: no reason
    with pytest.raises(HetrlError) as caught:
        hardware_cost("cpu", space, backend="numba")
    assert str(caught.value) == ("--cost-backend numba: numba does not import here (No module named 'numba'); "
                                 "use --cost-backend numpy")


def test_the_numba_cost_ranks_a_far_larger_operation_above_a_small_one():
    """A 5x5 conv of 32 filters on 16 channels of 10x10 (over 100x the MACs of a 4-unit dense
    layer on 4 inputs) costs more on numba."""
    costs = []
    for space in (search_space((16, 10, 10), 2, conv_layers=1, conv_widths=(32,), conv_ops=(("conv", 5),),
                               dense_widths=(4,)),
                  search_space((4,), 2, dense_layers=1, dense_widths=(4,))):
        macs, table = macs_table(space), measure_op_latency(space, repeats=3, backend="numba")
        assert space.layers[0].candidates[0].name in ("conv5x5-32", "dense-4")
        costs.append((macs.values[0][0, 0].item(), table.values[0][0, 0].item()))
    (big_macs, big_s), (small_macs, small_s) = costs
    assert big_macs > 100 * small_macs and big_s > small_s > 0 and math.isfinite(big_s)


@pytest.mark.parametrize("op, shape", [(Op("conv", 4, 3), (3, 5, 6)), (Op("conv", 3, 5, relu=False), (2, 4, 4)),
                                       (Op("sepconv", 5, 3), (3, 5, 6)), (Op("sepconv", 4, 5, relu=False), (2, 3, 3)),
                                       (Op("dense", 7), (9,)), (Op("dense", 3, relu=False), (5,))])
def test_the_numba_cost_s_one_layer_program_computes_the_operation(op, shape):
    """FusedOp (what the numba cost times) gives the op's torch output and its numpy forward's, in
    torch's (C, H, W) order, on random input with zeros (the kernels skip them)."""
    layer = Layer(op, *shape)
    with seeded_init(0):
        module = op.module(shape[0]).eval()
    x = torch.relu(torch.randn(3, *shape, generator=torch.Generator().manual_seed(1)))  # about half zeros
    with torch.no_grad():
        want = module(x).flatten(1).numpy()
    rows = x.flatten(1).numpy()
    got = FusedOp(layer, module).forward(rows)
    numpy_forward = NumpyOp(layer, "op")({f"op.{k}": v for k, v in numpy_params(module).items()}, rows)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(got, numpy_forward, rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError, match="not a skip"):
        FusedOp(Layer(SKIP, 4))


@pytest.mark.parametrize("hardware, backend, message", [
    ("cpu", "jax", "--cost-backend jax: expected one of numba, numpy, torch"),
    ("cuda", "numpy", "--cost-backend numpy runs on the host, not cuda: use --cost-backend torch"),
    ("cuda", "numba", "--cost-backend numba runs on the host, not cuda: use --cost-backend torch"),
    ("cuda:1", "numpy", "--cost-backend numpy runs on the host, not cuda:1"),
    ("macs", "torch", "only a measured cost (--hardware cpu or cuda) is timed on a backend, not --hardware macs"),
    ("fpga-model:zcu102", "numpy", "not --hardware fpga-model:zcu102; leave --cost-backend out"),
])
def test_a_bad_cost_backend_is_a_one_line_error(hardware, backend, message):
    with pytest.raises(HetrlError) as caught:
        hardware_cost(hardware, tiny_space(), backend=backend)
    assert message in str(caught.value) and "\n" not in str(caught.value)


def test_a_missing_fpga_model_is_a_one_line_error(monkeypatch):
    monkeypatch.setattr(cost_module, "FPGA_MODULE", "hetrl.cosearch.no_such_model")
    with pytest.raises(HetrlError, match=r"FPGA model \(hetrl.cosearch.no_such_model\) is not in this hetrl yet"):
        hardware_cost("fpga-model:board.json", tiny_space())
    with pytest.raises(HetrlError, match="expected cpu"):
        hardware_cost("tpu", tiny_space())


# --- the search ------------------------------------------------------------------------------------
def test_the_distillation_loss_halves_on_a_fixed_batch():
    data = teacher_data()
    torch.manual_seed(0)
    with seeded_init(0):
        net = SuperNet(tiny_space())
    searcher = Searcher(net, SearchConfig(lr=1e-2), None, data.q_variance)
    batch = data.take(torch.arange(64))

    def loss() -> float:
        with torch.no_grad():
            return searcher.task_loss(batch, net.gates(net.choice()))[0].item()

    first = loss()
    for _ in range(50):
        searcher.step(batch)
    assert loss() < 0.5 * first


def test_the_kl_distillation_is_zero_for_the_teacher_itself():
    q = torch.randn(8, 4)
    assert distillation_loss(q, q, "kl", 2.0).item() == pytest.approx(0, abs=1e-6)
    assert distillation_loss(q + 3, q, "kl").item() == pytest.approx(0, abs=1e-6)  # a shift changes no preference
    assert distillation_loss(q + 3, q, "mse", q_variance=9.0).item() == pytest.approx(1.0)


def test_a_large_hardware_weight_picks_the_cheapest_operations():
    space, data = tiny_space(), teacher_data()
    table = macs_table(space)
    results = {}
    for weight in (0.0, 20.0):
        with seeded_init(0):
            net = SuperNet(space)
        config = SearchConfig(steps=100, batch_size=32, hardware_weight=weight, warmup=0.0, alpha_lr=0.05)
        results[weight] = search(net, data, config, table)
    cheapest = min(space.architecture(choice).macs for choice in all_choices(space))
    assert results[20.0].architecture.macs == results[20.0].cost == cheapest
    assert results[0.0].architecture.macs > cheapest
    assert results[20.0].expected_cost < results[0.0].expected_cost


@pytest.mark.parametrize("mode", ["one-level", "bi-level"])
def test_one_level_and_bi_level_searches_run(mode):
    space, data = vector_space(), teacher_data(shape=(5,), n_actions=2)
    with seeded_init(0):
        net = SuperNet(space)
    steps = []
    config = SearchConfig(steps=30, batch_size=16, mode=mode, td_weight=0.5, hardware_weight=0.1, warmup=0.2, log_every=10)
    result = search(net, data, config, macs_table(space), progress=lambda step, parts: steps.append((step, parts)))
    assert [row["step"] for row in result.history] == [10, 20, 30]
    assert result.history[-1]["tau"] == pytest.approx(config.tau_end)
    last = steps[-1][1]
    assert {"distill", "td", "hardware"} <= set(last) and (("val_distill" in last) == (mode == "bi-level"))
    assert result.architecture == space.architecture(result.choice)
    assert result.cost == result.architecture.macs and result.distill_loss > 0
    with pytest.raises(ValueError, match="mode must be one of"):
        Searcher(net, SearchConfig(mode="three-level"))


# --- the derived network in DQN, and the command ---------------------------------------------------
def test_dqn_trains_a_saved_architecture(tmp_path):
    arch = tiny_space().architecture([1, 4, 0])
    path = arch.save(tmp_path / "arch.json", note="found by a test")
    spec = EnvSpec("MinAtar/Fake-v0", OBS, True, 3, (), (), (), None, False, obs_dtype="uint8")
    algo = make_algorithm("dqn", spec, DQNConfig(network=str(path)))
    q = algo.make_networks()["q"]
    assert isinstance(q, SearchedQNetwork) and q.architecture == arch and algo.network_kind == "searched"
    assert q(torch.zeros(2, *OBS, dtype=torch.uint8)).shape == (2, 3) and algo.numpy_policy()
    other = EnvSpec("MinAtar/Fake-v0", (3, 5, 5), True, 3, (), (), (), None, False, obs_dtype="uint8")
    with pytest.raises(HetrlError, match=r"searched for observations \(2, 5, 5\) and 3 actions"):
        make_algorithm("dqn", other, DQNConfig(network=str(path))).make_networks()
    with pytest.raises(HetrlError, match="does not exist"):
        make_algorithm("dqn", spec, DQNConfig(network=str(tmp_path / "none.json"))).make_networks()
    assert any("searched architecture" in p for p in ExitDQNConfig(network=str(path)).validate())


@pytest.fixture(scope="module")
def teacher_run(tmp_path_factory):
    path = tmp_path_factory.mktemp("teacher") / "dqn"
    assert main(["train", "dqn", "MinAtar/Breakout-v1", "--steps", "300", "--run-dir", str(path), "--plan", "rule",
                 "--executor", "inline", "--set", "learning_starts=100", "--set", "batch_size=16",
                 "--set", "eval_episodes=1", "--set", "eval_every=300", "--no-progress"]) == 0
    return path


def test_a_teacher_gives_its_replay_or_its_play(teacher_run):
    teacher = Teacher(teacher_run)
    replay = teacher.data(100, "auto")
    assert "from the replay of step_0000000300.pt" in replay.source and len(replay) == 100
    assert len({bytes(o.numpy()) for o in replay.obs}) > 50  # distinct states, drawn without repeats
    played = teacher.data(40, "play")
    assert "40 env steps of the teacher's policy" in played.source
    for data in (replay, played):
        assert data.obs.dtype == torch.uint8 and data.q.shape == (len(data), teacher.spec.n_actions)
        torch.testing.assert_close(data.q, teacher.q_values(data.obs))


def test_cosearch_writes_an_architecture_dqn_retrains(teacher_run, tmp_path, capsys):
    out = tmp_path / "search"
    assert main(["cosearch", "MinAtar/Breakout-v1", "--teacher", str(teacher_run), "--hardware", "macs", "--steps", "20",
                 "--states", "200", "--out", str(out), "--no-progress"]) == 0
    assert sorted(p.name for p in out.iterdir()) == ["architecture.json", "costs.json", "derived.pt", "search.png", "summary.md"]
    saved = json.loads((out / "architecture.json").read_text())
    assert saved["hardware"] == "macs" and saved["cost_unit"] == "MACs" and saved["search"]["steps"] == 20
    assert saved["macs"] == Architecture.load(out / "architecture.json").macs == saved["cost"]
    algo = make_algorithm("dqn", env_spec("MinAtar/Breakout-v1"), DQNConfig(network=str(out / "architecture.json")))
    assert algo.make_networks()["q"].architecture.names == saved["names"]
    assert "Retrain it: `hetrl train dqn MinAtar/Breakout-v1 --set network=" in (out / "summary.md").read_text()
    assert f"with its teacher too (distillation beside the TD loss): add `--set teacher={teacher_run}`" in (
        out / "summary.md").read_text()
    assert capsys.readouterr().out.strip() == f"hetrl train dqn MinAtar/Breakout-v1 --set network={(out / 'architecture.json').resolve()}"
    fpga_out = tmp_path / "fpga"  # the FPGA model as the cost: its table saved, the derived network's design reported
    assert main(["cosearch", "MinAtar/Breakout-v1", "--teacher", str(teacher_run), "--hardware", "fpga-model:zcu102",
                 "--steps", "10", "--states", "200", "--out", str(fpga_out), "--no-progress"]) == 0
    assert json.loads((fpga_out / "costs.json").read_text())["unit"] == "cycles"
    assert "derived network on the FPGA:" in (fpga_out / "summary.md").read_text()
    assert "modelled, never run" in (fpga_out / "summary.md").read_text()
    saved = json.loads((fpga_out / "architecture.json").read_text())  # joint by default: the searched accelerator
    assert saved["fpga_search"] == "joint" and saved["fpga_design"]["method"] == "joint"
    assert saved["fpga_design"]["label"] == "FPGA model, modelled, never run" and saved["cost"] == saved["fpga_design"]["interval_cycles"]
    assert saved["fpga_design"]["dsp"] <= saved["fpga_design"]["budget"]["dsp"]
    assert json.loads((fpga_out / "costs.json").read_text())["mode"] == "joint"
    decoupled = tmp_path / "decoupled"  # the agent alone, then allocate's greedy on the part: the decoupled baseline
    assert main(["cosearch", "MinAtar/Breakout-v1", "--teacher", str(teacher_run), "--hardware", "fpga-model:zcu102",
                 "--fpga-search", "fixed", "--lambda", "0", "--steps", "10", "--states", "200", "--out", str(decoupled),
                 "--no-progress"]) == 0
    saved = json.loads((decoupled / "architecture.json").read_text())
    assert saved["fpga_search"] == "fixed" and saved["fpga_design"]["method"] == "allocate"
    assert "allocate's greedy after the search" in (decoupled / "summary.md").read_text()
    measured = tmp_path / "measured"  # the host's measured cost: timed on numba by default, and the outputs say so
    assert main(["cosearch", "MinAtar/Breakout-v1", "--teacher", str(teacher_run), "--steps", "5", "--states", "200",
                 "--out", str(measured), "--no-progress"]) == 0
    saved = json.loads((measured / "architecture.json").read_text())
    assert saved["hardware"] == "cpu" and saved["cost_backend"] == "numba" and "with numba" in saved["cost_label"]
    assert json.loads((measured / "costs.json").read_text())["backend"] == "numba"
    assert "measured on cpu with numba" in (measured / "summary.md").read_text()
    capsys.readouterr()
    assert main(["cosearch", "MinAtar/Breakout-v1", "--teacher", str(teacher_run), "--hardware", "macs",
                 "--cost-backend", "torch", "--out", str(tmp_path / "y")]) == 2
    err = capsys.readouterr().err
    assert "--cost-backend torch: only a measured cost" in err and not (tmp_path / "y").exists()
    with pytest.raises(SystemExit):  # argparse's choices
        main(["cosearch", "MinAtar/Breakout-v1", "--teacher", str(teacher_run), "--cost-backend", "jax"])
    assert "invalid choice: 'jax'" in capsys.readouterr().err
    assert main(["cosearch", "MinAtar/Asterix-v1", "--teacher", str(teacher_run), "--out", str(tmp_path / "x")]) == 2
    assert "was trained on MinAtar/Breakout-v1, not MinAtar/Asterix-v1" in capsys.readouterr().err
