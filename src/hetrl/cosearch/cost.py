"""Hardware costs of a search space, as differentiable functions of the per-layer candidate
probabilities: ``cost(probs) -> torch scalar``, ``probs[k]`` the probabilities of layer ``k``'s
candidates (:meth:`hetrl.cosearch.supernet.SuperNet.probs`).

- :class:`CostTable`: an additive cost (FBNet's latency lookup table, Wu et al. 2019): each
  candidate of each layer costs ``T[k][i, j]`` at input width ``in_widths[j]``, and a network the
  sum over its layers. Its expectation under independent per-layer choices is
  ``sum_k probs[k] @ T[k] @ q[k]``, ``q[k]`` the probability of each input width
  (:meth:`~hetrl.cosearch.supernet.SearchSpace.input_width_probs`): exact, and differentiable in
  the probabilities, as ProxylessNAS's expected latency (Cai et al. 2019). At one-hot
  probabilities it is that architecture's cost.
- :func:`macs_table`: multiply-accumulates (exact, from the layer descriptions).
- :func:`measure_op_latency`: each candidate timed alone on a device (the profiler's
  :func:`hetrl.profile.time_calls`: median of repeated blocks after a warm-up) at every input width
  it can get: measured seconds per call, torch's per-call overhead included (at MinAtar's sizes it
  is a large part of a layer's time, and a network pays it per layer).
- :func:`hardware_cost`: the cost a ``--hardware`` argument names, labelled as measured or modelled.

Any other callable of the same signature serves the search (the FPGA model's expected cost).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from hetrl.cosearch.supernet import SearchSpace
from hetrl.errors import HetrlError
from hetrl.nets.searched import Op

Cost = Callable[[Sequence[torch.Tensor]], torch.Tensor]  # probs per layer -> expected cost (a scalar)
FPGA_MODULE = "hetrl.cosearch.accelerator"  # the FPGA model as a search cost (hetrl.cosearch.fpga)


@dataclass
class CostTable:
    """Per layer, a (candidates, input widths) table of one additive cost, in ``unit``; ``label``
    says what it is and whether it was measured or modelled."""

    space: SearchSpace
    values: list[torch.Tensor]
    unit: str
    label: str

    def __post_init__(self) -> None:
        for k, (layer, table) in enumerate(zip(self.space.layers, self.values, strict=True)):
            if tuple(table.shape) != (len(layer.candidates), len(layer.in_widths)):
                raise ValueError(f"layer {k}'s table has shape {tuple(table.shape)}, the layer "
                                 f"({len(layer.candidates)} candidates, {len(layer.in_widths)} input widths) needs "
                                 f"{(len(layer.candidates), len(layer.in_widths))}")

    def __call__(self, probs: Sequence[torch.Tensor]) -> torch.Tensor:
        return self.per_layer(probs).sum()

    def per_layer(self, probs: Sequence[torch.Tensor]) -> torch.Tensor:
        """Each layer's expected cost under ``probs`` (the candidates') and the input widths they give."""
        q = self.space.input_width_probs(probs)
        return torch.stack([p @ table.to(p) @ qk.to(p) for p, table, qk in zip(probs, self.values, q, strict=True)])

    def to_dict(self) -> dict[str, Any]:
        """Per layer, per candidate name, per input width: the cost."""
        return {"unit": self.unit, "label": self.label,
                "layers": [{op.name: dict(zip(map(str, layer.in_widths), table[i].tolist()))
                            for i, op in enumerate(layer.candidates)}
                           for layer, table in zip(self.space.layers, self.values)]}


def _table(space: SearchSpace, cost_of: Callable[[Op, int, int, int], float], unit: str, label: str) -> CostTable:
    values = [torch.tensor([[cost_of(op, w, layer.height, layer.width) for w in layer.in_widths] for op in layer.candidates],
                           dtype=torch.float64) for layer in space.layers]
    return CostTable(space, values, unit, label)


def macs_table(space: SearchSpace) -> CostTable:
    """Multiply-accumulates per decision of every candidate (exact; a model, not a measurement)."""
    return _table(space, lambda op, w, h, wd: float(sum(d.macs for d in op.describe(w, h, wd))),
                  "MACs", "multiply-accumulates per decision (counted)")


def measure_op_latency(space: SearchSpace, device: str = "cpu", batch: int = 1, threads: int | None = 1,
                       repeats: int = 7) -> CostTable:
    """Seconds per call of every candidate on ``device`` at ``batch`` observations, alone (a fresh
    module, no gradient, eval mode) at each input width it can get; with ``threads`` torch threads
    on the host (None: as set). A skip costs 0; an operation met twice is timed once."""
    from hetrl.profile import sync_for, time_calls, torch_threads

    sync, measured = sync_for(device), {}

    def seconds(op: Op, w: int, h: int, wd: int) -> float:
        key = (op, w, h, wd)
        if op.kind == "skip":
            return 0.0
        if key not in measured:
            module = op.module(w).to(device).eval()
            x = torch.randn((batch, w, h, wd) if op.is_conv else (batch, w), device=device)
            with torch.no_grad(), torch_threads(threads):
                measured[key] = time_calls(lambda: module(x), sync, repeats=repeats)[0]
        return measured[key]

    n_threads = threads or torch.get_num_threads()
    where = f"cpu, {n_threads} thread{'s' if n_threads > 1 else ''}" if device == "cpu" else device
    return _table(space, seconds, "s", f"latency per decision measured on {where}, batch {batch}, per layer summed")


def hardware_cost(hardware: str, space: SearchSpace, batch: int = 1, threads: int | None = 1,
                  fpga_search: str = "joint") -> Cost:
    """The cost ``hardware`` names: ``cpu`` or ``cuda[:N]`` (measured latency, :func:`measure_op_latency`),
    ``macs`` (counted operations), or ``fpga-model[:FILE]`` (the FPGA model's expected interval for
    the device description FILE, modelled: ``hetrl.cosearch.accelerator.search_cost(space, FILE, fpga_search)``,
    the accelerator searched ``joint``-ly with the agent or each layer in a ``fixed`` equal share)."""
    kind, _, arg = hardware.partition(":")
    if kind == "macs":
        return macs_table(space)
    if kind in ("cpu", "cuda"):
        device = hardware if kind == "cuda" else "cpu"
        if kind == "cuda" and not torch.cuda.is_available():
            raise HetrlError(f"--hardware {hardware}: torch sees no CUDA device here")
        return measure_op_latency(space, device, batch, threads if kind == "cpu" else None)
    if kind == "fpga-model":
        import importlib

        try:
            fpga = importlib.import_module(FPGA_MODULE)
        except ModuleNotFoundError as exc:
            if exc.name != FPGA_MODULE:
                raise
            raise HetrlError(f"--hardware {hardware}: the FPGA model ({FPGA_MODULE}) is not in this hetrl yet; "
                             "use --hardware cpu") from None
        if not hasattr(fpga, "search_cost"):
            raise HetrlError(f"--hardware {hardware}: {FPGA_MODULE} has no search_cost(space, device_file, mode), the "
                             "function the search calls for the model's expected cost")
        return fpga.search_cost(space, arg or None, fpga_search)
    raise HetrlError(f"--hardware {hardware}: expected cpu, cuda[:N], macs or fpga-model[:FILE]")


def cost_label(cost: Cost | None) -> str:
    """What a cost is (its ``label``), for reports; a plain callable is named by its name."""
    if cost is None:
        return ""
    return getattr(cost, "label", None) or getattr(cost, "__name__", type(cost).__name__)


def cost_unit(cost: Cost | None) -> str:
    return getattr(cost, "unit", "") if cost is not None else ""
