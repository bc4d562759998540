"""The FPGA model of co-search (hetrl.cosearch.fpga): hand-computed designs, the greedy
allocation within its budgets, the repair of an over-budget design, infeasible networks, device
files, and the search's smooth cost."""

import json
import math
from dataclasses import replace

import pytest
import torch
from torch import nn

from hetrl.cosearch.fpga import (BRAM_BITS, DEVICES, Budget, FpgaDevice, Layer, Parallelism, allocate, budget_penalty,
                                 cost_tables, evaluate, expected_cost, layers_of, repair, shipped_devices, smooth_max,
                                 stage_cost)
from hetrl.cosearch import fpga
from hetrl.errors import HetrlError
from hetrl.nets.layer_description import LayerDescription
from hetrl.nets.searched import Architecture, Op


def device(**changes) -> FpgaDevice:
    """A small made-up part: 128 DSPs, 50 BRAM36s, no URAM, 100 MHz, 1 GB/s of DDR."""
    data = {"format": "hetrl-fpga-v1", "name": "small", "part": "test", "dsp": 128, "bram36": 50, "uram": 0,
            "clock_mhz": 100, "ddr_gb_per_s": 1, "host_gb_per_s": 1, "dsp_per_mac": {"int8": 0.5, "int16": 1, "fp32": 5}}
    return FpgaDevice.from_dict({**data, **changes}, "test device")


MLP = [Layer.linear(4, 64), Layer.linear(64, 64), Layer.linear(64, 2)]
# conv 4->16 3x3 on 10x10 (out 8x8), depthwise 3x3 padding 1 on 8x8 (out 8x8), linear 16*8*8 = 1024 -> 6
CONV = [Layer("conv", 4, 16, 3, 1, 0, 10, 10), Layer("dwconv", 16, 16, 3, 1, 1, 8, 8), Layer.linear(1024, 6)]


def test_an_mlp_design_is_the_hand_computed_pipeline():
    d = evaluate(MLP, [Parallelism(4, 8), Parallelism(8, 8), Parallelism(8, 2)], ["bram"] * 3, device(), "int16")
    # cycles ceil(R/p_in) ceil(C_out/p_out): 1*8 = 8; 8*8 = 64; 8*1 = 8
    assert [s.cycles for s in d.stages] == [8, 64, 8]
    # DSPs p_in p_out x 1 (int16): 32 + 64 + 16
    assert [s.dsp for s in d.stages] == [32, 64, 16] and d.dsp == 112
    # weights 4*64+64 = 320, 64*64+64 = 4,160, 64*2+2 = 130; blocks max(ceil(w*16/32768), ceil(p_in p_out*16/64)):
    # max(1, 8) = 8; max(ceil(66,560/32,768) = 3, 16) = 16; max(1, 4) = 4
    assert [layer.params for layer in MLP] == [320, 4160, 130]
    assert [s.weight_blocks for s in d.stages] == [8, 16, 4]
    # line buffers ceil(C_in*16/32768) = 1 each; BRAM36 = 3 + 28
    assert [s.line_buffer_bram36 for s in d.stages] == [1, 1, 1] and d.bram36 == 31 and d.uram == 0
    # II 64 cycles at 100 MHz: 1,562,500 samples/s; latency (8+64+8)/1e8 = 0.8 us; 16 samples 0.8 + 15*0.64 us
    assert d.interval_cycles == 64 and d.bottleneck == 1
    assert d.samples_per_s == pytest.approx(1_562_500)
    assert d.latency_s == pytest.approx(0.8e-6) and d.batch_seconds(16) == pytest.approx(10.4e-6)
    assert d.memory_cycles == 0 and not d.over()


def test_a_conv_design_with_off_chip_weights_is_the_hand_computed_pipeline():
    dev = device(clock_mhz=200, ddr_gb_per_s=4)
    d = evaluate(CONV, [Parallelism(4, 4), Parallelism(1, 16), Parallelism(16, 6)], ["bram", "bram", "ddr"], dev, "int8")
    # MACs H_o W_o k^2 R C_out: 64*9*4*16, 64*9*1*16 (depthwise R = 1), 1024*6
    assert [layer.macs for layer in CONV] == [36_864, 9_216, 6_144]
    # cycles 64*9*ceil(4/4)*ceil(16/4) = 2,304; 64*9*1*ceil(16/16) = 576; ceil(1024/16)*1 = 64
    assert [s.cycles for s in d.stages] == [2304, 576, 64]
    # DSPs ceil(p_in p_out x 0.5) (two int8 MACs a DSP): 8, 8, 48
    assert [s.dsp for s in d.stages] == [8, 8, 48]
    # line buffers k ceil(W C_in 8/32768): 3*1, 3*1, 1*1; weights 592 and 160 on chip: max(1, ceil(16*8/64) = 2)
    assert [s.line_buffer_bram36 for s in d.stages] == [3, 3, 1] and [s.weight_blocks for s in d.stages] == [2, 2, 0]
    assert d.bram36 == 11
    # the linear layer's 1,024*6+6 = 6,150 int8 weights come from DDR each sample: 6,150 bytes at
    # 4 GB/s / 200 MHz = 20 bytes a cycle -> 307.5 cycles, less than the conv's 2,304
    assert d.ddr_bytes_per_sample == 6150 and d.memory_cycles == pytest.approx(307.5)
    assert d.interval_cycles == 2304 and d.samples_per_s == pytest.approx(2e8 / 2304)
    # latency: 2,304 + 576 + max(64, 307.5) cycles at 200 MHz = 15.9375 us
    assert d.latency_s == pytest.approx(15.9375e-6)
    # four processing elements on the conv's output positions: ceil(64/4)*9*1*4 = 576 cycles, 32 DSPs;
    # the depthwise stage (576) is now tied and first-of-equals goes to the conv
    wide = evaluate(CONV, [Parallelism(4, 4, 4), Parallelism(1, 16), Parallelism(16, 6)], ["bram", "bram", "ddr"], dev, "int8")
    assert wide.stages[0].cycles == 576 and wide.stages[0].dsp == 32 and wide.interval_cycles == 576
    # off-chip memory is the slowest stage once the compute stages go below 307.5 cycles
    fast = evaluate(CONV, [Parallelism(4, 16, 8), Parallelism(1, 16, 4), Parallelism(16, 6)], ["bram", "bram", "ddr"], dev, "int8")
    assert [s.cycles for s in fast.stages] == [72, 144, 64] and fast.bottleneck is None
    assert fast.interval_cycles == pytest.approx(307.5)


def test_the_greedy_doubles_the_bottleneck_while_the_budget_allows():
    layers = [Layer.linear(8, 8), Layer.linear(8, 2)]
    # start (1,1) (1,1): 64 and 16 cycles, 1 + 1 DSPs. Stage 1 (p_out before p_in on a tie): p_out 2
    # (32 cycles, 2 + 1 DSPs), p_out 4 (16, 4 + 1), then tied at 16 the first goes on: p_out 8 (8, 8 + 1);
    # stage 2: p_out 2 (8 cycles, 8 + 2 DSPs); then stage 1 would need p_in 2 (16 + 2 DSPs): over 11
    d = allocate(layers, device(), "int16", Budget(dsp=11, bram36=50, uram=0, ddr_gb_per_s=1))
    assert d.parallelism == (Parallelism(1, 8), Parallelism(1, 2)) and d.dsp == 10 and d.interval_cycles == 8
    # with 9 DSPs stage 2 cannot double: II stays at its 16 cycles
    d = allocate(layers, device(), "int16", Budget(dsp=9, bram36=50, uram=0, ddr_gb_per_s=1))
    assert d.parallelism == (Parallelism(1, 8), Parallelism(1, 1)) and d.dsp == 9 and d.interval_cycles == 16


def test_an_over_budget_design_is_repaired_by_halving_the_most_dsp_hungry_stage():
    layers = [Layer.linear(16, 16), Layer.linear(16, 4)]
    budget = Budget(dsp=40, bram36=50, uram=0, ddr_gb_per_s=1)
    # 16x16 (256 DSPs; 16x16x16 bits a cycle = 64 port blocks) and 4x4 (16 DSPs, 4 blocks), 2 line buffers: over both.
    # Stage 1 has the most DSPs; each halving doubles its cycles whichever axis, so the wider axis goes first
    # (p_in on a tie): 8x16 = 128, 8x8 = 64, 4x8 = 32, 4x4 = 16: four halvings, 16 + 16 = 32 DSPs, 4 + 4 + 2 blocks
    over = evaluate(layers, [Parallelism(16, 16), Parallelism(4, 4)], ["bram", "bram"], device(), "int16", budget)
    assert over.over() == ["272 DSPs of 40", "70 BRAM36s of 50"]
    fitted, halvings = repair(over)
    assert halvings == 4 and fitted.parallelism == (Parallelism(4, 4), Parallelism(4, 4)) and not fitted.over()
    assert (fitted.dsp, fitted.bram36) == (32, 10)
    assert repair(fitted) == (fitted, 0)
    with pytest.raises(HetrlError, match=r"does not fit its budget even at one MAC a cycle per stage \(2 DSPs of 1\)"):
        repair(evaluate(layers, [Parallelism(2, 2), Parallelism()], ["bram"] * 2, device(), "int16",
                        Budget(dsp=1, bram36=50, uram=0, ddr_gb_per_s=1)))


@pytest.mark.parametrize("name", ["zcu102", "u250"])
@pytest.mark.parametrize("precision", ["int8", "int16", "fp32"])
@pytest.mark.parametrize("share", [1.0, 0.25])
def test_allocation_respects_every_budget_and_improves_the_bottleneck(name, precision, share):
    part = FpgaDevice.load(DEVICES / f"{name}.json")
    nature = [Layer("conv", 4, 32, 8, 4, 0, 84, 84), Layer("conv", 32, 64, 4, 2, 0, 20, 20),
              Layer("conv", 64, 64, 3, 1, 0, 9, 9), Layer.linear(3136, 512), Layer.linear(512, 6)]
    for layers in (MLP, CONV, nature):
        budget = Budget.of(part, share)
        d = allocate(layers, part, precision, budget)
        assert not d.over()
        assert d.dsp <= budget.dsp and d.bram36 <= budget.bram36 and d.uram <= budget.uram
        # off-chip weights never ask for more bandwidth than the budget has
        assert d.ddr_bytes_per_sample * d.samples_per_s <= 1e9 * budget.ddr_gb_per_s * (1 + 1e-9)
        start = evaluate(layers, [Parallelism()] * len(layers), d.homes, part, precision, budget)
        assert d.interval_cycles < start.interval_cycles


def test_infeasible_networks_are_clear_errors():
    big = [Layer.linear(256, 256), Layer.linear(256, 4)]  # 65,792 weights: 1 Mbit at int16
    no_ddr = device(bram36=8, ddr_gb_per_s=0)
    with pytest.raises(HetrlError, match=r"weights of layer 1 \(1,053 kbit at int16\) do not fit on chip on small and "
                                         "the budget has no off-chip bandwidth") as exc:
        allocate(big, no_ddr, "int16")
    assert "\n" not in str(exc.value)
    assert allocate(big, device(bram36=8), "int16").homes == ("ddr", "bram")  # with bandwidth it streams them
    with pytest.raises(HetrlError, match="need at least 3 DSPs at int16"):
        allocate(MLP, device(dsp=2), "int16")
    # 8 rows of 84 x 4 x 32 = 10,752 bits: a BRAM36 each
    with pytest.raises(HetrlError, match="line buffers alone need 8 BRAM36s and the budget on small has 6"):
        allocate([Layer("conv", 4, 32, 8, 4, 0, 84, 84)], device(bram36=6), "fp32")
    with pytest.raises(HetrlError, match="precision 'int4' is not modelled"):
        allocate(MLP, device(), "int4")
    with pytest.raises(HetrlError, match="does not fit a 2x2 input"):
        Layer("conv", 1, 1, 3, 1, 0, 2, 2)


def test_the_shipped_device_files_load():
    assert shipped_devices() == ["u250", "zcu102"]
    zcu = FpgaDevice.load(DEVICES / "zcu102.json")
    assert (zcu.dsp, zcu.bram36, zcu.uram) == (2520, 912, 0) and "DS891" in zcu.source
    u250 = FpgaDevice.load(DEVICES / "u250.json")
    assert (u250.dsp, u250.bram36, u250.uram) == (12288, 2688, 1280) and "DS962" in u250.source


@pytest.mark.parametrize("edit, message", [
    (lambda d: d.pop("dsp"), "field 'dsp' is missing"),
    (lambda d: d.update(dsp=-1), "dsp must be positive, got -1"),
    (lambda d: d.update(bram36=-2), "bram36 must be zero or more, got -2"),
    (lambda d: d.update(clock_mhz="fast"), "clock_mhz must be a number"),
    (lambda d: d.update(uram=1.5), "uram must be a whole number"),
    (lambda d: d.pop("host_gb_per_s"), "field 'host_gb_per_s' is missing"),
    (lambda d: d.update(dsp_per_mac={"int4": 1}), "precision 'int4' is not modelled"),
    (lambda d: d.update(dsp_per_mac={"int8": -1}), r"dsp_per_mac.int8 must be a positive number"),
    (lambda d: d.update(bram=3), r"unknown field 'bram' \(did you mean 'bram36'\?\)"),
    (lambda d: d.update(design={"share": 2}), r"design.share must be in \(0, 1\]"),
    (lambda d: d.pop("format"), "is not an FPGA device description"),
])
def test_device_files_are_validated_in_one_line(tmp_path, edit, message):
    data = json.loads((DEVICES / "zcu102.json").read_text())
    edit(data)
    path = tmp_path / "part.json"
    path.write_text(json.dumps(data))
    with pytest.raises(HetrlError, match=message) as exc:
        FpgaDevice.load(path)
    assert "\n" not in str(exc.value) and str(path) in str(exc.value)


def test_layers_are_read_from_a_torch_network():
    net = nn.Sequential(nn.Conv2d(4, 16, 3), nn.ReLU(), nn.Conv2d(16, 16, 3, padding=1, groups=16), nn.ReLU(),
                        nn.Flatten(), nn.Linear(1024, 6))
    assert layers_of(net, torch.zeros(1, 4, 10, 10)) == CONV
    with pytest.raises(HetrlError, match="grouped convolutions"):
        layers_of(nn.Conv2d(4, 8, 3, groups=2), torch.zeros(1, 4, 5, 5))


def test_weight_memory_counts_biases_only_for_layers_that_have_them():
    """A searched network's layer descriptions are the model's layers (one class), and the model
    stores a bias only where the layer has one: the depthwise half of a separable convolution has
    none (its nn.Conv2d has bias=False), so its weights are k^2 C, not k^2 C + C."""
    assert Layer is LayerDescription
    arch = Architecture((4, 10, 10), 3, convs=(Op("sepconv", 8, 3),), dense=(Op("dense", 16),))
    net = arch.build()
    described = arch.describe()
    dw = described[0]
    assert (dw.kind, dw.bias, dw.params) == ("dwconv", False, 3 * 3 * 4)
    # read from torch: the same layers (the model does not read whether a ReLU follows)
    read = layers_of(net, torch.zeros(1, 4, 10, 10))
    assert [replace(layer, relu=d.relu) for layer, d in zip(read, described)] == described
    # every parameter torch holds, none more: 2 bytes each at int16
    design = allocate(described, device(), "int16")
    assert design.weight_bytes == 2 * sum(p.numel() for p in net.parameters())
    # off chip, the depthwise stage reads 36 weights of 2 bytes a sample (not 40)
    assert stage_cost(dw, Parallelism(), "ddr", "int16", device()).ddr_bytes == 36 * 2


# --- the search's smooth cost -------------------------------------------------------------------
SAME = [Layer("conv", 4, 16, 3, 1, 1, 10, 10), Layer("conv", 4, 16, 5, 1, 2, 10, 10)]  # both 16 x 10 x 10 out
OPTIONS = [Parallelism(1, 1), Parallelism(4, 4)]


def test_the_expected_cost_of_one_hot_choices_is_the_design():
    tables = cost_tables([SAME, [Layer.linear(1600, 6), None]], OPTIONS, device(), "int16")
    one_hot = [torch.tensor([1.0, 0.0]), torch.tensor([1.0, 0.0])]
    cost = expected_cost(tables, one_hot, [torch.tensor([0.0, 1.0]), torch.tensor([1.0, 0.0])])
    exact = evaluate([SAME[0], Layer.linear(1600, 6)], [OPTIONS[1], OPTIONS[0]], ["bram", "bram"], device(), "int16")
    # 100 positions x 9 taps x 1 x 4 = 3,600 cycles; 1,600 x 6 = 9,600 cycles
    assert [s.cycles for s in exact.stages] == [3600, 9600]
    assert cost.latency_cycles.item() == pytest.approx(3600 + 9600) and cost.dsp.item() == pytest.approx(16 + 1)
    # the smooth maximum is above the maximum, by at most t log(layers), t = 0.05 x the maximum
    assert 9600 <= cost.bottleneck_cycles.item() <= 9600 * (1 + 0.05 * math.log(2))
    # on-chip: the BRAM36s of the line buffers and of the weights in BRAM, as bits. The conv: 3 rows of 10 x 4 x 16
    # bits (3), 592 weights in 1 block but 4 x 4 x 16 bits a cycle need 4 ports (4); the linear: 1 row (1), 9,606
    # weights x 16 bits in 5 blocks (5)
    assert exact.bram36 == 3 + 4 + 1 + 5 and cost.onchip_bits.item() == exact.bram36 * BRAM_BITS
    # a skip costs nothing
    skip = expected_cost(tables, [torch.tensor([1.0, 0.0]), torch.tensor([0.0, 1.0])])
    assert skip.latency_cycles.item() == pytest.approx(100 * 9 * 4 * 16)


def test_an_operation_of_several_stages_costs_its_slowest_stage_and_all_their_resources():
    separable = [Layer("dwconv", 4, 4, 3, 1, 1, 10, 10), Layer("conv", 4, 16, 1, 1, 0, 10, 10)]
    options = [[Parallelism(1, 1, 4), Parallelism(4, 4, 4)], [Parallelism(1, 1), Parallelism(2, 3)]]  # per position
    tables = cost_tables([[separable, []], [Layer.linear(1600, 6)]], options, device(), "int16")
    assert [tuple(t.shape) for t in tables.cycles] == [(2, 2), (1, 2)]
    stages = evaluate(separable, [options[0][1]] * 2, ["bram", "bram"], device(), "int16")
    # depthwise (p_in capped at 1): 100/4 x 9 x 1 x 4/4 = 225 cycles, 16 DSPs; pointwise 100/4 x 1 x 4/4 x 16/4 = 100, 64
    assert [s.cycles for s in stages.stages] == [225, 100] and [s.dsp for s in stages.stages] == [16, 64]
    assert tables.cycles[0][0, 1].item() == 225 and tables.dsp[0][0, 1].item() == 80
    assert tables.onchip_bits[0][0, 1].item() == stages.bram36 * BRAM_BITS
    assert tables.cycles[0][1].tolist() == [0, 0] and tables.dsp[1][0, 1].item() == 6  # no stages: a skip; 2x3 capped


def test_the_smooth_cost_has_finite_gradients_that_point_to_cheaper_choices():
    tables = cost_tables([SAME, [Layer.linear(1600, 6)]], OPTIONS, device(), "int16")
    op_logits = [torch.zeros(2, requires_grad=True), torch.zeros(1, requires_grad=True)]
    option_logits = [torch.zeros(2, requires_grad=True), torch.zeros(2, requires_grad=True)]
    cost = expected_cost(tables, [torch.softmax(x, 0) for x in op_logits], [torch.softmax(x, 0) for x in option_logits])
    cost.bottleneck_cycles.backward()
    grads = [x.grad for x in op_logits + option_logits]
    assert all(torch.isfinite(g).all() for g in grads)
    # the conv (mean of 3x3 and 5x5 at mixed parallelism) is the bottleneck: more weight on the 3x3
    # or on 4x4 parallelism lowers the cost, more on the 5x5 or on 1x1 raises it
    assert op_logits[0].grad[0] < 0 < op_logits[0].grad[1]
    assert option_logits[0].grad[1] < 0 < option_logits[0].grad[0]
    # a smooth maximum weighs every entry by its softmax share
    x = torch.tensor([1.0, 3.0, 2.0], requires_grad=True)
    smooth_max(x, 0.1).backward()
    assert x.grad.sum().item() == pytest.approx(1.0) and x.grad.argmax().item() == 1


def test_the_budget_penalty_pushes_back_below_the_budget():
    tables = cost_tables([SAME], [Parallelism(1, 1), Parallelism(4, 16)], device(), "int16")
    option_logits = torch.zeros(2, requires_grad=True)
    cost = expected_cost(tables, [torch.tensor([1.0, 0.0])], [torch.softmax(option_logits, 0)])
    # expected DSPs (1 + 64) / 2 = 32.5: over a 16-DSP budget by 103%, within a 64-DSP one
    assert budget_penalty(cost, Budget(64, 50, 0, 1)).item() == 0
    penalty = budget_penalty(cost, Budget(16, 50, 0, 1))
    assert penalty.item() == pytest.approx(32.5 / 16 - 1)
    penalty.backward()
    assert option_logits.grad[1] > 0 > option_logits.grad[0]  # towards the smaller option


# --- the model as the co-search's cost ------------------------------------------------------------
def test_the_search_cost_is_the_bottleneck_of_each_layers_interval_within_its_share():
    from hetrl.cosearch.accelerator import SearchCost
    from hetrl.cosearch.cost import hardware_cost
    from hetrl.cosearch.supernet import search_space

    space = search_space((4, 10, 10), 3, conv_widths=(8, 16))
    cost = hardware_cost("fpga-model:zcu102", space, fpga_search="fixed")  # the joint search's is test_cosearch_accelerator's
    assert isinstance(cost, SearchCost) and "modelled, never run" in cost.label and cost.unit == "cycles"
    n = len(space.layers)
    assert cost.share.dsp == 2520 // n and cost.share.bram36 == 912 // n
    # one-hot choices: the first candidate everywhere; each layer's interval is its stages' design within the share
    probs = [torch.eye(len(layer.candidates), dtype=torch.float64)[0] for layer in space.layers]
    widths, intervals = [layer.in_widths[0] for layer in space.layers[:1]], []
    for k, layer in enumerate(space.layers):
        op = layer.candidates[0]
        j = 0 if k == 0 else layer.in_widths.index(widths[-1])
        stages = op.describe(layer.in_widths[j], layer.height, layer.width)
        intervals.append(fpga.allocate(stages, cost.device, budget=cost.share).interval_cycles)
        widths.append(op.width * (layer.height * layer.width if layer.conv and k + 1 < n and not space.layers[k + 1].conv else 1))
    value = float(cost(probs))
    assert max(intervals) <= value <= max(intervals) * (1 + 0.05 * math.log(n)) + 1e-9  # the smooth maximum's bound
    # gradients are finite and favour the cheaper candidates of the bottleneck layer
    logits = [torch.zeros(len(layer.candidates), dtype=torch.float64, requires_grad=True) for layer in space.layers]
    cost([torch.softmax(x, 0) for x in logits]).backward()
    assert all(torch.isfinite(x.grad).all() for x in logits)
    first = logits[0].grad
    cheap = int(torch.argmin(cost.values[0][:, 0]))
    dear = int(torch.argmax(cost.values[0][:, 0]))
    assert first[cheap] <= first[dear]
    assert cost.to_dict()["layers"][0]  # the table is reported with the search's outputs
