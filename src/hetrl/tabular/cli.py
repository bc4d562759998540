"""``hetrl tabular collect`` and ``hetrl tabular train``.

The main CLI calls :func:`add_subparser` on its subparsers object and then ``args.func(args)``;
user errors are raised as :class:`~hetrl.errors.HetrlError`.
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path
from typing import Any

from hetrl.errors import HetrlError
from hetrl.files import check_writable, write_file
from hetrl.tabular.fixed_point import DEFAULT_SCALE
from hetrl.tabular.options import ALGOS, FORMATS, ORDERS, POLICIES


def count(text: str) -> int:
    """A positive count written ``100000``, ``100_000``, ``100k``, ``1M`` or ``1e6``."""
    match = re.fullmatch(r"\s*([0-9_.eE+]+)\s*([kKmMgG]?)\s*", text)
    try:
        value = float(match.group(1).replace("_", "")) * {"": 1, "k": 1e3, "m": 1e6, "g": 1e9}[match.group(2).lower()]
    except (AttributeError, ValueError):
        raise argparse.ArgumentTypeError(f"{text!r} is not a count (examples: 10000, 100k, 1M, 1e6)") from None
    if value < 1 or value != int(value):
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive whole number")
    return int(value)


def _env_kwargs(pairs: list[str]) -> dict[str, Any]:
    kwargs: dict[str, Any] = {}
    for pair in pairs:
        key, sep, raw = pair.partition("=")
        if not sep or not key:
            raise HetrlError(f"--env-arg {pair!r} is not KEY=VALUE; write e.g. --env-arg map_name=8x8")
        try:
            kwargs[key] = json.loads(raw)
        except json.JSONDecodeError:
            kwargs[key] = raw  # a bare string such as 8x8
    return kwargs


def backend_names() -> list[str]:
    """The TabularLearn backends, read off the library's module names (``tabular_learn_numba_threads``
    holds ``numba-threads``) so that building the parser imports no implementation."""
    from hetrl.primitives import LIBRARY

    prefix = "tabular_learn_"
    return [module[len(prefix) :].replace("_", "-") for module in LIBRARY if module.startswith(prefix)]


def add_subparser(subparsers: Any) -> argparse.ArgumentParser:
    """Register ``tabular collect`` and ``tabular train`` on an argparse subparsers object."""
    parser = subparsers.add_parser(
        "tabular",
        help="tabular Q-learning/SARSA on experience datasets, data-parallel over units",
        description="Collect experience datasets from discrete Gymnasium envs and learn Q-tables from them, "
        "split across units (CPU cores, a GPU, a Ray cluster) whose tables are averaged.",
    )
    commands = parser.add_subparsers(dest="tabular_command", required=True, metavar="{collect,train}")

    collect = commands.add_parser(
        "collect",
        help="write an experience dataset (.npz) from a discrete env",
        description="Step ENV and write its transitions (s, a, r, s', done, a') to a .npz dataset.",
    )
    collect.add_argument("env", metavar="ENV", help="a Gymnasium id with discrete spaces, e.g. FrozenLake-v1, Taxi-v4")
    collect.add_argument("--transitions", type=count, default=100_000, metavar="N", help="how many (default 100k; 1M, 1e6 also work)")
    collect.add_argument("--policy", choices=POLICIES, default="random", help="behaviour policy (default random)")
    collect.add_argument("--epsilon", type=float, default=0.1, help="exploration of epsilon-greedy (default 0.1)")
    collect.add_argument("--seed", type=int, default=0)
    collect.add_argument("--env-arg", action="append", default=[], metavar="KEY=VALUE", help="env keyword, e.g. is_slippery=false (repeatable)")
    collect.add_argument("--out", type=Path, metavar="FILE", help="output file (default ENV_POLICY_N.npz)")
    collect.set_defaults(func=run_collect)

    train = commands.add_parser(
        "train",
        help="learn a Q-table from a dataset on N units and evaluate its greedy policy",
        description="Split the dataset over N units, learn a Q-table per unit, average them, evaluate the greedy policy.",
    )
    train.add_argument("env", metavar="ENV", help="the env the dataset was collected on")
    train.add_argument("--dataset", type=Path, required=True, metavar="FILE")
    train.add_argument("--algo", choices=ALGOS, default="q")
    train.add_argument("--units", type=int, default=1, metavar="N", help="shards learned in parallel (default 1)")
    train.add_argument("--format", dest="number_format", choices=FORMATS, default="fp32", help="fp32 or INT32 fixed point")
    train.add_argument("--epochs", type=int, default=10, metavar="E", help="passes over the dataset (default 10)")
    train.add_argument("--alpha", type=float, default=0.02, help="learning rate (default 0.02)")
    train.add_argument("--gamma", type=float, default=0.99, help="discount (default 0.99)")
    train.add_argument("--order", choices=ORDERS, default="sequential", help="how each unit walks its shard")
    train.add_argument("--stride", type=int, default=64, help="stride of --order strided (default 64)")
    train.add_argument("--seed", type=int, default=0, help="seed of --order random and of the evaluation")
    train.add_argument("--merge-every", type=count, metavar="K", help="average the tables every K updates per unit (default: at the end)")
    train.add_argument("--scale", type=int, default=DEFAULT_SCALE, help=f"int32: Q stored as round(Q * scale) (default {DEFAULT_SCALE})")
    train.add_argument("--backend", default="auto", help=f"auto (default) or one of {', '.join(backend_names())}")
    train.add_argument("--device", help="torch device for --backend torch (default cuda if available)")
    train.add_argument("--eval-episodes", type=int, default=1000, metavar="N", help="greedy evaluation episodes (default 1000; 0 skips)")
    train.add_argument("--save-q", type=Path, metavar="FILE", help="write the learned float32 Q-table as .npy")
    train.set_defaults(func=run_train)
    return parser


def _progress() -> Any:
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    return Progress(
        TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn(),
        console=Console(stderr=True), transient=True,
    )


def run_collect(args: argparse.Namespace) -> int:
    from rich.console import Console

    from hetrl.tabular.dataset import collect

    out = check_writable(args.out or Path(f"{re.sub(r'[^A-Za-z0-9_.-]', '_', args.env)}_{args.policy}_{args.transitions}.npz"),
                         "--out", make_parents=False)
    with _progress() as bar:
        task = bar.add_task(f"collect {args.env}", total=args.transitions)
        dataset = collect(
            args.env, args.transitions, args.policy, epsilon=args.epsilon, seed=args.seed,
            env_kwargs=_env_kwargs(args.env_arg), progress=lambda done: bar.update(task, completed=done),
        )
    dataset.save(out)
    Console().print(
        f"wrote {out}: {len(dataset)} transitions of {dataset.env_id} ({dataset.n_states} states, "
        f"{dataset.n_actions} actions, {int(dataset.done.sum())} terminal), policy {dataset.policy}"
    )
    return 0


def _npy(path: Path) -> Path:
    """``path`` as np.save names it: with .npy added unless it ends so."""
    return path if path.suffix == ".npy" else path.with_name(path.name + ".npy")


def _rate(value: float) -> str:
    return f"{value / 1e6:,.1f} M/s" if value >= 1e5 else f"{value:,.0f} /s"


def run_train(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.table import Table

    from hetrl.tabular.dataset import load, make_env
    from hetrl.tabular.evaluate import evaluate
    from hetrl.tabular.schedule import Order
    from hetrl.tabular.train import TabularConfig, train_tabular

    make_env(args.env).close()  # a clear error for an unknown or non-discrete env comes first
    save_q = args.save_q and check_writable(_npy(args.save_q), "--save-q", make_parents=False)  # before training
    dataset = load(args.dataset)
    if dataset.env_id != args.env:
        raise HetrlError(
            f"dataset {args.dataset} was collected on {dataset.env_id}, not {args.env}; "
            f"pass {dataset.env_id} or collect a dataset for {args.env}"
        )
    if args.eval_episodes < 0:
        raise HetrlError(f"--eval-episodes must be >= 0 (got {args.eval_episodes})")
    config = TabularConfig(
        algo=args.algo, number_format=args.number_format, units=args.units, epochs=args.epochs,
        alpha=args.alpha, gamma=args.gamma, order=Order(args.order, args.stride, args.seed),
        merge_every=args.merge_every, scale=args.scale, backend=args.backend, device=args.device,
    )
    with _progress() as bar:
        task = bar.add_task(f"{args.algo} {args.number_format} x{args.units}", total=None)
        result = train_tabular(dataset, config, progress=lambda done, total: bar.update(task, completed=done, total=total))
    if save_q:
        import numpy as np

        write_file(save_q, lambda f: np.save(f, result.q), size=result.q.nbytes)

    table = Table(title=f"tabular {args.algo} on {dataset.env_id}", show_header=False)
    table.add_column("metric", style="bold")
    table.add_column("value")
    rows = [
        ("dataset", f"{args.dataset} ({len(dataset):,} transitions, {dataset.policy})"),
        ("algorithm / format", f"{args.algo} / {args.number_format}" + (f" (scale {args.scale})" if args.number_format == "int32" else "")),
        ("backend", f"{result.backend} on {result.device}, {args.units} unit(s)"),
        ("schedule", f"{args.epochs} epoch(s), {args.order} order, merge " + (f"every {args.merge_every:,}" if args.merge_every else "at the end")),
        ("updates", f"{result.updates:,}"),
        ("learning time", f"{result.learn_seconds:.3f} s (+ {result.setup_seconds:.2f} s setup)"),
        ("updates/s", _rate(result.updates_per_second)),
        ("per-unit updates/s", _rate(result.unit_updates_per_second)),
        ("merge time", f"{result.merge_seconds * 1e3:.2f} ms ({result.merges} merge(s))"),
    ]
    if args.eval_episodes:
        evaluation = evaluate(dataset.make_env(), result.q, args.gamma, episodes=args.eval_episodes, seed=args.seed)
        rows += [
            ("greedy return", f"{evaluation.mean_return:.3f} over {evaluation.episodes} episodes"),
            ("greedy success rate", f"{evaluation.success_rate:.3f}"),
        ]
        if evaluation.value_gap is not None:
            rows += [
                ("success probability (exact)", f"{evaluation.success_probability:.3f} (optimal {evaluation.optimal_success_probability:.3f})"),
                ("value gap V*(s0) - V(s0)", f"{evaluation.value_gap:.4f} (V* = {evaluation.optimal_value:.4f})"),
                ("max |Q - Q*| (reachable states)", f"{evaluation.q_error:.4f}"),
            ]
    for row in rows:
        table.add_row(*row)
    Console().print(table)
    return 0
