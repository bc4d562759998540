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
  it can get, on the backend that will serve the network there (:func:`cost_backend`): on the
  host, Act/numba's compiled pass with the operation as a one-layer program
  (:class:`hetrl.nets.fused_q.FusedOp`; the numpy forward Act/numpy runs,
  :class:`hetrl.nets.searched.NumpyOp`, where numba does not import); on a GPU, the torch module.
  Measured seconds per call, the backend's per-call overhead included (torch and numpy pay theirs
  per layer in a network, numba once per pass; torch's is a large part of a layer's time at
  MinAtar's sizes, which is why the host's table is not timed on torch by default).
- :func:`hardware_cost`: the cost a ``--hardware`` argument names, labelled as measured or modelled.

Any other callable of the same signature serves the search (the FPGA model's expected cost).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from hetrl.cosearch.options import COST_BACKENDS
from hetrl.cosearch.supernet import SearchSpace
from hetrl.errors import HetrlError
from hetrl.nets.searched import Layer, NumpyOp, Op

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
    backend: str = ""  # what timed a measured table (numba, numpy, torch); empty for a counted or modelled one

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
        return {"unit": self.unit, "label": self.label, **({"backend": self.backend} if self.backend else {}),
                "layers": [{op.name: dict(zip(map(str, layer.in_widths), table[i].tolist()))
                            for i, op in enumerate(layer.candidates)}
                           for layer, table in zip(self.space.layers, self.values)]}


def _table(space: SearchSpace, cost_of: Callable[[Op, int, int, int], float], unit: str, label: str,
           backend: str = "") -> CostTable:
    values = [torch.tensor([[cost_of(op, w, layer.height, layer.width) for w in layer.in_widths] for op in layer.candidates],
                           dtype=torch.float64) for layer in space.layers]
    return CostTable(space, values, unit, label, backend)


def macs_table(space: SearchSpace) -> CostTable:
    """Multiply-accumulates per decision of every candidate (exact; a model, not a measurement)."""
    return _table(space, lambda op, w, h, wd: float(sum(d.macs for d in op.describe(w, h, wd))),
                  "MACs", "multiply-accumulates per decision (counted)")


def numba_missing() -> str | None:
    """Why numba cannot be imported here (a missing or broken wheel), or None when it can."""
    try:
        import numba  # noqa: F401
    except ImportError as exc:
        return str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    return None


def cost_backend(device: str, backend: str | None = None) -> str:
    """The backend that times a measured cost on ``device`` (checked; one-line errors).

    Default: ``numba`` on the host where numba imports (else ``numpy``; :func:`measure_op_latency`
    says why in the table's label), ``torch`` on a GPU. On the host a searched network is served
    by Act/torch, Act/numpy or Act/numba, and a run's planner, like ``bench/cosearch.py``, takes the
    fastest: at acting's batch 1 that is Act/numba (one compiled pass), whose lead over numpy
    varies by operation (docs/results.md, 'Co-search: the cost table's backend'), so a table timed
    on numpy ranks candidates by what they would cost on a backend that does not serve them.
    ``numpy`` and ``torch`` stay available on the host, for a network served by them (``torch``: a
    large batch, a learner). A GPU is timed on torch, the only backend that runs there."""
    on_host = device == "cpu"
    if backend is None:
        return ("numba" if numba_missing() is None else "numpy") if on_host else "torch"
    if backend not in COST_BACKENDS:
        raise HetrlError(f"--cost-backend {backend}: expected one of {', '.join(COST_BACKENDS)}")
    if backend != "torch" and not on_host:
        raise HetrlError(f"--cost-backend {backend} runs on the host, not {device}: use --cost-backend torch (the default there)")
    if backend == "numba" and (why := numba_missing()) is not None:
        raise HetrlError(f"--cost-backend numba: numba does not import here ({why}); use --cost-backend numpy")
    return backend


def measure_op_latency(space: SearchSpace, device: str = "cpu", batch: int = 1, threads: int | None = 1,
                       repeats: int = 7, backend: str | None = None) -> CostTable:
    """Seconds per call of every candidate on ``device`` at ``batch`` observations, alone (fresh
    parameters) at each input width it can get, on ``backend`` (:func:`cost_backend`; default numba
    on the host, numpy where numba does not import, torch on a GPU): ``numba``, the operation as a
    one-layer program of Act/numba's compiled pass (:class:`hetrl.nets.fused_q.FusedOp`: the same
    block records and kernels as inside a served network; one thread, as Act/numba runs; ``threads``
    does not apply); ``torch``, the op's module (no gradient, eval mode) with ``threads`` torch
    threads on the host (None: as set); ``numpy``, the op's :class:`~hetrl.nets.searched.NumpyOp`
    (what ``SearchedQNetwork.forward_numpy`` runs) with one BLAS thread, as Act/numpy runs in a run
    (:mod:`hetrl.runtime.host_blas`; ``threads`` does not apply). The input is random values;
    numba's convolutions skip zero inputs, so there it is a ReLU's output (half zeros) as a hidden
    layer reads, not a dense one (which would price its convolutions at twice what a network pays;
    a MinAtar image, the first layer's input, is sparser still). A skip costs 0; an operation met
    twice is timed once."""
    from hetrl.nets import numpy_params
    from hetrl.profile import sync_for, time_calls, torch_threads
    from hetrl.runtime.host_blas import one_blas_thread

    fallback = numba_missing() if backend is None and device == "cpu" else None
    backend = cost_backend(device, backend)
    sync, measured = sync_for(device), {}

    def timed_torch(op: Op, w: int, h: int, wd: int) -> float:
        module = op.module(w).to(device).eval()
        x = torch.randn((batch, w, h, wd) if op.is_conv else (batch, w), device=device)
        with torch.no_grad(), torch_threads(threads):
            return time_calls(lambda: module(x), sync, repeats=repeats)[0]

    def timed_numpy(op: Op, w: int, h: int, wd: int) -> float:
        forward = NumpyOp(Layer(op, w, h, wd), "op")
        params = {f"op.{k}": v for k, v in numpy_params(op.module(w)).items()}
        x = torch.randn(batch, w * h * wd).numpy()  # rows in torch's (C, H, W) order, as forward_numpy passes them
        with one_blas_thread():
            return time_calls(lambda: forward(params, x), sync, repeats=repeats)[0]

    def timed_numba(op: Op, w: int, h: int, wd: int) -> float:
        from hetrl.nets.fused_q import FusedOp

        program = FusedOp(Layer(op, w, h, wd))
        x = torch.randn(batch, w * h * wd).relu().numpy()  # float32 rows in torch's (C, H, W) order, half zeros
        return time_calls(lambda: program.run(x), sync, repeats=repeats)[0]

    timed = {"numba": timed_numba, "numpy": timed_numpy}.get(backend, timed_torch)

    def seconds(op: Op, w: int, h: int, wd: int) -> float:
        key = (op, w, h, wd)
        if op.kind == "skip":
            return 0.0
        if key not in measured:
            measured[key] = timed(op, w, h, wd)
        return measured[key]

    if backend == "numba":
        where = "cpu with numba (Act/numba's compiled pass, each operation a one-layer program, 1 thread)"
    elif backend == "numpy":
        where = "cpu with numpy (Act/numpy's per-layer forward, 1 BLAS thread)"
        if fallback is not None:
            where += f"; numpy because numba does not import here: {fallback}"
    elif device == "cpu":
        n_threads = threads or torch.get_num_threads()
        where = f"cpu with torch ({n_threads} thread{'s' if n_threads > 1 else ''})"
    else:
        where = f"{device} with torch"
    return _table(space, seconds, "s", f"latency per decision measured on {where}, batch {batch}, per layer summed",
                  backend)


def check_cost_backend(hardware: str, backend: str | None) -> str | None:
    """The backend that times the cost ``hardware`` names (:func:`cost_backend`), None for a counted
    or modelled cost, which takes none; a bad choice is a one-line HetrlError."""
    kind = hardware.partition(":")[0]
    if kind in ("cpu", "cuda"):
        return cost_backend(hardware if kind == "cuda" else "cpu", backend)
    if backend is not None:
        raise HetrlError(f"--cost-backend {backend}: only a measured cost (--hardware cpu or cuda) is timed on a "
                         f"backend, not --hardware {hardware}; leave --cost-backend out")
    return None


def hardware_cost(hardware: str, space: SearchSpace, batch: int = 1, threads: int | None = 1,
                  fpga_search: str = "joint", backend: str | None = None) -> Cost:
    """The cost ``hardware`` names: ``cpu`` or ``cuda[:N]`` (measured latency on ``backend``,
    :func:`measure_op_latency`; default numba on cpu, torch on cuda), ``macs`` (counted operations),
    or ``fpga-model[:FILE]`` (the FPGA model's expected interval for the device description FILE,
    modelled: ``hetrl.cosearch.accelerator.search_cost(space, FILE, fpga_search)``, the accelerator
    searched ``joint``-ly with the agent or each layer in a ``fixed`` equal share). ``backend``
    applies to a measured cost only."""
    kind, _, arg = hardware.partition(":")
    backend = check_cost_backend(hardware, backend)  # before CUDA is looked for
    if kind == "macs":
        return macs_table(space)
    if kind in ("cpu", "cuda"):
        device = hardware if kind == "cuda" else "cpu"
        if kind == "cuda" and not torch.cuda.is_available():
            raise HetrlError(f"--hardware {hardware}: torch sees no CUDA device here")
        return measure_op_latency(space, device, batch, threads if kind == "cpu" else None, backend=backend)
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
