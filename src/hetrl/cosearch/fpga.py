"""An analytical model of a dataflow FPGA accelerator for a network's forward pass: the hardware
cost of co-search (A3C-S, Fu et al. 2021) and of the planner's FPGA what-if devices.

The accelerator is a pipeline with one stage per layer (conv, depthwise conv, linear), each stage
its own array of multiply-accumulate units: ``p_pos`` processing elements working on as many
output positions at once, each unrolled ``p_in`` ways over input channels and ``p_out`` ways over
output channels (the weights they read are broadcast to every element). Samples stream through
the stages; activations stay on chip in each stage's line buffer; a layer's weights stay on chip
where they fit, else they are read from off-chip memory (DDR) once per sample.

Per layer (a :class:`hetrl.nets.layer_description.LayerDescription`: input C_in x H x W, C_out
outputs, k x k kernel, stride s, padding p; a linear layer has H = W = k = 1 and its features as
channels), with b the data width in bits:

    H_o = floor((H + 2p - k) / s) + 1, W_o likewise
    R   = C_in (conv, linear) or 1 (depthwise: an output channel reads its own input channel)
    MACs      = H_o W_o k^2 R C_out
    weights   = k^2 R C_out (+ C_out biases where the layer has them: its params)
    c         = ceil(H_o W_o / p_pos) k^2 ceil(R / p_in) ceil(C_out / p_out)   cycles per sample
    DSP       = ceil(p_pos p_in p_out d)                             d: DSPs per MAC at b (device file)
    A (BRAM36) = k ceil(W C_in b / 32,768)                           line buffer: k input rows, read in parallel
    B (blocks) = max(ceil(weights b / S), ceil(p_in p_out b / 64))   weights on chip: capacity, and ports
    D (bytes)  = weights b / 8                                       weights off chip, read once per sample

S is a block's data bits: 32,768 for a BRAM36 (36 Kb less parity), 262,144 for a URAM (288 Kb
less ECC); each block reads 64 data bits a cycle (one 72-bit port), so p_in p_out weights a cycle
need that many blocks side by side. The pipeline, at clock f and the off-chip bandwidth BW (bytes/s)
the budget allows:

    c_mem      = f sum_{off chip} D / BW              cycles per sample the off-chip weights take
    II         = max(max_l c_l, c_mem)                 cycles between samples (the slowest stage)
    throughput = f / II                                samples/s
    latency    = sum_l max(c_l, f D_l / BW) / f        one sample through every stage (the fill)
    batch(n)   = latency + (n - 1) II / f              seconds for n samples

and a design fits its budget when sum DSP <= DSPs, sum A + sum_{weights in BRAM} B <= BRAM36s and
sum_{weights in URAM} B <= URAMs. The network's input and output cross the host link, which the
model of a whole call (``hetrl.planner.whatif``) adds.

:func:`allocate` chooses the parallelism (a greedy, in its docstring); :func:`evaluate` costs a
given design and :func:`repair` halves an over-budget one's parallelism until it fits. For the
search, :func:`cost_tables` and :func:`expected_cost` give the expected bottleneck (a smooth
maximum) and resources of a network whose layers are softmax mixtures of candidate operations and
whose stages are softmax mixtures of parallelism options, as torch tensors that gradients flow
through; :mod:`hetrl.cosearch.accelerator` turns them into the co-search's hardware cost.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn

from hetrl.errors import HetrlError, did_you_mean
from hetrl.files import read_json
from hetrl.nets.layer_description import LayerDescription
BITS = {"int8": 8, "int16": 16, "fp32": 32}  # data width of each precision
BRAM_BITS = 32_768  # data bits of a BRAM36 (36 Kb less the parity bits)
URAM_BITS = 262_144  # data bits of a URAM (288 Kb less the ECC bits)
PORT_BITS = 64  # data bits a block reads a cycle (one 72-bit port)
DEVICE_FORMAT = "hetrl-fpga-v1"
DEVICES = Path(__file__).with_name("devices")  # the shipped parts, one JSON file each
WEIGHT_HOMES = ("uram", "bram", "ddr")
NAME = re.compile(r"[A-Za-z0-9_.-]+")  # a device's name (the planner calls it whatif:NAME)


def _ceil(a: int, b: int) -> int:
    return -(-a // b)


@dataclass(frozen=True)
class Parallelism:
    """A stage's unrolling: ``p_in`` input channels, ``p_out`` output channels and ``p_pos``
    output positions a cycle."""

    p_in: int = 1
    p_out: int = 1
    p_pos: int = 1

    def __post_init__(self) -> None:
        if min(self.p_in, self.p_out, self.p_pos) < 1:
            raise HetrlError(f"parallelism must be at least 1 each way, got {self}")

    @property
    def macs_per_cycle(self) -> int:
        return self.p_in * self.p_out * self.p_pos


Layer = LayerDescription  # the model's name for a layer, kept for code that imports it


def fit(layer: LayerDescription, p: Parallelism) -> Parallelism:
    """``p`` capped at ``layer``'s own sizes: unrolling past them buys nothing."""
    return Parallelism(min(p.p_in, layer.reduction), min(p.p_out, layer.out_channels), min(p.p_pos, layer.positions))


def stage_cycles(layer: LayerDescription, p: Parallelism) -> int:
    """c: cycles a sample takes ``layer``'s stage at parallelism ``p``."""
    return (_ceil(layer.positions, p.p_pos) * layer.kernel ** 2 * _ceil(layer.reduction, p.p_in)
            * _ceil(layer.out_channels, p.p_out))


@dataclass(frozen=True)
class DesignOptions:
    """What a design on a device uses unless told otherwise (a device file's optional ``design``)."""

    precision: str = "int16"
    share: float = 1.0  # the share of each resource (DSP, BRAM, URAM, bandwidth) a design may use


@dataclass(frozen=True)
class FpgaDevice:
    """A part (and its board) as the model needs it: a device file (``devices/*.json``)."""

    name: str
    part: str
    dsp: int
    bram36: int
    uram: int
    clock_mhz: float  # the design's clock
    ddr_gb_per_s: float  # off-chip memory bandwidth (GB/s, 1e9 bytes); 0: none
    host_gb_per_s: float  # the host link (PCIe; a SoC's shared DDR)
    dsp_per_mac: Mapping[str, float] = field(hash=False)  # DSP slices one multiply-accumulate a cycle takes, by precision
    call_overhead_us: float = 0.0  # what the host pays to start a call and see it end (driver, doorbell)
    design: DesignOptions = DesignOptions()
    source: str = ""  # where the figures come from

    @property
    def clock_hz(self) -> float:
        return 1e6 * self.clock_mhz

    @classmethod
    def from_dict(cls, data: Any, where: str) -> "FpgaDevice":
        """A device description, validated: one-line errors naming ``where`` and the field."""
        if not isinstance(data, dict) or data.get("format") != DEVICE_FORMAT:
            raise HetrlError(f"{where} is not an FPGA device description (expected \"format\": \"{DEVICE_FORMAT}\")")
        known = {"format", "name", "part", "dsp", "bram36", "uram", "clock_mhz", "ddr_gb_per_s", "host_gb_per_s",
                 "dsp_per_mac", "call_overhead_us", "design", "source"}
        for key in data:
            if key not in known:
                raise HetrlError(f"{where}: unknown field {key!r}{did_you_mean(key, known)}")

        def number(key: str, whole: bool = False, positive: bool = False, default: Any = None) -> Any:
            if key not in data:
                if default is not None:
                    return default
                raise HetrlError(f"{where}: field {key!r} is missing")
            value = data[key]
            kind = "whole number" if whole else "number"
            if isinstance(value, bool) or not isinstance(value, int if whole else (int, float)) or not math.isfinite(value):
                raise HetrlError(f"{where}: {key} must be a {kind}, got {value!r}")
            if value < 0 or (positive and value == 0):
                raise HetrlError(f"{where}: {key} must be {'positive' if positive else 'zero or more'}, got {value!r}")
            return value

        for key in ("name", "part"):
            if key not in data:
                raise HetrlError(f"{where}: field {key!r} is missing")
            if not isinstance(data[key], str) or not NAME.fullmatch(data[key]):
                raise HetrlError(f"{where}: {key} must be a name of letters, digits, '.', '_' and '-', got {data[key]!r}")
        per_mac = data.get("dsp_per_mac")
        if not isinstance(per_mac, dict) or not per_mac:
            raise HetrlError(f"{where}: field 'dsp_per_mac' is missing" if per_mac is None else
                             f"{where}: dsp_per_mac must map precisions ({', '.join(BITS)}) to DSPs per MAC")
        for precision, value in per_mac.items():
            if precision not in BITS:
                raise HetrlError(f"{where}: dsp_per_mac: precision {precision!r} is not modelled; use {', '.join(BITS)}")
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
                raise HetrlError(f"{where}: dsp_per_mac.{precision} must be a positive number, got {value!r}")
        design = data.get("design", {})
        if not isinstance(design, dict) or not set(design) <= {"precision", "share"}:
            raise HetrlError(f"{where}: design may hold precision and share only, got {design!r}")
        options = DesignOptions(**design)
        if not isinstance(options.precision, str) or options.precision not in per_mac:
            raise HetrlError(f"{where}: design.precision {options.precision!r} has no dsp_per_mac entry")
        if isinstance(options.share, bool) or not isinstance(options.share, (int, float)) or not 0 < options.share <= 1:
            raise HetrlError(f"{where}: design.share must be in (0, 1], got {options.share!r}")
        return cls(data["name"], data["part"], number("dsp", True, True), number("bram36", True), number("uram", True),
                   number("clock_mhz", positive=True), number("ddr_gb_per_s"), number("host_gb_per_s", positive=True),
                   {str(k): float(v) for k, v in per_mac.items()}, number("call_overhead_us", default=0.0), options,
                   str(data.get("source", "")))

    @classmethod
    def load(cls, path: str | Path) -> "FpgaDevice":
        return cls.from_dict(read_json(path, "FPGA device file", f"shipped parts: {', '.join(shipped_devices())}"),
                             f"FPGA device file {path}")


def shipped_devices() -> list[str]:
    """The names of the parts shipped with hetrl (:func:`device_file` finds their files)."""
    return sorted(p.stem for p in DEVICES.glob("*.json"))


def device_file(spec: str | Path) -> Path:
    """The device file ``spec`` names: a path, or the name of a shipped part (``zcu102``)."""
    path = Path(spec)
    return DEVICES / f"{spec}.json" if not path.exists() and str(spec) in shipped_devices() else path


def bits_of(precision: str) -> int:
    if precision not in BITS:
        raise HetrlError(f"precision {precision!r} is not modelled{did_you_mean(precision, BITS)}; use one of {', '.join(BITS)}")
    return BITS[precision]


@dataclass(frozen=True)
class Budget:
    """What a design may use of a device."""

    dsp: int
    bram36: int
    uram: int
    ddr_gb_per_s: float

    @classmethod
    def of(cls, device: FpgaDevice, share: float | None = None) -> "Budget":
        """``share`` (default: the device file's ``design.share``) of every resource of ``device``."""
        share = device.design.share if share is None else share
        return cls(int(device.dsp * share), int(device.bram36 * share), int(device.uram * share), device.ddr_gb_per_s * share)


@dataclass(frozen=True)
class StageCost:
    """A stage's figures at its parallelism and weight home (see the module docstring)."""

    cycles: int
    dsp: int
    line_buffer_bram36: int  # A
    weight_blocks: int  # B, of the weights' home (0 off chip)
    ddr_bytes: float  # D (0 on chip)


def stage_cost(layer: LayerDescription, p: Parallelism, home: str, precision: str, device: FpgaDevice) -> StageCost:
    b = bits_of(precision)
    if home not in WEIGHT_HOMES:
        raise HetrlError(f"weights live in {', '.join(WEIGHT_HOMES)}, not {home!r}")
    if precision not in device.dsp_per_mac:
        raise HetrlError(f"device {device.name} gives no DSPs per MAC for {precision}; add dsp_per_mac.{precision} to its file")
    p = fit(layer, p)
    line_buffer = layer.kernel * _ceil(layer.width * layer.in_channels * b, BRAM_BITS)
    ports = _ceil(p.p_in * p.p_out * b, PORT_BITS)
    blocks = 0 if home == "ddr" else max(_ceil(layer.params * b, URAM_BITS if home == "uram" else BRAM_BITS), ports)
    return StageCost(stage_cycles(layer, p), math.ceil(p.macs_per_cycle * device.dsp_per_mac[precision] - 1e-9), line_buffer,
                     blocks, layer.params * b / 8 if home == "ddr" else 0.0)


@dataclass(frozen=True)
class Design:
    """An accelerator for ``layers``: each stage's parallelism and weight home, and what it costs
    within ``budget`` (whose bandwidth the off-chip weights share)."""

    device: FpgaDevice
    precision: str
    budget: Budget
    layers: tuple[LayerDescription, ...]
    parallelism: tuple[Parallelism, ...]
    homes: tuple[str, ...]  # each layer's weights: uram, bram or ddr
    stages: tuple[StageCost, ...]

    @property
    def dsp(self) -> int:
        return sum(s.dsp for s in self.stages)

    @property
    def bram36(self) -> int:
        return sum(s.line_buffer_bram36 + (s.weight_blocks if h == "bram" else 0) for s, h in zip(self.stages, self.homes))

    @property
    def uram(self) -> int:
        return sum(s.weight_blocks for s, h in zip(self.stages, self.homes) if h == "uram")

    @property
    def ddr_bytes_per_sample(self) -> float:
        return sum(s.ddr_bytes for s in self.stages)

    def _ddr_cycles(self, nbytes: float) -> float:
        if nbytes == 0:
            return 0.0
        if self.budget.ddr_gb_per_s <= 0:
            return math.inf
        return nbytes * self.device.clock_hz / (1e9 * self.budget.ddr_gb_per_s)

    @property
    def memory_cycles(self) -> float:
        """c_mem: cycles per sample the off-chip weights take at the device's bandwidth."""
        return self._ddr_cycles(self.ddr_bytes_per_sample)

    @property
    def interval_cycles(self) -> float:
        """II: cycles between samples, set by the slowest stage (off-chip memory counted as one)."""
        return max(max(s.cycles for s in self.stages), self.memory_cycles)

    @property
    def bottleneck(self) -> int | None:
        """The index of the slowest stage (the first of equals); None where off-chip memory is."""
        slowest = max(range(len(self.stages)), key=lambda i: self.stages[i].cycles)
        return None if self.memory_cycles >= self.stages[slowest].cycles else slowest

    @property
    def samples_per_s(self) -> float:
        return self.device.clock_hz / self.interval_cycles

    @property
    def latency_s(self) -> float:
        return sum(max(s.cycles, self._ddr_cycles(s.ddr_bytes)) for s in self.stages) / self.device.clock_hz

    def batch_seconds(self, n: int) -> float:
        """Seconds for ``n`` samples: the fill, then one every II."""
        return self.latency_s + (n - 1) * self.interval_cycles / self.device.clock_hz

    @property
    def weight_bytes(self) -> float:
        return sum(layer.params for layer in self.layers) * bits_of(self.precision) / 8

    def over(self) -> list[str]:
        """The budgets this design exceeds, as phrases (empty: it fits; the bandwidth always
        does, since off-chip weights set the interval at that rate)."""
        out = []
        for what, used, have in (("DSPs", self.dsp, self.budget.dsp), ("BRAM36s", self.bram36, self.budget.bram36),
                                 ("URAMs", self.uram, self.budget.uram)):
            if used > have:
                out.append(f"{used:,} {what} of {have:,}")
        return out

    def describe(self) -> str:
        where = "off-chip memory" if self.bottleneck is None else f"stage {self.bottleneck + 1} ({self.layers[self.bottleneck].kind})"
        return (f"{len(self.layers)} stages at {self.precision}, {self.device.clock_mhz:g} MHz: "
                f"{self.samples_per_s:,.0f} samples/s (II {self.interval_cycles:,.0f} cycles, bottleneck {where}), "
                f"latency {1e6 * self.latency_s:,.2f} µs; {self.dsp:,}/{self.device.dsp:,} DSPs, "
                f"{self.bram36:,}/{self.device.bram36:,} BRAM36s, {self.uram:,}/{self.device.uram:,} URAMs, "
                f"{self.ddr_bytes_per_sample:,.0f} off-chip bytes a sample")


def evaluate(layers: Sequence[LayerDescription], parallelism: Sequence[Parallelism], homes: Sequence[str], device: FpgaDevice,
             precision: str | None = None, budget: Budget | None = None) -> Design:
    """The design with these per-layer choices, costed (``budget``, default all of ``device``, is
    not checked: :meth:`Design.over` says what it exceeds)."""
    precision = precision or device.design.precision
    budget = budget or Budget.of(device, 1.0)
    if not layers:
        raise HetrlError("a design needs at least one layer")
    if not len(layers) == len(parallelism) == len(homes):
        raise HetrlError(f"{len(layers)} layers need as many parallelism and weight-home choices, "
                         f"got {len(parallelism)} and {len(homes)}")
    parallelism = tuple(fit(layer, p) for layer, p in zip(layers, parallelism))
    stages = tuple(stage_cost(layer, p, home, precision, device) for layer, p, home in zip(layers, parallelism, homes))
    return Design(device, precision, budget, tuple(layers), parallelism, tuple(homes), stages)


def place_weights(layers: Sequence[LayerDescription], precision: str, device: FpgaDevice, budget: Budget) -> list[str]:
    """Each layer's weight home at parallelism 1: largest weights first, URAM where they fit, then
    BRAM (after every line buffer), else off chip. An error where even that cannot work."""
    ones = [stage_cost(layer, Parallelism(), "bram", precision, device) for layer in layers]
    line_buffers = sum(s.line_buffer_bram36 for s in ones)
    if line_buffers > budget.bram36:
        raise HetrlError(f"the line buffers alone need {line_buffers:,} BRAM36s and the budget on {device.name} has "
                         f"{budget.bram36:,} (activations stay on chip); use smaller inputs or fewer channels, or a larger part")
    free = {"uram": budget.uram, "bram": budget.bram36 - line_buffers}
    homes = ["ddr"] * len(layers)
    for i in sorted(range(len(layers)), key=lambda i: -layers[i].params):
        for home in ("uram", "bram"):
            blocks = stage_cost(layers[i], Parallelism(), home, precision, device).weight_blocks
            if blocks <= free[home]:
                homes[i], free[home] = home, free[home] - blocks
                break
    off = [i for i, home in enumerate(homes) if home == "ddr"]
    if off and budget.ddr_gb_per_s <= 0:
        kbit = sum(layers[i].params for i in off) * bits_of(precision) / 1e3
        raise HetrlError(f"the weights of layer{'s' if len(off) > 1 else ''} {', '.join(str(i + 1) for i in off)} "
                         f"({kbit:,.0f} kbit at {precision}) do not fit on chip on {device.name} and the budget has no "
                         "off-chip bandwidth; use a smaller network or precision, a larger part, or give the device ddr_gb_per_s")
    return homes


def _doublings(layer: LayerDescription, p: Parallelism) -> list[Parallelism]:
    """``p`` with p_out, p_in or p_pos doubled (capped at the layer's sizes), where that saves
    cycles: fewest cycles first, then fewest MACs a cycle, then in that order."""
    now = stage_cycles(layer, p)
    trials = [fit(layer, Parallelism(p.p_in, 2 * p.p_out, p.p_pos)), fit(layer, Parallelism(2 * p.p_in, p.p_out, p.p_pos)),
              fit(layer, Parallelism(p.p_in, p.p_out, 2 * p.p_pos))]
    order = {t: i for i, t in reversed(list(enumerate(trials)))}
    return sorted({t for t in trials if stage_cycles(layer, t) < now},
                  key=lambda t: (stage_cycles(layer, t), t.macs_per_cycle, order[t]))


def allocate(layers: Sequence[LayerDescription], device: FpgaDevice, precision: str | None = None,
             budget: Budget | None = None) -> Design:
    """The fastest design the greedy finds for ``layers`` within ``budget`` (default: the device
    file's share of the device), at ``precision`` (default: the device file's).

    1. Every stage starts at p_in = p_out = 1; weights are placed largest first in URAM where they
       fit, then BRAM (after all line buffers), else off chip. That start must fit: an error says
       which budget it cannot meet (DSPs for one MAC per stage, line buffers, or off-chip weights
       with no bandwidth).
    2. While the slowest stage is a compute stage: double its p_out, p_in or p_pos (the one that
       saves most cycles; on a tie the fewest MACs a cycle, then in that order), keeping the first
       doubling that fits every budget. Stop when
       off-chip memory is the bottleneck, or the slowest stage is fully unrolled or its doubling
       does not fit: then nothing can shorten the interval.

    Each step shortens the slowest stage, so II never grows; the result always fits ``budget``.
    """
    precision = precision or device.design.precision
    bits_of(precision)
    budget = budget or Budget.of(device)
    layers = tuple(layers)
    if not layers:
        raise HetrlError("a design needs at least one layer")
    homes = place_weights(layers, precision, device, budget)
    design = evaluate(layers, [Parallelism()] * len(layers), homes, device, precision, budget)
    if design.dsp > budget.dsp:
        raise HetrlError(f"{len(layers)} stages need at least {design.dsp:,} DSPs at {precision} (one MAC each) and the "
                         f"budget on {device.name} has {budget.dsp:,}; use fewer layers or a larger part")
    while (slowest := design.bottleneck) is not None:
        for trial in _doublings(layers[slowest], design.parallelism[slowest]):
            parallelism = list(design.parallelism)
            parallelism[slowest] = trial
            candidate = evaluate(layers, parallelism, homes, device, precision, budget)
            if not candidate.over():
                design = candidate
                break
        else:
            break
    return design


def _halvings(layer: LayerDescription, p: Parallelism) -> list[Parallelism]:
    """``p`` with p_pos, p_in or p_out halved (where above 1): fewest cycles first, then the widest
    axis, then in that order."""
    trials = [(p.p_pos, (p.p_in, p.p_out, p.p_pos // 2)), (p.p_in, (p.p_in // 2, p.p_out, p.p_pos)),
              (p.p_out, (p.p_in, p.p_out // 2, p.p_pos))]
    kept = [(i, width, Parallelism(*t)) for i, (width, t) in enumerate(trials) if width > 1]
    return [t for _, _, t in sorted(kept, key=lambda k: (stage_cycles(layer, k[2]), -k[1], k[0]))]


def repair(design: Design) -> tuple[Design, int]:
    """``design`` made to fit its budget, and how many halvings that took (0: it fitted): while
    it is over, halve the parallelism of the stage using the most DSPs (of those above one MAC a
    cycle) along the axis that costs it fewest cycles. Halving shrinks a stage's DSPs and its
    weights' port blocks; it cannot shrink line buffers or the weights' capacity, so a design still
    over at parallelism 1 everywhere is a one-line error naming what it exceeds."""
    halvings = 0
    while over := design.over():
        wide = [i for i, p in enumerate(design.parallelism) if p.macs_per_cycle > 1]
        if not wide:
            raise HetrlError(f"the design on {design.device.name} does not fit its budget even at one MAC a cycle per "
                             f"stage ({', '.join(over)}); use a smaller network or precision, or a larger part")
        i = max(wide, key=lambda i: (design.stages[i].dsp, design.parallelism[i].macs_per_cycle))
        parallelism = list(design.parallelism)
        parallelism[i] = _halvings(design.layers[i], parallelism[i])[0]
        design = evaluate(design.layers, parallelism, design.homes, design.device, design.precision, design.budget)
        halvings += 1
    return design, halvings


@dataclass(frozen=True)
class DerivedDesign:
    """The accelerator a co-search derives for its network, checked exactly (:func:`evaluate`,
    :meth:`Design.over`): found by ``method`` ("joint": the search's argmax parallelism and
    precision; "allocate": the greedy, after the search). ``searched``: the argmax parallelism
    before any repair; ``halvings``: the :func:`repair` steps it took to fit (0: it fitted).
    Summary.md and architecture.json report it (:meth:`describe`, :meth:`to_dict`)."""

    design: Design
    method: str
    searched: tuple[Parallelism, ...] | None = None
    halvings: int = 0
    greedy: Design | None = None  # joint: allocate's design for the same network, for comparison

    LABEL = "FPGA model, modelled, never run"

    @property
    def repaired(self) -> bool:
        return self.halvings > 0

    def describe(self) -> str:
        """One line for summary.md."""
        d, budget = self.design, self.design.budget
        how = ("accelerator searched jointly with the agent" if self.method == "joint"
               else "accelerator from allocate's greedy after the search")
        if self.repaired:
            how += f"; the argmax design was over its budget and was repaired ({self.halvings} halvings of parallelism)"
        if self.greedy is not None:
            how += f"; allocate's greedy on the same network: {self.greedy.samples_per_s:,.0f} decisions/s"
        stages = ", ".join(f"{layer.kind} {p.p_in}x{p.p_out}x{p.p_pos}" for layer, p in zip(d.layers, d.parallelism))
        return (f"{d.samples_per_s:,.0f} decisions/s, latency {d.latency_s * 1e6:,.2f} us, {d.dsp:,}/{budget.dsp:,} DSPs, "
                f"{d.bram36:,}/{budget.bram36:,} BRAM36, {d.uram:,}/{budget.uram:,} URAM at {d.precision}; "
                f"parallelism p_in x p_out x p_pos per stage: {stages}; {how} ({self.LABEL})")

    def to_dict(self) -> dict[str, Any]:
        """The design, JSON-able (architecture.json)."""
        d, budget = self.design, self.design.budget
        return {"label": self.LABEL, "method": self.method, "device": d.device.name, "part": d.device.part,
                "precision": d.precision, "clock_mhz": d.device.clock_mhz, "decisions_per_s": d.samples_per_s,
                "latency_us": d.latency_s * 1e6, "interval_cycles": d.interval_cycles,
                "dsp": d.dsp, "bram36": d.bram36, "uram": d.uram,
                "budget": {"dsp": budget.dsp, "bram36": budget.bram36, "uram": budget.uram, "ddr_gb_per_s": budget.ddr_gb_per_s},
                "stages": [{"kind": layer.kind, "p_in": p.p_in, "p_out": p.p_out, "p_pos": p.p_pos, "cycles": s.cycles,
                            "dsp": s.dsp, "weights": home} for layer, p, s, home in zip(d.layers, d.parallelism, d.stages, d.homes)],
                "searched": None if self.searched is None else [[p.p_in, p.p_out, p.p_pos] for p in self.searched],
                "repaired": self.repaired, "halvings": self.halvings,
                "greedy_decisions_per_s": None if self.greedy is None else self.greedy.samples_per_s}


def layers_of(network: nn.Module, example: torch.Tensor) -> list[LayerDescription]:
    """The Linear and Conv2d layers ``network`` runs on ``example`` (one sample, batch dimension
    included), in the order it runs them, with the sizes they see. Other modules (activations,
    flattening) are free in the model: they ride on the stage before them."""
    found: list[LayerDescription] = []

    def hook(module: nn.Module, inputs: tuple[torch.Tensor, ...], _output: Any) -> None:
        x = inputs[0]
        if isinstance(module, nn.Linear):
            found.append(LayerDescription.linear(module.in_features, module.out_features, module.bias is not None))
            return
        kh, kw = module.kernel_size
        sh, sw = module.stride
        ph, pw = module.padding if isinstance(module.padding, tuple) else (None, None)
        if kh != kw or sh != sw or ph != pw or ph is None or module.dilation != (1, 1):
            raise HetrlError(f"{module}: only square kernels, equal strides and paddings and no dilation are modelled")
        if module.groups == 1:
            kind = "conv"
        elif module.groups == module.in_channels == module.out_channels:
            kind = "dwconv"
        else:
            raise HetrlError(f"{module}: grouped convolutions other than depthwise are not modelled")
        found.append(LayerDescription(kind, module.in_channels, module.out_channels, kh, sh, ph, int(x.shape[-2]),
                                      int(x.shape[-1]), bias=module.bias is not None))

    handles = [m.register_forward_hook(hook) for m in network.modules() if isinstance(m, (nn.Linear, nn.Conv2d))]
    try:
        with torch.no_grad():
            network(example)
    finally:
        for handle in handles:
            handle.remove()
    if not found:
        raise HetrlError(f"{type(network).__name__} runs no nn.Linear or nn.Conv2d the FPGA model can see")
    return found


# --- the search's differentiable cost ----------------------------------------------------------


@dataclass(frozen=True)
class CostTables:
    """Constant tables, one tensor per layer position, rows its candidate operations, columns the
    parallelism options: cycles per sample, DSPs, and on-chip bits (weights and line buffer)."""

    cycles: tuple[torch.Tensor, ...]
    dsp: tuple[torch.Tensor, ...]
    onchip_bits: tuple[torch.Tensor, ...]


OpStages = LayerDescription | Sequence[LayerDescription] | None  # one stage, the stages of one operation (a separable conv), or a skip


def cost_tables(candidates: Sequence[Sequence[OpStages]], options: Sequence[Parallelism] | Sequence[Sequence[Parallelism]],
                device: FpgaDevice, precision: str | None = None) -> CostTables:
    """The tables :func:`expected_cost` weighs: ``candidates[l]`` are layer position l's candidate
    operations (a :class:`LayerDescription`; the stages of an operation that runs several, whose cycles are
    its slowest stage's and whose DSPs and bits add up; None or no stages: a skip, which costs
    nothing), ``options`` the parallelism choices offered to every position, or one sequence per
    position (each option capped at each stage's sizes)."""
    precision = precision or device.design.precision
    b = bits_of(precision)
    shared = bool(options) and isinstance(options[0], Parallelism)
    per_position = [options] * len(candidates) if shared else list(options)
    if len(per_position) != len(candidates) or not all(per_position):
        raise HetrlError("cost_tables needs at least one parallelism option for every layer position")
    cycles, dsp, bits = [], [], []
    for position, (ops, opts) in enumerate(zip(candidates, per_position)):
        if not ops:
            raise HetrlError(f"layer position {position} has no candidate operation")
        rows = [[_entry(_stages(op), p, b, precision, device) for p in opts] for op in ops]
        table = torch.tensor(rows, dtype=torch.float64)
        cycles.append(table[..., 0])
        dsp.append(table[..., 1])
        bits.append(table[..., 2])
    return CostTables(tuple(cycles), tuple(dsp), tuple(bits))


def _stages(candidate: OpStages) -> tuple[LayerDescription, ...]:
    return () if candidate is None else (candidate,) if isinstance(candidate, LayerDescription) else tuple(candidate)


def _entry(stages: Sequence[LayerDescription], p: Parallelism, b: int, precision: str, device: FpgaDevice) -> tuple[int, int, int]:
    """Cycles (the slowest stage's), DSPs and on-chip bits of ``stages`` at ``p``: the BRAM36s
    their line buffers and weights take with the weights in BRAM, port blocks included, as bits."""
    costs = [stage_cost(layer, p, "bram", precision, device) for layer in stages]
    return (max((s.cycles for s in costs), default=0), sum(s.dsp for s in costs),
            sum(s.line_buffer_bram36 + s.weight_blocks for s in costs) * BRAM_BITS)


@dataclass(frozen=True)
class ExpectedCost:
    """Expected figures under the search's probabilities (tensors, differentiable)."""

    bottleneck_cycles: torch.Tensor  # smooth maximum over layers of each layer's expected cycles
    latency_cycles: torch.Tensor  # sum over layers of expected cycles (the pipeline's fill; a multi-stage op's slowest stage)
    dsp: torch.Tensor
    onchip_bits: torch.Tensor

    @staticmethod
    def mix(costs: Sequence["ExpectedCost"], weights: torch.Tensor) -> "ExpectedCost":
        """The expectation over alternatives (each a whole design, e.g. one per precision) weighed by ``weights``."""
        def weigh(name: str) -> torch.Tensor:
            return torch.stack([getattr(c, name) for c in costs]) @ weights.to(torch.float64)

        return ExpectedCost(weigh("bottleneck_cycles"), weigh("latency_cycles"), weigh("dsp"), weigh("onchip_bits"))


def smooth_max(x: torch.Tensor, temperature: float = 0.05) -> torch.Tensor:
    """A differentiable maximum of ``x`` (1-D): ``t log sum exp(x / t)`` with ``t`` =
    ``temperature`` x the largest entry (so the temperature is relative, and the result exceeds
    the maximum by at most ``t log len(x)``); its gradient weighs each entry by its softmax share."""
    scale = temperature * x.detach().abs().max().clamp_min(1e-12)
    return scale * torch.logsumexp(x / scale, dim=0)


def expected_cost(tables: CostTables, op_weights: Sequence[torch.Tensor],
                  option_weights: Sequence[torch.Tensor] | None = None, temperature: float = 0.05) -> ExpectedCost:
    """Each layer's expected cycles, DSPs and on-chip bits, ``sum_j sum_k a_j q_k table[j, k]``
    with ``a`` = ``op_weights[l]`` (probabilities over its candidates, e.g. a softmax or
    Gumbel-softmax sample) and ``q`` = ``option_weights[l]`` (over the parallelism options; None:
    every layer takes the first option); then the smooth maximum of the expected cycles (the
    bottleneck) and the sums. Gradients flow to both weights."""
    if len(op_weights) != len(tables.cycles):
        raise HetrlError(f"{len(tables.cycles)} layer positions need as many op weight vectors, got {len(op_weights)}")
    per_layer: dict[str, list[torch.Tensor]] = {"cycles": [], "dsp": [], "bits": []}
    for l, a in enumerate(op_weights):
        options = tables.cycles[l].shape[1]
        q = option_weights[l] if option_weights is not None else torch.eye(options, dtype=torch.float64)[0]
        for key, table in (("cycles", tables.cycles[l]), ("dsp", tables.dsp[l]), ("bits", tables.onchip_bits[l])):
            per_layer[key].append(a.to(table.dtype) @ table @ q.to(table.dtype))
    cycles = torch.stack(per_layer["cycles"])
    return ExpectedCost(smooth_max(cycles, temperature), cycles.sum(), torch.stack(per_layer["dsp"]).sum(),
                        torch.stack(per_layer["bits"]).sum())


def budget_penalty(cost: ExpectedCost, budget: Budget) -> torch.Tensor:
    """How far the expected design runs over ``budget``, relative: ``relu(dsp / DSPs - 1) +
    relu(bits / on-chip bits - 1)`` (0 within it). On-chip bits pool BRAM and URAM and count every
    stage's weights in BRAM36s (port blocks included), so weights that would go to URAM or off chip
    are approximated; :func:`evaluate` checks the derived network's design exactly."""
    onchip = budget.bram36 * BRAM_BITS + budget.uram * URAM_BITS
    return (torch.relu(cost.dsp / max(budget.dsp, 1) - 1) + torch.relu(cost.onchip_bits / max(onchip, 1) - 1))


def position_stages(space: Any, choice: Sequence[int]) -> list[list[LayerDescription]]:
    """The model layers of the network ``choice`` picks from ``space``, per layer position (none
    for a skip, two for a separable convolution), the output layer last."""
    return [layer.describe() for layer in space.architecture(choice).layers()]


__all__ = ["BITS", "Budget", "CostTables", "DerivedDesign", "Design", "DesignOptions", "ExpectedCost", "FpgaDevice", "Layer",
           "LayerDescription", "OpStages", "Parallelism", "StageCost", "allocate", "budget_penalty", "cost_tables",
           "device_file", "evaluate", "expected_cost", "fit", "layers_of", "place_weights", "position_stages", "repair",
           "shipped_devices", "smooth_max", "stage_cost", "stage_cycles"]
