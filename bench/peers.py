"""hetrl against its peers on identical settings: Stable-Baselines3, Tianshou, TorchRL and a
CleanRL-style single-file script written for this benchmark (bench/cleanrl_dqn.py, cleanrl_ddpg.py).

Workloads (settings in bench/peer_runners.py, the same for every library): DQN on CartPole-v1 at
1 update per env step and at 1 update per 4 env steps, DDPG on Pendulum-v1 at 1 update per env
step, and DQN on CartPole-v1 with rl-baselines3-zoo's settings (dqn-zoo: 256x256, bursts of 128
updates every 256 env steps; the row hetrl's tuned CartPole defaults start from). Every (library,
workload, repeat) is a fresh subprocess with the same torch thread count; repeats alternate
between libraries (the order rotates each repeat). Only the training call is timed. Each final
policy is evaluated greedily for 10 episodes by one shared function.

Reports env steps/s and updates/s (median, min, max over repeats), hetrl's ratio to each peer,
the evaluation return of every run, this machine's fp32 matmul peak and the DDPG learner's
achieved GFLOP/s as a fraction of it: a markdown section and a PNG bar chart written into
docs/benchmarks.md (the section between its peer-benchmark markers is replaced, the rest kept).

    pip install "torch==2.13.0" -e ".[bench]"     # the peers, beside the pinned torch
    python bench/peers.py                          # 3 repeats, 50k DQN / 20k DDPG env steps
    python bench/peers.py --quick --out /tmp/peers.md   # smoke test: tiny runs, 1 repeat
    python bench/peers.py --libs hetrl sb3 --workloads ddpg --repeats 5
    python bench/peers.py --libs hetrl --baseline-src ../old/src --out /tmp/before_after.md   # a change's effect
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from workers import run_worker

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
LIBS = ("hetrl", "hetrl-auto", "sb3", "cleanrl", "tianshou", "torchrl")
BASELINE = "hetrl-baseline"  # hetrl from another checkout (--baseline-src), run like "hetrl"
LIB_NAMES = {"hetrl": "hetrl", "hetrl-auto": "hetrl, executor auto", BASELINE: "hetrl baseline (--baseline-src)", "sb3": "Stable-Baselines3", "cleanrl": "CleanRL-style script",
             "tianshou": "Tianshou", "torchrl": "TorchRL"}
WORKLOAD_NAMES = ("dqn", "dqn-r0.25", "ddpg", "dqn-zoo")
BEGIN, END = "<!-- peers:begin (written by bench/peers.py) -->", "<!-- peers:end -->"
QUICK_STEPS = {"dqn": 2_000, "ddpg": 1_500}
MATMUL_SIZES, QUICK_MATMUL_SIZES = (1024, 2048, 4096), (512, 1024)


# --- worker side (one subprocess per run) ----------------------------------------------------
def _set_threads(threads: int) -> None:
    import torch

    torch.set_num_threads(threads)


def torch_device_name(device: str) -> str:
    """``cpu``, or the GPU's name beside its torch device (``cuda (NVIDIA H100 80GB HBM3)``)."""
    import torch

    return f"{device} ({torch.cuda.get_device_name(0)})" if device == "cuda" else device


PEERS_FLUSH_HELP = ("run the other libraries with denormal floats flushed to zero too, as hetrl runs by default "
                    "(torch's default keeps them): what a user of a peer could set by hand")


def flush_peer_denormals(job: Sequence[str], asked: bool) -> None:
    """With ``asked`` (--peers-flush-denormals), a peer library's run (``job``: the worker's arguments,
    the library first) computes with denormal floats flushed to zero, as a hetrl run does by default
    (hetrl.runtime.denormals). Called before torch's thread pool starts: its threads take the mode
    they are created with."""
    if asked and job[0] not in ("probe", "matmul") and not job[0].startswith("hetrl"):
        from hetrl.runtime.denormals import set_flushing

        set_flushing(True)


def worker(args: argparse.Namespace) -> dict[str, Any]:
    """Run one job in this process and return its JSON-able result."""
    flush_peer_denormals(args.worker, args.peers_flush_denormals)
    _set_threads(args.threads)
    import peer_runners as pr

    kind = args.worker[0]
    if kind == "probe":
        return {"lib": args.worker[1], "version": pr.library_version(args.worker[1])}
    if kind == "matmul":
        from hetrl.hardware import read_cpu

        sizes = QUICK_MATMUL_SIZES if args.quick else MATMUL_SIZES
        name = torch_device_name(args.device)
        return {"gflops": pr.matmul_peak(sizes, device=args.device), "cpu": read_cpu().model, "threads": args.threads,
                "device": name}
    lib, workload_name = args.worker
    w = pr.WORKLOADS[workload_name]
    trained = pr.RUNNERS[lib](w, args.steps, args.seed, args.threads, args.device)
    returns = pr.evaluate(trained.act, w.settings.env_id, args.eval_episodes)
    result = {
        "lib": lib, "workload": workload_name, "seed": args.seed, "threads": args.threads,
        "version": trained.version, "env_steps": trained.env_steps, "updates": trained.updates,
        "seconds": trained.seconds, "eval_returns": returns,
        "eval_return_mean": statistics.fmean(returns), "eval_return_std": statistics.pstdev(returns),
        **trained.extra,
    }
    if w.algo == "ddpg":
        import gymnasium as gym

        env = gym.make(w.settings.env_id)
        dims = env.observation_space.shape[0], env.action_space.shape[0]
        result["flops_per_update"] = pr.ddpg_update_flops(*dims, w.settings)
        result["flops_performed_per_update"] = pr.ddpg_update_flops_performed(*dims, w.settings)
        env.close()
    return result


# --- parent side ------------------------------------------------------------------------------
@dataclass
class Failure:
    lib: str
    workload: str
    seed: int | None
    reason: str


def run_job(job: list[str], args: argparse.Namespace) -> dict[str, Any]:
    """Run ``peers.py --worker JOB...`` in a fresh interpreter; returns its JSON, or raises
    RuntimeError with the tail of its stderr."""
    first = [str(args.baseline_src)] if BASELINE in job and args.baseline_src else []  # that checkout's hetrl wins
    argv = [*job, "--threads", str(args.threads), "--device", args.device, "--eval-episodes", str(args.eval_episodes)]
    argv += ["--peers-flush-denormals"] if args.peers_flush_denormals else []
    return run_worker(Path(__file__).resolve(), argv + (["--quick"] if args.quick else []), args.threads,
                      first_on_path=first)


def probe(libs: Sequence[str], args: argparse.Namespace) -> tuple[dict[str, str], list[Failure]]:
    """Versions of the libraries that import; a Failure (with the reason) for those that do not."""
    versions, skipped = {}, []
    for lib in libs:
        try:
            versions[lib] = run_job(["probe", lib], args)["version"]
            print(f"{LIB_NAMES[lib]}: {versions[lib]}", flush=True)
        except RuntimeError as exc:
            reason = str(exc).strip().splitlines()[-1]
            print(f"SKIPPING {LIB_NAMES[lib]}: it cannot be imported here ({reason}); "
                  "install the peers with: pip install 'torch==2.13.0' -e '.[bench]'", flush=True)
            skipped.append(Failure(lib, "(every workload)", None, f"not importable: {reason}"))
    return versions, skipped


def steps_for(workload: str, args: argparse.Namespace) -> int:
    return args.ddpg_steps if workload.startswith("ddpg") else args.dqn_steps


def run_all(libs: list[str], args: argparse.Namespace, save: Callable[[list[dict[str, Any]], list[Failure]], None]
            ) -> tuple[list[dict[str, Any]], list[Failure]]:
    """Every run, repeats outermost; within a repeat and workload the library order rotates.
    ``save`` gets the runs so far after each one, so a benchmark cut short keeps what it measured."""
    results: list[dict[str, Any]] = []
    failures: list[Failure] = []
    total = args.repeats * len(args.workloads) * len(libs)
    done = 0
    for repeat in range(args.repeats):
        seed = args.seed + repeat
        order = libs[repeat % len(libs):] + libs[:repeat % len(libs)]
        for workload in args.workloads:
            for lib in order:
                done += 1
                steps = steps_for(workload, args)
                print(f"[{done}/{total}] {LIB_NAMES[lib]} {workload} seed {seed} ({steps:,} env steps) ...", end=" ", flush=True)
                try:
                    r = run_job([lib, workload, "--steps", str(steps), "--seed", str(seed)], args)
                except RuntimeError as exc:
                    print(f"FAILED:\n{exc}", flush=True)
                    failures.append(Failure(lib, workload, seed, str(exc).strip().splitlines()[-1]))
                    save(results, failures)
                    continue
                results.append(r)
                save(results, failures)
                print(f"{r['env_steps'] / r['seconds']:,.0f} env steps/s, {r['updates'] / r['seconds']:,.0f} updates/s, "
                      f"eval {r['eval_return_mean']:.1f}", flush=True)
    return results, failures


def _spread(values: list[float], digits: int = 0) -> str:
    fmt = f"{{:,.{digits}f}}"
    if len(values) == 1:
        return fmt.format(values[0])
    return f"{fmt.format(statistics.median(values))} [{fmt.format(min(values))}–{fmt.format(max(values))}]"


def summarize(results: list[dict[str, Any]], workload: str, libs: list[str]) -> dict[str, dict[str, Any]]:
    """Per library: rates (per run), medians, eval returns, version (runs of ``workload`` only)."""
    out = {}
    for lib in libs:
        runs = [r for r in results if r["lib"] == lib and r["workload"] == workload]
        if not runs:
            continue
        steps = [r["env_steps"] / r["seconds"] for r in runs]
        updates = [r["updates"] / r["seconds"] for r in runs]
        out[lib] = {"runs": runs, "steps_per_s": steps, "updates_per_s": updates,
                    "median_steps": statistics.median(steps), "version": runs[0]["version"]}
        if "flops_per_update" in runs[0]:
            out[lib]["gflops"] = [r["flops_per_update"] * u / 1e9 for r, u in zip(runs, updates)]
    return out


def workload_table(title: str, summary: dict[str, dict[str, Any]], peak: float | None, episodes: int) -> list[str]:
    ddpg = any("gflops" in s for s in summary.values())
    head = ["library", "version", "env steps/s median [min–max]", "updates/s median [min–max]",
            "hetrl ÷ library (env steps/s)", "hetrl auto ÷ library", "updates per run", f"eval return per run ({episodes} greedy episodes)"]
    if ddpg:
        head.append("learner GFLOP/s median (of matmul peak)")
    lines = [f"### {title}", "", "| " + " | ".join(head) + " |", "|" + "|".join(["---"] * 2 + ["---:"] * (len(head) - 2)) + "|"]
    hetrl, auto = summary.get("hetrl"), summary.get("hetrl-auto")
    for lib, s in summary.items():
        ratio = f"{hetrl['median_steps'] / s['median_steps']:.2f}×" if hetrl else "–"
        ratio_auto = f"{auto['median_steps'] / s['median_steps']:.2f}×" if auto else "–"
        updates = sorted({r["updates"] for r in s["runs"]})
        row = [LIB_NAMES[lib], s["version"], _spread(s["steps_per_s"]), _spread(s["updates_per_s"]), ratio, ratio_auto,
               ", ".join(f"{u:,}" for u in updates), ", ".join(f"{r['eval_return_mean']:.1f}" for r in s["runs"])]
        if ddpg:
            g = statistics.median(s["gflops"])
            row.append(f"{g:.1f} ({g / peak:.1%})" if peak else f"{g:.1f}")
        lines.append("| " + " | ".join(row) + " |")
    for name, variant in (("hetrl", hetrl), ("hetrl, executor auto", auto)):
        if variant and all("loop_seconds" in r for r in variant["runs"]):
            loop = [r["env_steps"] / r["loop_seconds"] for r in variant["runs"]]
            plans = sorted({r["plan"] for r in variant["runs"]})
            placement = variant["runs"][0]["placement"]
            where = ", ".join(f"{p} {placement[p]}" for p in ("Learn", "ReplaySample", "Act") if p in placement)
            lines += ["", f"{name}: its own loop timer (the same runs, without the end-of-run checkpoint, evaluation "
                          f"and plot): {_spread(loop)} env steps/s; plan: {'; '.join(plans)} ({where})."]
            learner = learner_rates(variant["runs"], peak)
            if learner:
                lines[-1] += " " + learner
    return lines + [""]


def learner_rates(runs: list[dict[str, Any]], peak: float | None) -> str:
    """hetrl's learner alone: GFLOP/s over its Learn timer, counting the usual FLOPs and those it computes."""
    if not runs or not all(r.get("learn_seconds") and "flops_per_update" in r for r in runs):
        return ""
    def rate(key: str) -> str:
        g = statistics.median(r[key] * r["updates"] / r["learn_seconds"] / 1e9 for r in runs)
        return f"{g:.1f} GFLOP/s" + (f" ({g / peak:.1%} of the matmul peak)" if peak else "")
    backends = ", ".join(sorted({r["learn_backend"] for r in runs}))
    return (f"Its Learn primitive alone (Learn/{backends}, its timer's seconds, median): {rate('flops_per_update')} "
            f"counting {runs[0]['flops_per_update'] / 1e6:,.0f} MFLOP per update as for every library, "
            f"{rate('flops_performed_per_update')} counting the {runs[0]['flops_performed_per_update'] / 1e6:,.0f} MFLOP "
            "an update must compute (bench/peer_runners.py ddpg_update_flops_performed).")


def plot(summaries: dict[str, dict[str, dict[str, Any]]], titles: dict[str, str], path: Path) -> None:
    """One panel per workload: median env steps/s per library, whiskers from min to max."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = [w for w in summaries if summaries[w]]
    fig, axes = plt.subplots(1, len(panels), figsize=(4.6 * len(panels), 4.2), squeeze=False)
    for ax, w in zip(axes[0], panels):
        s = summaries[w]
        libs = list(s)
        med = [statistics.median(s[lib]["steps_per_s"]) for lib in libs]
        low = [m - min(s[lib]["steps_per_s"]) for m, lib in zip(med, libs)]
        high = [max(s[lib]["steps_per_s"]) - m for m, lib in zip(med, libs)]
        colors = ["#d62728" if lib.startswith("hetrl") else "#7f7f7f" for lib in libs]
        ax.bar(range(len(libs)), med, yerr=[low, high], color=colors, capsize=4)
        ax.set_xticks(range(len(libs)), [LIB_NAMES[lib].replace(" script", "") for lib in libs], rotation=25, ha="right")
        ax.set_title(titles[w], fontsize=10)
        ax.set_ylabel("env steps/s (median, min–max)")
        for i, m in enumerate(med):
            ax.annotate(f"{m:,.0f}", (i, m), ha="center", va="bottom", fontsize=8, xytext=(0, 2), textcoords="offset points")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def report(results: list[dict[str, Any]], failures: list[Failure], matmul: dict[str, Any] | None,
           versions: dict[str, str], libs: list[str], args: argparse.Namespace, out: Path, png: Path,
           seconds: float) -> str:
    """The markdown section (between the markers) and the PNG beside it."""
    import peer_runners as pr

    peak = max(matmul["gflops"].values()) if matmul else None
    titles = {w: pr.WORKLOADS[w].title for w in args.workloads}
    summaries = {w: summarize(results, w, libs) for w in args.workloads}
    plot(summaries, titles, png)
    quick = " (--quick: a smoke test, not a measurement)" if args.quick else ""
    command = " ".join(["python bench/peers.py", *args.argv])
    machine = matmul["cpu"] if matmul else platform.processor() or platform.machine()
    if args.device != "cpu":
        machine += f", networks on {matmul['device'] if matmul else args.device}"
    how = (f"`{command}` on {datetime.date.today()}, {machine}, {args.threads} torch thread(s) for every library, "
           f"Python {platform.python_version()}; {args.repeats} repeat(s) per library and workload "
           f"(seeds {args.seed}..{args.seed + args.repeats - 1}), {args.dqn_steps:,} DQN and {args.ddpg_steps:,} DDPG "
           f"env steps per run; {seconds / 60:.0f} min in all."
           + (" Every library computed with denormal floats flushed to zero (`--peers-flush-denormals`; hetrl does "
              "by default, the peers only when asked)." if args.peers_flush_denormals else ""))
    method = ("Every run is a fresh process; repeats alternate between libraries. Timed: the training call only "
              "(not imports, construction or evaluation; hetrl's call includes its end-of-run checkpoint, "
              "one-episode evaluation and plot). Rates are env steps (or gradient updates) over those seconds. "
              f"Eval return: the mean of {args.eval_episodes} greedy episodes of the final policy, run by one shared "
              "function (bench/peer_runners.py `evaluate`) for every library.")
    lines = [BEGIN, f"## hetrl against its peers{quick}", "", how, "", method, "",
             f"![env steps/s per library]({os.path.relpath(png, out.parent)})", ""]
    for w in args.workloads:
        if summaries[w]:
            lines += workload_table(titles[w], summaries[w], peak, args.eval_episodes)
    if matmul:
        sizes = ", ".join(f"{n}: {g:,.1f}" for n, g in matmul["gflops"].items())
        where = f"on {matmul['device']}" if args.device != "cpu" else f"{matmul['threads']} thread(s)"
        lines += [(f"**fp32 matmul peak** (torch.mm of square matrices, {where}, best of 3): "
                   f"{peak:,.1f} GFLOP/s (by size, GFLOP/s: {sizes})."), ""]
        ddpg = summaries.get("ddpg", {})
        if ddpg:
            flops = next(iter(ddpg.values()))["runs"][0]["flops_per_update"]
            achieved = {lib: statistics.median(s["gflops"]) for lib, s in ddpg.items()}
            parts = ", ".join(f"{LIB_NAMES[lib]} {g:.1f} GFLOP/s ({g / peak:.1%})" for lib, g in achieved.items())
            lines += [(f"**DDPG learner**: {flops / 1e6:,.0f} MFLOP per update (linear layers of the target, critic "
                       "and actor passes, backward counted as 2× forward; Adam and activations left out) × updates/s "
                       f"over the whole training call: {parts} of the matmul peak."), ""]
    lines += ["**Settings** (identical for every library; bench/peer_runners.py):", ""]
    for w in args.workloads:
        settings = ", ".join(f"{k}={v}" for k, v in pr.settings_rows(pr.WORKLOADS[w]).items())
        lines.append(f"- {titles[w]}: {settings}")
    lines += [("- Adam everywhere; DQN: Huber loss, not double, gradient norm clipped to 10, epsilon decays "
               "linearly from eps_start to eps_end over eps_fraction of the run; DDPG: MSE critic loss, actor and "
               "Polyak target update after every critic update, no gradient clipping. Uniformly random actions "
               "for the first learning_starts env steps."), ""]
    lines += ["Versions: " + ", ".join(f"{LIB_NAMES[lib]} {v}" for lib, v in versions.items()) + ".", ""]
    if failures:
        lines += ["**Not measured:**", ""] + [
            f"- {LIB_NAMES[f.lib]} {f.workload if f.seed is None else f'{f.workload} seed {f.seed}'}: {f.reason}"
            for f in failures] + [""]
    lines.append(END)
    return "\n".join(lines) + "\n"


def write_section(out: Path, section: str, begin: str = BEGIN, end: str = END) -> None:
    """Replace the section of ``out`` between ``begin`` and ``end`` (the peers' markers unless named),
    append it, or create the file."""
    header = ("# Benchmarks\n\nMeasured numbers, each section written by the script it names; "
              "rerun the script to refresh its section.\n\n")
    text = out.read_text() if out.exists() else header
    if begin in text and end in text:
        before, rest = text.split(begin, 1)
        text = before + section.rstrip("\n") + rest.split(end, 1)[1]
    else:
        text = text.rstrip("\n") + "\n\n" + section
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text)


def parse(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--libs", nargs="+", default=list(LIBS), choices=(*LIBS, BASELINE), help="libraries to run (default: all)")
    parser.add_argument("--baseline-src", type=Path, help=f"the src/ folder of another hetrl checkout, run as the library "
                        f"{BASELINE!r} beside this one (e.g. a worktree of main before a change): before and after in one run")
    parser.add_argument("--workloads", nargs="+", default=list(WORKLOAD_NAMES), choices=WORKLOAD_NAMES)
    parser.add_argument("--repeats", type=int, default=3, help="runs per library and workload (default 3)")
    parser.add_argument("--dqn-steps", type=int, default=50_000, help="env steps per DQN run (default 50000)")
    parser.add_argument("--ddpg-steps", type=int, default=20_000, help="env steps per DDPG run (default 20000)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads of every library (default 1)")
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu",
                        help="where every library's networks live (default cpu); with cuda, hetrl pins its learner "
                             "there and 'hetrl-auto' lets its plan choose; Tianshou and TorchRL run on the CPU only")
    parser.add_argument("--seed", type=int, default=0, help="seed of the first repeat (repeat r uses seed + r)")
    parser.add_argument("--eval-episodes", type=int, default=10)
    parser.add_argument("--peers-flush-denormals", action="store_true", help=PEERS_FLUSH_HELP)
    parser.add_argument("--quick", action="store_true",
                        help=f"smoke test: 1 repeat, {QUICK_STEPS['dqn']} DQN and {QUICK_STEPS['ddpg']} DDPG env steps")
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "benchmarks.md",
                        help="markdown file to write the section into (default docs/benchmarks.md); "
                             "the chart goes beside it as <stem>_peers.png and the raw runs as <stem>_peers.json "
                             "(rewritten after every run, so a run cut short keeps what it measured)")
    parser.add_argument("--worker", nargs="+", help=argparse.SUPPRESS)
    parser.add_argument("--steps", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    args.argv = list(argv)
    if args.quick and not args.worker:
        args.repeats = 1
        args.dqn_steps = min(args.dqn_steps, QUICK_STEPS["dqn"])
        args.ddpg_steps = min(args.ddpg_steps, QUICK_STEPS["ddpg"])
    for name in ("repeats", "dqn_steps", "ddpg_steps", "threads", "eval_episodes"):
        if getattr(args, name) <= 0:
            parser.error(f"--{name.replace('_', '-')} must be > 0")
    if not args.worker:
        warmup = 1_000  # learning_starts of every workload
        if min(args.dqn_steps, args.ddpg_steps) <= warmup:
            parser.error(f"--dqn-steps and --ddpg-steps must exceed the {warmup} random warm-up steps")
        if args.dqn_steps % 4:
            parser.error("--dqn-steps must be a multiple of 4 (the 1-update-per-4-steps workload collects 4 at a time)")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse(sys.argv[1:] if argv is None else argv)
    if args.worker:
        print(json.dumps(worker(args)), flush=True)
        return 0
    started = time.perf_counter()
    if args.baseline_src and BASELINE not in args.libs:
        args.libs.append(BASELINE)
    if BASELINE in args.libs and not args.baseline_src:
        parser_error = f"--libs {BASELINE} needs --baseline-src PATH (another checkout's src/)"
        raise SystemExit(parser_error)
    versions, failures = probe(args.libs, args)
    libs = [lib for lib in args.libs if lib in versions]
    if not libs:
        print("no library can run here; nothing measured", file=sys.stderr)
        return 1
    try:
        matmul = run_job(["matmul"], args)
        print(f"fp32 matmul peak: {max(matmul['gflops'].values()):,.1f} GFLOP/s at {args.threads} thread(s)", flush=True)
    except RuntimeError as exc:
        print(f"matmul peak not measured: {exc}", flush=True)
        matmul = None
    out = args.out.resolve()
    png = out.with_name(f"{out.stem}_peers.png")
    raw = out.with_name(f"{out.stem}_peers.json")

    def save(results: list[dict[str, Any]], run_failures: list[Failure], complete: bool = False) -> None:
        raw.parent.mkdir(parents=True, exist_ok=True)
        raw.write_text(json.dumps({"complete": complete, "matmul": matmul, "versions": versions, "results": results,
                                   "failures": [f.__dict__ for f in failures + run_failures]}, indent=1) + "\n")

    results, run_failures = run_all(libs, args, save)
    failures += run_failures
    section = report(results, failures, matmul, versions, libs, args, out, png, time.perf_counter() - started)
    write_section(out, section)
    save(results, [], complete=True)
    print(f"\nwrote {out}, {png} and {raw}\n")
    print(section)
    return 0 if not failures else 2


if __name__ == "__main__":
    sys.exit(main())
