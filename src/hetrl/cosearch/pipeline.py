"""One co-search from a teacher run to an output folder: what ``hetrl cosearch`` runs, and what a
benchmark calls for each game, seed and lambda."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hetrl.algos.base import seeded_init
from hetrl.cosearch.cost import check_cost_backend, hardware_cost
from hetrl.cosearch.search import SearchConfig, SearchResult, search
from hetrl.cosearch.summary import write_outputs
from hetrl.cosearch.supernet import SuperNet, search_space
from hetrl.cosearch.teacher import Teacher
from hetrl.errors import HetrlError
from hetrl.files import check_writable, file_part
from hetrl.runtime.denormals import flush_denormals

STATES = 20_000  # teacher transitions searched on


@dataclass
class Outcome:
    result: SearchResult
    out: Path
    files: list[Path]


def default_out(env: str, hardware: str, seed: int) -> Path:
    return Path("cosearch") / f"{file_part(env)}_{file_part(hardware)}_s{seed}_{time.strftime('%Y%m%d-%H%M%S')}"


def cosearch(env: str, teacher_dir: str | Path, hardware: str = "cpu", config: SearchConfig | None = None,
             out: str | Path | None = None, states: int = STATES, source: str = "auto", checkpoint: str | None = None,
             space_options: dict[str, Any] | None = None, fpga_search: str = "joint", cost_backend: str | None = None,
             say: Callable[[str], None] = lambda _: None,
             progress: Callable[[int, dict[str, float]], None] | None = None) -> Outcome:
    """Search an agent for ``env`` distilled from the DQN run ``teacher_dir`` with the cost
    ``hardware`` names (:func:`hetrl.cosearch.cost.hardware_cost`); write the outputs
    (:mod:`hetrl.cosearch.summary`) to ``out`` (default ``cosearch/ENV_HARDWARE_sSEED_TIME``;
    refused if it holds files). ``space_options``: :func:`~hetrl.cosearch.supernet.search_space`'s;
    ``fpga_search``: with the FPGA model, ``joint`` (its accelerator searched with the agent) or
    ``fixed`` (an equal share per layer; the derived network's design from ``allocate``);
    ``cost_backend``: what times a measured cost (:func:`hetrl.cosearch.cost.cost_backend`; default
    numba on cpu, torch on cuda), checked before the teacher is loaded."""
    config = config or SearchConfig()
    if problems := config.validate():
        raise HetrlError("cosearch: " + "; ".join(problems))
    check_cost_backend(hardware, cost_backend)  # a bad --cost-backend: one line before the teacher loads
    out = Path(out) if out is not None else default_out(env, hardware, config.seed)
    check_writable(out, "--out", directory=True)  # a file, a read-only place: one line before the search
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise HetrlError(f"--out {out} holds files already; give a new or empty folder")
    teacher = Teacher(teacher_dir, checkpoint)
    if teacher.config.env != env:
        raise HetrlError(f"the teacher {teacher_dir} was trained on {teacher.config.env}, not {env}")
    spec = teacher.spec
    data = teacher.data(states, source, config.seed)
    say(f"teacher: {teacher.policy.source}; states: {data.source}")
    try:
        space = search_space(spec.obs_shape, spec.n_actions, spec.pixel_scale, **(space_options or {}))
    except (TypeError, ValueError) as exc:
        raise HetrlError(f"search space: {exc}") from None
    say(f"hardware cost: {hardware} ...")
    # denormals flushed, as a training run computes (hetrl.runtime.denormals): the costs are measured in the
    # mode the derived agent will run in, and the supernet's Adam moments decay into denormals as a learner's do
    with flush_denormals():
        cost = hardware_cost(hardware, space, batch=1, fpga_search=fpga_search, backend=cost_backend)
        with seeded_init(config.seed):
            supernet = SuperNet(space, config.tau_start)
        result = search(supernet, data, config, cost, progress)
    context: dict[str, Any] = {"env": env, "teacher": str(teacher_dir), "checkpoint": teacher.policy.source.name,
                               "states": data.source, "hardware": hardware,
                               **({"cost_backend": cost.backend} if getattr(cost, "backend", "") else {})}
    if hasattr(cost, "derive"):  # the FPGA model: the derived network's accelerator, checked exactly
        derived = cost.derive(result.choice)
        context.update({"fpga_search": fpga_search, "derived design": derived.describe(), "fpga_design": derived.to_dict()})
    files = write_outputs(out, result, space, context, cost.to_dict() if hasattr(cost, "to_dict") else None)
    return Outcome(result, out, files)
