"""The FPGA accelerator searched jointly with the agent (hetrl.cosearch.accelerator): its expected
cost is the evaluated design at one-hot choices and the exact expectation otherwise, gradients reach
its logits, the search derives a design within the budget (smaller ones for smaller budgets), and
the fixed equal-share mode is what it was."""

import itertools
import math

import pytest
import torch

from hetrl.algos.base import seeded_init
from hetrl.cosearch.accelerator import JointSearchCost, SearchCost, axis_values, search_cost
from hetrl.cosearch.cost import hardware_cost
from hetrl.cosearch.fpga import (BRAM_BITS, Budget, Parallelism, allocate, evaluate, position_stages,
                                 stage_cost)
from hetrl.cosearch.search import SearchConfig, Searcher, search
from hetrl.cosearch.supernet import SuperNet
from hetrl.errors import HetrlError
from test_cosearch_fpga import device
from test_cosearch_supernet import one_thread, teacher_data, tiny_space  # noqa: F401 (one_thread: an autouse fixture)

# tiny_space: 2 conv layers of {conv 3x3, sepconv 3x3} x {2, 4} channels and a skip, dense {8, 16}, the output layer
CHOICE = [1, 2, 1, 0]  # conv3x3-4 -> sep3x3-2 -> dense-16 -> output


def pin(cost: JointSearchCost, options: list[tuple[int, int, int]], precision: str | None = None) -> None:
    """Make the accelerator's probabilities one-hot at ``options`` (one (p_in, p_out, p_pos) per position)."""
    with torch.no_grad():
        for grid, axes, values in zip(cost.grids, cost.option_logits, options, strict=True):
            for axis_grid, logits, value in zip(grid, axes, values):
                logits.fill_(-1e4)
                logits[axis_grid.index(value)] = 0.0
        if precision is not None:
            cost.precision_logits.fill_(-1e4)
            cost.precision_logits[cost.precisions.index(precision)] = 0.0


def test_the_offered_parallelism_is_powers_of_two_capped_per_layer():
    assert axis_values(1) == (1,) and axis_values(4) == (1, 2, 4) and axis_values(5) == (1, 2, 4, 8)
    assert axis_values(3136, 64) == (1, 2, 4, 8, 16, 32, 64)
    cost = JointSearchCost(tiny_space(), device())
    # conv positions: p_in up to 2 (observation channels) then 4; p_out up to 4; 25 positions -> 32
    assert cost.grids[0] == ((1, 2), (1, 2, 4), (1, 2, 4, 8, 16, 32))
    assert cost.grids[1] == ((1, 2, 4), (1, 2, 4), (1, 2, 4, 8, 16, 32))
    assert cost.grids[2] == ((1, 2, 4, 8, 16, 32, 64), (1, 2, 4, 8, 16), (1,))  # 100 input features, capped at 64
    assert cost.grids[3] == ((1, 2, 4, 8, 16), (1, 2, 4), (1,))


@pytest.mark.parametrize("precision", ["int16", "int8"])
def test_the_expected_cost_at_one_hot_choices_is_the_evaluated_design(precision):
    space, dev = tiny_space(), device()
    cost = JointSearchCost(space, dev, precisions=("int8", "int16"))
    options = [(2, 4, 4), (2, 2, 8), (8, 4, 1), (8, 2, 1)]  # 32 + (16 + 32) + 32 + 16 = 128 DSPs at int16: the part's
    pin(cost, options, precision)
    positions = position_stages(space, CHOICE)
    layers = [layer for stages in positions for layer in stages]
    assert [layer.kind for layer in layers] == ["conv", "dwconv", "conv", "linear", "linear"]
    per_stage = [Parallelism(*p) for p, stages in zip(options, positions) for _ in stages]
    design = evaluate(layers, per_stage, ["bram"] * len(layers), dev, precision)
    expected = cost.expected(SuperNet(space).gates(CHOICE))
    # DSPs and BRAM36s (all weights in BRAM, port blocks included) exactly; the bottleneck within the smooth max's bound
    assert expected.dsp.item() == design.dsp
    assert expected.onchip_bits.item() == design.bram36 * BRAM_BITS
    interval = design.interval_cycles
    assert interval <= expected.bottleneck_cycles.item() <= interval * (1 + 0.05 * math.log(len(positions)))
    derived = cost.derive(CHOICE)  # the argmax design is that one (it fits the small part: no repair)
    assert derived.design.parallelism == design.parallelism and derived.design.precision == precision
    assert not derived.repaired and not derived.design.over() and cost.derived_cost(CHOICE) == interval


def test_the_expected_resources_are_the_average_over_every_network_and_option():
    space, dev = tiny_space(), device()
    cost = JointSearchCost(space, dev)
    torch.manual_seed(0)
    with torch.no_grad():
        for logits in cost.parameters():
            logits.copy_(torch.randn_like(logits))
    probs = [torch.randn(len(layer.candidates), dtype=torch.float64).softmax(0) for layer in space.layers]
    options = cost.option_probs()
    total = 0.0
    for choice in itertools.product(*(range(len(layer.candidates)) for layer in space.layers)):
        weight = math.prod(p[c].item() for p, c in zip(probs, choice))
        for grid, axes, stages in zip(cost.grids, options, position_stages(space, choice)):
            for values in itertools.product(*(range(len(g)) for g in grid)):
                q = math.prod(axis[v].item() for axis, v in zip(axes, values))
                p = Parallelism(*(g[v] for g, v in zip(grid, values)))
                total += weight * q * sum(stage_cost(layer, p, "bram", "int16", dev).dsp for layer in stages)
    assert cost.expected(probs).dsp.item() == pytest.approx(total, rel=1e-9)


@pytest.mark.parametrize("mode, weight", [("one-level", 0.5), ("bi-level", 0.5), ("one-level", 0.0)])
def test_gradients_reach_the_accelerator_logits_and_the_searcher_steps_them(mode, weight):
    space, data = tiny_space(), teacher_data(n=64)
    tight = Budget(dsp=8, bram36=50, uram=0, ddr_gb_per_s=1)  # the uniform start is over it: the penalty acts
    cost = JointSearchCost(space, device(), precisions=("int8", "int16"), budget=tight)
    with seeded_init(0):
        net = SuperNet(space)
    searcher = Searcher(net, SearchConfig(mode=mode, hardware_weight=weight), cost, data.q_variance)
    assert searcher.hardware_parameters == cost.arch_parameters() and len(cost.arch_parameters()) == 4 * 3 + 1
    batch, val = data.take(torch.arange(16), "cpu"), data.take(torch.arange(16, 32), "cpu")
    before = [p.detach().clone() for p in cost.parameters()]
    parts = searcher.step(batch, val if mode == "bi-level" else None)
    assert parts["budget"] > 0 and parts["hardware"] > parts["budget"]
    searched = [p for p in cost.parameters() if len(p) > 1]
    assert all(p.grad is not None and torch.isfinite(p.grad).all() and (p.grad != 0).any() for p in searched)
    assert cost.precision_logits.grad[0] < 0 < cost.precision_logits.grad[1]  # int8 takes half the DSPs: more of it
    assert all(not torch.equal(b, p) for b, p in zip(before, cost.parameters()) if len(p) > 1)  # stepped, even at lambda 0
    after = [p.detach().clone() for p in cost.parameters()]
    searcher.step(batch, val if mode == "bi-level" else None, search=False)  # warm-up: the accelerator is left alone
    assert all(torch.equal(a, p) for a, p in zip(after, cost.parameters()))


def small_search(budget: Budget, steps: int = 60):
    space, data = tiny_space(), teacher_data(n=128)
    cost = JointSearchCost(space, device(), budget=budget)
    with seeded_init(0):
        net = SuperNet(space)
    config = SearchConfig(steps=steps, batch_size=16, hardware_weight=0.5, warmup=0.0, alpha_lr=0.05, log_every=steps)
    result = search(net, data, config, cost)
    return result, cost, cost.derive(result.choice)


def test_the_joint_search_derives_a_design_within_its_budget_and_smaller_for_a_smaller_one():
    wide, tight = Budget(dsp=128, bram36=50, uram=0, ddr_gb_per_s=1), Budget(dsp=8, bram36=50, uram=0, ddr_gb_per_s=1)
    results = {}
    for name, budget in (("wide", wide), ("tight", tight)):
        result, cost, derived = small_search(budget)
        assert derived.design.budget == budget and not derived.design.over()
        assert result.cost == derived.design.interval_cycles  # the result's cost is the derived accelerator's
        assert derived.method == "joint" and (derived.searched != derived.design.parallelism) == derived.repaired
        assert "modelled, never run" in derived.describe() and derived.to_dict()["dsp"] == derived.design.dsp
        with torch.no_grad():
            expected_dsp = cost.expected([torch.tensor(p, dtype=torch.float64) for p in result.probs]).dsp.item()
        results[name] = (derived, expected_dsp, result.architecture.macs)
    (wide_design, wide_dsp, wide_macs), (tight_design, tight_dsp, tight_macs) = results["wide"], results["tight"]
    assert tight_design.design.dsp <= 8 < wide_design.design.dsp
    assert tight_dsp < 8 * 1.25 and tight_dsp < wide_dsp  # the expected design settles near its budget
    assert tight_macs <= wide_macs and tight_design.design.interval_cycles > wide_design.design.interval_cycles


def test_the_fixed_mode_is_the_equal_share_cost_and_joint_the_default():
    space = tiny_space()
    fixed = hardware_cost("fpga-model:zcu102", space, fpga_search="fixed")
    assert isinstance(fixed, SearchCost) and not hasattr(fixed, "arch_parameters") and not hasattr(fixed, "penalty")
    assert isinstance(hardware_cost("fpga-model:zcu102", space), JointSearchCost)
    with pytest.raises(HetrlError, match="--fpga-search both: one of joint, fixed"):
        search_cost(space, "zcu102", "both")
    with seeded_init(0):
        net = SuperNet(space)
    searcher = Searcher(net, SearchConfig(hardware_weight=0.5), fixed)
    assert searcher.hardware_parameters == [] and searcher.hardware_optimizer is None
    with torch.no_grad():
        start = float(fixed(net.probs())) / searcher.cost_scale
    parts = searcher.step(teacher_data(n=32).take(torch.arange(16), "cpu"))
    assert "budget" not in parts and parts["hardware"] == pytest.approx(start)  # the cost over its start, no penalty
    derived = fixed.derive(CHOICE)  # the derived network's design is allocate's, on the whole part
    layers = [layer for stages in position_stages(space, CHOICE) for layer in stages]
    assert derived.method == "allocate" and derived.design == allocate(layers, fixed.device, fixed.precision)
