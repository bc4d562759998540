"""The FPGA accelerator's parameters searched jointly with the agent (A3C-S): the hardware cost of
``hetrl cosearch --hardware fpga-model[:FILE]`` in its default ``--fpga-search joint`` mode
(:func:`search_cost` gives it, or the ``fixed`` mode's :class:`SearchCost`).

A3C-S (Fu et al., DAC 2021, arXiv 2106.06577) searches the agent's network and its accelerator
together, with the differentiable accelerator search of its companion Auto-NBA (Fu et al., ICML
2021, arXiv 2106.06575): the accelerator is a template of pipelined sub-accelerators whose
micro-architecture (how processing elements and buffers are shared out among them: each one's
parallelism) and mapping (loop order, tiling) are discrete choices, each relaxed to a softmax
(Gumbel-softmax) over its options and learned by gradient through an analytical model of the
hardware's cost, beside the agent's architecture choices. Here the template is
:mod:`hetrl.cosearch.fpga`'s dataflow pipeline, one stage per layer, and the searched parameters
are those its model has:

- per layer position, each of ``p_in``, ``p_out`` and ``p_pos`` over the powers of two 1, 2, 4, ...
  up to the largest size any candidate there has on that axis (input channels summed over, output
  channels, output positions), at most ``max_parallel``; the position's choice applies to every
  stage of the candidate there (both of a separable convolution), capped at each stage's sizes;
- optionally the design's data precision (``precisions``, e.g. int8 and int16; one for the whole
  design). Off by default: the supernet trains in floating point, so nothing in the loss prices a
  narrower width in score, and a searched precision would always be the narrowest.

Not searched: loop orders and tiling (a stage of the model has one dataflow) and where weights
live (placed as :func:`~hetrl.cosearch.fpga.allocate` places them).

Every choice is a softmax over its own logits, independent of the others, so an option's
probability is the product of its three axes'. With the agent's per-layer probabilities ``P``
(``softmax(alpha)``) the search minimises, for the accelerator's logits ``beta``::

    H(P, beta) = C(P, beta) / C_0 + budget_weight * budget_penalty(P, beta)

``C``: the smooth maximum over positions of each position's expected cycles under the op, input
width and option probabilities (:func:`~hetrl.cosearch.fpga.expected_cost`), in cycles per sample,
``C_0`` its value at the start (:class:`~hetrl.cosearch.search.Searcher` divides by it);
``budget_penalty``: the expected DSPs and on-chip bits over the budget, relative
(:func:`~hetrl.cosearch.fpga.budget_penalty`), weighted well above the cycles (10 by default) so
that the expected design settles at the budget. The agent's logits minimise the task loss plus
``lambda * H``; the accelerator's minimise ``H`` alone, so they follow the agent whatever lambda.

The derived accelerator (:meth:`JointSearchCost.derive`) is the argmax of every choice for the
argmax agent, its weights placed as ``allocate`` places them, checked exactly
(:func:`~hetrl.cosearch.fpga.evaluate`); a design over its budget is repaired
(:func:`~hetrl.cosearch.fpga.repair`) and says so. Modelled, never run.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from torch import nn

from hetrl.cosearch.fpga import (Budget, DerivedDesign, ExpectedCost, FpgaDevice, Parallelism, allocate, bits_of,
                                 budget_penalty, cost_tables, device_file, evaluate, expected_cost, place_weights,
                                 position_stages, repair, smooth_max)
from hetrl.cosearch.cost import CostTable
from hetrl.cosearch.options import FPGA_SEARCH
from hetrl.errors import HetrlError
from hetrl.nets.layer_description import LayerDescription

DEFAULT_PART = "zcu102"  # the part --hardware fpga-model costs on without a file
AXES = ("p_in", "p_out", "p_pos")
MAX_PARALLEL = 64  # the widest unrolling offered on any one axis
BUDGET_WEIGHT = 10.0


def axis_values(size: int, cap: int = MAX_PARALLEL) -> tuple[int, ...]:
    """The parallelism offered on an axis of ``size``: 1, 2, 4, ... up to the first power of two
    that covers ``size``, at most ``cap``."""
    values = [1]
    while values[-1] < size and values[-1] * 2 <= cap:
        values.append(values[-1] * 2)
    return tuple(values)


def _sizes(layer: LayerDescription) -> tuple[int, int, int]:
    return layer.reduction, layer.out_channels, layer.positions


def _product(weights: Sequence[torch.Tensor]) -> torch.Tensor:
    """The joint probabilities of independent axes, flattened in ``itertools.product`` order."""
    a, b, c = weights
    return (a[:, None, None] * b[None, :, None] * c[None, None, :]).flatten()


class JointSearchCost(nn.Module):
    """The FPGA model's expected pipeline interval (cycles per sample) with the accelerator's
    parallelism (and optionally precision) as logits of its own (:meth:`arch_parameters`), which
    the search steps beside the agent's; see the module docstring. ``cost(probs)`` is ``C``,
    :meth:`penalty` the weighted budget term."""

    unit = "cycles"

    def __init__(self, space: Any, device: FpgaDevice, precisions: Sequence[str] | None = None, budget: Budget | None = None,
                 max_parallel: int = MAX_PARALLEL, budget_weight: float = BUDGET_WEIGHT, temperature: float = 0.05) -> None:
        super().__init__()
        self.space, self.device, self.temperature, self.budget_weight = space, device, temperature, budget_weight
        self.precisions = tuple(precisions or (device.design.precision,))
        for precision in self.precisions:
            bits_of(precision)
            if precision not in device.dsp_per_mac:
                raise HetrlError(f"device {device.name} gives no DSPs per MAC for {precision}; add dsp_per_mac.{precision} to its file")
        self.budget = budget or Budget.of(device)
        # per position, every (candidate, input width) pair's stages, candidate-major
        rows = [[op.describe(w, layer.height, layer.width) for op in layer.candidates for w in layer.in_widths]
                for layer in space.layers]
        self.grids = [tuple(axis_values(max((_sizes(s)[axis] for stages in position for s in stages), default=1), max_parallel)
                            for axis in range(len(AXES))) for position in rows]
        options = [[Parallelism(*p) for p in itertools.product(*grid)] for grid in self.grids]
        self.tables = [cost_tables(rows, options, device, precision) for precision in self.precisions]
        self.option_logits = nn.ModuleList(
            nn.ParameterList(nn.Parameter(torch.zeros(len(values), dtype=torch.float64)) for values in grid)
            for grid in self.grids)
        self.precision_logits = nn.Parameter(torch.zeros(len(self.precisions), dtype=torch.float64))
        searched = "parallelism and precision" if len(self.precisions) > 1 else "parallelism"
        self.label = (f"FPGA model of {device.name} ({device.part}, {'/'.join(self.precisions)}, {device.clock_mhz:g} MHz): "
                      f"expected pipeline interval per sample, the accelerator's {searched} searched jointly within "
                      f"{self.budget.dsp:,} DSPs and {self.budget.bram36:,} BRAM36 (modelled, never run)")

    def arch_parameters(self) -> list[nn.Parameter]:
        """The accelerator's logits: per position, one vector per axis; then the precision's."""
        return list(self.parameters())

    def option_probs(self) -> list[list[torch.Tensor]]:
        """Per position, per axis (:data:`AXES`), the probability of each value of :attr:`grids`."""
        return [[logits.softmax(0) for logits in axes] for axes in self.option_logits]

    def precision_probs(self) -> torch.Tensor:
        return self.precision_logits.softmax(0)

    def expected(self, probs: Sequence[torch.Tensor]) -> ExpectedCost:
        """The expected design under the agent's per-layer ``probs`` and the accelerator's own."""
        probs = [p.to("cpu", torch.float64) for p in probs]
        widths = self.space.input_width_probs(probs)
        ops = [torch.outer(p, q).flatten() for p, q in zip(probs, widths, strict=True)]
        options = [_product(axes) for axes in self.option_probs()]
        costs = [expected_cost(tables, ops, options, self.temperature) for tables in self.tables]
        return costs[0] if len(costs) == 1 else ExpectedCost.mix(costs, self.precision_probs())

    def forward(self, probs: Sequence[torch.Tensor]) -> torch.Tensor:
        return self.expected(probs).bottleneck_cycles

    def penalty(self, probs: Sequence[torch.Tensor]) -> torch.Tensor:
        """``budget_weight`` times how far the expected design runs over the budget (0 within it)."""
        return self.budget_weight * budget_penalty(self.expected(probs), self.budget)

    def accelerator(self) -> tuple[list[Parallelism], str]:
        """The most probable parallelism of each position, and precision."""
        parallelism = [Parallelism(*(values[int(logits.argmax())] for values, logits in zip(grid, axes)))
                       for grid, axes in zip(self.grids, self.option_logits)]
        return parallelism, self.precisions[int(self.precision_logits.argmax())]

    def derive(self, choice: Sequence[int]) -> DerivedDesign:
        """The argmax accelerator for the network of ``choice``, checked exactly and repaired
        where it runs over the budget."""
        parallelism, precision = self.accelerator()
        positions = position_stages(self.space, choice)
        layers = [layer for stages in positions for layer in stages]
        per_stage = [p for p, stages in zip(parallelism, positions) for _ in stages]
        homes = place_weights(layers, precision, self.device, self.budget)
        searched = evaluate(layers, per_stage, homes, self.device, precision, self.budget)
        design, halvings = repair(searched)
        return DerivedDesign(design, "joint", searched.parallelism, halvings,
                             allocate(layers, self.device, precision, self.budget))

    def derived_cost(self, choice: Sequence[int]) -> float:
        """The derived design's exact interval (cycles per sample)."""
        return self.derive(choice).design.interval_cycles

    @torch.no_grad()
    def to_dict(self) -> dict[str, Any]:
        """The accelerator's final probabilities (costs.json)."""
        return {"unit": self.unit, "label": self.label, "mode": "joint",
                "budget": {"dsp": self.budget.dsp, "bram36": self.budget.bram36, "uram": self.budget.uram},
                "precision": dict(zip(self.precisions, self.precision_probs().tolist())),
                "positions": [{axis: dict(zip(map(str, values), probs.tolist()))
                               for axis, values, probs in zip(AXES, grid, axes)}
                              for grid, axes in zip(self.grids, self.option_probs())]}


class SearchCost:
    """The FPGA model as the co-search's hardware cost (``cost(probs) -> scalar``, see
    :mod:`hetrl.cosearch.cost`): the expected pipeline interval, in cycles per sample, of a network
    whose layer ``k`` takes candidate ``i`` with probability ``probs[k][i]``.

    Each position of the search space gets an equal share (1/L) of the part's DSPs, BRAM, URAM and
    off-chip bandwidth; a candidate (at each input width it can get) costs the interval of its own
    stages at the parallelism :func:`allocate` finds within that share (a separable convolution is
    two stages). The network's interval is the smooth maximum (:func:`~hetrl.cosearch.fpga.smooth_max`)
    over positions of each position's expected interval, as in :func:`~hetrl.cosearch.fpga.expected_cost`,
    so the gradient falls on the bottleneck position (the per-position expectation is :class:`~hetrl.cosearch.cost.CostTable`'s,
    which sums them instead). The equal share is the model's simplification for the search (it keeps
    the tables constant); the derived network gets its own whole-part design from :func:`allocate`
    (:meth:`derive`). A candidate that does not fit its share costs ``UNFIT`` times the
    dearest one that does. Modelled, never run."""

    UNFIT = 10.0

    def __init__(self, space: Any, device: FpgaDevice, precision: str | None = None, temperature: float = 0.05) -> None:
        self.space, self.device, self.temperature = space, device, temperature
        self.precision = precision or device.design.precision
        whole = Budget.of(device)
        n = len(space.layers)
        self.share = Budget(whole.dsp // n, whole.bram36 // n, whole.uram // n, whole.ddr_gb_per_s / n)
        label = (f"FPGA model of {device.name} ({device.part}, {self.precision}, {device.clock_mhz:g} MHz): expected "
                 f"pipeline interval per sample, each layer within 1/{n} of the part (modelled, never run)")
        self.table = CostTable(space, [self._table(layer) for layer in space.layers], "cycles", label)
        self.unit, self.label, self.values = self.table.unit, self.table.label, self.table.values

    def _table(self, layer: Any) -> torch.Tensor:
        rows = []
        for op in layer.candidates:
            row = []
            for w in layer.in_widths:
                stages = op.describe(w, layer.height, layer.width)
                try:
                    row.append(allocate(stages, self.device, self.precision, self.share).interval_cycles if stages else 0.0)
                except HetrlError:
                    row.append(math.nan)  # does not fit the share: priced below
            rows.append(row)
        table = torch.tensor(rows, dtype=torch.float64)
        worst = table[~table.isnan()].max() if (~table.isnan()).any() else torch.tensor(1.0, dtype=torch.float64)
        return torch.where(table.isnan(), self.UNFIT * worst, table)

    def __call__(self, probs: Sequence[torch.Tensor]) -> torch.Tensor:
        return smooth_max(self.table.per_layer(probs), self.temperature)

    def derive(self, choice: Sequence[int]) -> DerivedDesign:
        """The whole-part design :func:`allocate` finds for the network of ``choice`` (one
        candidate per layer of the space)."""
        layers = [layer for stages in position_stages(self.space, choice) for layer in stages]
        return DerivedDesign(allocate(layers, self.device, self.precision), "allocate")

    def to_dict(self) -> dict[str, Any]:
        return self.table.to_dict()


def search_cost(space: Any, device_spec: str | Path | None = None, mode: str = "joint") -> JointSearchCost | SearchCost:
    """The co-search's FPGA cost for ``space`` on the part ``device_spec`` names (a shipped part's
    name or a device file; default :data:`DEFAULT_PART`): ``joint`` (default), the accelerator's
    parallelism searched with the agent (:class:`JointSearchCost`), or ``fixed``, each position
    priced within an equal share of the part (:class:`SearchCost`)."""
    if mode not in FPGA_SEARCH:
        raise HetrlError(f"--fpga-search {mode}: one of {', '.join(FPGA_SEARCH)}")
    device = FpgaDevice.load(device_file(device_spec or DEFAULT_PART))
    return JointSearchCost(space, device) if mode == "joint" else SearchCost(space, device)


__all__ = ["AXES", "DEFAULT_PART", "JointSearchCost", "SearchCost", "axis_values", "search_cost"]
