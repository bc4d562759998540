"""The ``hetrl`` command line: train, resume, eval, devices, profile, plan, exits sweep, cosearch, and tabular collect/train."""

from __future__ import annotations

import argparse
import atexit
import os
import signal
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.console import Console

from hetrl.errors import HetrlError
from hetrl.files import check_writable

if TYPE_CHECKING:
    from hetrl.run.result import TrainResult


SETTINGS_HELP = Path(__file__).with_name("settings_help.txt")  # what settings_help_text() writes, read by `train --help`


def _settings_help() -> str:
    """`train --help`'s epilog, kept in SETTINGS_HELP so that help imports no torch (a test checks it
    equals :func:`settings_help_text`; `python -c "from hetrl.cli import write_settings_help as w; w()"`
    writes it anew)."""
    try:
        return SETTINGS_HELP.read_text()
    except OSError:
        return settings_help_text()


def write_settings_help() -> None:
    from hetrl.files import write_text

    write_text(SETTINGS_HELP, settings_help_text())


def settings_help_text() -> str:
    """Every --set key with its default, generated from the config dataclasses (imports torch)."""
    from dataclasses import MISSING, fields

    from hetrl.algos import ALGORITHMS
    from hetrl.config import TrainConfig

    def listing(obj_fields, defaults) -> str:
        return ", ".join(f"{f.name}={defaults[f.name]}" for f in obj_fields)

    run_fields = [f for f in fields(TrainConfig) if f.name not in ("algo", "env", "agent", "atari")]  # atari.KEY: below the table
    run_defaults = {f.name: f.default_factory() if f.default is MISSING else f.default for f in run_fields}
    run_defaults["steps"] = "/".join(f"{cls.default_steps}({name})" for name, cls in ALGORITHMS.items())
    from hetrl.tuned import TUNED, family_labels

    lines = ["settings for --set KEY=VALUE (generic defaults shown):", f"  run: {listing(run_fields, run_defaults)}"]
    for name, cls in ALGORITHMS.items():
        config = cls.Config()
        lines.append(f"  {name}: {listing(fields(config), {f.name: getattr(config, f.name) for f in fields(config)})}")
    lines.append("tuned defaults (hetrl.tuned, from rl-baselines3-zoo) replace the generic ones for:")
    for name in ALGORITHMS:
        envs = [env for algo, env in TUNED if algo == name] + family_labels(name)
        lines.append(f"  {name}: {', '.join(envs) or 'none'}")
    return "\n".join(lines)


def _count(text: str) -> int:
    """argparse type for step counts: 100000, 1e5, 100k."""
    from hetrl.config import parse_count

    try:
        return parse_count(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number of steps (e.g. 100000, 1e5 or 100k)") from None


def _add_train(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("train", help="train an agent", description="Train ALGO (dqn, exit-dqn, ddpg, td3, sac) on a Gymnasium env.",
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.epilog_fn = _settings_help  # built on `train --help` only, from a file (SETTINGS_HELP)
    p.add_argument("algo", help="dqn, exit-dqn, ddpg, td3 or sac")
    p.add_argument("env", help="a Gymnasium env id (CartPole-v1), 'module:Id' (importing the module registers Id) "
                               "or 'module:factory' (a function returning a gym.Env); --set env_kwargs='{...}' "
                               "and --set wrappers=module:Wrapper,... apply to it")
    p.add_argument("--steps", type=_count, help="total env steps, e.g. 100000, 1e5 or 100k (default: the tuned row's "
                                                 "budget for the env, else the algorithm's)")
    p.add_argument("--seed", type=int)
    p.add_argument("--device", help="learner device: auto (default), cpu, cuda, cuda:N, mps")
    p.add_argument("--config", help="a YAML or JSON config to start from: a run's config.json, or only the settings to change")
    p.add_argument("--set", dest="overrides", metavar="KEY=VALUE", action="append", default=[],
                   help="override a setting, e.g. --set lr=0.001 --set hidden=64,64 (repeatable)")
    p.add_argument("--stop-at-return", type=float, help="stop once an evaluation's mean return reaches this")
    p.add_argument("--plan", help="auto (default: planned from this machine's measured profile), rule, or a plan.json")
    p.add_argument("--executor", choices=("inline", "local", "ray", "auto"),
                   help="inline (default: one process), local (actor processes + learner, shared memory), ray, or auto (the plan chooses)")
    p.add_argument("--actors", type=int, help="actor processes for local/ray (default: one per core beside the learner)")
    p.add_argument("--ray-address", help="connect the ray executor to this cluster (e.g. 10.0.0.1:6379); default: a local one")
    p.add_argument("--run-dir", help="where to write the run (default runs/ALGO_ENV_sSEED_TIME)")
    p.add_argument("--overwrite", action="store_true",
                   help="replace the run in --run-dir if it stopped before its first checkpoint (one with checkpoints is refused)")
    p.add_argument("--force", action="store_true",
                   help="start more actors or learner threads than 4x this machine's cores (refused otherwise)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(func=_train)


def _train(args: argparse.Namespace) -> int:
    from hetrl.config import defaults_origin, make_config
    from hetrl.training import Session

    flags = [f"{k}={v}" for k, v in (("steps", args.steps), ("seed", args.seed), ("device", args.device),
                                      ("stop_at_return", args.stop_at_return), ("plan", args.plan),
                                      ("executor", args.executor), ("actors", args.actors),
                                      ("ray_address", args.ray_address)) if v is not None]
    flags += ["force=true"] if args.force else []
    cfg = make_config(args.algo, args.env, args.config, flags + args.overrides)
    console = Console(stderr=True)
    session = Session.create(cfg, args.run_dir, console,
                             defaults=defaults_origin(args.algo, args.env, args.config, flags + args.overrides),
                             progress=not args.no_progress, overwrite=args.overwrite)
    replaced = " (replacing the run that stopped there before its first checkpoint)" if session.run.replaced else ""
    console.print(f"run directory: {session.run.path}{replaced}", soft_wrap=True)
    result = session.train(progress=not args.no_progress)
    session.print_summary(result)
    return _exit_code(result)


def _exit_code(result: TrainResult) -> int:
    """0, or for a run a signal stopped (checkpoint written), 128 + its number: 130 for Ctrl-C, 143 for SIGTERM."""
    if not result.interrupted:
        return 0
    return 128 + signal.Signals[result.stop_signal or "SIGINT"]


def _add_resume(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("resume", help="continue a run from its newest checkpoint")
    p.add_argument("run_dir")
    p.add_argument("--steps", type=_count, help="new total env steps, e.g. 150k (default: the run's own total)")
    p.add_argument("--checkpoint", help="resume from this checkpoint file instead of the newest")
    p.add_argument("--trust-env-state", action="store_true",
                   help="restore the envs' state (a pickle, which can run code) from a checkpoint not signed by this user's "
                        "key: one written elsewhere or by an older hetrl; only for files whose origin you trust")
    p.add_argument("--no-progress", action="store_true")
    p.set_defaults(func=_resume)


def _resume(args: argparse.Namespace) -> int:
    from hetrl.api import resume

    result = resume(args.run_dir, args.steps, checkpoint=args.checkpoint, progress=not args.no_progress, summary=True,
                    trust_env_state=args.trust_env_state)
    return _exit_code(result)


def _add_eval(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("eval", help="evaluate a run's greedy policy")
    p.add_argument("run_dir")
    p.add_argument("--episodes", type=int, default=20)
    p.add_argument("--checkpoint", help="best (default: checkpoints/best.pt, the best evaluation during training), "
                                        "final (the newest periodic checkpoint), or a checkpoint file")
    p.add_argument("--seed", type=int)
    p.add_argument("--render-video", action="store_true",
                   help="save a video of one episode (rgb_array envs): RUN_DIR/eval_CHECKPOINT.mp4 where an MP4 "
                        "encoder is installed (hetrl[video]), else .gif")
    p.set_defaults(func=_eval)


def _eval(args: argparse.Namespace) -> int:
    from hetrl.api import evaluate

    res = evaluate(args.run_dir, args.episodes, checkpoint=args.checkpoint, render_video=args.render_video, seed=args.seed)
    if res.note:
        print(f"note: {res.note}")
    print(f"{res.which} policy ({res.checkpoint}, env step {res.env_steps:,}): return {res.mean:.2f} ± {res.std:.2f} "
          f"over {len(res.returns)} episodes (min {res.returns.min():.1f}, max {res.returns.max():.1f})")
    if res.exits is not None:
        print(res.exits.describe())
    if res.video is not None:
        print(f"video: {res.video} ({res.video.suffix[1:].upper()}{'; ' + res.video_note if res.video_note else ''})")
    return 0


def _add_devices(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("devices", help="list CPU, memory, NUMA nodes, torch accelerators and energy meters")
    p.add_argument("--json", action="store_true", help="print the machine description as JSON")
    p.set_defaults(func=_devices)


def _devices(args: argparse.Namespace) -> int:
    from hetrl.devices_report import devices_command

    return devices_command(args)


def _add_profile(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("profile", help="measure every primitive of ALGO on ENV on every device here",
                       description="Time every registered implementation of every primitive the algorithm uses, "
                                   "on every device, at the algorithm's sizes; save the profile as JSON.")
    p.add_argument("algo")
    p.add_argument("env")
    p.add_argument("--config", help="a YAML or JSON config to start from (all settings or some)")
    p.add_argument("--set", dest="overrides", metavar="KEY=VALUE", action="append", default=[],
                   help="override an agent setting (batch_size, hidden, prioritized, ...)")
    p.add_argument("--device", dest="devices", action="append", help="profile only this device (repeatable)")
    p.add_argument("--out", help="where to save the JSON (default: the per-machine cache, printed at the end)")
    p.add_argument("--no-progress", action="store_true")
    p.set_defaults(func=_profile)


def _profile(args: argparse.Namespace) -> int:
    from hetrl.config import make_config
    from hetrl.devices import resolve_device
    from hetrl.hardware import describe_machine
    from hetrl.profile import default_path, partial_path, profile_table, profile_workload
    from hetrl.run.report import progress_bar
    from hetrl.runtime.denormals import flush_denormals

    cfg = make_config(args.algo, args.env, args.config, args.overrides)
    devices = [str(resolve_device(d)) for d in args.devices] if args.devices else None
    console = Console(stderr=True)
    machine = describe_machine()
    out = check_writable(args.out or default_path(machine, cfg.algo, cfg.env_source(), cfg.agent), "--out")  # before profiling
    # in the mode a run computes in (runtime/denormals.py), set before the profile starts torch's thread pool
    with flush_denormals(cfg.flush_denormals), progress_bar(console, not args.no_progress) as bar:
        task = bar.add_task(f"profile {cfg.algo} {cfg.env}", total=None, stats="", unit="measurements")
        profile = profile_workload(cfg.algo, cfg.env_source(), cfg.agent, devices, machine=machine, resume=partial_path(out),
                                   progress=lambda label, done, total: bar.update(task, completed=done + 1, total=total, stats=label))
    console.print(profile_table(profile))
    path = profile.save(out)
    console.print(f"profile saved: {path}")
    return 0


def _add_plan(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("plan", help="choose where each primitive runs, from a measured profile",
                       description="Predict env steps/s of every placement the profile can cost and pick the best.")
    p.add_argument("algo")
    p.add_argument("env")
    p.add_argument("--config", help="a YAML or JSON config to start from (all settings or some)")
    p.add_argument("--set", dest="overrides", metavar="KEY=VALUE", action="append", default=[])
    p.add_argument("--objective", default="throughput", choices=("throughput", "efficiency"),
                   help="throughput (env steps/s, default) or efficiency (env steps per joule; needs a working energy meter)")
    p.add_argument("--device", help="pin the learner to this device (default: the planner chooses)")
    p.add_argument("--executor", default="auto", choices=("auto", "inline", "local"),
                   help="consider inline and local (auto, default) or only one of them")
    p.add_argument("--actors", type=int, help="actor processes for local (default: the planner tries 1 to the core count)")
    p.add_argument("--profile", help="a profile JSON (default: this machine's cached one, measured now if missing)")
    p.add_argument("--steps", type=_count, help="the run's env steps, over which start-up costs are weighed "
                                              "(default: the algorithm's default run length)")
    p.add_argument("--what-if", dest="what_if", metavar="FILE", action="append", default=[],
                   help="also consider a device you do not have (repeatable): an FPGA device file or a shipped part "
                        "(zcu102, u250), whose model costs Act, or a table of seconds per call "
                        '({"device": NAME, "costs": {"Act": {"1": 1e-5}, "Learn": {...}}}); its figures are labelled '
                        "what-if, modelled, never run, and `hetrl train` refuses a plan that uses it")
    p.add_argument("--out", default="plan.json", help="where to write the plan (default plan.json)")
    p.set_defaults(func=_plan)


def _plan(args: argparse.Namespace) -> int:
    from hetrl.config import make_config
    from hetrl.devices import resolve_device
    from hetrl.planner.tables import plan_tables
    from hetrl.planner.choice import plan_for_run, plan_from_profile
    from hetrl.planner.whatif import LABEL, load_what_if, what_if_slots
    from hetrl.profile import Profile
    from hetrl.training import checked_algorithm

    cfg = make_config(args.algo, args.env, args.config,
                      args.overrides + [f"executor={args.executor}"] + ([f"actors={args.actors}"] if args.actors else [])
                      + ([f"steps={args.steps}"] if args.steps else []))
    check_writable(args.out, "--out")  # before planning
    algorithm = checked_algorithm(cfg)  # the settings are checked before any profile is read, as a run checks them
    console = Console(stderr=True)
    what_if = [load_what_if(spec) for spec in args.what_if]
    if args.profile:
        device = None if args.device is None else str(resolve_device(args.device))
        plan = plan_from_profile(Profile.load(args.profile), cfg, algorithm, args.objective, device, what_if=what_if)
    else:
        cfg.device, cfg.plan = args.device or "auto", "auto"
        plan = plan_for_run(cfg, algorithm, console.print, args.objective, what_if=what_if)
    for device in what_if:
        console.print(device.describe(algorithm), soft_wrap=True)
    for table in plan_tables(plan):
        console.print(table)
    path = plan.save(args.out)
    if what_if_slots(plan.placement):
        console.print(f"plan written to {path}; it places {', '.join(what_if_slots(plan.placement))} on a what-if device "
                      f"({LABEL}): `hetrl train` refuses it, since no run can use the device", soft_wrap=True)
    else:
        console.print(f"plan written to {path}; train with it: hetrl train {cfg.algo} {cfg.env} --plan {args.out} --executor auto")
    return 0


def _add_sweep(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("sweep", help="measure env steps/s at each actor count and find the knee",
                       description="Run ALGO on ENV under the local executor at each actor count; report env steps/s, "
                                   "learner utilisation, energy where metered, and the knee (fewest actors within 95% "
                                   "of the best rate). Writes sweep.json and sweep.png.")
    p.add_argument("algo")
    p.add_argument("env")
    p.add_argument("--actors", default="1..4", help="actor counts: a range 1..4 (default) or a list 1,2,4")
    p.add_argument("--steps", type=_count, help="env steps per run (default: learning_starts + 10000)")
    p.add_argument("--config", help="a YAML or JSON config to start from (all settings or some)")
    p.add_argument("--set", dest="overrides", metavar="KEY=VALUE", action="append", default=[])
    p.add_argument("--out", default="sweep", help="output folder (default ./sweep; must be new or empty)")
    p.set_defaults(func=_sweep)


def _sweep(args: argparse.Namespace) -> int:
    from pathlib import Path

    from hetrl.config import make_config
    from hetrl.sweep import parse_range, sweep, table

    counts = parse_range(args.actors)
    cfg = make_config(args.algo, args.env, args.config, args.overrides)
    cfg.steps = args.steps or cfg.agent.learning_starts + 10_000
    console = Console(stderr=True)
    points = sweep(cfg, counts, Path(args.out), console)
    console.print(table(points))
    console.print(f"written: {Path(args.out) / 'sweep.json'}, {Path(args.out) / 'sweep.png'}")
    return 0


def _add_export(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("export", help="write a run's greedy policy as a TorchScript or ONNX file",
                       description="Write the greedy policy of a run (its newest checkpoint, or --checkpoint) as one "
                                   "self-contained file mapping a batch of observations to actions, with the "
                                   "observation and action spec inside (TorchScript extra file or ONNX metadata "
                                   "'hetrl_spec').")
    p.add_argument("run_dir")
    p.add_argument("--format", choices=("torchscript", "onnx"), default="torchscript")
    p.add_argument("--out", help="the file to write (default: RUN_DIR/policy.pt, or policy.onnx)")
    p.add_argument("--checkpoint", help="export this checkpoint file instead of the newest")
    p.set_defaults(func=_export)


def _export(args: argparse.Namespace) -> int:
    from pathlib import Path

    from hetrl.policy import load

    out = check_writable(args.out or Path(args.run_dir) / ("policy.pt" if args.format == "torchscript" else "policy.onnx"),
                         "--out")
    policy = load(args.run_dir, args.checkpoint)
    path = policy.export(out, args.format)
    print(f"{path}: the greedy policy of {policy.source} ({args.format})")
    return 0


def _add_exits(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("exits", help="early exits of an exit-dqn run: choose its threshold",
                       description="Early-exit DQN (exit-dqn): the trade-off between operations and score.")
    commands = p.add_subparsers(dest="exits_command", required=True, metavar="COMMAND")
    s = commands.add_parser("sweep", help="choose the exit threshold and branch width on validation episodes",
                            description="Fit branches of each width to the trained network, then play validation "
                                        "episodes (seeded apart from the test episodes `hetrl eval` plays) at each "
                                        "confidence threshold; report the operations ratio, score ratio and measured "
                                        "latency per decision against the whole network; write RUN_DIR/exits/sweep.md, "
                                        "sweep.json and sweep.png; store the chosen threshold and branches (the fewest "
                                        "operations at the score ratio asked for) in the checkpoint.")
    s.add_argument("run_dir")
    s.add_argument("--checkpoint", help="best (default, as hetrl eval), final, or a checkpoint file")
    s.add_argument("--episodes", type=int, default=20, help="validation episodes per threshold (default 20)")
    s.add_argument("--max-episodes", type=int,
                   help="validation episodes a point the sweep cannot yet tell (cheaper than the choice, its score "
                        "ratio within --margin standard errors of the line) plays in all, in steps of --episodes "
                        "(default 4x --episodes; --episodes: none more)")
    s.add_argument("--thresholds", help="comma-separated confidences in [0, 1] (default 1,0.99,0.98,0.95,0.9,0.85,"
                                        "0.8,0.7,0.6,0.5,0.4,0.3,0.2,0.1,0; 1, the whole network, is always "
                                        "included)")
    s.add_argument("--fit-updates", type=int,
                   help="first fit the branches to the trained network on the run's replay, backbone and final "
                        "head frozen, for this many updates (default 20000; 0: sweep the branches as trained)")
    s.add_argument("--fit-rounds", type=int,
                   help="after the fit on the replay, rounds of DAgger: the branch alone plays 40 episodes, the "
                        "states it met join the fit's (labelled by the final head) and the fit goes on for half "
                        "its updates (default 3; 0: the replay alone; needs exit_target policy or distill)")
    s.add_argument("--confidence-tolerance", type=float,
                   help="the fit's exit_confidence_tolerance: its confidence heads predict that the final head "
                        "values the branch's action within this share of the state's Q spread of its best "
                        "(default: the run's; 0: the same action)")
    s.add_argument("--widths", help="comma-separated branch widths (hidden units; 0: linear heads) to fit and sweep, "
                                    "the cheapest at the score chosen with its threshold (default: the run's own and "
                                    "two narrower, each about 3/4 of the one before: 16,12,9 for 16)")
    s.add_argument("--shares", help="comma-separated shares of its block's outputs a branch reads (exit_share), each "
                                    "fit with --widths, or by default with the run's width ladder scaled by the run's "
                                    "share over it (a branch on half the filters twice as wide); default: the run's own")
    s.add_argument("--min-score-ratio", type=float, default=0.9,
                   help="the least score ratio to the whole network the chosen threshold keeps (default 0.9)")
    s.add_argument("--margin", type=float, default=1.0,
                   help="standard errors of its validation score ratio (episodes paired with the whole network's) "
                        "by which the chosen point clears --min-score-ratio (default 1; 0: the ratio alone)")
    s.add_argument("--out", help="where to write the table and plot (default RUN_DIR/exits)")
    s.add_argument("--no-store", action="store_true", help="report only; leave the checkpoint's threshold as it is")
    s.add_argument("--no-timing", action="store_true", help="skip the latency measurements")
    s.set_defaults(func=_exits_sweep)


def _comma_list(value: str | None, kind: type, flag: str, expected: str) -> list[Any] | None:
    """The values of a comma-separated option (None where it was not given); one clear error naming
    ``flag`` where one does not parse as ``kind``."""
    if not value:
        return None
    try:
        return [kind(v) for v in value.split(",") if v.strip()]
    except ValueError:
        raise HetrlError(f"{flag} {value}: expected {expected}") from None


def _exits_sweep(args: argparse.Namespace) -> int:
    from hetrl.exits import FIT_UPDATES, THRESHOLDS, markdown, sweep

    listed = _comma_list(args.thresholds, float, "--thresholds", "comma-separated numbers in [0, 1]")
    thresholds = tuple(listed) if listed is not None else THRESHOLDS
    widths = _comma_list(args.widths, int, "--widths", "comma-separated hidden-unit counts, e.g. 16,12,9")
    shares = _comma_list(args.shares, float, "--shares", "comma-separated numbers in (0, 1], e.g. 1,0.5")
    if args.out:
        check_writable(args.out, "--out", directory=True)
    console = Console(stderr=True)
    result = sweep(args.run_dir, args.checkpoint, args.episodes, thresholds, args.min_score_ratio, args.out,
                   store=not args.no_store, timing=not args.no_timing,
                   progress=lambda label: console.print(f"exits sweep: {label}", highlight=False),
                   fit_updates=FIT_UPDATES if args.fit_updates is None else args.fit_updates, widths=widths,
                   margin=args.margin, shares=shares, fit_rounds=args.fit_rounds,
                   confidence_tolerance=args.confidence_tolerance, max_episodes=args.max_episodes)
    print(markdown(result))
    return 0


class _Parser(argparse.ArgumentParser):
    """A parser whose epilog may be computed when help is asked for (``epilog_fn``), so that
    building the parsers, and `hetrl --help`, import no torch."""

    epilog_fn = None

    def format_help(self) -> str:
        if self.epilog_fn is not None and self.epilog is None:
            self.epilog = self.epilog_fn()
        return super().format_help()


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="hetrl", description="Deep RL on heterogeneous hardware.")
    parser.add_argument("--version", action="version", version=f"hetrl {__import__('hetrl').__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND", parser_class=_Parser)
    _add_train(sub)
    _add_sweep(sub)
    _add_resume(sub)
    _add_eval(sub)
    _add_export(sub)
    _add_devices(sub)
    _add_profile(sub)
    _add_plan(sub)
    _add_exits(sub)
    from hetrl.cosearch.cli import add_subparser as _add_cosearch
    from hetrl.tabular.cli import add_subparser as _add_tabular

    _add_cosearch(sub)
    _add_tabular(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    if argv is None:  # the command line's own process (see _main's gc.freeze)
        atexit.register(_quiet_teardown)  # registered first, so it runs after every other exit handler
    code = _main(argv)
    ray_executor = sys.modules.get("hetrl.runtime.ray_executor")
    if ray_executor is not None and ray_executor.connect_pending():  # see connect_pending: no finalizing beside it
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    return code


def _quiet_teardown() -> None:
    """Once every exit handler has run, the interpreter's teardown writes nothing to stderr. With the
    objects frozen (``gc.freeze`` below) nanobind reports those of Triton's bindings still alive as
    leaks, some 30 lines (torch imports Triton wherever it is installed, and the Adam optimizer
    imports Dynamo); nothing the run did is in them, and its own messages were written before."""
    sys.stdout.flush()
    sys.stderr.flush()
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 2)
    os.close(devnull)


def _main(argv: Sequence[str] | None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except HetrlError as exc:
        print(f"hetrl: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt as exc:  # hetrl.errors.StopRequested says which signal
        signum = getattr(exc, "signum", signal.SIGINT)
        reason = f": {exc}" if str(exc) else ""
        print(f"hetrl: {'interrupted' if signum == signal.SIGINT else f'stopped by {signal.Signals(signum).name}'}{reason}",
              file=sys.stderr)
        return 128 + signum
    finally:
        if argv is None:  # the command line's own process, which ends next: skip the exit's collections
            import gc  # of every object torch and the rest made (about 1 s of a 2-core machine's time)

            gc.freeze()


if __name__ == "__main__":
    sys.exit(main())
