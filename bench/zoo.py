"""hetrl with its tuned defaults (hetrl.tuned) on every (algorithm, env) of the table, beside the
figure rl-baselines3-zoo published for the same pair where one was found.

Each seed is a real `hetrl train ALGO ENV --seed S` run with the table's settings, in its own
process, two at a time with one torch thread each (so the rates are below those of a run alone).
Per pair it reports the FINAL policy's greedy evaluation (the run's last evaluation, 20 episodes),
the best policy (checkpoints/best.pt, re-evaluated on 20 fresh episodes, since the evaluation that
selected it is biased upwards), wall time and env steps/s, and writes one PNG of evaluation curves
per pair. The zoo's budget is used unless --max-steps caps it; the table says where it did.

    python bench/zoo.py --pairs dqn:CartPole-v1 dqn:Acrobot-v1 --seeds 5 --out bench_out
    python bench/zoo.py --algos td3 --envs Pendulum-v1 --max-steps 15000 --seeds 3
    python bench/zoo.py --pairs dqn:CartPole-v1 --seeds 10 --set lr=1e-3    # a variant of the defaults
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

ALGOS = ("dqn", "ddpg", "td3", "sac")  # the algorithms with rows in hetrl.tuned

# rl-baselines3-zoo's benchmark.md (github.com/DLR-RM/rl-baselines3-zoo, commit 0088472b): one trained
# agent per pair, its deterministic policy evaluated for ~150k env steps; mean and std over those
# evaluation episodes (not over seeds). Its Box2D rows are for the -v2 envs, hetrl's rows for -v3.
BENCHMARK_MD = "rl-baselines3-zoo benchmark.md (commit 0088472b; one run, std over its evaluation episodes)"
PUBLISHED: dict[tuple[str, str], tuple[float, float, str]] = {  # (mean, std, note)
    ("dqn", "Acrobot-v1"): (-76.639, 11.752, ""),
    ("dqn", "CartPole-v1"): (500.0, 0.0, ""),
    ("dqn", "LunarLander-v3"): (154.382, 79.241, "LunarLander-v2"),
    ("dqn", "MountainCar-v0"): (-100.849, 9.925, ""),
    ("ddpg", "BipedalWalker-v3"): (197.486, 141.580, ""),
    ("ddpg", "LunarLanderContinuous-v3"): (230.217, 92.372, "LunarLanderContinuous-v2"),
    ("ddpg", "MountainCarContinuous-v0"): (93.512, 0.048, ""),
    ("ddpg", "Pendulum-v1"): (-152.099, 94.282, ""),
    ("td3", "BipedalWalker-v3"): (305.990, 56.886, ""),
    ("td3", "LunarLanderContinuous-v3"): (207.451, 67.562, "LunarLanderContinuous-v2"),
    ("td3", "MountainCarContinuous-v0"): (93.483, 0.075, ""),
    ("td3", "Pendulum-v1"): (-151.855, 90.227, ""),
    ("sac", "BipedalWalker-v3"): (297.668, 33.060, ""),
    ("sac", "LunarLanderContinuous-v3"): (260.390, 65.467, "LunarLanderContinuous-v2"),
    ("sac", "MountainCarContinuous-v0"): (94.679, 1.134, ""),
    ("sac", "Pendulum-v1"): (-156.995, 88.714, ""),
}


def published_text(algo: str, env: str) -> str | None:
    if (algo, env) not in PUBLISHED:
        return None
    mean, std, note = PUBLISHED[(algo, env)]
    return f"{mean:.1f} ± {std:.1f}" + (f" ({note})" if note else "")


def pairs(args: argparse.Namespace) -> list[tuple[str, str]]:
    from hetrl.tuned import TUNED

    if args.pairs:
        chosen = [tuple(p.split(":")[:2]) for p in args.pairs]
        unknown = [p for p in chosen if p not in TUNED]
        if unknown:
            raise SystemExit(f"no tuned row for {unknown}; rows: {sorted(TUNED)}")
        return chosen
    return [(a, e) for (a, e) in TUNED if a in args.algos and (not args.envs or e in args.envs)]


def run_seed(algo: str, env: str, seed: int, steps: int | None, eval_every: int, settings: list[str], root: Path,
             plan: str) -> dict:
    run = root / f"{algo}_{env}_s{seed}"
    if (run / "summary.json").exists():  # done by an earlier invocation with the same --out: reused, not rerun
        return collect(run, seed, None, "")
    cmd = [sys.executable, "-m", "hetrl", "train", algo, env, "--seed", str(seed), "--run-dir", str(run),
           "--no-progress", "--device", "cpu", "--plan", plan, "--set", f"eval_every={eval_every}"]
    if steps is not None:
        cmd += ["--steps", str(steps)]
    for item in settings:
        cmd += ["--set", item]
    proc = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "OMP_NUM_THREADS": "1"})
    if proc.returncode != 0:
        raise RuntimeError(f"{algo} {env} seed {seed} failed:\n{proc.stderr[-2000:]}")
    return collect(run, seed, None, proc.stderr.splitlines()[0])


def collect(run: Path, seed: int, wall_s: float | None, first_line: str) -> dict:
    import hetrl

    summary = json.loads((run / "summary.json").read_text())
    best = hetrl.evaluate(run, episodes=20, checkpoint="best", seed=seed + 10_000)  # fresh episodes
    curve = [(int(r["env_steps"]), float(r["eval_return_mean"])) for r in csv.DictReader((run / "metrics.csv").open())
             if r.get("eval_return_mean")]
    return {"seed": seed, "summary": summary, "best_fresh": best.mean, "curve": curve,
            "wall_s": summary["wall_s"] if wall_s is None else wall_s, "first_line": first_line}  # the training loop's time


def plot(algo: str, env: str, results: list[dict], path: Path, published: str | None) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.6))
    for r in results:
        steps, returns = zip(*r["curve"])
        ax.plot(steps, returns, lw=1, alpha=0.7, label=f"seed {r['seed']}")
    ax.set_xlabel("env steps")
    ax.set_ylabel("greedy evaluation return (20 episodes)")
    ax.set_title(f"hetrl {algo} on {env}, tuned defaults" + (f" (zoo: {published})" if published else ""), fontsize=9)
    ax.legend(fontsize=6, ncol=2)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--algos", nargs="+", default=list(ALGOS), choices=list(ALGOS))
    parser.add_argument("--envs", nargs="+", help="only these env ids")
    parser.add_argument("--pairs", nargs="+", metavar="ALGO:ENV[:SEEDS]",
                        help="exactly these pairs (overrides --algos/--envs), each with its own seed count if given")
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--first-seed", type=int, default=0)
    parser.add_argument("--max-steps", type=int, help="cap every pair's budget (the table says which were shortened)")
    parser.add_argument("--evals", type=int, default=20, help="evaluations per run (default 20)")
    parser.add_argument("--set", dest="settings", action="append", default=[], metavar="KEY=VALUE",
                        help="change a setting of every run (a variant of the defaults)")
    parser.add_argument("--plan", default="auto", help="the runs' --plan (default auto: profiled once per pair first)")
    parser.add_argument("--out", default="bench_zoo", help="folder for the runs, PNGs and the table")
    args = parser.parse_args()
    from hetrl.tuned import TUNED

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    lines = ["| algo | env | seeds | env steps | final return (mean ± std over seeds) | final >= solved | best, fresh episodes | "
             "best during training (step) | zoo published | >= zoo mean - std | training wall s per run | env steps/s |",
             "|---|---|---:|---:|---:|---:|---:|---:|---|---|---:|---:|"]
    notes, prepared = [], []
    chosen = pairs(args)
    for algo, env in chosen:
        budget = TUNED[(algo, env)]["steps"]
        steps = min(budget, args.max_steps) if args.max_steps else None
        steps_run = steps or budget
        try:
            from hetrl.envs import env_spec

            spec = env_spec(env)
        except Exception as exc:  # e.g. the box2d extra is missing
            notes.append(f"- {algo} {env}: not run ({exc})")
            continue
        if args.plan == "auto":  # profile once, alone, so the seeds do not profile side by side
            subprocess.run([sys.executable, "-m", "hetrl", "plan", algo, env, "--device", "cpu", "--steps", str(steps_run),
                            "--out", str(out / f"plan_{algo}_{env}.json"), *sum((["--set", s] for s in args.settings), [])],
                           capture_output=True, text=True, env={**os.environ, "OMP_NUM_THREADS": "1"}, check=True)
        prepared.append((algo, env, spec, budget, steps, steps_run, max(1, steps_run // args.evals)))
    counts = {tuple(p.split(":")[:2]): int(p.split(":")[2]) for p in args.pairs or [] if p.count(":") == 2}
    jobs = [(p, seed) for p in prepared  # one queue over every pair: two runs at all times
            for seed in range(args.first_seed, args.first_seed + counts.get(p[:2], args.seeds))]
    with ThreadPoolExecutor(2) as pool:
        done = list(pool.map(lambda job: run_seed(job[0][0], job[0][1], job[1], job[0][4], job[0][6], args.settings, out,
                                                  args.plan), jobs))
    for algo, env, spec, budget, steps, steps_run, _ in prepared:
        results = [r for (p, _), r in zip(jobs, done) if p[:2] == (algo, env)]
        finals = np.array([r["summary"]["eval_return_mean"] for r in results])
        fresh = np.array([r["best_fresh"] for r in results])
        threshold = spec.reward_threshold
        solved = f"{int((finals >= threshold).sum())}/{len(finals)} (>= {threshold:g})" if threshold is not None else "-"
        bests = ", ".join(f"{r['summary']['best_eval_return_mean']:.0f} ({r['summary']['best_eval_step'] // 1000}k)" for r in results)
        published = published_text(algo, env)
        if (algo, env) in PUBLISHED:
            mean, std, _ = PUBLISHED[(algo, env)]
            aim = "yes" if finals.mean() >= mean - std else "no"
        else:
            aim = "-"
        rate = np.mean([r["summary"]["env_steps_per_s"] for r in results])
        shortened = f" (zoo: {budget:,})" if steps_run < budget else ""
        lines.append(f"| {algo} | {env} | {len(results)} | {steps_run:,}{shortened} | {finals.mean():.1f} ± {finals.std():.1f} | "
                     f"{solved} | {fresh.mean():.1f} ± {fresh.std():.1f} | {bests} | {published or 'not found'} | {aim} | "
                     f"{np.mean([r['wall_s'] for r in results]):.0f} | {rate:,.0f} |")
        for r in results:
            notes.append(f"- {algo} {env} seed {r['seed']}: final {r['summary']['eval_return_mean']:.1f}; evaluations "
                         + " ".join(f"{v:.0f}" for _, v in r["curve"]))
        if steps_run < budget:
            notes.append(f"- {algo} {env}: shortened from the zoo's {budget:,} env steps to {steps_run:,} (--max-steps)")
        plot(algo, env, results, out / f"{algo}_{env}.png", published)
        print(lines[-1], flush=True)
    skipped = [f"{a} {e}" for (a, e) in TUNED if a in ALGOS and (a, e) not in chosen]
    if skipped:
        notes.append(f"- not run in this invocation: {', '.join(skipped)}")
    notes.append(f"- zoo published: {BENCHMARK_MD}")
    text = "\n".join(lines) + "\n\n" + "\n".join(notes) + "\n"
    header = f"`python bench/zoo.py {' '.join(sys.argv[1:])}`\n\n"
    (out / "table.md").write_text(header + text)
    print(text)


if __name__ == "__main__":
    main()
