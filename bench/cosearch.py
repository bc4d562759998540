"""Agent/accelerator co-search (issue 19, A3C-S) against the hand-designed agent and a decoupled search.

Per MinAtar game a teacher DQN (the MinAtar network, the tuned MinAtar row, ``--teacher-steps``,
seed 0) is trained once and shared by every seed and arm. Then, per seed, these arms each give one
network that DQN retrains from scratch at the same budget (``--steps``, the tuned row, the seed):

- ``hand``: the hand-designed agent, ``network=minatar`` (Young and Tian 2019's network);
- ``cosearch``: ``hetrl.cosearch.pipeline.cosearch`` on ``--hardware`` at each ``--lambdas``
  (distillation from the teacher, the hardware cost in the loss), the derived architecture retrained;
- ``decoupled``: the agent searched first (distillation, lambda 0: no hardware term), the hardware
  costed after: measured on the CPU like every arm, and for an FPGA the derived network's whole-part
  ``allocate`` design (modelled);
- ``td-only``: co-search without distillation (SearchConfig ``distill_weight=0``, ``td_weight=1``:
  the TD loss on the teacher's transitions alone) at ``--td-lambda`` on the first ``--hardware``,
  to show what distillation does in the search;
- with ``--distill-weight W``: ``hand`` and ``cosearch`` (at ``--distill-lambdas``, default every
  lambda) once more, retrained with distillation from the game's teacher (DQN ``teacher=``,
  ``distill_weight=W``: the mean squared error to the teacher's Q-values beside the TD loss, as
  A3C-S trains its derived agent with its teacher too), each searched network from the same search
  as its plain arm. Aim 1 is then also checked for them against both hand-designed arms: the one
  trained as usual, and the one retrained with the same distillation (which keeps the comparison
  fair: the teacher learned from ``--teacher-steps`` env steps).

Every retrained final policy plays the same ``--test-episodes`` test episodes (``hetrl.evaluate``,
seed ``TEST_SEED`` for all); its decisions per second are measured at batch 1 on this CPU the same
way for every arm (the Act primitive's ``act`` as a run calls it, greedy, on every host Act backend
that serves the network: Act/torch always, Act/numpy for hetrl's conv and searched networks; one
torch and BLAS thread; 1 / the median of ``profile.time_calls``'s timed blocks, cycling through
states the teacher met in two test episodes), after every training has finished, one network at a
time. An arm's CPU speed is that of its fastest backend (named in the report), as a run's planner
would choose it; the Act/torch figure is reported beside it. For each ``fpga-model[:FILE]`` among
``--hardware`` the FPGA model's whole-part design of every network (``allocate``) gives modelled
decisions per second, labelled as modelled. MACs come from the FPGA model's reading of the network
(``layers_of``), parameters from the module.

The report, per game: a table of arms (lambda, MACs, parameters, score mean ± std over seeds,
measured CPU decisions/s on the fastest host Act backend, which one, and the ratio to the
hand-designed agent's; the same on Act/torch; modelled FPGA decisions/s), the
Pareto front of score against decisions/s (marked in the table; a PNG per game, one panel per
speed axis), and one computed line per aim of the issue: a co-searched agent with >= the
hand-designed agent's score at >= 2x its measured CPU decisions/s (each on its fastest backend; and
Act/torch against Act/torch), and co-search dominating decoupled search
(same score or better at the same speed or faster, one of them strictly; on the measured CPU axis
for a measured cost, on the modelled axis for an FPGA model). Means over seeds throughout.

``--workdir`` keeps the teachers, searches and retrained runs; a later invocation with the same
workdir reuses every finished one (a run with a summary.json not marked interrupted, a search with
architecture.json), so an invocation cut short goes on where it stopped and arms can be added (more
lambdas, another ``--hardware``): a training cut short after a checkpoint (every 50,000 env steps,
and the interrupt checkpoint a signal makes it write) is resumed from it with ``hetrl resume``, bit
for bit as if never cut; one cut before, and a search cut short, start again.
A workdir holds one set of budgets and settings: a finished run or search of other ``--steps``,
``--teacher-steps`` or ``--search-steps``, or a measured cost timed on another ``--cost-backend``,
is refused (other ``--set`` values are not checked).
Trainings run as ``hetrl train`` subprocesses (``--plan rule``, one torch thread each) and searches
as ``pipeline.cosearch`` in worker processes (a share of the cores' torch threads each), ``--jobs``
at a time. A CPU cost is measured at the start of its search, under the load of the other jobs
where ``--jobs`` > 1, on ``--cost-backend`` (default numba where it imports, else numpy: what
serves a searched network fastest on the host; the report names it; a workdir's searches timed on
numpy before numba was the default are refused, as any other backend's); the decisions/s in the
report are measured alone, after all training.

    python bench/cosearch.py --workdir bench_cosearch                          # the full default run (long)
    python bench/cosearch.py --workdir bench_cosearch --hardware cpu fpga-model:u250 --jobs 14
    python bench/cosearch.py --quick --workdir /tmp/cosearch_quick             # smoke test (minutes)

How long: the retrainings dominate. The default run is 2 games x 3 seeds x 7 arms (hand, 4
co-search lambdas, decoupled, TD-only; arms that derive the same network share one run): up to 42
DQN runs of 250k env steps (28 in the run docs/results.md reports: the searches derive few distinct
networks, and small ones train fast), 2 teachers of 500k and 36 searches of 2,000 steps. That run,
on a 2-core machine with ``--jobs 2``, took about an hour and a half, nearly all of it retraining
(docs/results.md, "Co-search against the hand-designed agent": the phases measured).
``--distill-weight`` adds up to 30 more runs (21 there), slower per step (the torch learner and a
teacher forward per update): about an hour more at ``--jobs 2``.
"""

from __future__ import annotations

import argparse
import copy
import datetime
import json
import os
import platform
import shutil
import statistics
import sys
import time
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from dataclasses import asdict, dataclass, replace
from multiprocessing import get_context
from pathlib import Path
from typing import Any

# a `hetrl train` subprocess: rule placement, on the CPU, `threads` torch threads, no evaluations during it
from early_exit import hetrl_cli, train

GAMES = ("Breakout-v1", "SpaceInvaders-v1")  # the MinAtar network learns both within a few 100k env steps
LAMBDAS = (0.03, 0.1, 0.3, 1.0)
TEST_SEED = 10_000  # hetrl.evaluate's seed for every arm and seed: the same test episodes
TEACHER_SEED = 0
TIMED_BLOCKS = 101  # profile.time_calls blocks per Act backend; decisions/s from their median
AIM_SPEEDUP = 2.0
QUICK = {"games": ["Breakout-v1"], "seeds": 1, "teacher_steps": 4000, "steps": 2000, "lambdas": [0.3],
         "td_lambda": 0.3, "search_steps": 100, "states": 2000, "test_episodes": 3,
         "settings": ["learning_starts=500", "eps_decay_steps=2000", "target_update_every=250"]}


@dataclass(frozen=True)
class Arm:
    kind: str  # hand, cosearch, decoupled, td-only
    hardware: str = ""  # the search's cost (cosearch, td-only)
    lam: float = 0.0
    distilled: bool = False  # retrained with distillation from the game's teacher (--distill-weight)

    @property
    def key(self) -> str:
        from hetrl.files import file_part

        key = self.kind if self.kind in ("hand", "decoupled") else f"{self.kind}_{file_part(self.hardware)}_l{self.lam:g}"
        return key + ("_distilled" if self.distilled else "")

    @property
    def searched_as(self) -> "Arm":
        """The arm whose search gives this one's network: itself, or the same arm retrained without
        distillation (one search serves both retrainings)."""
        return replace(self, distilled=False)

    @property
    def label(self) -> str:
        label = {"hand": "hand-designed (MinAtar network)", "cosearch": f"co-search ({self.hardware})",
                 "decoupled": "decoupled (agent first, costed after)",
                 "td-only": f"co-search ({self.hardware}), TD loss only"}[self.kind]
        return label + (", retrained with distillation" if self.distilled else "")

    def search_config(self, seed: int, steps: int) -> Any:
        from hetrl.cosearch.search import SearchConfig

        no_distill = {"distill_weight": 0.0, "td_weight": 1.0} if self.kind == "td-only" else {}
        return SearchConfig(steps=steps, hardware_weight=self.lam, seed=seed, **no_distill)


def arms_of(args: argparse.Namespace) -> list[Arm]:
    cosearch = [Arm("cosearch", h, lam) for h in args.hardware for lam in args.lambdas]
    arms = [Arm("hand"), *cosearch, Arm("decoupled"), Arm("td-only", args.hardware[0], args.td_lambda)]
    if args.distill_weight is not None:
        lambdas = args.lambdas if args.distill_lambdas is None else args.distill_lambdas
        arms += [Arm("hand", distilled=True), *(Arm("cosearch", h, lam, True) for h in args.hardware for lam in lambdas)]
    return arms


def say(text: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {text}", file=sys.stderr, flush=True)


def check_reused(folder: Path, done: int, wanted: int, what: str) -> None:
    """Refuse a finished run or search of another budget than this invocation's."""
    if done != wanted:
        raise SystemExit(f"{folder} ran {done:,} {what}, not {wanted:,}: give another --workdir for another budget")


def resumable(run_dir: Path, steps: int) -> bool:
    """Whether ``run_dir`` is a run of ``steps`` env steps cut short after writing a checkpoint (a
    run of another budget is refused, as a finished one is)."""
    from hetrl.run.rundir import RunDir

    if not (run_dir / "config.json").exists():
        return False
    check_reused(run_dir, json.loads((run_dir / "config.json").read_text())["steps"], steps, "env steps")
    return bool(RunDir.open(run_dir).checkpoints())


def trained(env: str, seed: int, steps: int, run_dir: Path, args: argparse.Namespace, settings: list[str]) -> Path:
    """``run_dir`` trained by `hetrl train dqn` (reused where an earlier invocation finished it)."""
    summary = run_dir / "summary.json"
    # a run stopped by a signal writes its summary too, marked interrupted, beside its interrupt checkpoint
    if summary.exists() and not json.loads(summary.read_text()).get("interrupted"):
        check_reused(run_dir, json.loads((run_dir / "config.json").read_text())["steps"], steps, "env steps")
        return run_dir
    if resumable(run_dir, steps):  # a run cut short after a checkpoint: resumed, bit for bit as if never cut
        say(f"resume {run_dir.relative_to(args.workdir)} ({steps:,} env steps)")
        hetrl_cli("resume", str(run_dir), "--no-progress")
        return run_dir
    if run_dir.exists():  # cut short before its first checkpoint: trained again from the start
        shutil.rmtree(run_dir)
    say(f"train {run_dir.relative_to(args.workdir)} ({steps:,} env steps)")
    train("dqn", env, seed, steps, run_dir, 1, [*args.settings, *settings])
    return run_dir


def searched(env: str, teacher: Path, arm: Arm, seed: int, out: Path, args: argparse.Namespace) -> Path:
    """The architecture file of ``arm``'s search for ``seed`` (reused where an earlier invocation
    wrote it); run in a worker process, with a share of the cores' torch threads."""
    from hetrl.cosearch.cost import check_cost_backend
    from hetrl.cosearch.pipeline import cosearch
    from hetrl.profile import torch_threads

    # lambda 0 gives the same search whatever the cost (it never enters the loss): the cheap counted one
    hardware = "macs" if arm.kind == "decoupled" else arm.hardware
    measured = hardware.partition(":")[0] in ("cpu", "cuda")
    backend = check_cost_backend(hardware, args.cost_backend if measured else None)
    path = out / "architecture.json"
    if path.exists():
        saved = json.loads(path.read_text())
        check_reused(out, saved["search"]["steps"], args.search_steps, "search steps")
        # a measured table saved before the choice existed was timed on torch
        if measured and (timed := saved.get("cost_backend", "torch")) != backend:
            raise SystemExit(f"{out}'s cost table was timed on {timed}, not {backend}: give another --workdir, or "
                             f"--cost-backend {timed}")
        return path
    if out.exists():  # a search cut short
        shutil.rmtree(out)
    say(f"search {out.relative_to(args.workdir)}")
    with torch_threads(max(1, (os.cpu_count() or 1) // args.jobs)):
        cosearch(env, teacher, hardware, arm.search_config(seed, args.search_steps), out, args.states,
                 cost_backend=backend)
    return path


def retrain_setting(architecture: Path | None) -> tuple[str, str]:
    """(architecture name, network setting): the hand-designed network, or a searched architecture
    (arms that derive the same network share its name, so one run)."""
    from hetrl.nets.searched import Architecture

    if architecture is None:
        return "minatar", "network=minatar"
    return "_".join(Architecture.load(architecture).names), f"network={architecture.resolve()}"


def retraining(arm: Arm, architecture: Path | None, teacher: Path, args: argparse.Namespace) -> tuple[str, str, list[str]]:
    """(architecture name, run name, settings) of ``arm``'s retraining: with distillation, the
    teacher and the weight join the settings and the run's name (so each weight has its own run)."""
    name, network = retrain_setting(architecture)
    if not arm.distilled:
        return name, name, [network]
    return name, f"{name}_distill{args.distill_weight:g}", [network, f"teacher={teacher}",
                                                          f"distill_weight={args.distill_weight}"]


def teacher_states(teacher: Path, env: str, n: int = 256) -> Any:
    """States the teacher's greedy policy meets in two test episodes: what every network is timed on."""
    import numpy as np

    import hetrl
    from hetrl.evaluation import evaluate_policy

    policy, seen = hetrl.load(teacher), []

    def act(obs: Any) -> Any:
        seen.extend(obs)
        return policy.predict(obs)

    evaluate_policy(act, env, 2, TEST_SEED)
    return np.stack(seen[:n])


def decisions_per_s(policy: Any, backend: str, states: Any) -> float:
    """Greedy decisions per second of ``backend``'s Act on the host at batch 1 (its ``act``, as a
    run calls it), one torch and BLAS thread, cycling through ``states``: 1 / the median block of
    :func:`hetrl.profile.time_calls`."""
    import numpy as np

    from hetrl.primitives import build
    from hetrl.profile import time_calls, torch_threads
    from hetrl.protocol import Slot
    from hetrl.runtime.host_blas import one_blas_thread

    act = build("Act", Slot(backend, "cpu"), policy.algo, 0, source=copy.deepcopy(policy.network))
    batches = [s[None] for s in states]
    greedy, random_actions = np.ones(1, dtype=np.float32), np.zeros(1, dtype=np.int64)  # explore >= level 0: never
    k = 0

    def decide() -> None:
        nonlocal k
        act.act(batches[k], greedy, random_actions, 0.0)
        k = (k + 1) % len(batches)

    with torch_threads(1), one_blas_thread():
        return 1.0 / time_calls(decide, lambda: None, repeats=TIMED_BLOCKS)[0]


def fpga_devices(hardware: list[str]) -> dict[str, Any]:
    """The FPGA model's device of each ``fpga-model[:FILE]`` among ``hardware``."""
    from hetrl.cosearch.accelerator import DEFAULT_PART
    from hetrl.cosearch.fpga import FpgaDevice, device_file

    return {h: FpgaDevice.load(device_file(h.partition(":")[2] or DEFAULT_PART))
            for h in hardware if h.startswith("fpga-model")}


def measure(run_dir: Path, states: Any, episodes: int, devices: dict[str, Any]) -> dict[str, Any]:
    """A retrained run's final policy: test score, MACs, parameters, measured CPU decisions/s per
    Act backend, modelled decisions/s of the FPGA model's whole-part design per device."""
    import torch

    import hetrl
    from hetrl.cosearch.fpga import allocate, layers_of
    from hetrl.nets.conv import parameter_count
    from hetrl.primitives import implementations

    policy = hetrl.load(run_dir, "final")
    score = hetrl.evaluate(run_dir, episodes, checkpoint="final", seed=TEST_SEED)
    layers = layers_of(policy.network, torch.as_tensor(states[:1]))
    return {"score": score.mean, "macs": sum(layer.macs for layer in layers), "params": parameter_count(policy.network),
            "cpu": {b: decisions_per_s(policy, b, states) for b, impl in implementations("Act").items()
                    if impl.runs_on("cpu") and not impl.unsupported(policy.algo)},
            "fpga": {h: allocate(layers, device).samples_per_s for h, device in devices.items()}}


# --- the report ------------------------------------------------------------------------------------


def mean(values: list[float]) -> float:
    return statistics.fmean(values) if values else float("nan")


def summarise(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """One arm of one game over its seeds: means (and the score's std) of the per-seed measurements."""
    scores = [r["score"] for r in rows]
    backends = [b for b in rows[0]["cpu"] if all(b in r["cpu"] for r in rows)]
    return {"arm": rows[0]["arm"], "label": rows[0]["label"], "kind": rows[0]["kind"], "hardware": rows[0]["hardware"],
            "lam": rows[0]["lam"], "distilled": rows[0].get("distilled", False), "seeds": len(rows), "score": mean(scores),
            "score_std": statistics.pstdev(scores) if len(scores) > 1 else 0.0,
            "macs": [r["macs"] for r in rows], "params": [r["params"] for r in rows],
            "architectures": sorted({r["architecture"] for r in rows}),
            "cpu": {b: mean([r["cpu"][b] for r in rows]) for b in backends},
            "fpga": {h: mean([r["fpga"][h] for r in rows]) for h in rows[0]["fpga"]}}


def fastest(cpu: dict[str, float]) -> str:
    """The host Act backend with the most measured decisions/s."""
    return max(cpu, key=cpu.__getitem__)


def speed(arm: dict[str, Any], axis: str) -> float:
    """An arm's (or a run's) decisions/s on ``axis``: "cpu" (measured, its fastest host Act backend)
    or an fpga-model hardware (modelled)."""
    return arm["cpu"][fastest(arm["cpu"])] if axis == "cpu" else arm["fpga"][axis]


def dominates(a: dict[str, Any], b: dict[str, Any], axis: str) -> bool:
    """``a`` scores as well as ``b`` or better and decides as fast or faster, one of them strictly."""
    ge = a["score"] >= b["score"] and speed(a, axis) >= speed(b, axis)
    return ge and (a["score"] > b["score"] or speed(a, axis) > speed(b, axis))


def front(arms: list[dict[str, Any]], axis: str) -> list[dict[str, Any]]:
    """The arms no other arm dominates on ``axis``, fastest first."""
    return sorted((a for a in arms if not any(dominates(b, a, axis) for b in arms)), key=lambda a: -speed(a, axis))


def axes_of(hardware: list[str]) -> list[str]:
    return ["cpu", *(h for h in hardware if h.startswith("fpga-model"))]


def axis_name(axis: str, devices: dict[str, Any]) -> str:
    if axis == "cpu":
        return "measured CPU decisions/s (fastest host Act backend, batch 1, 1 thread)"
    return f"modelled decisions/s, FPGA model of {devices[axis].name} (never run)"


def span(values: list[int]) -> str:
    return f"{min(values):,}" if min(values) == max(values) else f"{min(values):,}-{max(values):,}"


def table(arms: list[dict[str, Any]], axes: list[str], devices: dict[str, Any]) -> list[str]:
    hand = next(a for a in arms if a["kind"] == "hand")
    on_front = {axis: {a["arm"] for a in front(arms, axis)} for axis in axes}
    fpga_heads = [f"FPGA model {devices[axis].name} decisions/s (modelled)" for axis in axes[1:]]
    lines = ["| arm | λ | architecture(s) | MACs | params | score (mean ± std over seeds) | CPU decisions/s, fastest "
             "host Act (measured) | its backend | × hand-designed's fastest | CPU decisions/s Act/torch (measured) | "
             "× hand-designed's Act/torch | " + " | ".join(fpga_heads) + (" | " if fpga_heads else "") + "Pareto front |",
             "|---|---:|---|---:|---:|---:|---:|---|---:|---:|---:|" + "---:|" * len(fpga_heads) + "---|"]
    for a in arms:
        lam = "-" if a["kind"] == "hand" else f"{a['lam']:g}"
        fpga = "".join(f"{a['fpga'][axis]:,.0f} | " for axis in axes[1:])
        marks = ", ".join("CPU" if axis == "cpu" else devices[axis].name for axis in axes if a["arm"] in on_front[axis])
        lines.append(f"| {a['label']} | {lam} | {'; '.join(a['architectures'])} | {span(a['macs'])} | {span(a['params'])} | "
                     f"{a['score']:.2f} ± {a['score_std']:.2f} | {speed(a, 'cpu'):,.0f} | {fastest(a['cpu'])} | "
                     f"{speed(a, 'cpu') / speed(hand, 'cpu'):.2f} | {a['cpu']['torch']:,.0f} | "
                     f"{a['cpu']['torch'] / hand['cpu']['torch']:.2f} | {fpga}{marks or '-'} |")
    return lines


def aim_speed(arms: list[dict[str, Any]], distilled: bool = False, hand_distilled: bool = False) -> tuple[bool, str]:
    """Aim 1 on one game: a co-search arm with >= the hand-designed agent's score at >= 2x its
    measured CPU decisions/s (each on its fastest host Act backend; Act/torch against Act/torch beside it).
    ``distilled``: among the co-search arms retrained with distillation (else those retrained without);
    ``hand_distilled``: against the hand-designed agent retrained with distillation (else without)."""
    hand = next(a for a in arms if a["kind"] == "hand" and a["distilled"] == hand_distilled)
    searched = [a for a in arms if a["kind"] == "cosearch" and a["distilled"] == distilled]
    good = [a for a in searched if a["score"] >= hand["score"]]
    met = [a for a in good if speed(a, "cpu") >= AIM_SPEEDUP * speed(hand, "cpu")]
    best = max(met or good or searched, key=lambda a: speed(a, "cpu"))
    ratio, ratio_torch = speed(best, "cpu") / speed(hand, "cpu"), best["cpu"]["torch"] / hand["cpu"]["torch"]
    what = (f"{best['label']} λ {best['lam']:g}: score {best['score']:.2f} vs {hand['score']:.2f}, "
            f"{ratio:.2f}x its decisions/s (Act/{fastest(best['cpu'])} against the hand-designed agent's "
            f"Act/{fastest(hand['cpu'])}; {ratio_torch:.2f}x Act/torch against Act/torch)")
    if met:
        return True, f"met by {what}"
    if good:
        return False, f"not met: the fastest co-searched agent with >= its score is {what}"
    return False, f"not met: no co-searched agent reaches its score; the fastest is {what}"


def aim_dominance(arms: list[dict[str, Any]], axes: list[str], hardware: list[str]) -> tuple[bool, list[str]]:
    """Aim 2 on one game: a co-search arm that dominates the decoupled one, per hardware on its axis."""
    decoupled = next(a for a in arms if a["kind"] == "decoupled")
    found, lines = False, []
    for h in hardware:
        axis = h if h in axes else "cpu"
        mine = [a for a in arms if a["kind"] == "cosearch" and a["hardware"] == h and not a["distilled"]]
        winners = [a for a in mine if dominates(a, decoupled, axis)]
        found = found or bool(winners)
        where = "measured CPU" if axis == "cpu" else "modelled"
        if winners:
            lines.append(f"{h} on the {where} axis: dominated by λ " + ", ".join(f"{a['lam']:g}" for a in winners))
        else:
            lines.append(f"{h} on the {where} axis: not dominated by any λ")
    return found, lines


def distillation_line(arms: list[dict[str, Any]]) -> str:
    td = next(a for a in arms if a["kind"] == "td-only")
    same = [a for a in arms if a["kind"] == "cosearch" and a["hardware"] == td["hardware"] and a["lam"] == td["lam"]
            and not a["distilled"]]
    theirs = f"TD loss only: score {td['score']:.2f} ± {td['score_std']:.2f}, {span(td['macs'])} MACs"
    if not same:
        return f"{theirs} (no co-search with distillation in its loss ran at λ {td['lam']:g} on {td['hardware']} to compare)"
    d = same[0]
    return f"{theirs}; with distillation: score {d['score']:.2f} ± {d['score_std']:.2f}, {span(d['macs'])} MACs"


def plot(game: str, arms: list[dict[str, Any]], rows: list[dict[str, Any]], axes: list[str], devices: dict[str, Any],
         path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, panels = plt.subplots(1, len(axes), figsize=(6.4 * len(axes), 4.4), squeeze=False)
    colours = {"hand": "black", "cosearch": "tab:blue", "decoupled": "tab:orange", "td-only": "tab:red"}
    for ax, axis in zip(panels[0], axes):
        for a in arms:
            mine = [r for r in rows if r["arm"] == a["arm"]]
            marker = "s" if a["distilled"] else "o"  # squares: retrained with distillation
            ax.scatter([speed(r, axis) for r in mine], [r["score"] for r in mine],
                       s=10, alpha=0.3, color=colours[a["kind"]], marker=marker)
            ax.errorbar(speed(a, axis), a["score"], yerr=a["score_std"], fmt=marker, color=colours[a["kind"]], capsize=3)
        names: dict[tuple[float, float], list[str]] = {}  # arms that derived the same networks share a point
        for a in arms:
            names.setdefault((speed(a, axis), a["score"]), []).append(a["arm"])
        for point, keys in names.items():
            ax.annotate(", ".join(keys), point, fontsize=6, xytext=(4, 3), textcoords="offset points")
        edge = front(arms, axis)
        ax.step([speed(a, axis) for a in edge], [a["score"] for a in edge], where="post", color="grey", lw=1,
                label="Pareto front (means)")
        ax.set_xscale("log")
        ax.set_xlabel(axis_name(axis, devices), fontsize=8)
        ax.set_ylabel("greedy test return (mean ± std over seeds)", fontsize=8)
        ax.legend(fontsize=7)
    fig.suptitle(f"MinAtar/{game}: score against decisions/s\n(small marks: seeds; squares: retrained with distillation)",
                 fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def report(rows: list[dict[str, Any]], args: argparse.Namespace, devices: dict[str, Any], stem: Path,
           phases: dict[str, float], costs: list[str] | None = None) -> str:
    """The markdown report; ``costs``: the searches' cost labels (which backend timed a measured table)."""
    axes = axes_of(args.hardware)
    lines = [
        "## Agent/accelerator co-search against the hand-designed agent (bench/cosearch.py)", "",
        f"{datetime.date.today()}, {platform.processor() or platform.machine()}, {os.cpu_count()} cores; "
        f"`python bench/cosearch.py {' '.join(sys.argv[1:])}`. Teachers: {args.teacher_steps:,} env steps, seed "
        f"{TEACHER_SEED}; retrains: {args.steps:,} env steps per run, seeds {', '.join(map(str, range(args.seeds)))}; searches: "
        f"{args.search_steps:,} steps on {args.states:,} teacher states; DQN settings: the tuned MinAtar row"
        + (f", then {', '.join(args.settings)}" if args.settings else "") + f"; final policies, {args.test_episodes} "
        f"test episodes (seed {TEST_SEED}, the same for every arm). Decisions/s: greedy Act at batch 1 on this CPU, "
        "each network on every host Act backend that serves it (its fastest sets its speed; Act/torch beside it), "
        f"one thread, median of {TIMED_BLOCKS} timed blocks, measured one network at a time after all training; "
        "FPGA columns are the FPGA model's (modelled, never run). "
        + (f"Search costs: {'; '.join(costs)}. " if costs else "")
        + (f"Arms \"retrained with distillation\": DQN with teacher= the game's teacher, distill_weight="
           f"{args.distill_weight:g} (the mean squared error to the teacher's Q-values on every action beside the TD "
           "loss, the same env steps). " if args.distill_weight is not None else "")
        + "Wall time of this invocation (what an earlier one finished in the workdir is reused, not counted): "
        + ", ".join(f"{k} {v / 60:.1f} min" for k, v in phases.items()) + ".", ""]
    speed_met, dominance_met, distilled_met = [], [], {False: [], True: []}
    for game in dict.fromkeys(r["game"] for r in rows):
        mine = [r for r in rows if r["game"] == game]
        arms = [summarise([r for r in mine if r["arm"] == key]) for key in dict.fromkeys(r["arm"] for r in mine)]
        png = stem.with_name(f"{stem.name}_{game}.png")
        plot(game, arms, mine, axes, devices, png)
        met, text = aim_speed(arms)
        speed_met.append(met)
        found, dominance = aim_dominance(arms, axes, args.hardware)
        dominance_met.append(found)
        aim = f"- Aim, >= the hand-designed agent's score at >= {AIM_SPEEDUP:g}x its CPU decisions/s"
        lines += [f"### MinAtar/{game}", "", *table(arms, axes, devices), "", f"![Pareto front]({png.name})", "",
                  f"{aim}: {text}."]
        if any(a["distilled"] for a in arms):
            for hand_distilled, whom in ((False, "the hand-designed agent trained as usual"),
                                         (True, "the hand-designed agent retrained with the same distillation")):
                met, text = aim_speed(arms, distilled=True, hand_distilled=hand_distilled)
                distilled_met[hand_distilled].append(met)
                lines.append(f"{aim}, co-searched agents retrained with distillation against {whom}: {text}.")
        lines += [f"- Aim, co-search dominating decoupled search: {'; '.join(dominance)}.",
                  f"- Distillation in the search: {distillation_line(arms)}.", ""]
    games = len(speed_met)
    distilled_lines = [(f"Aim 1 with the co-searched agents retrained with distillation, against the hand-designed agent "
                        f"{whom}: met on {sum(distilled_met[key])} of {games} game(s).")
                       for key, whom in ((False, "trained as usual"), (True, "retrained with the same distillation"))
                       if distilled_met[key]]
    lines += [(f"Aim 1 (a co-searched agent with >= the hand-designed agent's score at >= {AIM_SPEEDUP:g}x its measured "
               f"CPU decisions/s): met on {sum(speed_met)} of {games} game(s)."), *distilled_lines,
              (f"Aim 2 (co-search dominating decoupled search on at least one game): "
               f"{'met' if any(dominance_met) else 'not met'} (on {sum(dominance_met)} of {games})."), "",
              "Per run (CPU decisions/s measured on every host Act backend that serves the network):", "",
              "| game | arm | seed | architecture | MACs | params | score | CPU decisions/s per Act backend | fastest |"
              + "".join(f" {devices[a].name} (modelled) |" for a in axes[1:]),
              "|---|---|---:|---|---:|---:|---:|---|---|" + "---:|" * (len(axes) - 1)]
    for r in rows:
        per_backend = ", ".join(f"{b} {v:,.0f}" for b, v in r["cpu"].items())
        lines.append(f"| {r['game']} | {r['arm']} | {r['seed']} | {r['architecture']} | {r['macs']:,} | {r['params']:,} | "
                     f"{r['score']:.2f} | {per_backend} | {fastest(r['cpu'])} |"
                     + "".join(f" {r['fpga'][a]:,.0f} |" for a in axes[1:]))
    return "\n".join(lines)


def main() -> int:
    from hetrl.cosearch.options import COST_BACKENDS

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--games", nargs="+", default=list(GAMES), help="MinAtar games (default: %(default)s)")
    p.add_argument("--seeds", type=int, default=3)
    p.add_argument("--teacher-steps", type=int, default=500_000, help="env steps of each game's teacher")
    p.add_argument("--steps", type=int, default=250_000, help="env steps of every retraining (every arm)")
    p.add_argument("--hardware", nargs="+", default=["cpu"], help="co-search costs: cpu, macs, fpga-model[:FILE], ...")
    p.add_argument("--cost-backend", choices=COST_BACKENDS, default=None,
                   help="what times a measured search cost (cpu: numba by default where it imports, as Act/numba "
                        "serves searched networks fastest on the host, else numpy; numpy or torch on request; cuda: torch)")
    p.add_argument("--lambdas", nargs="+", type=float, default=list(LAMBDAS), help="co-search λ (default %(default)s)")
    p.add_argument("--td-lambda", type=float, default=0.1, help="λ of the search without distillation (default 0.1)")
    p.add_argument("--distill-weight", type=float, default=None,
                   help="also retrain the hand-designed agent and the co-searched ones with distillation from the "
                        "game's teacher at this weight (DQN teacher=, distill_weight=; default: not)")
    p.add_argument("--distill-lambdas", nargs="+", type=float, default=None,
                   help="the co-search λ retrained with distillation too (default: every --lambdas)")
    p.add_argument("--search-steps", type=int, default=2000)
    p.add_argument("--states", type=int, default=20_000, help="teacher states each search trains on")
    p.add_argument("--test-episodes", type=int, default=30)
    p.add_argument("--set", dest="settings", action="append", default=[], metavar="KEY=VALUE",
                   help="a DQN setting for the teachers and every retraining")
    p.add_argument("--jobs", type=int, default=1, help="trainings at a time (default 1)")
    p.add_argument("--workdir", default="bench_cosearch", help="teachers, searches and runs; finished ones are reused")
    p.add_argument("--out", help="the markdown report (default WORKDIR/cosearch.md; PNGs and JSON beside it)")
    p.add_argument("--quick", action="store_true", help="smoke test: " + ", ".join(f"{k} {v}" for k, v in QUICK.items()))
    args = p.parse_args()
    if args.quick:
        for key, value in QUICK.items():
            setattr(args, key, value + args.settings if key == "settings" else value)
    args.workdir = Path(args.workdir).resolve()
    out = Path(args.out) if args.out else args.workdir / "cosearch.md"
    out.parent.mkdir(parents=True, exist_ok=True)
    arms, devices = arms_of(args), fpga_devices(args.hardware)
    envs = {game: game if game.startswith("MinAtar/") else f"MinAtar/{game}" for game in args.games}
    games = {g: e.removeprefix("MinAtar/") for g, e in envs.items()}
    phases, start = {}, time.perf_counter()

    with ThreadPoolExecutor(args.jobs) as pool:
        teachers = dict(zip(envs, pool.map(
            lambda g: trained(envs[g], TEACHER_SEED, args.teacher_steps, args.workdir / games[g] / "teacher", args, []),
            envs)))
    phases["teachers"] = time.perf_counter() - start

    start, plan = time.perf_counter(), [(g, seed, arm) for g in envs for seed in range(args.seeds) for arm in arms]
    folders = {(g, seed, arm): args.workdir / games[g] / "search" / f"{arm.searched_as.key}_s{seed}"
               for g, seed, arm in plan if arm.kind != "hand"}
    jobs = {folder: (envs[g], teachers[g], arm.searched_as, seed, folder, args) for (g, seed, arm), folder in folders.items()}
    with ProcessPoolExecutor(args.jobs, mp_context=get_context("spawn")) as pool:  # torch in fresh processes
        found = dict(zip(jobs, pool.map(searched, *zip(*jobs.values()))))
    architectures = {item: found[folder] for item, folder in folders.items()}
    phases["searches"] = time.perf_counter() - start
    runs = []  # (game, seed, arm, architecture name, run dir, settings)
    for g, seed, arm in plan:
        name, run_name, settings = retraining(arm, architectures.get((g, seed, arm)), teachers[g], args)
        runs.append((g, seed, arm, name, args.workdir / games[g] / "train" / f"{run_name}_s{seed}", settings))

    start = time.perf_counter()
    unique = {run: (g, seed, settings) for g, seed, _, _, run, settings in runs}
    with ThreadPoolExecutor(args.jobs) as pool:
        list(pool.map(lambda item: trained(envs[item[1][0]], item[1][1], args.steps, item[0], args, item[1][2]),
                      unique.items()))
    phases["retraining"] = time.perf_counter() - start

    start, measured, rows = time.perf_counter(), {}, []
    states = {g: teacher_states(teachers[g], env) for g, env in envs.items()}
    for g, seed, arm, name, run, _ in runs:
        if run not in measured:
            say(f"measure {run.relative_to(args.workdir)}")
            measured[run] = measure(run, states[g], args.test_episodes, devices)
        rows.append({"game": games[g], "seed": seed, "arm": arm.key, "label": arm.label, **asdict(arm),
                     "architecture": name, "run": str(run), **measured[run]})
    phases["measurement"] = time.perf_counter() - start
    out.with_suffix(".json").write_text(json.dumps(rows, indent=1))
    costs = sorted({json.loads(path.read_text())["cost_label"] for path in architectures.values()})
    text = report(rows, args, devices, out.with_suffix(""), phases, costs)
    out.write_text(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
