"""DQN in fp32 against bf16 mixed precision (Learn/torch-bf16): does it learn the same, and how fast.

Per env and seed, two `hetrl train dqn` runs of the same plan but the Learn backend: first the fp32
run with the fixed rule (``--plan rule --set precision=fp32``: Learn/blas for the MinAtar network,
Learn/torch for the Nature CNN), then the bf16 run with that run's plan.json, its Learn backend
replaced by torch-bf16 (``--set precision=bf16``). Both play the same ``--test-episodes`` greedy test
episodes after training (``hetrl.evaluate``, seed 10,000). The report, per env: each precision's
test return and its training return over the last tenth of the run (mean and standard deviation
over seeds), env steps/s and updates/s over the run, and whether each precision's mean return lies
within the other's seeds' range (the issue's "learning parity": final returns within the seeds'
spread). Runs go ``--jobs`` at a time with one torch thread each; a workdir's finished runs are
reused, so an invocation cut short goes on.

    python bench/precision.py --envs MinAtar/Breakout-v1 --seeds 3 --steps 500000 --jobs 2
    python bench/precision.py --envs MinAtar/Breakout-v1 --seeds 1 --steps 3000 --quick   # smoke test
"""

from __future__ import annotations

import argparse
import datetime
import json
import platform
import statistics
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from early_exit import train  # bench/ is on the path of a script run from it

TEST_SEED = 10_000
QUICK = ["learning_starts=500", "eps_decay_steps=1000", "target_update_every=250"]


def run_pair(env: str, seed: int, steps: int, workdir: Path, settings: list[str], test_episodes: int) -> dict[str, Any]:
    """The fp32 and bf16 runs of one env and seed (each reused where finished), and their test returns."""
    import hetrl

    folder = workdir / env.replace("/", "-")
    folder.mkdir(parents=True, exist_ok=True)
    fp32, mixed = folder / f"s{seed}_fp32", folder / f"s{seed}_bf16"
    if not (fp32 / "summary.json").exists():
        train("dqn", env, seed, steps, fp32, 1, [*settings, "precision=fp32"])
    if not (mixed / "summary.json").exists():
        plan = json.loads((fp32 / "plan.json").read_text())
        plan["placement"]["learn"]["backend"] = "torch-bf16"
        plan_file = folder / f"s{seed}_bf16_plan.json"
        plan_file.write_text(json.dumps(plan, indent=1))
        train("dqn", env, seed, steps, mixed, 1, [*settings, "precision=bf16"], plan=str(plan_file))
    out: dict[str, Any] = {"env": env, "seed": seed}
    for name, run in (("fp32", fp32), ("bf16", mixed)):
        summary = json.loads((run / "summary.json").read_text())
        tail = [r for step, r in training_returns(run) if step > 0.9 * steps]
        out[name] = {"learn": summary["placement"]["Learn"], "env_steps_per_s": summary["env_steps_per_s"],
                     "updates_per_s": summary["updates_per_s"], "wall_s": summary["wall_s"],
                     "test_return": hetrl.evaluate(run, test_episodes, checkpoint="final", seed=TEST_SEED).mean,
                     "train_return_tail": statistics.fmean(tail) if tail else None}
    return out


def training_returns(run: Path) -> list[tuple[int, float]]:
    """(env step, mean return of the training episodes that ended since the row before) of every
    row of the run's metrics.csv that has one."""
    import math

    from hetrl.run.metrics import read_metrics

    return [(int(r["env_steps"]), float(r["return_mean"])) for r in read_metrics(run / "metrics.csv")
            if r.get("return_mean") is not None and not math.isnan(r["return_mean"])]


def summary_line(values: list[float]) -> str:
    if len(values) == 1:
        return f"{values[0]:.2f}"
    return f"{statistics.fmean(values):.2f} ± {statistics.stdev(values):.2f} [{min(values):.2f}-{max(values):.2f}]"


def within(mean: float, others: list[float]) -> bool:
    return min(others) <= mean <= max(others)


def report(rows: list[dict[str, Any]], args: argparse.Namespace) -> str:
    from hetrl.hardware import read_cpu

    lines = ["## DQN in fp32 against bf16 mixed precision (bench/precision.py)", "",
             f"{datetime.date.today()}, {read_cpu().model}, {read_cpu().logical_cores} cores ({platform.machine()}); "
             f"`python bench/precision.py {' '.join(sys.argv[1:])}`; {args.steps:,} env steps per run, seeds "
             f"{', '.join(str(s) for s in range(args.seeds))}, {args.test_episodes} greedy test episodes each, one torch "
             "thread per run, runs side by side as --jobs says (so the rates are a loaded machine's).", "",
             "| env | precision | Learn | test return | training return, last tenth | env steps/s | updates/s |",
             "|---|---|---|---:|---:|---:|---:|"]
    verdicts = []
    for env in dict.fromkeys(r["env"] for r in rows):
        mine = [r for r in rows if r["env"] == env]
        test = {p: [r[p]["test_return"] for r in mine] for p in ("fp32", "bf16")}
        for p in ("fp32", "bf16"):
            tails = [r[p]["train_return_tail"] for r in mine if r[p]["train_return_tail"] is not None]
            learns = ", ".join(dict.fromkeys(r[p]["learn"] for r in mine))
            lines.append(f"| {env} | {p} | {learns} | {summary_line(test[p])} | {summary_line(tails) if tails else '-'} | "
                         f"{summary_line([r[p]['env_steps_per_s'] for r in mine])} | "
                         f"{summary_line([r[p]['updates_per_s'] for r in mine])} |")
        a, b = statistics.fmean(test["fp32"]), statistics.fmean(test["bf16"])
        verdicts.append(f"- {env}: bf16's mean test return {b:.2f} is {'within' if within(b, test['fp32']) else 'outside'} the "
                        f"fp32 seeds' range [{min(test['fp32']):.2f}-{max(test['fp32']):.2f}], fp32's {a:.2f} "
                        f"{'within' if within(a, test['bf16']) else 'outside'} bf16's [{min(test['bf16']):.2f}-"
                        f"{max(test['bf16']):.2f}].")
    lines += ["", *verdicts, "", "Per run:", "", "| env | seed | fp32 test return | bf16 test return | fp32 env steps/s | bf16 env steps/s |",
              "|---|---:|---:|---:|---:|---:|"]
    for r in rows:
        lines.append(f"| {r['env']} | {r['seed']} | {r['fp32']['test_return']:.2f} | {r['bf16']['test_return']:.2f} | "
                     f"{r['fp32']['env_steps_per_s']:.0f} | {r['bf16']['env_steps_per_s']:.0f} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--envs", nargs="+", default=["MinAtar/Breakout-v1"])
    p.add_argument("--seeds", type=int, default=3)
    p.add_argument("--steps", type=int, default=500_000)
    p.add_argument("--test-episodes", type=int, default=30)
    p.add_argument("--set", dest="settings", action="append", default=[], metavar="KEY=VALUE")
    p.add_argument("--jobs", type=int, default=1)
    p.add_argument("--workdir", default="bench_precision")
    p.add_argument("--out", help="the markdown report (default WORKDIR/precision.md; JSON beside it)")
    p.add_argument("--quick", action="store_true", help="smoke test: " + ", ".join(QUICK))
    args = p.parse_args()
    settings = [*(QUICK if args.quick else []), *args.settings]
    workdir = Path(args.workdir)
    pairs = [(env, seed) for env in args.envs for seed in range(args.seeds)]
    with ThreadPoolExecutor(args.jobs) as pool:
        rows = list(pool.map(lambda es: run_pair(es[0], es[1], args.steps, workdir, settings, args.test_episodes), pairs))
    out = Path(args.out) if args.out else workdir / "precision.md"
    out.write_text(report(rows, args))
    out.with_suffix(".json").write_text(json.dumps(rows, indent=1))
    print(out.read_text())


if __name__ == "__main__":
    main()
