"""Early-exit DQN (exit-dqn, RAPID-RL): exits skip compute, operation counts, the training
schedules, the threshold chosen on validation episodes only, checkpoints, and acting under every
executor of one process and of the local executor alike."""

import contextlib
import json
import math
from dataclasses import replace

import numpy as np
import pytest
import torch

import hetrl
from hetrl.algos import make_algorithm
from hetrl.algos.dqn import DQNLearner
from hetrl.algos.exit_dqn import ExitDQNLearner
from hetrl.cli import main
from hetrl.config import make_config
from hetrl.envs import EnvSpec, env_spec
from hetrl.errors import HetrlError
from hetrl.evaluation import EVAL_SEED_OFFSET
from hetrl.exits import VALIDATION_SEED_OFFSET, SweepPoint, SweepResult, choose, fitted_before, monotone_scores, planning_settings, store_threshold
from hetrl.nets import exits as exits_module
from hetrl.nets import numpy_params
from hetrl.nets.conv import MinAtarNet
from hetrl.nets.exits import (
    CONFIDENCE_BIAS,
    INPUT,
    MINATAR_CONVS,
    ExitQNetwork,
    threshold_logit,
)
from hetrl.primitives import build, get
from hetrl.protocol import Slot


def image_spec(shape=(4, 10, 10), n_actions=3, env_id="Pixels/Fake-v0"):
    return EnvSpec(env_id, shape, True, n_actions, (), (), (), None, False, obs_dtype="uint8")


def exit_algo(spec=None, **agent):
    spec = spec or image_spec()
    cfg = make_config("exit-dqn", "CartPole-v1").agent
    for key, value in agent.items():
        setattr(cfg, key, value)
    return make_algorithm("exit-dqn", spec, cfg)


class Work:
    """Every layer the network's passes run, recorded: the rows each weight was applied to and the
    multiply-accumulates done (its passes call torch.nn.functional, which this stands in for)."""

    def __init__(self, net, monkeypatch):
        self.names = {id(p): name.removesuffix(".weight") for name, p in net.named_parameters() if name.endswith("weight")}
        self.rows = {name: [] for name in self.names.values()}
        self.outputs = []  # (layer, outputs computed) per call, in order
        self.macs = 0
        monkeypatch.setattr(exits_module, "F", self)

    def name(self, weight):
        """The layer a weight (or a slice of it: a share of a block's outputs) belongs to."""
        return self.names.get(id(weight)) or self.names[id(weight._base)]

    def linear(self, x, weight, bias=None):
        self.rows[self.name(weight)].append(len(x))
        self.outputs.append((self.name(weight), weight.shape[0]))
        self.macs += len(x) * weight.shape[0] * weight.shape[1]
        return torch.nn.functional.linear(x, weight, bias)

    def conv2d(self, x, weight, bias=None, stride=1):
        out = torch.nn.functional.conv2d(x, weight, bias, stride)
        self.rows[self.name(weight)].append(len(x))
        self.outputs.append((self.name(weight), weight.shape[0]))
        self.macs += out.numel() * weight[0].numel()  # positions x filters x patch, per row
        return out

    def clear(self):
        self.rows = {name: [] for name in self.rows}
        self.outputs = []
        self.macs = 0

    def __getattr__(self, name):
        return getattr(torch.nn.functional, name)


def sorting_mlp():
    """An MLP whose branch is confident exactly for inputs with x0 > 0.5: block 0 passes x0 through
    its first unit, and the branch's confidence logit is 20 * (x0 - 0.5)."""
    net = ExitQNetwork((2,), 3, (), (4, 4, 4), exits=(0,))
    with torch.no_grad():
        net.blocks[0][0].weight.zero_()
        net.blocks[0][0].bias.zero_()
        net.blocks[0][0].weight[0, 0] = 1.0
        branch = net.branches[0]
        branch.confidence.weight.zero_()
        branch.confidence.weight[0, 0] = 20.0
        branch.confidence.bias.fill_(-10.0)
    return net


# --- the network ---------------------------------------------------------------------------------
def test_exits_skip_the_rest_of_the_network_at_batch_1(monkeypatch):
    net = sorting_mlp()
    with torch.no_grad():
        branch_q = net.heads(torch.tensor([[0.9, 0.0]]))[1][0]  # every head, for reference
    work = Work(net, monkeypatch)
    with torch.no_grad():
        q, exit_index = net.act_forward(torch.tensor([[0.9, 0.0]]), threshold=0.5)
    assert exit_index.tolist() == [0]
    assert work.rows == {"blocks.0.0": [1], "blocks.1.0": [], "blocks.2.0": [], "head": [], "branches.0.q": [1],
                         "branches.0.confidence": [1]}
    torch.testing.assert_close(q, branch_q)  # the branch's Q-values
    work.clear()
    with torch.no_grad():  # not confident: on to the final head, the branch's Q head never runs
        _, exit_index = net.act_forward(torch.tensor([[0.1, 0.0]]), threshold=0.5)
    assert exit_index.tolist() == [1]
    assert work.rows == {"blocks.0.0": [1], "blocks.1.0": [1], "blocks.2.0": [1], "head": [1], "branches.0.q": [],
                         "branches.0.confidence": [1]}


def test_exited_samples_leave_the_batch(monkeypatch):
    """At batch 8, the later layers see only the rows that did not exit (gather), every row gets
    its own exit's Q-values (scatter), and the work done is the sum of each row's exit's count."""
    net = sorting_mlp()
    x0 = torch.tensor([0.9, 0.1, 0.7, 0.2, 0.3, 0.95, 0.0, 0.6])
    obs = torch.stack([x0, torch.randn(8)], dim=1)
    with torch.no_grad():
        final, branch_q, _ = net.heads(obs)  # every head on every row, for reference
    work = Work(net, monkeypatch)
    with torch.no_grad():
        q, exit_index = net.act_forward(obs, threshold=0.5)
    exited = x0 > 0.5
    assert exit_index.tolist() == [0 if e else 1 for e in exited.tolist()]
    assert work.rows == {"blocks.0.0": [8], "blocks.1.0": [4], "blocks.2.0": [4], "head": [4], "branches.0.q": [4],
                         "branches.0.confidence": [8]}
    assert work.macs == 4 * net.macs(0) + 4 * net.macs(1)
    torch.testing.assert_close(q[exited], branch_q[0][exited])
    torch.testing.assert_close(q[~exited], final[~exited])
    work.clear()
    with torch.no_grad():  # every row exits: nothing after the branch runs
        net.act_forward(obs[exited], threshold=0.5)
    assert work.rows["head"] == [] and work.rows["blocks.1.0"] == [] and work.macs == 4 * net.macs(0)
    # the numpy pass takes the same exits and gives the same Q-values
    q_np, exit_np = net.act_numpy(numpy_params(net), obs.numpy(), threshold=0.5)
    np.testing.assert_array_equal(exit_np, exit_index.numpy())
    np.testing.assert_allclose(q_np, q.numpy(), rtol=1e-5, atol=1e-6)
    for row in range(8):  # and batch 1, in both
        q1, e1 = net.act_forward(obs[row:row + 1], threshold=0.5)
        q1_np, e1_np = net.act_numpy(numpy_params(net), obs[row:row + 1].numpy(), threshold=0.5)
        assert e1.item() == e1_np[0] == exit_index[row].item()
        np.testing.assert_allclose(q1.detach().numpy(), q[row:row + 1].numpy(), rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(q1_np, q[row:row + 1].numpy(), rtol=1e-5, atol=1e-6)


def test_threshold_one_runs_no_branch(monkeypatch):
    net = sorting_mlp()
    obs = torch.tensor([[0.99, 0.0], [0.9, 1.0]])
    with torch.no_grad():
        reference = net.final(obs)
    work = Work(net, monkeypatch)
    with torch.no_grad():
        q, exit_index = net.act_forward(obs)  # the buffer's threshold: 1 (never) by default
    assert net.threshold == 1.0 and exit_index.tolist() == [1, 1]
    assert work.rows["branches.0.confidence"] == [] and work.rows["head"] == [2]
    assert work.macs == 2 * net.baseline_macs
    torch.testing.assert_close(q, reference)
    assert threshold_logit(1.0) == math.inf and threshold_logit(0.0) == -math.inf


def small_conv():
    # obs (2, 6, 6); conv 3x3x3 stride 1 -> (3, 4, 4); conv 4 2x2 stride 2 -> (4, 2, 2); 16 -> 5; 5 -> 3 actions
    return ExitQNetwork((2, 6, 6), 3, ((3, 3, 1), (4, 2, 2)), (5,), exits=(0, 1))


def test_operation_counts_equal_a_hand_count():
    net = small_conv()
    conv1 = 4 * 4 * 3 * (2 * 3 * 3)  # positions x filters x patch = 864
    conv2 = 2 * 2 * 4 * (3 * 2 * 2)  # 192
    fc, head = 16 * 5, 5 * 3  # 80, 15
    assert net.block_macs() == [864, 192, 80] == [conv1, conv2, fc]
    assert net.baseline_macs == 1151 == conv1 + conv2 + fc + head
    branch0_conf, branch0_q = 48, 48 * 3  # branch 0 reads conv1's 3 x 4 x 4 = 48 features
    branch1_conf, branch1_q = 16, 16 * 3
    assert net.macs(0) == conv1 + branch0_conf + branch0_q == 1056
    assert net.macs(1) == conv1 + conv2 + branch0_conf + branch1_conf + branch1_q == 1168
    assert net.macs(2) == net.baseline_macs + branch0_conf + branch1_conf == 1215
    assert net.macs(2, exits_on=False) == 1151
    assert net.mean_macs([1, 1, 2]) == (1056 + 1168 + 2 * 1215) / 4


def test_a_branch_on_the_input_runs_before_any_block(monkeypatch):
    """A branch on the observation itself (exit -1): a confident row runs no block at all; its
    operations are the branch's alone, counted by hand."""
    net = ExitQNetwork((2, 6, 6), 3, ((3, 3, 1), (4, 2, 2)), (5,), exits=(INPUT, 1), scale=2.0)
    assert net.exit_names() == ["on the input", "after block 1", "final head"]
    conv1, conv2, fc, head = 864, 192, 80, 15
    inputs = 2 * 6 * 6  # the branch reads the 72 input values
    assert net.macs(0) == inputs + inputs * 3 == 288
    assert net.macs(1) == conv1 + conv2 + inputs + 16 + 16 * 3 == 1192
    assert net.macs(2) == conv1 + conv2 + fc + head + inputs + 16 == 1239
    obs = torch.randint(0, 3, (4, 2, 6, 6), dtype=torch.uint8)
    with torch.no_grad():
        net.branches[0].confidence.weight.zero_()
        net.branches[0].confidence.weight[0, 0] = 20.0  # confident where the first input value is > 1 (scaled: > 0.5)
        net.branches[0].confidence.bias.fill_(-10.0)
        net.branches[1].confidence.bias.fill_(-10.0)  # never confident
        obs[:, 0, 0, 0] = torch.tensor([2, 0, 2, 1], dtype=torch.uint8)
        _, branch_q, _ = net.heads(obs)
        want = branch_q[0][0:1]
    work = Work(net, monkeypatch)
    with torch.no_grad():
        q, exit_index = net.act_forward(obs[0:1], threshold=0.5)
    assert exit_index.tolist() == [0] and work.macs == net.macs(0)
    assert all(rows == [] for name, rows in work.rows.items() if not name.startswith("branches.0"))
    torch.testing.assert_close(q, want)
    work.clear()
    with torch.no_grad():
        q, exit_index = net.act_forward(obs, threshold=0.5)
    assert exit_index.tolist() == [0, 2, 0, 2] and work.rows["blocks.0.0"] == [2] and work.rows["branches.0.q"] == [2]
    assert work.macs == 2 * net.macs(0) + 2 * net.macs(2)
    q_np, exit_np = net.act_numpy(numpy_params(net), obs.numpy(), threshold=0.5)
    np.testing.assert_array_equal(exit_np, exit_index.numpy())
    np.testing.assert_allclose(q_np, q.numpy(), rtol=1e-5, atol=1e-5)
    for row in range(4):
        q1_np, e1_np = net.act_numpy(numpy_params(net), obs[row:row + 1].numpy(), threshold=0.5)
        assert e1_np[0] == exit_index[row].item()
        np.testing.assert_allclose(q1_np, q[row:row + 1].numpy(), rtol=1e-5, atol=1e-5)


def test_operation_counts_equal_what_the_pass_ran(monkeypatch):
    """The analytic count of each exit equals the multiply-accumulates of the layers a pass ran."""
    net = small_conv()
    obs = torch.randint(0, 2, (1, 2, 6, 6), dtype=torch.uint8)
    work = Work(net, monkeypatch)
    for exit_index in range(3):
        with torch.no_grad():  # make exit `exit_index` the first confident one
            for j, branch in enumerate(net.branches):
                branch.confidence.weight.zero_()
                branch.confidence.bias.fill_(10.0 if j == exit_index else -10.0)
            work.clear()
            _, got = net.act_forward(obs, threshold=0.5)
        assert got.tolist() == [exit_index]
        assert work.macs == net.macs(exit_index)


def test_a_branch_on_a_share_of_its_block_runs_before_the_rest_of_it(monkeypatch):
    """Branches that read half their block's outputs (conv 1: 2 of 3 filters, conv 2: 2 of 4): a
    decision computes that share, then the branch, and the rest of the block only if it goes on;
    operations counted by hand equal what the pass ran, and every pass acts as the heads say."""
    with torch.random.fork_rng():  # its own weights: the global generator's state depends on the tests run before
        torch.manual_seed(0)
        net = ExitQNetwork((2, 6, 6), 3, ((3, 3, 1), (4, 2, 2)), (5,), exits=(0, 1), branch_hidden=0, branch_share=0.5)
    assert net.branch_shares == [2 / 3, 0.5] and [b.in_features for b in net.branches] == [2 * 16, 2 * 4]
    assert net.exit_names() == ["after block 0 (2 of 3 filters)", "after block 1 (2 of 4 filters)", "final head"]
    conv1, conv2, fc, head = 864, 192, 80, 15
    conv1_part, conv2_part = 4 * 4 * 2 * 18, 2 * 2 * 2 * 12  # the filters before each exit
    assert net.macs(0) == conv1_part + 32 + 32 * 3 == 704
    assert net.macs(1) == conv1 + conv2_part + 32 + 8 + 8 * 3 == 1024
    assert net.macs(2) == conv1 + conv2 + fc + head + 32 + 8 == 1191
    g = torch.Generator().manual_seed(0)
    obs = torch.randint(0, 3, (12, 2, 6, 6), dtype=torch.uint8, generator=g)
    work = Work(net, monkeypatch)
    for exit_index in range(3):  # batch 1: the filters each exit computes, in order
        with torch.no_grad():
            for j, branch in enumerate(net.branches):
                branch.confidence.weight.zero_()
                branch.confidence.bias.fill_(10.0 if j == exit_index else -10.0)
            work.clear()
            _, got = net.act_forward(obs[:1], threshold=0.5)
        assert got.tolist() == [exit_index] and work.macs == net.macs(exit_index)
        convs = [(name, n) for name, n in work.outputs if name.startswith("blocks")]
        assert convs == [[("blocks.0.0", 2)],
                         [("blocks.0.0", 2), ("blocks.0.0", 1), ("blocks.1.0", 2)],
                         [("blocks.0.0", 2), ("blocks.0.0", 1), ("blocks.1.0", 2), ("blocks.1.0", 2), ("blocks.2.0", 5)]][exit_index]
    with torch.no_grad():  # input-dependent confidences, biased so that a batch leaves at every exit
        for branch in net.branches:
            branch.confidence.weight.copy_(torch.randn(branch.confidence.weight.shape, generator=g))
            branch.confidence.bias.zero_()
        logits = net.heads(obs)[2]
        net.branches[0].confidence.bias.fill_(-float(torch.sort(logits[0]).values[8:10].mean()))  # 3 of 12 leave
        rest = torch.sort(logits[1][logits[0] <= torch.sort(logits[0]).values[8]]).values
        net.branches[1].confidence.bias.fill_(-float(rest[4:6].mean()))  # then 4 of the 9 left
        final, branch_q, logits = net.heads(obs)
        want_exit = torch.where(logits[0] > 0, 0, torch.where(logits[1] > 0, 1, 2))
        want_q = torch.where((want_exit == 0)[:, None], branch_q[0], torch.where((want_exit == 1)[:, None], branch_q[1], final))
        work.clear()
        q, exit_index = net.act_forward(obs, threshold=0.5)
    counts = np.bincount(exit_index.numpy(), minlength=3)
    assert (counts > 0).all(), counts
    assert torch.equal(exit_index, want_exit) and work.macs == sum(c * net.macs(j) for j, c in enumerate(counts))
    assert work.rows["blocks.0.0"] == [12, 12 - counts[0]] and work.rows["head"] == [counts[2]]
    torch.testing.assert_close(q, want_q)
    q_np, exit_np = net.act_numpy(numpy_params(net), obs.numpy(), threshold=0.5)
    np.testing.assert_array_equal(exit_np, exit_index.numpy())
    np.testing.assert_allclose(q_np, q.numpy(), rtol=1e-5, atol=1e-5)
    for row in range(12):
        q1, e1 = net.act_forward(obs[row:row + 1], threshold=0.5)
        q1_np, e1_np = net.act_numpy(numpy_params(net), obs[row:row + 1].numpy(), threshold=0.5)
        assert e1.item() == e1_np[0] == exit_index[row].item()
        np.testing.assert_allclose(q1.detach().numpy(), q[row:row + 1].numpy(), rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(q1_np, q[row:row + 1].numpy(), rtol=1e-5, atol=1e-5)


def test_a_branch_share_travels_with_its_weights():
    """A state whose branch reads another share of its block takes that share on load; a share
    that is no whole number of the block's outputs is refused, naming the branch."""
    source = ExitQNetwork((4, 10, 10), 3, MINATAR_CONVS, (32,), exits=(0,), branch_hidden=12, branch_share=0.25)
    made = ExitQNetwork((4, 10, 10), 3, MINATAR_CONVS, (32,), exits=(0,), branch_hidden=16)
    made.load_state_dict(source.state_dict())
    assert made.branch_shares == [0.25] and made.branch_widths == [12] and made.macs(0) == source.macs(0)
    obs = torch.randint(0, 2, (8, 4, 10, 10), dtype=torch.uint8)
    torch.testing.assert_close(made.act_forward(obs, 0.0)[0], source.act_forward(obs, 0.0)[0])
    bad = dict(source.state_dict())
    bad["branches.0.trunk.0.weight"] = torch.zeros(12, 100)  # 100 features: not a number of 8x8 maps
    with pytest.raises(ValueError, match="branch 0's stored input of 100 features"):
        made.load_state_dict(bad)
    with pytest.raises(ValueError, match=r"share of its block's outputs must be in \(0, 1\]"):
        ExitQNetwork((4, 10, 10), 3, MINATAR_CONVS, (32,), branch_share=0.0)
    on_input = ExitQNetwork((4, 10, 10), 3, MINATAR_CONVS, (32,), exits=(INPUT, 0), branch_share=0.5)
    assert [b.in_features for b in on_input.branches] == [400, 8 * 64]  # the input branch reads it all


def test_the_minatar_backbone_is_dqns_network():
    """For one seed the backbone and final head start as dqn's MinAtar network, and the pass
    without exits computes what it computes."""
    torch.manual_seed(3)
    dqn = MinAtarNet((4, 10, 10), 3)
    torch.manual_seed(3)
    net = ExitQNetwork((4, 10, 10), 3, MINATAR_CONVS, (128,))
    assert net.exits == (0,) and net.baseline_macs == 8 * 8 * 16 * 36 + 1024 * 128 + 128 * 3
    obs = torch.randint(0, 2, (5, 4, 10, 10), dtype=torch.uint8)
    with torch.no_grad():
        assert torch.equal(net(obs), dqn(obs)) and torch.equal(net.final(obs), dqn(obs))
    assert net.branches[0].confidence.bias.item() == CONFIDENCE_BIAS


def test_exits_are_checked():
    with pytest.raises(ValueError, match="out of range"):
        ExitQNetwork((4,), 2, (), (8, 8), exits=(1,))
    with pytest.raises(ValueError, match="out of range"):
        ExitQNetwork((4,), 2, (), (8, 8), exits=(-2,))
    with pytest.raises(ValueError, match="no exit"):
        ExitQNetwork((4,), 2, (), (8,))
    with pytest.raises(HetrlError, match="out of range"):
        exit_algo(exits=(1,)).make_networks()
    with pytest.raises(HetrlError, match="-1 for a branch on the input"):
        exit_algo(exits=(-2,))
    with pytest.raises(HetrlError, match="no dueling head"):
        exit_algo(dueling=True)
    with pytest.raises(HetrlError, match="exit_schedule"):
        exit_algo(exit_schedule="later")


def test_host_backends_that_cannot_run_it_say_so():
    algo = exit_algo(env_spec("CartPole-v1"), hidden=(16, 16))
    for primitive, backend in [("Learn", "numba"), ("Learn", "blas"), ("Learn", "cudagraph")]:
        assert get(primitive, backend).unsupported(algo), (primitive, backend)
    for backend in ("numpy", "torch", "numba"):  # Act/numba: hetrl.nets.fused_q (tests/primitives/test_act_numba_conv.py)
        assert get("Act", backend).unsupported(algo) is None, backend
        assert get("Act", backend).unsupported(exit_algo()) is None, backend  # MinAtar-sized images
    nature = get("Act", "numba").unsupported(exit_algo(image_spec((4, 84, 84), 6)))
    assert nature and "numpy or torch" in nature


def test_the_profiler_times_act_at_a_fixed_exit_distribution():
    """The profiler's random observations would exit at random; the network it times answers every
    one at the final head after every confidence head (acting with exits), or runs no branch."""
    obs = np.random.default_rng(0).integers(0, 256, (64, 4, 10, 10), dtype=np.uint8)
    algo = exit_algo(act_with_exits=True)
    net = algo.make_networks()["q"]
    mixed_exits(net, obs)  # confidences as after some learning: input-dependent, half of them above 0.5
    with torch.no_grad():
        assert 0 < int((net.act_forward(torch.as_tensor(obs))[1] == 0).sum()) < 64
        profiled = algo.profiled_policy(net)
        assert profiled.threshold == 0.5 and profiled.act_forward(torch.as_tensor(obs))[1].tolist() == [1] * 64
        assert 0 < int((net.act_forward(torch.as_tensor(obs))[1] == 0).sum()) < 64  # the run's own is untouched
    plain = exit_algo(act_with_exits=False)
    assert plain.profiled_policy(plain.make_networks()["q"]).threshold == 1.0  # no branch runs


@pytest.mark.parametrize("image", [True, False])
def test_the_profiler_times_act_at_the_validated_exit_rates(image):
    """With exit_rates (what the sweep measured), the profiled network sends exactly those shares
    of the profiler's observation pool out at each exit, under Act/torch and Act/numpy alike; the
    profile's Act rows are measured cycling through that pool."""
    rng = np.random.default_rng(1)
    if image:
        spec, obs = image_spec(), rng.integers(0, 256, (256, 4, 10, 10), dtype=np.uint8)
        algo = exit_algo(spec, act_with_exits=True, exit_threshold=0.8, exit_rates=(0.625, 0.375))
    else:
        spec, obs = env_spec("CartPole-v1"), rng.standard_normal((256, 4)).astype(np.float32)
        algo = exit_algo(spec, hidden=(16, 16, 16), act_with_exits=True, exit_threshold=0.8, exit_rates=(0.125, 0.5, 0.375))
    net = algo.make_networks()["q"]
    profiled = algo.profiled_policy(net, torch.as_tensor(obs))
    wanted = [round(r * 256) for r in algo.config.exit_rates]
    with torch.no_grad():
        exits_torch = profiled.act_forward(torch.as_tensor(obs))[1].numpy()
        assert np.bincount(exits_torch, minlength=profiled.n_exits).tolist() == wanted
        one_by_one = [int(profiled.act_forward(torch.as_tensor(obs[i:i + 1]))[1]) for i in range(256)]
        assert one_by_one == exits_torch.tolist()  # the batch-1 pass leaves where the batched one does
    exits_numpy = profiled.act_numpy(numpy_params(profiled), obs)[1]
    assert np.asarray(exits_numpy).tolist() == exits_torch.tolist()
    with torch.no_grad():  # no pool given: the dearest path, as before (every decision at the final head)
        assert set(algo.profiled_policy(net).act_forward(torch.as_tensor(obs))[1].tolist()) == {profiled.n_exits - 1}
    wrong = exit_algo(spec, hidden=(16, 16, 16), act_with_exits=True, exit_rates=(0.2,) * 5)
    with pytest.raises(HetrlError, match="exit_rates has 5 shares but the network has"):
        wrong.profiled_policy(wrong.make_networks()["q"], torch.as_tensor(obs))


def test_exit_rates_are_validated_and_round_trip_from_the_sweep():
    for bad in [(0.5, 0.6), (1.5, -0.5), ()]:
        with pytest.raises(HetrlError, match="exit_rates must be shares >= 0 summing to 1"):
            exit_algo(exit_rates=bad)
    point = SweepPoint(0.9, 1.0, 0.1, 0.95, 1e3, 0.4, [0.6, 0.3, 0.1])
    result = SweepResult("r", "c", "MinAtar/Breakout-v1", 5, VALIDATION_SEED_OFFSET, 1, "torch", 2500, ["b0", "b1", "final"],
                         0.9, 0.9, [point])
    flags = planning_settings(result).split()
    cfg = make_config("exit-dqn", "MinAtar/Breakout-v1", None, [flags[i + 1] for i in range(0, len(flags), 2)])
    assert cfg.agent.exit_rates == (0.6, 0.3, 0.1) and cfg.agent.act_with_exits and cfg.agent.exit_threshold == 0.9
    assert not cfg.agent.validate()


# --- training ------------------------------------------------------------------------------------
def batches(spec, n, size=16, seed=0):
    rng = np.random.default_rng(seed)
    for _ in range(n):
        yield {
            "obs": torch.as_tensor(rng.integers(0, 2, (size, *spec.obs_shape), dtype=np.uint8)),
            "actions": torch.as_tensor(rng.integers(0, spec.n_actions, size)),
            "rewards": torch.as_tensor(rng.standard_normal(size).astype(np.float32)),
            "next_obs": torch.as_tensor(rng.integers(0, 2, (size, *spec.obs_shape), dtype=np.uint8)),
            "discounts": torch.full((size,), 0.99),
            "weights": torch.ones(size),
        }


SETTINGS = {"lr": 1e-3, "double": True, "target_update_every": 3, "max_grad_norm": 1.0}


def test_staged_schedule_leaves_the_final_head_plain_dqn():
    """Staged: the branches learn without touching the backbone, so the backbone and final head
    take exactly the updates dqn's learner takes on the same batches from the same seed."""
    spec = image_spec()
    dqn_cfg = make_config("dqn", "CartPole-v1").agent
    for key, value in SETTINGS.items():
        setattr(dqn_cfg, key, value)
    dqn = DQNLearner(make_algorithm("dqn", spec, dqn_cfg), torch.device("cpu"), seed=5)
    exits = ExitDQNLearner(exit_algo(spec, exit_schedule="staged", **SETTINGS), torch.device("cpu"), seed=5)
    branch_before = [p.clone() for p in exits.q.branches.parameters()]
    for batch in batches(spec, 8):
        dqn.update(dict(batch))
        exits.update(dict(batch))
    mine = exits.q.state_dict()
    pairs = [("features.0", "blocks.0.0"), ("head.0", "blocks.1.0"), ("head.2", "head")]
    for theirs, ours in pairs:
        for kind in ("weight", "bias"):
            assert torch.equal(dqn.q.state_dict()[f"{theirs}.{kind}"], mine[f"{ours}.{kind}"]), (ours, kind)
    assert all(not torch.equal(a, b) for a, b in zip(branch_before, exits.q.branches.parameters()))  # they learned


def test_joint_schedule_trains_the_backbone_for_the_branches_too():
    spec = image_spec()
    staged = ExitDQNLearner(exit_algo(spec, exit_schedule="staged", **SETTINGS), torch.device("cpu"), seed=5)
    joint = ExitDQNLearner(exit_algo(spec, exit_schedule="joint", **SETTINGS), torch.device("cpu"), seed=5)
    batch = next(batches(spec, 1))
    staged.update(dict(batch))
    joint.update(dict(batch))
    assert not torch.equal(staged.q.blocks[0][0].weight, joint.q.blocks[0][0].weight)  # the branches' pull


def test_staged_branches_start_at_the_stage_boundary():
    spec = image_spec()
    learner = ExitDQNLearner(exit_algo(spec, exit_schedule="staged", exit_stage_start=3, **SETTINGS),
                             torch.device("cpu"), seed=0)
    before = [p.clone() for p in learner.q.branches.parameters()]
    stream = batches(spec, 4)
    for _ in range(3):
        learner.update(next(stream))
    assert all(torch.equal(a, b) for a, b in zip(before, learner.q.branches.parameters()))
    learner.update(next(stream))
    assert not all(torch.equal(a, b) for a, b in zip(before, learner.q.branches.parameters()))


def test_confidence_learns_whether_the_branch_agrees_with_the_final_head():
    """The confidence head's target is 1 where the branch's greedy action is the final head's and
    0 where it is not: the loss pushes its logit up on the first and down on the second."""
    learner = ExitDQNLearner(exit_algo(image_spec(), exit_target="td"), torch.device("cpu"), seed=1)
    final = torch.tensor([[1.0, 0.0, 0.0], [0.0, 2.0, 0.0], [0.0, 0.0, 3.0], [1.0, 2.0, 0.0]])
    branch = torch.tensor([[0.5, 0.0, 0.0], [1.0, 0.0, 0.0], [0.0, 0.0, 1.0], [0.0, 0.0, 9.0]])
    logits = torch.zeros(4, requires_grad=True)
    target = torch.zeros(4)
    learner.branch_loss(final, [branch], [logits], torch.zeros(4, 1, dtype=torch.int64), target, torch.ones(4)).backward()
    agrees = torch.tensor([True, False, True, False])
    assert (logits.grad[agrees] < 0).all() and (logits.grad[~agrees] > 0).all()  # descent raises / lowers them
    torch.testing.assert_close(logits.grad.abs(), torch.full((4,), 0.5 / 4))  # BCE at sigmoid(0) = 0.5, mean of 4


def test_a_confidence_tolerance_counts_a_nearly_tied_action_as_safe():
    """exit_confidence_tolerance: the confidence head's target is 1 where the final head values the
    branch's action within that share of the state's Q spread of its best, so a branch that takes a
    nearly tied action is confident there; a far worse action stays 0; 0 is the exact agreement."""
    from hetrl.algos.exit_dqn import branch_loss

    final = torch.tensor([[1.0, 0.98, 0.0], [1.0, 0.5, 0.0], [0.0, 2.0, 0.0]])
    branch = torch.tensor([[0.0, 1.0, 0.0], [0.0, 1.0, 0.0], [0.0, 1.0, 0.0]])  # action 1 on every state
    grads = {}
    for tolerance in (0.0, 0.05):
        logits = torch.zeros(3, requires_grad=True)
        branch_loss(final, [branch], [logits], torch.zeros(3, 1, dtype=torch.int64), torch.zeros(3), torch.ones(3),
                    "policy", 0.01, tolerance).backward()
        grads[tolerance] = logits.grad
    # gap 0.02 of a spread of 1: safe at 0.05, not at 0; gap 0.5: unsafe at both; the final head's own action: safe
    assert grads[0.0][0] > 0 and grads[0.05][0] < 0
    assert grads[0.0][1] > 0 and grads[0.05][1] > 0 and grads[0.0][2] < 0 and grads[0.05][2] < 0
    cfg = make_config("exit-dqn", "CartPole-v1").agent
    cfg.exit_confidence_tolerance = 1.5
    assert any("exit_confidence_tolerance must be in [0, 1]" in problem for problem in cfg.validate())


def test_policy_distillation_teaches_the_branch_the_final_heads_action_only():
    """exit_target=policy: descent on the branch loss makes the branch's greedy action the final
    head's on every state, from a start that disagrees on all of them; the Q-values' scale is left
    free (a shift of the branch's outputs costs nothing)."""
    learner = ExitDQNLearner(exit_algo(image_spec(), exit_target="policy"), torch.device("cpu"), seed=1)
    final = torch.tensor([[1.0, 0.9, 0.0], [0.0, 2.0, 1.99], [0.0, 0.5, 3.0], [-1.0, -2.0, -1.5]])
    branch = torch.tensor([[0.0, 1.0, 0.0], [0.0, 0.0, 1.0], [1.0, 0.0, 0.0], [0.0, 1.0, 0.0]], requires_grad=True)
    assert not (branch.argmax(dim=1) == final.argmax(dim=1)).any()
    args = (torch.zeros(4, 1, dtype=torch.int64), torch.zeros(4), torch.ones(4))
    optimizer = torch.optim.SGD([branch], lr=1.0)
    for _ in range(50):
        optimizer.zero_grad()
        learner.branch_loss(final, [branch], [torch.zeros(4)], *args).backward()
        optimizer.step()
    assert torch.equal(branch.argmax(dim=1), final.argmax(dim=1))  # margins of 0.1 and 0.01 included
    shifted = branch.detach() + 5.0
    same = learner.branch_loss(final, [branch.detach()], [torch.zeros(4)], *args)
    assert learner.branch_loss(final, [shifted], [torch.zeros(4)], *args).item() == pytest.approx(same.item(), abs=1e-5)


def test_a_non_positive_distillation_temperature_is_refused():
    cfg = make_config("exit-dqn", "CartPole-v1").agent
    cfg.exit_distill_temperature = 0.0
    assert any("exit_distill_temperature must be > 0" in problem for problem in cfg.validate())


# --- threshold, checkpoints, evaluation ----------------------------------------------------------
@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    path = tmp_path_factory.mktemp("exits") / "run"
    hetrl.train("exit-dqn", "CartPole-v1", steps=1_000, run_dir=path, progress=False, plan="rule", hidden=(64, 64),
                learning_starts=300, batch_size=32, eval_every=500, eval_episodes=2, seed=2)
    return path


def test_choose_takes_the_fewest_operations_at_the_score_ratio():
    def point(threshold, score, ops):
        return SweepPoint(threshold, 0.0, 0.0, score, 0.0, ops, [])

    points = [point(1.0, 1.0, 1.0), point(0.9, 0.97, 0.6), point(0.8, 0.92, 0.4), point(0.7, 0.85, 0.3)]
    assert choose(points, 0.9).threshold == 0.8
    assert choose(points, 0.99).threshold == 1.0  # the whole network always qualifies
    assert choose(points, 0.0).threshold == 0.7


def test_one_lucky_validation_score_does_not_choose_the_threshold():
    """0.4 scores 0.95 alone, but 0.5 above it (fewer exits) falls short: the monotone fit pools the
    two (0.895) and the choice stays at 0.6; a real plateau is kept."""
    def point(threshold, score, ops):
        return SweepPoint(threshold, 0.0, 0.0, score, 0.0, ops, [])

    noisy = [point(1.0, 1.0, 1.0), point(0.7, 1.02, 0.85), point(0.6, 0.93, 0.65), point(0.5, 0.84, 0.45),
             point(0.4, 0.95, 0.36), point(0.3, 0.85, 0.34)]
    fitted = monotone_scores(noisy)
    assert fitted[0.4] == fitted[0.5] == pytest.approx((0.84 + 0.95) / 2) and fitted[0.3] == 0.85
    assert all(fitted[a.threshold] >= fitted[b.threshold] for a, b in zip(noisy, noisy[1:]))  # falls with the threshold
    assert choose(noisy, 0.9).threshold == 0.6
    plateau = [point(1.0, 1.0, 1.0), point(0.6, 0.97, 0.5), point(0.4, 0.95, 0.36), point(0.3, 0.96, 0.34)]
    assert monotone_scores(plateau)[0.3] == pytest.approx(0.955)
    assert choose(plateau, 0.9).threshold == 0.3


def test_the_threshold_is_chosen_without_the_test_episodes(run_dir, monkeypatch):
    """Every episode the sweep plays is a validation episode: its seeds are none of those of the
    test episodes hetrl eval plays."""
    from hetrl import evaluation

    seeds = []
    make_env = evaluation.make_env

    def spying(*args, **kwargs):
        env = make_env(*args, **kwargs)
        reset = env.reset

        def recording_reset(*a, seed=None, **k):
            seeds.append(seed)
            return reset(*a, seed=seed, **k)

        env.reset = recording_reset
        return env

    monkeypatch.setattr(evaluation, "make_env", spying)
    from hetrl.exits import sweep

    result = sweep(run_dir, episodes=3, thresholds=(0.9, 0.5), timing=False, store=False, fit_updates=0)
    assert len(seeds) == 3 * 3  # three thresholds (the whole network's added), the same three episodes each
    assert set(seeds) == {2 + VALIDATION_SEED_OFFSET + i for i in range(3)}
    tests = {2 + EVAL_SEED_OFFSET + i for i in range(10_000)}
    assert not tests & set(seeds)
    assert [p.threshold for p in result.points] == [1.0, 0.9, 0.5] and result.point(1.0).score_ratio == 1.0
    seeds.clear()
    hetrl.evaluate(run_dir, 2)  # while the test episodes are these
    assert seeds == [2 + EVAL_SEED_OFFSET, 2 + EVAL_SEED_OFFSET + 1]


def test_save_and_load_keep_branches_and_threshold(run_dir, tmp_path):
    best = run_dir / "checkpoints" / "best.pt"
    final = max((run_dir / "checkpoints").glob("step_*.pt"))
    copy = tmp_path / final.name
    copy.write_bytes(final.read_bytes())
    assert store_threshold(best, 0.7) == 1  # the policy
    assert store_threshold(copy, 0.6) >= 3  # the learner's network, its target, the inline acting copy
    policy = hetrl.load(run_dir)  # best.pt
    assert isinstance(policy.network, ExitQNetwork) and policy.network.threshold == pytest.approx(0.7)
    state = torch.load(best, weights_only=False)["policy"]
    assert any(k.startswith("branches.0.confidence") for k in state)
    for name, value in policy.network.state_dict().items():
        assert torch.equal(value, state[name]), name
    # a periodic checkpoint restores the learner with its branches and threshold
    from hetrl.run.rundir import RunDir
    from hetrl.training import Session

    run = RunDir.open(run_dir)
    cfg = run.load_config()
    cfg.plan = "rule"
    session = Session.open(run, cfg, keep_plan=False)
    try:
        session.restore(copy, replay=False)  # the copy has no replay file beside it
        net = session.executor.policy_network
        assert isinstance(net, ExitQNetwork) and net.threshold == pytest.approx(0.6)
        saved = torch.load(copy, weights_only=False)["executor"]["learner"]["q"]
        for name, value in net.state_dict().items():
            assert torch.equal(value, saved[name]), name
    finally:
        session.executor.close()
    result = hetrl.evaluate(run_dir, 2)
    assert result.exits is not None and result.exits.threshold == pytest.approx(0.7)
    assert sum(result.exits.counts) > 0 and len(result.exits.counts) == 2


def test_an_exit_network_takes_the_branch_width_its_state_holds():
    """A branch's width travels with its weights: a network made with 16-unit branches loads a
    state of 5-unit or linear (0) branches and then computes what the state's own network does."""
    torch.manual_seed(0)
    made = ExitQNetwork((4, 10, 10), 3, ((16, 3, 1),), (32,), exits=(0,), branch_hidden=16, threshold=0.5)
    obs = torch.rand(64, 4, 10, 10)
    for width in (5, 0, 16):
        source = ExitQNetwork((4, 10, 10), 3, ((16, 3, 1),), (32,), exits=(0,), branch_hidden=width, threshold=0.5)
        made.load_state_dict(source.state_dict())
        assert made.branch_widths == [width] and made.macs(0) == source.macs(0)
        with torch.no_grad():
            assert torch.equal(made.act_forward(obs)[0], source.act_forward(obs)[0])
            _, branch_q, _ = made.heads(obs)
            assert torch.equal(branch_q[0], source.heads(obs)[1][0])
        q, exits = made.act_numpy(numpy_params(made), obs.numpy())
        assert np.allclose(q, source.act_forward(obs)[0].detach().numpy(), atol=1e-5)
    other = ExitQNetwork((4, 10, 10), 3, ((16, 3, 1),), (64,), exits=(0,), branch_hidden=5)
    with pytest.raises(RuntimeError, match="size mismatch"):  # the backbone must still match
        made.load_state_dict(other.state_dict())


def test_candidate_widths_step_down_from_the_runs_own():
    from hetrl.exits import candidate_widths

    assert candidate_widths(16) == (16, 12, 9)
    assert candidate_widths(64) == (64, 48, 36)
    assert candidate_widths(2) == (2, 1) and candidate_widths(1) == (1,) and candidate_widths(0) == (0,)


def test_choose_takes_the_cheapest_width_and_threshold_at_the_score():
    """Each width's thresholds are fit monotone on their own; the choice is over every pair."""
    def point(threshold, score, ops, width):
        return SweepPoint(threshold, 0.0, 0.0, score, 0.0, ops, [], branch_width=width if threshold < 1 else None)

    whole = point(1.0, 1.0, 1.0, None)
    wide = [point(0.5, 0.97, 0.5, 16), point(0.0, 0.95, 0.38, 16)]
    narrow = [point(0.5, 0.93, 0.45, 9), point(0.0, 0.91, 0.35, 9)]
    chosen = choose([whole, *wide, *narrow], 0.9)
    assert (chosen.threshold, chosen.branch_width) == (0.0, 9)
    chosen = choose([whole, *wide, *narrow], 0.94)  # the narrow branch falls short: the wide one at 0
    assert (chosen.threshold, chosen.branch_width) == (0.0, 16)
    lucky = [point(0.5, 0.80, 0.45, 9), point(0.0, 0.99, 0.35, 9)]  # pooled: 0.895, short of 0.9
    chosen = choose([whole, *wide, *lucky], 0.9)
    assert (chosen.threshold, chosen.branch_width) == (0.0, 16)
    assert choose([whole, *wide, *narrow], 0.999) is whole


def test_the_choice_keeps_a_margin_of_standard_errors():
    """A point whose validation ratio clears the bound by less than ``margin`` standard errors is
    passed over for a dearer one that clears it by more; without a margin it is taken."""
    from hetrl.exits import score_ratio_se

    base = np.array([4.0, 6.0, 5.0, 7.0, 3.0])
    assert score_ratio_se(base, base) == 0.0
    noisy = base + np.array([1.0, -2.0, 0.5, -1.5, 1.5])  # mean difference -0.1
    diff = noisy - base
    assert score_ratio_se(noisy, base) == pytest.approx(diff.std(ddof=1) / math.sqrt(5) / 5.0)
    assert score_ratio_se(noisy[:1], base[:1]) == 0.0 and score_ratio_se(noisy, np.zeros(5)) == 0.0

    def point(threshold, score, ops, width, se):
        return SweepPoint(threshold, 0.0, 0.0, score, 0.0, ops, [], branch_width=width, score_ratio_se=se)

    whole = SweepPoint(1.0, 0.0, 0.0, 1.0, 0.0, 1.0, [])
    edge = point(0.0, 0.93, 0.27, 9, 0.05)  # clears 0.9 by 0.6 standard errors
    safe = point(0.0, 1.02, 0.32, 16, 0.05)
    assert choose([whole, safe, edge], 0.9, margin=0.0) is edge
    assert choose([whole, safe, edge], 0.9, margin=1.0) is safe
    assert choose([whole, safe, edge], 0.9, margin=3.0) is whole


def test_the_monotone_fit_weighs_each_point_by_its_episodes():
    """Two thresholds out of order pool to their mean weighted by episodes: the one played three
    times as long counts three times."""
    def point(threshold, score, episodes):
        return SweepPoint(threshold, 0.0, 0.0, score, 0.0, 0.5, [], returns=[1.0] * episodes)

    fitted = monotone_scores([point(1.0, 1.0, 1200), point(0.5, 0.86, 1200), point(0.3, 0.94, 400)])
    assert fitted[0.5] == fitted[0.3] == pytest.approx((0.86 * 1200 + 0.94 * 400) / 1600) and fitted[1.0] == 1.0


def test_undecided_points_are_those_the_margin_could_tip():
    """Cheaper than the choice and within the margin of the line on either side: undecided. Clearly
    below, dearer than the choice, or the choice itself: not; without a margin nothing is."""
    from hetrl.exits import undecided

    def point(threshold, score, ops, se):
        return SweepPoint(threshold, 0.0, 0.0, score, 0.0, ops, [], branch_width=9, score_ratio_se=se)

    whole = SweepPoint(1.0, 0.0, 0.0, 1.0, 0.0, 1.0, [])
    safe = point(0.9, 1.0, 0.8, 0.02)  # the choice at margin 1
    near_above = point(0.5, 0.93, 0.5, 0.05)  # clears 0.9, not by a standard error
    near_below = point(0.3, 0.88, 0.4, 0.05)  # short of 0.9, within a standard error
    far_below = point(0.0, 0.7, 0.3, 0.05)
    points = [whole, safe, near_above, near_below, far_below]
    assert choose(points, 0.9, 1.0) is safe
    assert undecided(points, 0.9, 1.0) == [near_above, near_below]
    assert undecided(points, 0.9, 0.0) == []
    assert undecided(points, 0.9, 6.0) == [safe, near_above, near_below, far_below]  # the whole network is the choice


def test_more_episodes_go_to_undecided_points_on_the_next_seeds(run_dir, monkeypatch):
    """decide plays an undecided point its next validation seeds in steps of the sweep's episodes,
    up to the most, the whole network's point as far, and takes the ratio, its paired standard
    error and the exits again over all the episodes; the points it does not name keep theirs."""
    from hetrl import exits
    from hetrl.evaluation import evaluate_policy
    from hetrl.exits import ExitCounter, decide, score_ratio, score_ratio_se, sweep_policy

    policy = hetrl.load(run_dir)
    algo, net, env, seed = policy.algo, policy.network, "CartPole-v1", 2
    points = sweep_policy(algo, net, env, seed, 2, (0.0, 0.5), timing=False)
    whole, low, mid = points[0], points[2], points[1]
    assert (whole.threshold, mid.threshold, low.threshold) == (1.0, 0.5, 0.0) and whole.episodes == low.episodes == 2
    first, mid_before = list(low.returns), (list(mid.returns), mid.score_ratio)
    monkeypatch.setattr(exits, "undecided", lambda pts, *_: [low])  # the threshold-0 point stays undecided
    assert decide(algo, {(16, 1.0): net}, points, env, seed, 2, 7, 0.9, 1.0) == 3  # 2 -> 4 -> 6 -> 7
    assert low.episodes == whole.episodes == 7 and low.returns[:2] == first
    direct = ExitCounter(algo, net, 0.0)
    assert low.returns == evaluate_policy(direct, env, 7, seed, seed_offset=VALIDATION_SEED_OFFSET).tolist()
    base = np.asarray(whole.returns)
    assert low.score_ratio == pytest.approx(score_ratio(float(np.mean(low.returns)), float(base.mean())))
    assert low.score_ratio_se == pytest.approx(score_ratio_se(np.asarray(low.returns), base))
    assert low.decisions == int(direct.counts.sum()) and low.exit_fractions == [1.0, 0.0]
    assert low.return_mean == pytest.approx(np.mean(low.returns)) and whole.score_ratio == 1.0
    assert (list(mid.returns), mid.score_ratio) == mid_before  # not undecided: as it was
    assert decide(algo, {(16, 1.0): net}, points, env, seed, 2, 7, 0.9, 1.0) == 0  # at the most already


def test_the_cheapest_undecided_point_plays_first(run_dir, monkeypatch):
    """Each round extends the undecided point of fewest operations alone; once it is decided (here:
    played to the most), the next cheapest; a point decided in ends the rest (none dearer is undecided)."""
    from hetrl import exits
    from hetrl.exits import decide, sweep_policy

    policy = hetrl.load(run_dir)
    algo, net, env, seed = policy.algo, policy.network, "CartPole-v1", 2
    points = sweep_policy(algo, net, env, seed, 2, (0.0, 0.5), timing=False)
    whole, mid, low = points
    assert low.ops_ratio < mid.ops_ratio
    played = []
    play = exits._play_more
    monkeypatch.setattr(exits, "_play_more", lambda a, n, p, e, s, goal, atari: (played.append((p.threshold, goal)) if p is not whole else None,
                                                                                 play(a, n, p, e, s, goal, atari)))
    monkeypatch.setattr(exits, "undecided", lambda pts, *_: [p for p in (mid, low) if p.episodes < 6])
    assert decide(algo, {(16, 1.0): net}, points, env, seed, 2, 6, 0.9, 1.0) == 4
    assert played == [(0.0, 4), (0.0, 6), (0.5, 4), (0.5, 6)]
    assert whole.episodes == low.episodes == mid.episodes == 6
    played.clear()
    monkeypatch.setattr(exits, "undecided", lambda pts, *_: [mid, low] if not played else [])  # low decided in
    for p in points:
        p.returns = p.returns[:2]
    assert decide(algo, {(16, 1.0): net}, points, env, seed, 2, 6, 0.9, 1.0) == 1
    assert played == [(0.0, 4)]


@contextlib.contextmanager
def resumed_session(run_dir, checkpoint, **agent):
    """A training session of ``run_dir`` (its config, with ``agent`` settings changed) resumed
    from ``checkpoint``, closed on the way out."""
    from hetrl.run.rundir import RunDir
    from hetrl.training import Session

    run = RunDir.open(run_dir)
    cfg = run.load_config()
    cfg.plan = "rule"
    for key, value in agent.items():
        setattr(cfg.agent, key, value)
    session = Session.open(run, cfg, keep_plan=False)
    try:
        session.restore(checkpoint, replay=False)
        yield session
    finally:
        session.executor.close()


def test_a_checkpoint_takes_branches_of_another_width(run_dir, tmp_path):
    """store_threshold with 5-unit branches on a checkpoint trained with 16: every exit network
    state holds them (the policy loads them, the learner's Adam moments of the branches start
    afresh), the checkpoint's config says exit_hidden=5, and resuming it under the run's 16 names
    that setting, while the run at 5 resumes it."""
    final = max((run_dir / "checkpoints").glob("step_*.pt"))
    copy = tmp_path / final.name
    copy.write_bytes(final.read_bytes())
    net = hetrl.load(run_dir, copy).network
    torch.manual_seed(3)
    net.set_branch_width(5)
    assert store_threshold(copy, 0.4, net) >= 3
    saved = torch.load(copy, weights_only=False)
    assert saved["config"]["agent"]["exit_hidden"] == 5
    learner = saved["executor"]["learner"]
    n_params = len(list(net.parameters()))
    first_branch = next(i for i, (name, _) in enumerate(net.named_parameters()) if name.startswith("branches."))
    assert learner["optimizer"]["param_groups"][0]["params"] == list(range(n_params))
    assert set(learner["optimizer"]["state"]) == set(range(first_branch))  # the backbone's moments kept
    loaded = hetrl.load(run_dir, copy).network
    assert loaded.branch_widths == [5] and loaded.threshold == pytest.approx(0.4)
    for name, value in net.state_dict().items():
        if name != "exit_threshold":
            assert torch.equal(loaded.state_dict()[name], value), name
    result = hetrl.evaluate(run_dir, 2, checkpoint=copy)  # evaluation plays the stored branches
    assert result.exits is not None and result.exits.threshold == pytest.approx(0.4)
    assert result.exits.macs_mean == pytest.approx(loaded.mean_macs(result.exits.counts))
    with pytest.raises(HetrlError, match="exit_hidden: 5 -> 16"), resumed_session(run_dir, copy):
        pass
    with resumed_session(run_dir, copy, exit_hidden=5) as session:
        resumed = session.executor.policy_network
        assert resumed.branch_widths == [5]
        for name, value in loaded.state_dict().items():
            assert torch.equal(resumed.state_dict()[name], value), name
        learner = session.executor.learner  # its optimizer holds the 5-unit branches it trains
        held = {id(q) for group in learner.optimizer.param_groups for q in group["params"]}
        assert {id(q) for q in learner.q.parameters()} == held


def test_a_checkpoint_takes_branches_on_another_share(run_dir, tmp_path):
    """Branches on half of block 0's units stored in a checkpoint trained with branches on all of
    them: the policy and evaluation play them, the checkpoint's config says exit_share=0.5, and a
    resume under the run's share names that setting, while the run at that share resumes it."""
    final = max((run_dir / "checkpoints").glob("step_*.pt"))
    copy = tmp_path / final.name
    copy.write_bytes(final.read_bytes())
    net = hetrl.load(run_dir, copy).network
    torch.manual_seed(4)
    net.set_branch_width(16, share=0.5)
    assert net.branch_shares == [0.5] and net.branches[0].in_features == 32
    assert store_threshold(copy, 0.3, net, 0.5) >= 3
    assert torch.load(copy, weights_only=False)["config"]["agent"]["exit_share"] == 0.5
    loaded = hetrl.load(run_dir, copy).network
    assert loaded.branch_shares == [0.5] and loaded.exit_names()[0] == "after block 0 (32 of 64 units)"
    result = hetrl.evaluate(run_dir, 2, checkpoint=copy)
    assert result.exits.macs_mean == pytest.approx(loaded.mean_macs(result.exits.counts))
    with pytest.raises(HetrlError, match="exit_share: 0.5 -> 1"), resumed_session(run_dir, copy):
        pass
    with resumed_session(run_dir, copy, exit_share=0.5) as session:
        assert session.executor.policy_network.branch_shares == [0.5]
        assert session.executor.learner.q.branches[0].in_features == 32


def test_candidate_branches_scale_the_width_ladder_with_the_share():
    from hetrl.exits import candidate_branches

    assert candidate_branches(16) == [(16, 1.0), (12, 1.0), (9, 1.0)]
    assert candidate_branches(16, 1.0, (1.0, 0.5)) == [(16, 1.0), (12, 1.0), (9, 1.0), (32, 0.5), (24, 0.5), (18, 0.5)]
    assert candidate_branches(16, 0.5, (0.5, 0.25), [9, 64]) == [(9, 0.5), (64, 0.5), (9, 0.25), (64, 0.25)]
    assert candidate_branches(0, 1.0, (1.0, 0.5)) == [(0, 1.0), (0, 0.5)]


def test_choose_keeps_each_share_apart():
    """Two candidates of one width on other shares are fit monotone apart: the pooled curve of one
    does not lift the other's."""
    def point(threshold, score, ops, width, share):
        return SweepPoint(threshold, 0.0, 0.0, score, 0.0, ops, [], branch_width=width, branch_share=share)

    whole = SweepPoint(1.0, 0.0, 0.0, 1.0, 0.0, 1.0, [])
    full = [point(0.5, 0.98, 0.5, 16, 1.0), point(0.0, 0.95, 0.38, 16, 1.0)]
    half = [point(0.5, 0.86, 0.3, 16, 0.5), point(0.0, 0.93, 0.22, 16, 0.5)]  # pooled: 0.895
    chosen = choose([whole, *full, *half], 0.9)
    assert (chosen.threshold, chosen.branch_width, chosen.branch_share) == (0.0, 16, 1.0)
    good = [point(0.5, 0.96, 0.3, 16, 0.5), point(0.0, 0.92, 0.22, 16, 0.5)]
    chosen = choose([whole, *full, *good], 0.9)
    assert (chosen.threshold, chosen.branch_share) == (0.0, 0.5)


def test_cli_sweep_fits_and_stores_branches_on_a_share(run_dir, tmp_path, capsys):
    out = tmp_path / "sweep"
    final = max((run_dir / "checkpoints").glob("step_*.pt"))
    copy = tmp_path / final.name
    copy.write_bytes(final.read_bytes())
    assert main(["exits", "sweep", str(run_dir), "--checkpoint", str(copy), "--episodes", "2", "--thresholds", "0",
                 "--widths", "9", "--shares", "1,0.5", "--fit-updates", "200", "--no-timing", "--out", str(out),
                 "--min-score-ratio", "0"]) == 0
    text = capsys.readouterr().out
    assert "| 9 units on 0.5 of the block | 0 " in text and "branches of 9 units; 9 units on 0.5 of the block" in text
    data = json.loads((out / "sweep.json").read_text())
    assert data["widths"] == [9, 9] and data["shares"] == [1.0, 0.5] and [f["share"] for f in data["fits"]] == [1.0, 0.5]
    zeros = [p for p in data["points"] if p["threshold"] == 0.0]
    assert [(p["branch_width"], p["branch_share"]) for p in zeros] == [(9, 1.0), (9, 0.5)]
    assert zeros[1]["ops_ratio"] < zeros[0]["ops_ratio"]  # half the block before the exit
    # with no score to hold, the cheapest: the branch on half the block, stored with its threshold
    assert (data["chosen"], data["chosen_width"], data["chosen_share"]) == (0.0, 9, 0.5)
    loaded = SweepResult.load(out / "sweep.json")
    assert loaded.fit is not None and loaded.fit.share == 0.5 and loaded.chosen_point.branch_share == 0.5
    policy = hetrl.load(run_dir, copy)
    assert policy.network.branch_shares == [0.5] and policy.network.branch_widths == [9]
    assert "--set exit_hidden=9 --set exit_share=0.5" in text
    assert "held-out states, as trained -> fit" in text
    assert main(["exits", "sweep", str(run_dir), "--checkpoint", str(copy), "--shares", "0", "--no-timing"]) != 0
    assert "branch shares must be in (0, 1]" in capsys.readouterr().err
    # a second sweep of that checkpoint does not call the branches the first one stored the trained ones
    assert main(["exits", "sweep", str(run_dir), "--checkpoint", str(copy), "--episodes", "1", "--thresholds", "0",
                 "--widths", "9", "--shares", "0.5", "--fit-updates", "20", "--fit-rounds", "0", "--no-timing",
                 "--no-store", "--out", str(tmp_path / "again")]) == 0
    assert "held-out states, as an earlier sweep fit and stored them -> fit" in capsys.readouterr().out
    assert not fitted_before(final) and fitted_before(copy)


def test_cli_sweep_fits_on_the_branchs_own_play(run_dir, tmp_path, capsys, monkeypatch):
    from hetrl import exits

    monkeypatch.setattr(exits, "FIT_PLAY_EPISODES", 2)
    out = tmp_path / "sweep"
    assert main(["exits", "sweep", str(run_dir), "--episodes", "2", "--thresholds", "0", "--widths", "9",
                 "--fit-updates", "60", "--fit-rounds", "1", "--no-timing", "--no-store", "--out", str(out)]) == 0
    assert "of their own play's (1 round)" in capsys.readouterr().out
    fit = SweepResult.load(out / "sweep.json").fits[0]
    assert fit.rounds == 1 and fit.play_states > 0 and fit.updates == 90
    assert main(["exits", "sweep", str(run_dir), "--fit-rounds", "-1", "--no-timing", "--no-store"]) != 0
    assert "fit rounds must be >= 0" in capsys.readouterr().err
    assert main(["exits", "sweep", str(run_dir), "--fit-rounds", "1", "--fit-updates", "0", "--no-timing",
                 "--no-store"]) != 0
    assert "need the fit: give fit updates > 0" in capsys.readouterr().err


def test_a_sweep_of_a_td_run_fits_on_the_replay_alone(run_dir, tmp_path):
    """A TD target learns from transitions, which the branch's own play does not give: by default
    its sweep fits on the replay alone; rounds asked for are refused before any fit."""
    import shutil

    from hetrl.exits import sweep

    td = tmp_path / "td"
    shutil.copytree(run_dir, td)
    config = json.loads((td / "config.json").read_text())
    config["agent"]["exit_target"] = "td"
    (td / "config.json").write_text(json.dumps(config))
    result = sweep(td, episodes=1, thresholds=(0.0,), store=False, timing=False, fit_updates=20, widths=[9],
                   out=tmp_path / "out")
    assert result.fits[0].rounds == 0 and result.fits[0].play_states == 0
    with pytest.raises(HetrlError, match="exit_target 'td' learns from them; give --fit-rounds 0"):
        sweep(td, episodes=1, store=False, timing=False, fit_updates=20, fit_rounds=2, out=tmp_path / "out")


def test_cli_sweep_fits_confidence_heads_to_a_tolerance(run_dir, tmp_path, capsys):
    out = tmp_path / "sweep"
    assert main(["exits", "sweep", str(run_dir), "--episodes", "2", "--thresholds", "0.5", "--widths", "9",
                 "--fit-updates", "60", "--confidence-tolerance", "0.1", "--no-timing", "--no-store",
                 "--out", str(out)]) == 0
    assert "confidence within 0.1 of each state's Q spread" in capsys.readouterr().out
    assert SweepResult.load(out / "sweep.json").fits[0].tolerance == 0.1
    assert json.loads((run_dir / "config.json").read_text())["agent"]["exit_confidence_tolerance"] == 0.0  # the run's own
    assert main(["exits", "sweep", str(run_dir), "--confidence-tolerance", "2", "--no-timing", "--no-store"]) != 0
    assert "the confidence tolerance is a share of a state's spread of Q-values in [0, 1]" in capsys.readouterr().err


def test_cli_sweep_refuses_fewer_most_episodes_than_episodes(run_dir, capsys):
    assert main(["exits", "sweep", str(run_dir), "--episodes", "4", "--max-episodes", "2", "--no-timing",
                 "--no-store"]) != 0
    assert "the most validation episodes a point plays (2) is below the episodes every point plays (4)" in capsys.readouterr().err


@pytest.mark.parametrize("target", ["policy", "both"])
def test_the_branch_fit_on_the_backbones_kept_outputs_is_the_fit_per_batch(monkeypatch, target):
    """The fit keeps the frozen backbone's outputs on its states (computed once) where they fit in
    memory; the branches it gives are those of computing them batch by batch."""
    from hetrl import exits
    from hetrl.cosearch.teacher import TeacherData

    torch.manual_seed(1)
    net = ExitQNetwork((4, 10, 10), 3, ((8, 3, 1),), (32,), exits=(-1, 0), branch_hidden=8)
    n = 600
    obs = torch.randint(0, 2, (n, 4, 10, 10), dtype=torch.uint8)
    with torch.no_grad():
        q = net.final(obs)
    data = TeacherData(obs, torch.randint(0, 3, (n,)), torch.rand(n), obs.roll(1, 0), torch.full((n,), 0.99), q, "test")
    cfg = exit_algo(exit_target=target).config
    fitted = []
    for budget in (exits.FIT_CACHE_BYTES, 0):  # kept, then per batch
        monkeypatch.setattr(exits, "FIT_CACHE_BYTES", budget)
        copy_ = ExitQNetwork((4, 10, 10), 3, ((8, 3, 1),), (32,), exits=(-1, 0), branch_hidden=8)
        copy_.load_state_dict(net.state_dict())
        exits.fit_branches(copy_, data, cfg, updates=60, seed=0)
        fitted.append(copy_.state_dict())
    assert exits._backbone_outputs(net, data, True) is None  # no budget: nothing kept
    for name, value in fitted[0].items():
        assert torch.allclose(value, fitted[1][name], atol=1e-5), name


def test_the_branch_fit_teaches_a_fresh_branch_the_final_heads_actions():
    """fit_branches: from fresh branch weights, with the backbone and final head frozen, the branch
    comes to take the final head's action on most held-out states (a random network's branch agrees
    about as often as chance)."""
    from hetrl.cosearch.teacher import TeacherData
    from hetrl.exits import branch_agreement, fit_branches

    torch.manual_seed(0)
    n_actions = 4
    net = ExitQNetwork((6,), n_actions, (), (64, 64), exits=(0,), branch_hidden=16)
    obs = torch.randn(4000, 6)
    with torch.no_grad():
        q = net.final(obs)
    data = TeacherData(obs, torch.zeros(4000, dtype=torch.int64), torch.zeros(4000), obs, torch.zeros(4000), q, "test")
    backbone = {k: v.clone() for k, v in net.state_dict().items() if not k.startswith("branches.")}
    cfg = exit_algo(exit_target="policy").config
    fit = fit_branches(net, data, cfg, updates=1500, seed=0)
    assert fit.agreement_before[0] < 0.6 and fit.agreement_after[0] > 0.9
    assert fit.agreement_after == pytest.approx(branch_agreement(net, obs[-400:]), abs=0.05)
    for name, value in net.state_dict().items():  # frozen
        if name in backbone:
            assert torch.equal(value, backbone[name]), name
    assert "after block 0" in fit.describe(net.exit_names()[:-1])


def test_the_fit_on_own_play_adds_the_branchs_states_on_their_own_seeds(run_dir, monkeypatch):
    """fit_on_own_play (DAgger): each round the branch alone plays episodes on seeds apart from the
    validation and test episodes, the states it met join the training states (not the held-out
    ones, so agreement stays comparable), and the fit goes on from the branch's weights; the backbone
    and final head stay frozen."""
    from hetrl import evaluation, exits
    from hetrl.cosearch.teacher import Teacher

    monkeypatch.setattr(exits, "FIT_PLAY_EPISODES", 2)
    played, fits = [], []
    evaluate = exits.evaluate_policy

    def spying_evaluate(policy, env, episodes, seed, atari=None, seed_offset=evaluation.EVAL_SEED_OFFSET, **kw):
        played.append((episodes, seed + seed_offset, getattr(policy, "threshold", None)))
        return evaluate(policy, env, episodes, seed, atari, seed_offset, **kw)

    fit_branches = exits.fit_branches

    def spying_fit(network, data, config, updates, seed, *args, **kwargs):
        fits.append((updates, None if kwargs.get("play") is None else len(kwargs["play"]), kwargs.get("fresh", True)))
        return fit_branches(network, data, config, updates, seed, *args, **kwargs)

    monkeypatch.setattr(exits, "evaluate_policy", spying_evaluate)
    monkeypatch.setattr(exits, "fit_branches", spying_fit)
    teacher = Teacher(run_dir)
    policy, data = teacher.policy, teacher.data(2_000, "auto", 2)
    net = policy.network
    backbone = {k: v.clone() for k, v in net.state_dict().items() if not k.startswith("branches.")}
    plain = fit_branches(hetrl.load(run_dir).network, data, policy.algo.config, 50, 2, width=9)
    fit = exits.fit_on_own_play(policy.algo, net, data, "CartPole-v1", 2, rounds=2, updates=50, width=9)
    assert [p[0] for p in played] == [2, 2] and all(p[2] == 0.0 for p in played)  # the branch takes every decision
    starts = [p[1] for p in played]
    assert starts == [2 + exits.FIT_PLAY_SEED_OFFSET, 2 + exits.FIT_PLAY_SEED_OFFSET + 2]  # rounds apart
    tests = range(2 + EVAL_SEED_OFFSET, 2 + EVAL_SEED_OFFSET + 10_000)
    validation = range(2 + VALIDATION_SEED_OFFSET, 2 + VALIDATION_SEED_OFFSET + 10_000)
    assert not any(s + i in tests or s + i in validation for s in starts for i in range(2))
    assert len(fits) == 3 and fits[0][:2] == (50, None)  # the fit on the replay first
    assert [f[0] for f in fits[1:]] == [25, 25] and all(f[2] is False for f in fits[1:])  # then on from its weights
    assert 0 < fits[1][1] < fits[2][1] == fit.play_states  # each round's states join the earlier ones'
    assert fit.rounds == 2 and fit.updates == 100 and fit.widths == [9]
    assert fit.agreement_before == plain.agreement_before  # the same held-out states
    assert "of their own play's (2 rounds)" in fit.describe(net.exit_names()[:-1])
    for name, value in net.state_dict().items():
        if name in backbone:
            assert torch.equal(value, backbone[name]), name
    monkeypatch.setattr(exits, "FIT_PLAY_DECISIONS", 3)  # a round's play stops after its decisions (long games)
    capped = exits.fit_on_own_play(policy.algo, net, data, "CartPole-v1", 2, rounds=2, updates=20, width=9)
    assert 0 < capped.play_states <= 2 * 4  # two episodes a step: stopped at the step that passed 3
    with pytest.raises(HetrlError, match="rounds of the branch fit on its own play must be >= 0"):
        exits.fit_on_own_play(policy.algo, net, data, "CartPole-v1", 2, rounds=-1)


def test_the_fit_on_own_play_needs_a_target_the_final_head_labels():
    """States of the branch's play carry no transitions: a TD target cannot learn from them, and the
    fit says so instead of fitting to zeros; nor does a fit that goes on from the weights change them."""
    from hetrl.cosearch.teacher import TeacherData
    from hetrl.exits import fit_branches

    net = ExitQNetwork((6,), 3, (), (32, 32), exits=(0,), branch_hidden=8)
    obs = torch.randn(200, 6)
    data = TeacherData(obs, torch.zeros(200, dtype=torch.int64), torch.zeros(200), obs, torch.zeros(200),
                       torch.zeros(200, 3), "test")
    grown = data.with_states(torch.randn(50, 6), "and more")
    assert len(grown) == 250 and grown.rewards[200:].abs().sum() == 0 and grown.discounts[200:].abs().sum() == 0
    assert torch.equal(grown.next_obs[200:], grown.obs[200:]) and grown.source == "test and more"
    with pytest.raises(HetrlError, match="exit_target 'td' learns from transitions"):
        fit_branches(net, data, exit_algo(exit_target="td").config, 10, play=torch.randn(20, 6))
    with pytest.raises(HetrlError, match="keeps their width and share"):
        fit_branches(net, data, exit_algo().config, 10, width=4, fresh=False)


def test_cli_sweep_and_eval_report_exits(run_dir, tmp_path, capsys):
    out = tmp_path / "sweep"
    before = {k: v.clone() for k, v in hetrl.load(run_dir).network.state_dict().items()}
    assert main(["exits", "sweep", str(run_dir), "--episodes", "2", "--thresholds", "0.9,0", "--out", str(out),
                 "--fit-updates", "300"]) == 0
    text = capsys.readouterr().out
    assert "| branch | threshold |" in text and "Chosen: " in text and "branches fit to the trained network" in text
    assert "with 1 standard error to spare" in text and "up to 8" in text  # more episodes: 4x by default
    policy = hetrl.load(run_dir)
    fitted = policy.network.state_dict()  # the fitted branches are stored with the threshold
    assert torch.equal(fitted["head.weight"], before["head.weight"])
    data = json.loads((out / "sweep.json").read_text())
    # the run's 16-unit branches and two narrower widths, each fit, then swept (the whole network once)
    assert data["trained_width"] == 16 and data["widths"] == [16, 12, 9]
    assert [f["widths"] for f in data["fits"]] == [[16], [12], [9]]
    # by default the fit goes on over 3 rounds of the branch's own play, each half the replay fit's updates
    assert all(f["updates"] == 300 + 3 * 150 and f["rounds"] == 3 and f["play_states"] > 0
               and len(f["agreement_after"]) == 1 for f in data["fits"])
    assert [(p["threshold"], p["branch_width"]) for p in data["points"]] == [
        (1.0, None), (0.9, 16), (0.0, 16), (0.9, 12), (0.0, 12), (0.9, 9), (0.0, 9)]
    # each validation episode's: 2, or more for a point within the margin of the line (up to 4x: 8)
    assert all(len(p["returns"]) in (2, 4, 6, 8) and p["score_ratio_se"] >= 0 for p in data["points"])
    assert data["max_episodes"] == 8 and len(data["points"][0]["returns"]) == max(len(p["returns"]) for p in data["points"])
    zeros = [p for p in data["points"] if p["threshold"] == 0.0]  # threshold 0: every decision leaves at the branch
    assert all(z["exit_fractions"] == [1.0, 0.0] and z["ops_ratio"] < 0.5 for z in zeros)
    assert zeros[0]["ops_ratio"] > zeros[1]["ops_ratio"] > zeros[2]["ops_ratio"]  # a narrower branch, fewer MACs
    assert zeros[0]["latency_b1_us"] > 0 and data["points"][0]["latency_ratio_b1"] == 1.0
    assert (out / "sweep.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and (out / "sweep.md").exists()
    chosen, width = data["chosen"], data["chosen_width"]
    loaded = SweepResult.load(out / "sweep.json")  # read back as the sweep wrote it
    assert loaded.chosen_point.threshold == chosen and loaded.fit is not None and loaded.fit.widths == [width]
    with pytest.raises(HetrlError, match="is not a sweep"):
        SweepResult.load(out / "sweep.md")
    assert policy.network.threshold == pytest.approx(chosen) and policy.network.branch_widths == [width]
    if width == 16:
        assert not torch.equal(fitted["branches.0.q.weight"], before["branches.0.q.weight"])
    assert main(["eval", str(run_dir), "--episodes", "2"]) == 0
    text = capsys.readouterr().out
    assert "multiply-accumulates per decision" in text and "exits" in text
    assert main(["exits", "sweep", str(run_dir), "--episodes", "2", "--thresholds", "2"]) == 2


def test_train_exit_dqn_on_minatar_from_the_cli(tmp_path, capsys):
    path = tmp_path / "minatar"
    assert main(["train", "exit-dqn", "MinAtar/Breakout-v1", "--steps", "600", "--plan", "rule", "--run-dir", str(path),
                 "--set", "learning_starts=300", "--set", "eval_episodes=2", "--set", "act_with_exits=true",
                 "--no-progress"]) == 0
    config = json.loads((path / "config.json").read_text())
    assert config["algo"] == "exit-dqn" and config["agent"]["lr"] == 1e-4  # dqn's MinAtar row
    net = hetrl.load(path).network
    assert isinstance(net, ExitQNetwork) and net.exits == (0,) and net.threshold == pytest.approx(0.9)


# --- acting under every executor ---------------------------------------------------------------
def mixed_exits(net, obs):
    """Confidence weights that send some of ``obs`` out at the branch at threshold 0.5."""
    with torch.no_grad():
        branch = net.branches[0]
        g = torch.Generator().manual_seed(0)
        branch.confidence.weight.copy_(torch.randn(branch.confidence.weight.shape, generator=g))
        features = net.blocks[0](net._input(torch.as_tensor(obs)))
        logits = branch.confidence(net._branch_features(0, features)).squeeze(1)
        branch.confidence.bias.sub_(logits.median())  # half above 0, half below
        net.set_threshold(0.5)


@pytest.mark.parametrize("inference", ["actor", "central"])
def test_local_executor_acts_as_inline(inference):
    """Actor processes (their own acting copy, weights and threshold through shared memory) and
    central inference choose, for every observation they met, the action the inline Act chooses on
    it with the same network."""
    from hetrl.planner.rule import default_placement
    from hetrl.runtime.local import LocalExecutor

    spec = env_spec("CartPole-v1")
    algo = exit_algo(spec, hidden=(32, 32), learning_starts=0, batch_size=16, eps_start=0.0, eps_end=0.0,
                     lr=1e-30, replay_ratio=0.25, train_every=1, act_with_exits=True)
    placement = replace(default_placement(torch.device("cpu"), (1, 1), threads=1, mlp_policy=False),
                        act=Slot("torch", "cpu"))
    ex = LocalExecutor(algo, placement, 2, seed=0, actors=1, log=lambda m: None, inference=inference)
    net = ex.learner.policy_network
    probe = np.random.default_rng(0).uniform(-0.2, 0.2, (256, 4)).astype(np.float32)
    mixed_exits(net, probe)  # before the executor starts: the actors take these weights
    try:
        while ex.env_steps < 300:
            ex.iteration()
        state = ex.state_dict()
    finally:
        ex.close()
    replay = state["replay"]
    obs, actions = replay["obs"][:replay["size"]], replay["actions"][:replay["size"]]
    inline = build("Act", Slot("torch", "cpu"), algo, 0, source=net)
    host = build("Act", Slot("numpy", "cpu"), algo, 0, source=net)
    ones = np.ones(len(obs), np.float32)  # explore draws above epsilon: greedy
    np.testing.assert_array_equal(inline.act(obs, ones, np.zeros(len(obs), np.int64), 0.0), actions)
    np.testing.assert_array_equal(host.act(obs, ones, np.zeros(len(obs), np.int64), 0.0), actions)
    with torch.no_grad():
        exits = net.act_forward(torch.as_tensor(obs))[1]
    assert 0 < int((exits == 0).sum()) < len(obs)  # some decisions left early, some did not
