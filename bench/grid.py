"""The speed grid: hetrl against Stable-Baselines3 and the CleanRL-style scripts over a grid of MLP
workloads, not only the settings an earlier benchmark quoted (issue 22).

Cells: DQN on CartPole-v1 and Acrobot-v1; DDPG, TD3 and SAC on Pendulum-v1 and
MountainCarContinuous-v0; hidden layers 64x64, 256x256 and 400x300; batch 64 and 256; replay ratio 1
(one update per env step) and 0.25 in bursts as rl-baselines3-zoo trains (64 updates every 256 env
steps). Every other setting is the shared one of bench/peer_runners.py (DQNSettings, DDPGSettings),
the same for every library.

hetrl's profile (what its plan is made from) is measured afresh in this run, by this code, at the
first hetrl run of each cell (untimed, as a user's later runs find it cached).

Each library runs at its default threads (hetrl: the plan's count, ``threads=0``; the peers: torch's
default, every core) and at each explicit count 1..N (N: this machine's cores); its best is the
fastest of those. Every (cell, library, threads, repeat) is a fresh process; within a cell and
repeat the order of the runs rotates. Only the training call is timed; the final policy of each run
is evaluated greedily by one shared function (bench/peer_runners.py ``evaluate``).

Per cell the report gives: env steps/s of each library at its default threads and at its best; the
ratio of hetrl's best to the fastest peer's best; hetrl's learner GFLOP/s over its Learn timer
against this machine's fp32 matmul peak on 1 core and on all cores (both measured in the same run);
the regime (compute-bound where the Learn timer holds at least half of hetrl's loop and the learner
runs at at least half the 1-core peak, else overhead-bound); the aim (compute-bound: learner >= 75%
of the all-cores peak and >= 1.8x the fastest peer; overhead-bound: >= 3x); learning parity (hetrl's
mean eval return at least the lowest peer run's: a weak check at these short budgets, stated as
such). A heat map of the ratio goes beside the markdown.

    python bench/grid.py                      # the whole grid (hours on 2 cores), 1 repeat
    python bench/grid.py --quick              # 4 cells, short runs: under 10 minutes
    python bench/grid.py --pairs td3:Pendulum-v1 --hidden 400,300 --batches 256 --ratios 1
    python bench/grid.py --resume             # go on from the raw JSON of a run cut short
    python bench/grid.py --device cuda --quick  # the GPU column: every library's networks on the GPU

``--device cuda`` (a lent GPU machine) writes its own section, heat map and raw JSON beside the
CPU grid's: each library at its default threads only, hetrl on the fixed rule (``plan=rule``: its
learner is Learn/cudagraph on the GPU, the replay and acting on the host; a profile of every
primitive on such a machine takes minutes per workload, which a lease does not have), the peers with
their networks and sampled batches on the GPU, and the fp32 (TF32 off) matmul peak of the GPU.
"""

from __future__ import annotations

import argparse
import datetime
import itertools
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from peers import PEERS_FLUSH_HELP, flush_peer_denormals, write_section
from workers import run_worker  # one writer of marked sections in docs/benchmarks.md

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
LIBS = ("hetrl", "sb3", "cleanrl")
LIB_NAMES = {"hetrl": "hetrl", "sb3": "SB3", "cleanrl": "CleanRL-style"}
PAIRS = ("dqn:CartPole-v1", "dqn:Acrobot-v1", "ddpg:Pendulum-v1", "td3:Pendulum-v1", "sac:Pendulum-v1",
         "ddpg:MountainCarContinuous-v0", "td3:MountainCarContinuous-v0", "sac:MountainCarContinuous-v0")
HIDDEN = ("64,64", "256,256", "400,300")
BATCHES = (64, 256)
RATIOS = {"1": (1, 1), "0.25": (256, 64)}  # replay ratio -> (env steps per burst, updates per burst)
QUICK_CELLS = ("dqn:CartPole-v1:64,64:64:1", "dqn:Acrobot-v1:256,256:256:0.25",
               "td3:Pendulum-v1:400,300:256:1", "sac:Pendulum-v1:256,256:256:1")
BEGIN, END = "<!-- grid:begin (written by bench/grid.py) -->", "<!-- grid:end -->"
GPU_BEGIN, GPU_END = "<!-- grid-gpu:begin (written by bench/grid.py --device cuda) -->", "<!-- grid-gpu:end -->"
MATMUL_SIZES = (1024, 2048)
DEFAULT = 0  # "threads" of a run at the library's own default


@dataclass(frozen=True)
class Cell:
    algo: str
    env_id: str
    hidden: str  # "400,300"
    batch: int
    ratio: str  # a key of RATIOS

    @property
    def key(self) -> str:
        return f"{self.algo}:{self.env_id}:{self.hidden}:{self.batch}:{self.ratio}"

    @property
    def title(self) -> str:
        return f"{self.algo.upper()} {self.env_id}, {self.hidden.replace(',', 'x')}, batch {self.batch}, ratio {self.ratio}"

    @classmethod
    def parse(cls, key: str) -> Cell:
        """A cell from ``algo:env:hidden:batch:ratio``; ValueError for any other shape or ratio."""
        algo, env_id, hidden, batch, ratio = key.split(":")
        if ratio not in RATIOS:
            raise ValueError(f"ratio {ratio!r} is not one of {list(RATIOS)}")
        return cls(algo, env_id, hidden, int(batch), ratio)

    def workload(self) -> Any:
        import peer_runners as pr

        train_every, gradient_steps = RATIOS[self.ratio]
        hidden = tuple(int(w) for w in self.hidden.split(","))
        common = {"env_id": self.env_id, "hidden": hidden, "batch_size": self.batch, "train_every": train_every,
                  "gradient_steps": gradient_steps}
        settings = pr.DQNSettings(**common) if self.algo == "dqn" else pr.DDPGSettings(**common)
        return pr.Workload(self.key, self.algo, self.title, settings)


# --- worker side ------------------------------------------------------------------------------
def worker(args: argparse.Namespace) -> dict[str, Any]:
    """One run (or the matmul peak) in this process; its JSON-able result."""
    flush_peer_denormals(args.worker, args.peers_flush_denormals)
    import torch

    if args.threads != DEFAULT:
        torch.set_num_threads(args.threads)
    import peer_runners as pr

    if args.worker[0] == "matmul":
        return {"threads": torch.get_num_threads(), "gflops": pr.matmul_peak(MATMUL_SIZES, device=args.device)}
    lib, key = args.worker
    cell = Cell.parse(key)
    w = cell.workload()
    threads_asked = args.threads
    if lib == "hetrl" and args.device != "cpu":  # the fixed rule: see the module's docstring
        trained = pr.run_hetrl(w, args.steps, args.seed, args.threads, args.device, plan="rule")
    else:
        trained = pr.RUNNERS[lib](w, args.steps, args.seed, args.threads, args.device)
    returns = pr.evaluate(trained.act, cell.env_id, args.eval_episodes)
    import gymnasium as gym

    env = gym.make(cell.env_id)
    obs_dim = int(env.observation_space.shape[0])
    out_dim = int(env.action_space.n) if cell.algo == "dqn" else int(env.action_space.shape[0])
    env.close()
    return {"lib": lib, "cell": key, "seed": args.seed, "threads": threads_asked,
            "threads_used": trained.extra.get("learn_threads", torch.get_num_threads()),
            "version": trained.version, "env_steps": trained.env_steps, "updates": trained.updates,
            "seconds": trained.seconds, "eval_return_mean": statistics.fmean(returns),
            "eval_returns": returns, "flops_per_update": pr.update_flops(cell.algo, obs_dim, out_dim, w.settings.hidden, cell.batch),
            **{k: v for k, v in trained.extra.items() if k in ("loop_seconds", "learn_seconds", "learn_backend", "plan")}}


# --- parent side ------------------------------------------------------------------------------
def run_job(job: list[str], threads: int, args: argparse.Namespace, steps: int = 0, seed: int = 0) -> dict[str, Any]:
    """``grid.py --worker JOB`` in a fresh interpreter; RuntimeError with its stderr's tail on failure.
    At the default threads no thread variable is set: the library sees the machine as a user's run does."""
    argv = [*job, "--threads", str(threads), "--steps", str(steps), "--seed", str(seed), "--eval-episodes",
            str(args.eval_episodes), "--device", args.device] + (["--peers-flush-denormals"] if args.peers_flush_denormals else [])
    return run_worker(Path(__file__).resolve(), argv, None if threads == DEFAULT else threads, tail_lines=8,
                      env={"XDG_CACHE_HOME": str(args.cache)})  # hetrl's profiles measured by this code, in this run


def thread_settings(lib: str, cores: int, device: str = "cpu") -> list[int]:
    """hetrl: its plan's count and each of 1..cores; a peer: 1..cores-1 and its default (torch's: every
    core). With the networks on a GPU: the default alone."""
    if device != "cpu":
        return [DEFAULT]
    explicit = list(range(1, cores + 1))
    return [DEFAULT, *explicit] if lib == "hetrl" else [*explicit[:-1], DEFAULT]


def cells_of(args: argparse.Namespace) -> list[Cell]:
    if args.cells:
        return [Cell.parse(k) for k in args.cells]
    return [Cell(*pair.split(":"), hidden, batch, ratio)  # type: ignore[call-arg]
            for pair, hidden, batch, ratio in itertools.product(args.pairs, args.hidden, args.batches, args.ratios)]


def run_all(cells: list[Cell], args: argparse.Namespace, raw: dict[str, Any], save: Any) -> None:
    cores = args.cores
    done_keys = {(r["lib"], r["cell"], r["threads"], r["seed"]) for r in raw["results"]}
    jobs = [(c, seed, lib, t) for c in cells for seed in range(args.seed, args.seed + args.repeats)
            for lib in args.libs for t in thread_settings(lib, cores, args.device)]
    total = len(jobs)
    for n, (cell, seed, lib, threads) in enumerate(rotated(jobs), 1):
        if (lib, cell.key, threads, seed) in done_keys:
            continue
        if cell.algo == "sac" and lib == "cleanrl":
            continue  # no CleanRL-style SAC script here (said in the report)
        label = f"{LIB_NAMES[lib]} at {'default' if threads == DEFAULT else threads} thread(s)"
        print(f"[{n}/{total}] {cell.title}: {label}, seed {seed} ...", end=" ", flush=True)
        try:
            r = run_job([lib, cell.key], threads, args, args.steps, seed)
        except RuntimeError as exc:
            print(f"FAILED: {str(exc).splitlines()[-1]}", flush=True)
            raw["failures"].append({"lib": lib, "cell": cell.key, "threads": threads, "seed": seed,
                                    "reason": str(exc).strip().splitlines()[-1]})
            save()
            continue
        raw["results"].append(r)
        save()
        print(f"{r['env_steps'] / r['seconds']:,.0f} env steps/s, eval {r['eval_return_mean']:.1f}", flush=True)


def rotated(jobs: list[tuple[Cell, int, str, int]]) -> list[tuple[Cell, int, str, int]]:
    """Within each (cell, seed), rotate the order of the runs by the group's index, so no library
    always runs first (or last) after a change of cell."""
    out = []
    for i, (_, group) in enumerate(itertools.groupby(jobs, key=lambda j: (j[0], j[1]))):
        g = list(group)
        k = i % len(g)
        out += g[k:] + g[:k]
    return out


# --- the report -------------------------------------------------------------------------------
def rate(r: dict[str, Any]) -> float:
    return r["env_steps"] / r["seconds"]


def cell_rows(cell: Cell, results: list[dict[str, Any]], peak1: float, peak_all: float, libs: Sequence[str]
              ) -> dict[str, Any] | None:
    """Everything the table says about one cell (None if hetrl or every peer is missing)."""
    runs = [r for r in results if r["cell"] == cell.key]
    by_lib: dict[str, dict[int, list[float]]] = {}
    for r in runs:
        by_lib.setdefault(r["lib"], {}).setdefault(r["threads"], []).append(rate(r))
    if "hetrl" not in by_lib or not any(lib in by_lib for lib in libs if lib != "hetrl"):
        return None
    median = {lib: {t: statistics.median(v) for t, v in ts.items()} for lib, ts in by_lib.items()}
    best = {lib: max(ts.items(), key=lambda kv: kv[1]) for lib, ts in median.items()}  # (threads, rate)
    default = {lib: ts.get(DEFAULT) for lib, ts in median.items()}
    peers = [lib for lib in best if lib != "hetrl"]
    fastest = max(peers, key=lambda lib: best[lib][1])
    ratio = best["hetrl"][1] / best[fastest][1]
    ratio_default = (default["hetrl"] / max(d for lib, d in default.items() if lib != "hetrl" and d)
                     if default.get("hetrl") and any(default[p] for p in peers) else None)
    hetrl_best = [r for r in runs if r["lib"] == "hetrl" and r["threads"] == best["hetrl"][0]]
    learn_s = statistics.median(r["learn_seconds"] for r in hetrl_best)
    share = statistics.median(r["learn_seconds"] / r["loop_seconds"] for r in hetrl_best)
    gflops = statistics.median(r["flops_per_update"] * r["updates"] / r["learn_seconds"] / 1e9 for r in hetrl_best) if learn_s else 0.0
    regime = "compute" if share >= 0.5 and gflops >= 0.5 * peak1 else "overhead"
    aim = (gflops >= 0.75 * peak_all and ratio >= 1.8) if regime == "compute" else ratio >= 3.0
    # the ratio hetrl would reach if its run were its updates' arithmetic alone at the all-cores peak
    # (no env stepping, acting or replay, every product at the peak): no implementation of the same
    # arithmetic beats it, so a compute-bound cell whose ceiling is under its aim cannot meet it this way
    arithmetic_s = statistics.median(r["flops_per_update"] * r["updates"] / (peak_all * 1e9) for r in hetrl_best)
    env_steps = statistics.median(r["env_steps"] for r in hetrl_best)
    ceiling = env_steps / arithmetic_s / best[fastest][1] if arithmetic_s else float("inf")
    outside_us = statistics.median((r["loop_seconds"] - r["learn_seconds"]) / r["env_steps"] for r in hetrl_best) * 1e6
    # the timed call's time outside the loop (the final checkpoint, evaluation episode, plot and summary),
    # per env step: a fixed cost that weighs on short runs
    fixed_us = statistics.median((r["seconds"] - r["loop_seconds"]) / r["env_steps"] for r in hetrl_best) * 1e6
    evals = {lib: [r["eval_return_mean"] for r in runs if r["lib"] == lib] for lib in by_lib}
    episodes = {lib: [x for r in runs if r["lib"] == lib for x in r["eval_returns"]] for lib in by_lib}
    return {"cell": cell, "median": median, "best": best, "default": default, "fastest": fastest, "ratio": ratio,
            "ratio_default": ratio_default, "share": share, "gflops": gflops, "regime": regime, "aim": aim,
            "ceiling": ceiling, "outside_us": outside_us, "fixed_us": fixed_us, "learn_us": learn_s / env_steps * 1e6,
            "evals": evals, "parity": parity(episodes["hetrl"], [episodes[p] for p in peers]), "backend": hetrl_best[0].get("learn_backend", "?"),
            "threads_used": hetrl_best[0].get("threads_used")}


def parity(hetrl: list[float], peers: list[list[float]]) -> bool:
    """hetrl's mean evaluation return is above the weakest peer's, or below it by less than two
    standard errors of the difference (every library plays the same evaluation episodes)."""
    weakest = min(peers, key=statistics.fmean)
    gap = statistics.fmean(weakest) - statistics.fmean(hetrl)
    se = (statistics.pvariance(hetrl) / len(hetrl) + statistics.pvariance(weakest) / len(weakest)) ** 0.5
    return gap <= 2 * se


def _threads(t: int) -> str:
    return "default" if t == DEFAULT else str(t)


def table(rows: list[dict[str, Any]], peak1: float, peak_all: float, libs: Sequence[str]) -> list[str]:
    peers = [lib for lib in libs if lib != "hetrl"]
    head = (["cell", "hetrl default", "hetrl best (threads)"] + [f"{LIB_NAMES[p]} default" for p in peers]
            + [f"{LIB_NAMES[p]} best (threads)" for p in peers]
            + ["hetrl ÷ fastest peer, best", "arithmetic ceiling", "at defaults", "Learn share", "learner GFLOP/s (1 core / all)", "regime", "aim",
               "eval: hetrl | peers", "parity"])
    columns = sum(h.count("|") + 1 for h in head)  # "eval: hetrl | peers" heads two columns
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join(["---"] + ["---:"] * (columns - 1)) + "|"]
    for r in rows:
        def at(lib: str, kind: str) -> str:
            if lib not in r["median"]:
                return "–"
            if kind == "default":
                d = r["default"].get(lib)
                return f"{d:,.0f}" if d else "–"
            t, v = r["best"][lib]
            return f"{v:,.0f} ({_threads(t)})"
        g = r["gflops"]
        peer_evals = "; ".join(f"{statistics.fmean(r['evals'][p]):.0f}" for p in peers if p in r["evals"])
        row = ([r["cell"].title, at("hetrl", "default"), at("hetrl", "best")] + [at(p, "default") for p in peers]
               + [at(p, "best") for p in peers]
               + [f"**{r['ratio']:.2f}×** vs {LIB_NAMES[r['fastest']]}", f"{r['ceiling']:.2f}×",
                  f"{r['ratio_default']:.2f}×" if r["ratio_default"] else "–", f"{r['share']:.0%}",
                  f"{g:,.0f} ({g / peak1:.0%} / {g / peak_all:.0%})", r["regime"], "met" if r["aim"] else "**missed**",
                  f"{statistics.fmean(r['evals']['hetrl']):.0f} | {peer_evals}", "yes" if r["parity"] else "**no**"])
        lines.append("| " + " | ".join(row) + " |")
    return lines


def why_missed(r: dict[str, Any], peak_all: float) -> str:
    """One line on why a cell misses its aim, from what the run measured."""
    peer_us = 1e6 / r["best"][r["fastest"]][1]
    times = (f"per env step hetrl spent {r['learn_us']:,.0f} µs in Learn, {r['outside_us']:,.0f} µs in the rest of its "
             f"loop (env stepping, acting, replay) and {r['fixed_us']:,.0f} µs outside the loop (the end of the run: "
             f"final checkpoint, evaluation episode, plot); {LIB_NAMES[r['fastest']]} {peer_us:,.0f} µs in all")
    if r["regime"] == "compute":
        reasons = []
        if r["gflops"] < 0.75 * peak_all:
            reasons.append(f"the learner ran at {r['gflops'] / peak_all:.0%} of the all-cores peak")
        if r["ratio"] < 1.8:
            reasons.append(f"the arithmetic ceiling is {r['ceiling']:.2f}×, under 1.8×: the same updates at the all-cores "
                           "peak with nothing else in the loop could not reach the aim" if r["ceiling"] < 1.8
                           else f"{r['ratio']:.2f}× of a {r['ceiling']:.2f}× ceiling; {times}")
        return "; ".join(reasons)
    target_us = peer_us / 3
    if r["outside_us"] >= target_us:
        return f"{times}: the loop outside Learn alone is over the {target_us:,.0f} µs per env step that 3× allows"
    if r["learn_us"] + r["outside_us"] <= target_us:
        return (f"{times}: the loop alone is within the {target_us:,.0f} µs per env step that 3× allows; the fixed "
                "end-of-run cost over this run's few steps is not")
    return f"{times}; 3× allows {target_us:,.0f} µs per env step in all"


def heat_map(rows: list[dict[str, Any]], path: Path,
             title: str = "hetrl ÷ the fastest peer (env steps/s, each at its best thread count)") -> None:
    """Rows: algorithm and env; columns: hidden, batch, ratio; colour: log2 of hetrl ÷ the fastest peer."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    ys = sorted({(r["cell"].algo, r["cell"].env_id) for r in rows}, key=lambda p: PAIRS.index(f"{p[0]}:{p[1]}") if f"{p[0]}:{p[1]}" in PAIRS else 99)
    xs = sorted({(r["cell"].hidden, r["cell"].batch, r["cell"].ratio) for r in rows},
                key=lambda c: (HIDDEN.index(c[0]) if c[0] in HIDDEN else 9, c[1], -float(c[2])))
    grid = np.full((len(ys), len(xs)), np.nan)
    for r in rows:
        c = r["cell"]
        grid[ys.index((c.algo, c.env_id)), xs.index((c.hidden, c.batch, c.ratio))] = r["ratio"]
    fig, ax = plt.subplots(figsize=(1.1 * len(xs) + 3, 0.55 * len(ys) + 2))
    image = ax.imshow(np.log2(grid), cmap="RdYlGn", vmin=-1, vmax=3, aspect="auto")
    for (i, j), v in np.ndenumerate(grid):
        if not np.isnan(v):
            ax.text(j, i, f"{v:.1f}×", ha="center", va="center", fontsize=8)
    ax.set_xticks(range(len(xs)), [f"{h.replace(',', 'x')}\nb{b} r{r}" for h, b, r in xs], fontsize=7)
    ax.set_yticks(range(len(ys)), [f"{a.upper()} {e}" for a, e in ys], fontsize=8)
    ax.set_title(title, fontsize=9)
    fig.colorbar(image, ax=ax, label="log2 of the ratio")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def measured_here(args: argparse.Namespace) -> dict[str, Any]:
    from hetrl.hardware import read_cpu

    where = {"date": str(datetime.date.today()), "machine": f"{read_cpu().model} ({platform.machine()})", "cores": args.cores,
             "python": platform.python_version()}
    if args.device != "cpu":
        import torch

        where["gpu"] = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "no GPU seen"
    return where


def report(raw: dict[str, Any], cells: list[Cell], args: argparse.Namespace, out: Path, png: Path, seconds: float) -> str:
    # the highest peak any session of this grid measured (a resumed grid measures it again): a learner's
    # share of the peak is never overstated by a slower measurement
    sessions = [raw["matmul"], *raw.get("matmul_earlier", [])]
    peak1 = max(max(m["1"]["gflops"].values()) for m in sessions)
    peak_all = max(max(m[str(args.cores)]["gflops"].values()) for m in sessions)
    rows = [r for r in (cell_rows(c, raw["results"], peak1, peak_all, args.libs) for c in cells) if r]
    if rows:
        heat_map(rows, png)
    quick = " (--quick: a smoke test, not a measurement)" if args.quick else ""
    where = raw.get("measured") or measured_here(args)  # the measuring run's machine and date (--from-json keeps them)
    lines = [BEGIN, f"## The speed grid{quick}", "",
             how_measured(raw, args, seconds, f"{where['machine']}, {where['cores']} cores"), "",
             f"fp32 matmul peak (torch.mm, best of sizes {', '.join(map(str, MATMUL_SIZES))}, measured in this run; the "
             f"highest of {1 + len(raw.get('matmul_earlier', []))} measurement(s) where the grid was resumed): "
             f"**{peak1:,.0f} GFLOP/s on 1 core, {peak_all:,.0f} on {args.cores}**.", "",
             "Rates are env steps/s over the training call (median over repeats); a library's *best* is its fastest "
             "thread setting (default, or an explicit count), its *default* what it does untouched (hetrl: the plan's "
             "thread count; the peers: torch's default, every core). Ratio: hetrl's best over the fastest peer's best. "
             "Learn share: hetrl's Learn timer over its loop (best run); learner GFLOP/s: linear-layer FLOPs per update "
             "(bench/peer_runners.py `update_flops`, backward as 2× forward) × updates over the Learn timer. Arithmetic "
             "ceiling: the ratio hetrl would reach if its run took only its updates' FLOPs at the all-cores peak (no env "
             "stepping, acting or replay): no implementation of the same arithmetic can beat it. Regime: "
             "compute-bound where the Learn share is >= 50% and the learner >= 50% of the 1-core peak. Aim: "
             "compute-bound cells >= 75% of the all-cores peak and >= 1.8×; overhead-bound cells >= 3×. Parity: hetrl's "
             "mean eval return over its runs' episodes is above the weakest peer's, or below it by less than two standard "
             "errors of the difference (the same evaluation episodes for every library; at these budgets most policies "
             "are still learning: a check that nothing is broken, not a learning result).", "",
             f"![hetrl ÷ fastest peer over the grid]({os.path.relpath(png, out.parent)})", ""]
    lines += table(rows, peak1, peak_all, args.libs)
    missed = [r for r in rows if not r["aim"]]
    lines += ["", f"Cells measured: {len(rows)} of {len(cells)}; aim met in {len(rows) - len(missed)}, missed in {len(missed)}; "
                  f"parity in {sum(r['parity'] for r in rows)}.", ""]
    if missed:
        lines += ["Why the missed cells miss (computed from the runs above):", ""]
        lines += [f"- {r['cell'].title}: {why_missed(r, peak_all)}." for r in missed] + [""]
    if any(c.algo == "sac" for c in cells) and "cleanrl" in args.libs:
        lines += ["SAC cells have no CleanRL-style run (bench/cleanrl_ddpg.py has DDPG and TD3 only).", ""]
    if raw["failures"]:
        lines += ["**Not measured:**", ""] + [f"- {LIB_NAMES[f['lib']]} {f['cell']} at {_threads(f['threads'])} threads, "
                                               f"seed {f['seed']}: {f['reason']}" for f in raw["failures"]] + [""]
    lines.append(END)
    return "\n".join(lines) + "\n"


def report_gpu(raw: dict[str, Any], cells: list[Cell], args: argparse.Namespace, out: Path, png: Path,
               seconds: float) -> str:
    """The GPU column: the same cells with every library's networks on the GPU, at default threads."""
    peak = max(max(m[str(DEFAULT)]["gflops"].values()) for m in [raw["matmul"], *raw.get("matmul_earlier", [])])
    rows = [r for r in (cell_rows(c, raw["results"], peak, peak, args.libs) for c in cells) if r]
    if rows:
        heat_map(rows, png, "hetrl ÷ the fastest peer, every library's networks on the GPU (env steps/s, default threads)")
    peers = [lib for lib in args.libs if lib != "hetrl"]
    quick = " (--quick: a smoke test, not a measurement)" if args.quick else ""
    where = raw.get("measured") or measured_here(args)
    lines = [GPU_BEGIN, f"## The speed grid on a GPU{quick}", "",
             how_measured(raw, args, seconds, f"{where.get('gpu', '?')} beside {where['machine']} ({where['cores']} cores)"), "",
             f"Every library at its default threads with its networks on the GPU: hetrl on the fixed rule "
             f"(`plan=rule`: Learn/cudagraph on the GPU, replay and acting on the host), SB3 with `device=\"cuda\"`, "
             f"the CleanRL-style scripts as CleanRL's `--cuda` runs them. The GPU's fp32 matmul peak (TF32 off, "
             f"torch.mm of sizes {', '.join(map(str, MATMUL_SIZES))}, measured in this run): **{peak:,.0f} GFLOP/s**. "
             "Learn share and µs per update are from hetrl's Learn timer, which on a GPU times the host's side of an "
             "update (a graph launch does not wait for the GPU; the loop waits where it reads the results), and the "
             "first update's graph capture, which weighs on these short runs' few hundred to 1,500 updates "
             "(bench/cudagraph_update.py times an update in steady state).", "",
             f"![hetrl ÷ fastest peer, networks on the GPU]({os.path.relpath(png, out.parent)})", "",
             "| cell | hetrl | " + " | ".join(LIB_NAMES[p] for p in peers) + " | hetrl ÷ fastest peer | hetrl's learner | "
             "Learn share | Learn µs per update, capture included | learner GFLOP/s (of the fp32 peak) | eval: hetrl | peers | parity |",
             "|---|" + "---:|" * (len(peers) + 1) + "---:|---|---:|---:|---:|---:|---|---|"]
    for r in rows:
        rate_of = {lib: (f"{r['best'][lib][1]:,.0f}" if lib in r["best"] else "–") for lib in args.libs}
        learn_us = statistics.median(x["learn_seconds"] / max(x["updates"], 1) * 1e6 for x in raw["results"]
                                     if x["cell"] == r["cell"].key and x["lib"] == "hetrl")
        peer_evals = "; ".join(f"{statistics.fmean(r['evals'][p]):.0f}" for p in peers if p in r["evals"])
        lines.append(f"| {r['cell'].title} | {rate_of['hetrl']} | " + " | ".join(rate_of[p] for p in peers)
                     + f" | **{r['ratio']:.2f}×** vs {LIB_NAMES[r['fastest']]} | {r['backend']} | {r['share']:.0%} | "
                     f"{learn_us:,.0f} | {r['gflops']:,.0f} ({r['gflops'] / peak:.1%}) | "
                     f"{statistics.fmean(r['evals']['hetrl']):.0f} | {peer_evals} | {'yes' if r['parity'] else '**no**'} |")
    lines += ["", f"Cells measured: {len(rows)} of {len(cells)}; parity in {sum(r['parity'] for r in rows)}.", ""]
    if raw["failures"]:
        lines += ["**Not measured:**", ""] + [f"- {LIB_NAMES[f['lib']]} {f['cell']}, seed {f['seed']}: {f['reason']}"
                                               for f in raw["failures"]] + [""]
    lines.append(GPU_END)
    return "\n".join(lines) + "\n"


def merged(raws: list[dict[str, Any]]) -> dict[str, Any]:
    """One raw JSON from several runs' (the first's machine, date and matmul peak, the others' peaks
    kept as earlier sessions'; every run kept once, by library, cell, threads and seed; the cells in
    order of first appearance; the times summed; every command kept)."""
    if len(raws) == 1:
        return raws[0]
    first = raws[0]
    out = {**first, "results": [], "failures": [], "cells": [], "seconds": sum(r.get("seconds", 0.0) for r in raws),
           "matmul_earlier": [*first.get("matmul_earlier", []), *(r["matmul"] for r in raws[1:])],
           "commands": [c for r in raws for c in r.get("commands", [r.get("argv", [])])]}
    seen: set[tuple[str, str, int, int]] = set()
    for r in raws:
        for result in r["results"]:
            key = (result["lib"], result["cell"], result["threads"], result["seed"])
            if key not in seen:
                seen.add(key)
                out["results"].append(result)
        out["failures"] += r["failures"]
        out["cells"] += [c for c in r["cells"] if c not in out["cells"]]
    return out


def runs_said(raw: dict[str, Any]) -> str:
    """How many seeds and evaluation episodes the runs of ``raw`` had (from the runs, so a report
    written later from the JSON says what was run, not what its own command line defaults to)."""
    seeds: dict[tuple[str, str], set[int]] = {}
    for r in raw["results"]:
        seeds.setdefault((r["cell"], r["lib"]), set()).add(r["seed"])

    def span(values: set[int]) -> str:
        low, high = min(values, default=0), max(values, default=0)
        return str(low) if low == high else f"{low}-{high}"

    return (f"{span({len(v) for v in seeds.values()})} seed(s) per cell and library, "
            f"{span({len(r['eval_returns']) for r in raw['results']})} greedy evaluation episodes per run")


def how_measured(raw: dict[str, Any], args: argparse.Namespace, seconds: float, machine: str) -> str:
    """The report's first line: the commands, date, ``machine``, runs and versions."""
    where = raw.get("measured") or measured_here(args)
    versions = sorted({f"{LIB_NAMES[r['lib']]} {r['version']}" for r in raw["results"]})
    return (f"{commands_of(raw, args)} on {where['date']}, {machine}, Python {where['python']}; {args.steps:,} env steps "
            f"per run ({1000:,} of them random warm-up), {runs_said(raw)}; {seconds / 60:.0f} min in all. "
            f"Versions: {', '.join(versions)}."
            + (" The peers computed with denormal floats flushed to zero, as hetrl does by default."
               if any("--peers-flush-denormals" in argv for argv in commands(raw, args)) else ""))


def commands(raw: dict[str, Any], args: argparse.Namespace) -> list[list[str]]:
    """The arguments of the measuring run (--from-json keeps them), or of each merged run."""
    return raw.get("commands", [raw.get("argv", args.argv)])


def commands_of(raw: dict[str, Any], args: argparse.Namespace) -> str:
    """The measuring run's command, or each merged run's, as the report names them."""
    return "; ".join(f"`{' '.join(['python bench/grid.py', *argv])}`" for argv in commands(raw, args))


def parse(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--libs", nargs="+", default=list(LIBS), choices=LIBS)
    parser.add_argument("--pairs", nargs="+", default=list(PAIRS), help="algo:env pairs (default: all eight)")
    parser.add_argument("--hidden", nargs="+", default=list(HIDDEN))
    parser.add_argument("--batches", nargs="+", type=int, default=list(BATCHES))
    parser.add_argument("--ratios", nargs="+", default=list(RATIOS), choices=list(RATIOS))
    parser.add_argument("--cells", nargs="+", help="explicit cells algo:env:hidden:batch:ratio (instead of the product)")
    parser.add_argument("--steps", type=int, default=6_000, help="env steps per run (default 6000, 1000 of them warm-up)")
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--eval-episodes", type=int, default=5)
    parser.add_argument("--cores", type=int, default=os.cpu_count() or 1, help="the most threads tried (default: every core)")
    parser.add_argument("--device", default="cpu", choices=("cpu", "cuda"),
                        help="where every library's networks go (cuda: the GPU column, its own section)")
    parser.add_argument("--quick", action="store_true", help="4 cells, 2500 env steps, 2 evaluation episodes: under 10 minutes")
    parser.add_argument("--peers-flush-denormals", action="store_true", help=PEERS_FLUSH_HELP)
    parser.add_argument("--resume", action="store_true", help="keep the runs already in the raw JSON and run only the rest")
    parser.add_argument("--from-json", type=Path, nargs="+",
                        help="write the report from this raw JSON (of an earlier run) without running; several: "
                             "their runs merged (e.g. the calls of one GPU lease), each command named in the report")
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "benchmarks.md",
                        help="markdown file for the section (default docs/benchmarks.md); heat map <stem>_grid.png and raw "
                             "runs <stem>_grid.json beside it (rewritten after every run; _grid_gpu with --device cuda)")
    parser.add_argument("--worker", nargs="+", help=argparse.SUPPRESS)
    parser.add_argument("--threads", type=int, default=DEFAULT, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    args.argv = list(argv)
    if args.quick and not args.worker:
        args.cells = args.cells or list(QUICK_CELLS)
        args.steps = min(args.steps, 2_500)
        args.eval_episodes = min(args.eval_episodes, 2)
    if not args.worker:
        if args.steps <= 1_000 + 256:
            parser.error("--steps must exceed the 1000 random warm-up steps and one burst of 256")
        for pair in args.pairs:
            if pair.count(":") != 1 or pair.split(":")[0] not in ("dqn", "ddpg", "td3", "sac"):
                parser.error(f"--pairs takes algo:env with algo dqn, ddpg, td3 or sac (got {pair!r})")
        for key in args.cells or []:
            try:
                Cell.parse(key)
            except ValueError:
                parser.error(f"--cells takes algo:env:hidden:batch:ratio with ratio in {list(RATIOS)} (got {key!r})")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse(sys.argv[1:] if argv is None else argv)
    if args.worker:
        print(json.dumps(worker(args)), flush=True)
        return 0
    started = time.perf_counter()
    out = args.out.resolve()
    tag = "_grid" if args.device == "cpu" else "_grid_gpu"
    png, raw_path = out.with_name(f"{out.stem}{tag}.png"), out.with_name(f"{out.stem}{tag}.json")
    write = report if args.device == "cpu" else report_gpu
    markers = (BEGIN, END) if args.device == "cpu" else (GPU_BEGIN, GPU_END)
    raw: dict[str, Any] = {"results": [], "failures": [], "matmul": {}, "measured": measured_here(args)}
    if args.from_json:
        raw = merged([json.loads(path.read_text()) for path in args.from_json])
        cells = [Cell(**c) for c in raw["cells"]]
        args.steps = raw.get("steps", args.steps)
        section = write(raw, cells, args, out, png, raw.get("seconds", 0.0))
        write_section(out, section, *markers)
        raw_path.write_text(json.dumps(raw, indent=1) + "\n")
        print(section)
        return 0
    earlier_s = 0.0
    if args.resume and raw_path.exists():
        raw = json.loads(raw_path.read_text())
        raw["failures"] = []
        raw.setdefault("measured", measured_here(args))
        earlier_s = raw.get("seconds", 0.0)  # the time of the runs kept counts too
        raw["matmul_earlier"] = [*raw.get("matmul_earlier", []), raw["matmul"]]
        raw["matmul"] = {}
        print(f"resuming: {len(raw['results'])} runs kept from {raw_path}")
    cells = cells_of(args)
    args.cache = Path(tempfile.mkdtemp(prefix="hetrl_grid_cache_"))

    def save() -> None:
        raw_path.parent.mkdir(parents=True, exist_ok=True)
        raw["cells"] = [asdict(c) for c in cells]
        raw["steps"], raw["seconds"], raw["argv"] = args.steps, earlier_s + time.perf_counter() - started, args.argv
        raw_path.write_text(json.dumps(raw, indent=1) + "\n")

    for threads in sorted({1, args.cores}) if args.device == "cpu" else [DEFAULT]:
        raw["matmul"][str(threads)] = run_job(["matmul"], threads, args)
        print(f"fp32 matmul peak on {args.device}, {_threads(threads)} thread(s): {max(raw['matmul'][str(threads)]['gflops'].values()):,.0f} GFLOP/s", flush=True)
    save()
    run_all(cells, args, raw, save)
    section = write(raw, cells, args, out, png, earlier_s + time.perf_counter() - started)
    write_section(out, section, *markers)
    print(f"\nwrote {out}, {png} and {raw_path}\n")
    print(section)
    return 0


if __name__ == "__main__":
    sys.exit(main())
