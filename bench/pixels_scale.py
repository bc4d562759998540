"""Throughput on pixels as the actors grow: hetrl's executors beside Stable-Baselines3's n_envs (issue 23).

DQN on MinAtar Breakout-v1 and Atari Breakout-v5 with the settings objects of bench/pixels.py
(``SETTINGS``: the same for every library, the warm-up shortened by ``--*-warmup`` so that most of
a run is the learning phase), every library on the env ``hetrl.envs.make_env`` builds:

- hetrl: the inline executor, the local executor with 1 and 2 actors (more with ``--gpu``), and
  ``executor=auto`` (the plan's own choice of executor, actors, envs per actor and inference,
  reported with what it chose). hetrl keeps its replay ratio under every executor.
- Stable-Baselines3: ``DQN`` with ``n_envs`` 1, 2 and 4 in a ``DummyVecEnv`` (what ``make_atari_env``
  and the RL zoo give Atari users by default; ``--sb3-vec subproc`` for a ``SubprocVecEnv``). Updates
  per env step stay those of the settings at every ``n_envs``: ``train_freq`` (vector steps) and
  ``gradient_steps`` from ``pixels.sb3_train_freq`` (the zoo's convention), e.g. 1 update per 4
  env steps on Atari is train_freq 4/2/1 with 1 gradient step at n_envs 1/2/4, and 1 per env step
  on MinAtar is train_freq 1 with 1/2/4 gradient steps.

Each run is a fresh subprocess (``pixels.run_job``); runs alternate between the libraries.
``--threads 1`` (the default) pins every library's thread pools to one thread; ``--threads
default`` leaves each as a user's run finds it (hetrl's plan picks its learner's threads, SB3 takes
torch's default: every core); ``--threads 1 default`` runs both, and each library's best is over both.
Timed: the training call (hetrl: its training loop; SB3: ``learn``), over which each library's
energy is measured the same way (``hetrl.energy``'s meters, RAPL and NVML; ``unavailable``, with
the reason, where none works). Per workload: each library's best, and the
plan's choice over SB3's best (the issue's aim: >= 2x on Atari on a CPU machine, >= 5x on a GPU).

    python bench/pixels_scale.py                      # 10k MinAtar / 5k Atari env steps per run after a 1k warm-up
    python bench/pixels_scale.py --quick --out /tmp/scale.md   # smoke test (a few minutes)
    python bench/pixels_scale.py --workloads atari-breakout --threads 1 default   # each library at its best threads
    python bench/pixels_scale.py --gpu                # lent GPU machine: 1..15 actors, every library on CUDA
    python bench/pixels_scale.py --from-json docs/benchmarks_pixels_scale.json   # the report from saved runs
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from dataclasses import replace
from itertools import zip_longest
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))

import pixels  # bench/pixels.py: settings, runners, evaluator, subprocess per run
from peers import write_section
from pixels import mode_of
from workers import worker_environ

ROOT = BENCH.parent
BEGIN, END = "<!-- pixels_scale:begin (written by bench/pixels_scale.py) -->", "<!-- pixels_scale:end -->"
GPU_BEGIN, GPU_END = "<!-- pixels_scale-gpu:begin (written by bench/pixels_scale.py --gpu) -->", "<!-- pixels_scale-gpu:end -->"
WORKLOADS = ("minatar-breakout", "atari-breakout")
SB3_N_ENVS = (1, 2, 4)
VEC = {"dummy": "DummyVecEnv", "subproc": "SubprocVecEnv"}
AIM = {"cpu": 2.0, "gpu": 5.0}  # the plan's choice over SB3's best on Atari (issue 23)


def markers(gpu: bool) -> tuple[str, str]:
    """The report's section markers: the GPU variant has its own section, so it keeps the CPU one."""
    return (GPU_BEGIN, GPU_END) if gpu else (BEGIN, END)


def default_actors(gpu: bool) -> list[int]:
    """1 and 2 actors on the CPU machine; 1..15 (at most a core each beside the learner's) with ``--gpu``."""
    return list(range(1, (max(1, min(15, (os.cpu_count() or 2) - 1)) if gpu else 2) + 1))


def hetrl_configs(actors: list[int]) -> dict[str, dict[str, Any]]:
    """Run settings of each hetrl configuration: inline, local with each actor count, the plan's choice."""
    configs: dict[str, dict[str, Any]] = {"inline": {"executor": "inline"}}
    configs.update({f"local-{n}": {"executor": "local", "actors": n} for n in actors})
    configs["auto"] = {"executor": "auto", "actors": 0, "num_envs": 0, "inference": "auto"}
    return configs


def config_of(name: str) -> dict[str, Any]:
    """The run settings a configuration's name stands for (``inline``, ``local-N``, ``auto``)."""
    return hetrl_configs([int(name.removeprefix("local-"))] if name.startswith("local-") else [])[name]


def settings(workload: str, args: argparse.Namespace) -> pixels.PixelSettings:
    warmup = args.atari_warmup if workload.startswith("atari") else args.minatar_warmup
    return replace(pixels.SETTINGS[workload], learning_starts=warmup)


def steps_of(workload: str, args: argparse.Namespace) -> int:
    """Env steps per run: the warm-up plus the learning budget."""
    budget = args.atari_steps if workload.startswith("atari") else args.minatar_steps
    return settings(workload, args).learning_starts + budget


# --- worker side ---------------------------------------------------------------------------------
def worker(args: argparse.Namespace) -> dict[str, Any]:
    import torch

    threads = pixels.threads_of(args.thread_mode)
    if threads:
        torch.set_num_threads(threads)
    lib, workload, config = args.worker
    s = settings(workload, args)
    load = os.getloadavg()[0]
    if lib == "hetrl":
        out = pixels.run_hetrl(s, args.steps, args.seed, {**config_of(config), "device": args.device}, threads)
    else:
        out = pixels.run_sb3(s, args.steps, args.seed, n_envs=int(config), vec_env=args.sb3_vec, device=args.device)
    torch_threads = torch.get_num_threads()  # after the run: hetrl's session sets its learner's
    policy = out.pop("policy")
    returns = pixels.evaluate(policy, s.env_id, args.eval_episodes) if s.learning and args.eval_episodes else []
    return {"lib": lib, "workload": workload, "config": config, "seed": args.seed, "steps": args.steps, "load_before": load,
            "threads": args.thread_mode, "torch_threads": torch_threads, **out,
            "learning_starts": s.learning_starts, "eval_returns": returns,
            "eval_mean": statistics.fmean(returns) if returns else None}


# --- parent side ---------------------------------------------------------------------------------
def job(lib: str, workload: str, config: str, steps: int, seed: int, args: argparse.Namespace) -> list[str]:
    return [lib, workload, config, "--steps", str(steps), "--seed", str(seed), "--device", args.device,
            "--sb3-vec", args.sb3_vec, "--minatar-warmup", str(args.minatar_warmup),
            "--atari-warmup", str(args.atari_warmup)] + (["--gpu"] if args.gpu else [])


Job = tuple[str, str, str, int, str]  # library, workload, configuration, seed, thread mode ("1" or "default")


def schedule(args: argparse.Namespace) -> list[Job]:
    """(lib, workload, config, seed, thread mode) in run order: hetrl and SB3 alternate, the first
    library switching from seed to seed; each thread mode of a configuration one after the other."""
    order = []
    for k, seed in enumerate(args.seeds):
        for workload in args.workloads:
            pairs = zip_longest([("hetrl", c) for c in args.hetrl_configs], [("sb3", str(n)) for n in args.n_envs])
            for pair in pairs:
                for item in (pair if k % 2 == 0 else pair[::-1]):
                    if item is not None:
                        order += [(item[0], workload, item[1], seed, mode) for mode in args.threads]
    return order


def rate(r: dict[str, Any]) -> float:
    return r["env_steps"] / r["seconds"]


def label(r: dict[str, Any]) -> str:
    """A run's configuration, and its thread mode where it is not one thread (with the torch threads it ran)."""
    name = f"SB3 n_envs={r['config']}" if r["lib"] == "sb3" else f"hetrl {r['config']}"
    if mode_of(r) == "1":
        return name
    return f"{name}, {pixels.mode_label(r)}"


def chosen(r: dict[str, Any]) -> str:
    """What a run used: hetrl's executor, actors, envs per actor, inference and placement; SB3's vector env."""
    if r["lib"] == "sb3":
        return f"{VEC.get(r['vec_env'], r['vec_env'])}, train_freq {r['train_freq']}, gradient_steps {r['gradient_steps']}"
    p = r["placement"]
    where = "; ".join(f"{k}: {p[k]}" for k in ("EnvStep", "Act", "ReplaySample", "Learn") if k in p)
    envs = f"{r['num_envs']} env{'s' if r['num_envs'] != 1 else ''}"
    if r["actors"]:
        return (f"{r['executor']}, {r['actors']} actor{'s' if r['actors'] != 1 else ''} x {envs}, "
                f"inference {r['inference']}; {where}")
    return f"{r['executor']}, {envs}; {where}"


def per_step(r: dict[str, Any]) -> str:
    learning = r["env_steps"] - r["learning_starts"]
    return f"{r['updates'] / learning:.3f}" if learning > 0 else "–"


def joules(r: dict[str, Any]) -> str:
    return f"{r['joules_per_env_step']:.3g}" if r.get("joules_per_env_step") is not None else "unavailable"


def energy_note(runs: list[dict[str, Any]]) -> str:
    """What the J per env step column is: each method the runs' joules came from (a saved run without
    ``energy_methods``: its energy line), or why no run has one."""
    methods = list(dict.fromkeys(r.get("energy_methods") or r["energy"] for r in runs if r.get("joules_per_env_step") is not None))
    missing = next((r["energy"] for r in runs if r.get("joules_per_env_step") is None), None)
    if not methods:
        return (f"Energy: `unavailable` for every library: {(missing or 'no run').removeprefix('energy unavailable: ')}. "
                "Where a meter works, each run's joules come from the same meters over its training call.")
    note = ("Energy: each run's joules from the same meters (hetrl.energy) over its training call; J per env step by "
            + " | ".join(methods) + ".")
    return note + (f" Runs with `unavailable`: {missing}." if missing else "")


def best(runs: list[dict[str, Any]], lib: str, workload: str) -> dict[str, Any] | None:
    """The run of ``lib`` with the highest median env steps/s over seeds, by configuration and thread mode."""
    mine = [r for r in runs if r["lib"] == lib and r["workload"] == workload]
    if not mine:
        return None
    by: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for r in mine:
        by.setdefault((r["config"], mode_of(r)), []).append(r)
    top = max(by, key=lambda c: statistics.median(map(rate, by[c])))
    return {"config": top[0], "label": label(by[top][0]), "rate": statistics.median(map(rate, by[top])), "run": by[top][0]}


def plan_runs(runs: list[dict[str, Any]], workload: str) -> list[dict[str, Any]]:
    """The plan's own choice (``auto``) as a user's run finds it: at default threads where those ran,
    else pinned to one thread."""
    auto = [r for r in runs if r["lib"] == "hetrl" and r["workload"] == workload and r["config"] == "auto"]
    default = [r for r in auto if mode_of(r) == "default"]
    return default or auto


def table(runs: list[dict[str, Any]], workload: str, args: argparse.Namespace) -> list[str]:
    s = settings(workload, args)
    mine = [r for r in runs if r["workload"] == workload]
    if not mine:
        return []
    evals = s.learning and any(r["eval_returns"] for r in mine)
    head = ["run", "env steps/s", "updates", "updates per env step after warm-up", "J per env step", "load avg at start"]
    head += [f"greedy return ({args.eval_episodes} ep.)"] if evals else []
    head += ["what it ran"]
    steps = min(r.get("steps", r["env_steps"]) for r in mine)  # as the runs were asked (a saved run's, too)
    lines = [f"### {s.env_id}: {steps:,} env steps per run ({mine[0]['learning_starts']:,} warm-up), "
             + (f"1 update per {s.train_every} env steps" if s.train_every > 1 else "1 update per env step"), "",
             "| " + " | ".join(head) + " |", "|---|" + "---:|" * (len(head) - 2) + "---|"]
    for r in mine:
        row = [label(r) + (f" (seed {r['seed']})" if len(args.seeds) > 1 else ""), f"{rate(r):,.0f}", f"{r['updates']:,}",
               per_step(r), joules(r), f"{r['load_before']:.1f}"]
        row += [f"{r['eval_mean']:.1f}" if r["eval_mean"] is not None else "–"] if evals else []
        row += [chosen(r)]
        lines.append("| " + " | ".join(row) + " |")
    h, sb = best(runs, "hetrl", workload), best(runs, "sb3", workload)
    plans = plan_runs(runs, workload)
    auto = statistics.median(map(rate, plans)) if plans else None
    lines.append("")
    lines += learner_lines(plans, sb, args)
    if h:
        lines.append(f"- hetrl's best: {h['label'].removeprefix('hetrl ')}, {h['rate']:,.0f} env steps/s.")
    if sb:
        lines.append(f"- SB3's best: {sb['label'].removeprefix('SB3 ')}, {sb['rate']:,.0f} env steps/s.")
    if auto is not None:
        plan = plans[0]
        predicted = plan.get("predicted_env_steps_per_s")
        said = f" (its model predicted {predicted:,.0f} for the learning phase)" if predicted else ""
        lines.append(f"- The plan's choice (`executor=auto`, {pixels.THREAD_MODES[mode_of(plan)]}): {chosen(plan).split(';')[0]}"
                     f"{said}: {auto:,.0f} env steps/s"
                     + (f", **{auto / sb['rate']:.2f}x SB3's best**" if sb else "")
                     + (f" (aim on Atari: >= {AIM[args.kind]:.0f}x, {'met' if sb and auto / sb['rate'] >= AIM[args.kind] else 'not met'})"
                        if workload.startswith("atari") else "") + ".")
    return lines + [""]


def learner_lines(plans: list[dict[str, Any]], sb3_best: dict[str, Any] | None, args: argparse.Namespace) -> list[str]:
    """What the plan's runs spent on their updates, against the all-cores fp32 matmul peak measured
    in the same benchmark: the Learn timer's share of the loop and its GFLOP/s, and two ceilings on
    the ratio to SB3's best: the run's updates alone at the rate they ran (no env stepping, acting or
    replay), and its updates' arithmetic alone at the all-cores peak (bench/grid.py's arithmetic
    ceiling: no implementation of the same arithmetic gets past it)."""
    runs = [r for r in plans if r.get("learn_seconds") and r.get("flops_per_update")]
    peak = getattr(args, "peak_all", None)
    if not runs or not sb3_best:
        return []
    med = statistics.median
    learn_s, loop_s = med(r["learn_seconds"] for r in runs), med(r["seconds"] for r in runs)
    steps, updates, flops = med(r["env_steps"] for r in runs), med(r["updates"] for r in runs), runs[0]["flops_per_update"]
    gflops = flops * updates / learn_s / 1e9
    # a bfloat16 learner (Learn/torch-bf16) is not bound by the fp32 peak: no fp32 ceiling for it
    mixed = any("bf16" in str(r.get("placement", {}).get("Learn", "")) for r in runs)
    fp32_peak = peak if peak and not mixed else None
    lines = [f"- The plan's updates: {updates:,.0f} x {flops / 1e9:.2f} GFLOP (bench/peer_runners.py `dqn_update_flops`) in "
             f"{learn_s:.1f} s of its {loop_s:.1f} s loop ({learn_s / loop_s:.0%}), {gflops:,.0f} GFLOP/s"
             + (f" ({gflops / peak:.0%} of the all-cores fp32 matmul peak, {peak:,.0f} GFLOP/s measured in this run)" if fp32_peak else "")
             + (f" in bfloat16 mixed precision (Learn/torch-bf16; {gflops / peak:.0%} of the all-cores *fp32* matmul peak, "
                f"{peak:,.0f} GFLOP/s measured in this run, which bounds fp32 arithmetic, not this)" if mixed and peak else "")
             + f". Were its run those updates alone at that rate, it would reach {steps / learn_s / sb3_best['rate']:.2f}x "
             "SB3's best" + (f"; were it their arithmetic alone at the all-cores fp32 peak, "
                             f"{steps / (flops * updates / (fp32_peak * 1e9)) / sb3_best['rate']:.2f}x (the fp32 arithmetic ceiling)"
                             if fp32_peak else "")
             + "."]
    return lines


def plot(runs: list[dict[str, Any]], args: argparse.Namespace, path: Path) -> None:
    """Env steps/s of every run, one panel per workload, hetrl red (the plan's choice dark), SB3 blue."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    games = [w for w in args.workloads if any(r["workload"] == w for r in runs)]
    if not games:
        return
    fig, axes = plt.subplots(1, len(games), figsize=(5.5 * len(games), 0.5 + 0.4 * max(
        sum(r["workload"] == w for r in runs) for w in games)), squeeze=False)
    for ax, w in zip(axes[0], games):
        mine = [r for r in runs if r["workload"] == w]
        names = [label(r) + (f" s{r['seed']}" if len(args.seeds) > 1 else "") for r in mine]
        colors = ["#8b0000" if r["config"] == "auto" and r["lib"] == "hetrl" else "#d62728" if r["lib"] == "hetrl"
                  else "#1f77b4" for r in mine]
        ax.barh(range(len(mine)), [rate(r) for r in mine], color=colors)
        ax.set_yticks(range(len(mine)), names, fontsize=8)
        ax.invert_yaxis()
        ax.set_xlabel("env steps/s (training call)")
        ax.set_title(pixels.SETTINGS[w].env_id, fontsize=10)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def report(runs: list[dict[str, Any]], failures: list[str], args: argparse.Namespace, seconds: float,
           complete: bool) -> str:
    from hetrl.hardware import read_cpu

    png = args.out.with_name(args.out.stem + ("_pixels_scale_gpu.png" if args.gpu else "_pixels_scale.png"))
    plot(runs, args, png)
    quick = " (--quick: a smoke test, not a measurement)" if args.quick else ""
    device = "every library on CUDA" if args.gpu else "every library on the CPU"
    loads = [r["load_before"] for r in runs]
    begin, end = markers(args.gpu)
    lines = [begin, f"## DQN on pixels as the actors grow: hetrl's executors and SB3's n_envs"
                    f"{' on a GPU machine' if args.gpu else ''}{quick}", "",
             f"`python bench/pixels_scale.py {' '.join(args.argv)}` on {datetime.date.today()}, {read_cpu().model}, "
             f"{os.cpu_count()} cores, {device}, {' and '.join(pixels.THREAD_MODES[m] for m in args.threads)} per library "
             "(default: hetrl's plan picks its learner's threads, SB3 takes torch's default), "
             f"Python {platform.python_version()}; "
             f"seed{'s' if len(args.seeds) > 1 else ''} {', '.join(map(str, args.seeds))}; {seconds / 60:.0f} min in all"
             + ("" if complete else " (cut short: the runs it finished)") + ". Settings: bench/pixels.py's `SETTINGS` "
             f"with the warm-up (`learning_starts`) cut to {args.minatar_warmup:,} (MinAtar) and {args.atari_warmup:,} "
             "(Atari) env steps; every library plays the env `hetrl.envs.make_env` builds; each run a fresh "
             "subprocess, hetrl and SB3 alternating. SB3: `DQN` on a "
             + ("`DummyVecEnv` (as `make_atari_env` and the RL zoo give Atari users)" if args.sb3_vec == "dummy"
                else "`SubprocVecEnv`")
             + ", `train_freq` and `gradient_steps` scaled with `n_envs` so that updates per env step stay the "
             "settings' (`pixels.sb3_train_freq`). Env steps/s: over the training call (hetrl: its training loop; "
             "SB3: `learn`), warm-up included.", "",
             (f"The machine is shared with other engineers' jobs (load average {min(loads):.1f}–{max(loads):.1f} "
              f"at the runs' starts, on {os.cpu_count()} cores): absolute rates move with that load, so the fair "
              "figures are the ratios between runs made one after another, alternating libraries."), "",
             f"![env steps/s per run]({os.path.relpath(png, args.out.parent)})", ""]
    for w in args.workloads:
        lines += table(runs, w, args)
    lines += [energy_note(runs), ""]
    if failures:
        lines += ["**Not measured:**", ""] + [f"- {f}" for f in failures] + [""]
    lines.append(end)
    return "\n".join(lines) + "\n"


def all_cores_peak(gpu: bool) -> float | None:
    """The fp32 matmul peak on every core (GFLOP/s, best of sizes; bench/peer_runners.py's
    ``matmul_peak``), measured in a fresh interpreter with torch's default threads; None with
    ``--gpu`` (the learner's peak there is the device's, which this report does not measure)."""
    if gpu:
        return None
    code = "import peer_runners; print(max(peer_runners.matmul_peak((1024, 2048)).values()))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=worker_environ(None))
    return float(out.stdout.strip().splitlines()[-1])


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workloads", nargs="+", default=list(WORKLOADS), choices=WORKLOADS)
    parser.add_argument("--seeds", nargs="+", type=int, default=[0])
    parser.add_argument("--minatar-steps", type=int, default=10_000, help="env steps per run after the warm-up")
    parser.add_argument("--atari-steps", type=int, default=5_000, help="env steps per run after the warm-up")
    parser.add_argument("--minatar-warmup", type=int, default=1_000, help="learning_starts (env steps)")
    parser.add_argument("--atari-warmup", type=int, default=1_000, help="learning_starts (env steps)")
    parser.add_argument("--n-envs", nargs="+", type=int, default=list(SB3_N_ENVS), help="SB3's n_envs settings")
    parser.add_argument("--sb3-vec", choices=("dummy", "subproc"), default="dummy")
    parser.add_argument("--eval-episodes", type=int, default=3, help="greedy episodes after each MinAtar run (0: none)")
    parser.add_argument("--gpu", action="store_true", help="the GPU variant: 1..15 actors, every library on CUDA")
    parser.add_argument("--actors", nargs="+", type=int, help="hetrl's local-executor actor counts "
                        "(default: 1 2; 1..15 with --gpu, at most one per core beside the learner's)")
    parser.add_argument("--quick", action="store_true", help="smoke test: 600 MinAtar / 300 Atari env steps after 300 / 200 warm-up")
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "benchmarks.md")
    parser.add_argument("--from-json", type=Path, help="write the report from a saved _pixels_scale.json, measuring nothing")
    parser.add_argument("--threads", nargs="+", default=["1"], choices=list(pixels.THREAD_MODES),
                        help="thread modes: 1 (every library's pools pinned to one thread, the default) and/or default "
                        "(each library as a user's run finds it: hetrl's plan picks its learner's threads, SB3 takes "
                        "torch's default, every core); with both, each library's best is over both")
    parser.add_argument("--worker", nargs=3, metavar=("LIB", "WORKLOAD", "CONFIG"), help=argparse.SUPPRESS)
    parser.add_argument("--thread-mode", default="1", help=argparse.SUPPRESS)
    parser.add_argument("--steps", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--seed", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--device", default="cpu", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.quick:
        args.minatar_steps, args.atari_steps, args.minatar_warmup, args.atari_warmup = 600, 300, 300, 200
        args.seeds, args.eval_episodes = args.seeds[:1], min(args.eval_episodes, 1)
    args.kind = "gpu" if args.gpu else "cpu"
    args.hetrl_configs = list(hetrl_configs(args.actors or default_actors(args.gpu)))
    return args


def main() -> int:
    args = parse()
    if args.worker:
        print(json.dumps(worker(args)))
        return 0
    if args.gpu:
        import torch

        if not torch.cuda.is_available():
            print("pixels_scale.py: --gpu needs CUDA, and torch.cuda.is_available() is False here; "
                  "run without --gpu for the CPU variant", file=sys.stderr)
            return 2
        args.device = "cuda"
    raw = args.out.with_name(args.out.stem + ("_pixels_scale_gpu.json" if args.gpu else "_pixels_scale.json"))
    if args.from_json:
        saved = json.loads(args.from_json.read_text())
        out, args = args.out, parse(saved["args"])
        args.out, args.argv, args.device = out, saved["args"], saved.get("device", args.device)
        args.peak_all = saved.get("peak_all")
        for r in saved["runs"]:  # the warm-ups the runs had (a --quick of another version had others)
            setattr(args, "atari_warmup" if r["workload"].startswith("atari") else "minatar_warmup", r["learning_starts"])
        write_section(args.out, report(saved["runs"], saved["failures"], args, saved["seconds"], saved["complete"]),
                      *markers(args.gpu))
        print(f"wrote {args.out}")
        return 0
    args.argv = sys.argv[1:]
    args.peak_all = all_cores_peak(args.gpu)
    start = time.perf_counter()
    runs: list[dict[str, Any]] = []
    failures: list[str] = []

    def save(complete: bool) -> None:
        raw.write_text(json.dumps({"complete": complete, "args": args.argv, "device": args.device, "peak_all": args.peak_all, "runs": runs,
                                   "failures": failures, "seconds": time.perf_counter() - start}, indent=1))

    script = Path(__file__).resolve()
    for workload in args.workloads:  # hetrl's plan=auto profiles once and caches: untimed, as a user's second run
        print(f"profiling hetrl on {pixels.SETTINGS[workload].env_id} (untimed, cached for the runs) ...", flush=True)
        s = settings(workload, args)
        pixels.run_job(job("hetrl", workload, "auto", s.learning_starts + 2 * s.batch_size, 0, args), args, script,
                       thread_mode=args.threads[-1])
    order = schedule(args)
    for i, (lib, workload, config, seed, mode) in enumerate(order, 1):
        steps = steps_of(workload, args)
        name = (f"{'hetrl ' + config if lib == 'hetrl' else 'SB3 n_envs=' + config} {workload} seed {seed}"
                + (f", {pixels.THREAD_MODES[mode]}" if len(args.threads) > 1 else ""))
        print(f"[{i}/{len(order)}] {name} ({steps:,} env steps) ...", end=" ", flush=True)
        try:
            r = pixels.run_job(job(lib, workload, config, steps, seed, args), args, script, thread_mode=mode)
        except RuntimeError as exc:
            print(f"FAILED:\n{exc}", flush=True)
            failures.append(f"{name}: {str(exc).strip().splitlines()[-1] if str(exc).strip() else 'failed'}")
            save(False)
            continue
        runs.append(r)
        save(False)
        print(f"{rate(r):,.0f} env steps/s, {r['updates']:,} updates ({chosen(r).split(';')[0]})", flush=True)
    save(True)
    write_section(args.out, report(runs, failures, args, time.perf_counter() - start, True),
                  *markers(args.gpu))
    print(f"wrote {args.out} and {raw}")
    return 2 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
