"""``hetrl cosearch ENV --teacher RUN_DIR --hardware cpu|cuda|macs|fpga-model[:FILE]``.

The main CLI calls :func:`add_subparser`; building the parser imports no torch (the search's
modules are imported when the command runs)."""

from __future__ import annotations

import argparse
from typing import Any

from rich.console import Console

from hetrl.cosearch.options import COST_BACKENDS, DISTILL, FPGA_SEARCH, MODES, SOURCES


def add_subparser(subparsers: Any) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "cosearch", help="search a DQN agent's network for the hardware, distilled from a trained teacher",
        description="Agent and accelerator co-search (A3C-S): train a supernet of candidate layers on a trained "
                    "DQN teacher's states (distillation of its Q-values), its architecture pushed towards "
                    "candidates cheap on the hardware (on the FPGA model, the accelerator's parallelism searched with "
                    "it); write the derived architecture (architecture.json, which "
                    "`hetrl train dqn ENV --set network=PATH` retrains), summary.md and search.png.")
    p.add_argument("env", help="the env the teacher was trained on")
    p.add_argument("--teacher", required=True, metavar="RUN_DIR", help="a dqn or exit-dqn run directory")
    p.add_argument("--checkpoint", help="best (default, as hetrl eval), final, or a checkpoint file of the teacher")
    p.add_argument("--hardware", default="cpu",
                   help="the cost: cpu (each candidate's latency measured here, batch 1, on --cost-backend; default), cuda[:N] "
                        "(measured there), macs (counted operations) or fpga-model[:FILE] (the FPGA model's, modelled)")
    p.add_argument("--cost-backend", choices=COST_BACKENDS, default=None,
                   help="what times a measured cost: numba (each candidate as a one-layer program of Act/numba's "
                        "compiled pass, which serves a searched network fastest on the host; the default with "
                        "--hardware cpu where numba imports, else numpy, said in the cost's label), numpy (its numpy "
                        "forward, as Act/numpy serves it) or torch (its torch module; the default, and the only "
                        "choice, with --hardware cuda)")
    p.add_argument("--fpga-search", choices=FPGA_SEARCH, default="joint",
                   help="with --hardware fpga-model: joint (the accelerator's parallelism per layer searched with the "
                        "agent, within the part's DSP and memory budget; default) or fixed (each layer priced within an "
                        "equal share of the part; the derived network's accelerator from a greedy after the search: "
                        "with --lambda 0, the decoupled baseline)")
    p.add_argument("--steps", type=int, default=2000, help="search steps (default 2000)")
    p.add_argument("--lambda", dest="hardware_weight", metavar="X", type=float, default=0.1,
                   help="weight of the hardware cost, relative to its value at the start (default 0.1; 0: none)")
    p.add_argument("--mode", choices=MODES, default="one-level",
                   help="one-level (weights and architecture on the same batch; default) or bi-level (DARTS: "
                        "architecture on a held-out half of the teacher's states)")
    p.add_argument("--distill", choices=DISTILL, default="mse",
                   help="mse (Q-values, relative to their variance; default) or kl (softmax(Q/T), policy distillation)")
    p.add_argument("--td-weight", type=float, default=0.0, help="weight of DQN's TD loss on the teacher's transitions (default 0)")
    p.add_argument("--states", type=int, default=20_000, help="teacher transitions to search on (default 20000)")
    p.add_argument("--source", choices=SOURCES, default="auto",
                   help="where the states come from: the teacher run's replay, the teacher playing, or auto (the "
                        "replay where one was kept; default)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--device", default="cpu", help="where the supernet trains (default cpu)")
    p.add_argument("--out", help="output folder (default cosearch/ENV_HARDWARE_sSEED_TIME; must be new or empty)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(func=run)
    return p


def run(args: argparse.Namespace) -> int:
    from hetrl.cosearch.pipeline import cosearch
    from hetrl.cosearch.search import SearchConfig
    from hetrl.cosearch.summary import format_cost
    from hetrl.run.report import progress_bar

    config = SearchConfig(steps=args.steps, hardware_weight=args.hardware_weight, mode=args.mode, distill=args.distill,
                          td_weight=args.td_weight, seed=args.seed, device=args.device)
    console = Console(stderr=True)

    def say(text: str) -> None:
        console.print(text, highlight=False, soft_wrap=True)

    with progress_bar(console, not args.no_progress) as bar:
        task = bar.add_task(f"cosearch {args.env}", total=args.steps, stats="", unit="steps")

        def progress(step: int, parts: dict[str, float]) -> None:
            if step % 10 == 0 or step == args.steps:
                bar.update(task, completed=step, stats=", ".join(f"{k} {v:.3g}" for k, v in parts.items()))

        outcome = cosearch(args.env, args.teacher, args.hardware, config, args.out, args.states, args.source,
                           args.checkpoint, fpga_search=args.fpga_search, cost_backend=args.cost_backend, say=say,
                           progress=progress)
    result = outcome.result
    say(f"derived: {' -> '.join(result.architecture.names)}; {result.architecture.macs:,} MACs per decision; "
        f"cost {format_cost(result.cost, result.cost_unit)} ({result.cost_label})")
    say(f"written: {', '.join(str(p) for p in outcome.files)}")
    print(f"hetrl train dqn {args.env} --set network={(outcome.out / 'architecture.json').resolve()}")
    return 0
