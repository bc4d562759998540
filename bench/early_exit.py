"""Early-exit DQN (exit-dqn, RAPID-RL) against the baseline DQN: operations, score and latency.

For each MinAtar game and seed, a baseline ``dqn`` and an ``exit-dqn`` train with the same settings
(the tuned MinAtar row, the MinAtar reference agent), the same seed and the same env-step budget,
each as a fresh ``hetrl train`` subprocess: the exit-dqn run first, with the fixed rule's placement
(one process, Act/numba and Learn/torch on the host, ``--threads`` torch threads), then the
baseline with the exit run's plan, so that under the staged schedule (the default) the exit run's
backbone and final head are the baseline's bit for bit and the score ratio measures the exits
alone (the report says whether they are). Then, for the exit-dqn run, ``hetrl exits sweep`` fits
branches of each width (``--widths``; by default the run's and two narrower,
``hetrl.exits.candidate_widths``) and share of their block's outputs (``--shares``; by default the
run's) to the trained network (on the run's replay, then over rounds of the branch's own play,
``--fit-rounds``; the report gives the chosen branches' agreement with the final head's action
before and after) and chooses the width and
threshold on validation episodes (seeded apart from the test episodes), and stores both; both final
policies then play the same test episodes (``hetrl.evaluate``: the seeds ``hetrl eval`` uses), and

- operations ratio: exit-dqn's mean multiply-accumulates per decision over the test episodes'
  decisions (counted exactly, layer by layer, for the exits the decisions took) over the baseline
  network's per decision (the same backbone without branches);
- score ratio: exit-dqn's mean test return over the baseline's (on the same episode seeds);
- latency ratio: measured wall time per decision at batch 1 of each policy's Act on the host (one
  thread, median of timed blocks) on the same observations, those the exit-dqn policy met in its
  test episodes, on the fastest host Act backend that serves both policies (every one that does is
  timed, side by side in alternating blocks, each policy on the same backend; the report names the
  backend, and gives Act/torch's ratio beside it); beside it, the ratio to the exit network's own
  pass at threshold 1 (the same code, no exit), which separates what the exits save from how the
  two networks' passes are written.

The report gives each ratio per (game, seed) and per game as mean, min and max over seeds, against
the aims of issue 18 (<= 0.35x operations at >= 0.9x score on every game; batch-1 latency <= 0.5x).
The final checkpoints are compared (not best.pt, which training chose on the test seeds).

    python bench/early_exit.py                                   # 3 games x 3 seeds x 1M steps (very long)
    python bench/early_exit.py --games Breakout-v1 --seeds 1 --steps 3000 --set learning_starts=1000 \
        --test-episodes 3 --validation-episodes 3 --out /tmp/exits.md        # smoke test (minutes)

``--swept`` (with the ``--workdir`` of an earlier run) measures the sweeps the runs already have,
without sweeping again: the test episodes and latencies alone, e.g. on a quiet machine after sweeps
that ran side by side.

``--own-baseline`` trains no DQN: the baseline is the exit run's own whole network (threshold 1, no
branch run). Under the staged schedule that network takes DQN's updates bit for bit (the runs of
docs/results.md that trained both were the same network on every run), so the score ratio is the
same and the training is halved; the latency ratio is then to the exit network's own whole pass
(Act's exit-network code with no exit), not to DQN's network. A run whose DQN the ``--workdir``
has (trained earlier) is still measured against it. The joint schedule trains another network and
is refused.

On 2 cores, MinAtar DQN trains at a few hundred env steps per second: a full run is some 2 x 9
trainings of 1M steps, i.e. days; pass ``--steps`` to shorten it.
"""

from __future__ import annotations

import argparse
import datetime
import json
import platform
import statistics
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
GAMES = ("Breakout-v1", "SpaceInvaders-v1", "Asterix-v1")
AIM_OPS, AIM_SCORE, AIM_LATENCY = 0.35, 0.9, 0.5


def hetrl_cli(*args: str) -> None:
    cmd = [sys.executable, "-m", "hetrl", *args]
    proc = subprocess.run(cmd, check=False, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stderr[-3000:]}")


def train(algo: str, env: str, seed: int, steps: int, run_dir: Path, threads: int, settings: list[str],
          plan: str = "rule") -> None:
    sets = [f"threads={threads}", "eval_every=0", "eval_episodes=3", *settings]
    hetrl_cli("train", algo, env, "--steps", str(steps), "--seed", str(seed), "--plan", plan, "--device", "cpu",
              "--run-dir", str(run_dir), "--no-progress", *[a for s in sets for a in ("--set", s)])


def baseline_plan(exit_dir: Path, path: Path) -> Path:
    """The exit-dqn run's plan for the baseline DQN: the same backends (Learn/torch: the fixed rule's
    Learn/blas, which exit networks do not have, is the same update in another rounding, and two
    trainings a rounding apart part ways like two seeds). With the staged schedule the exit run's
    backbone and final head then take DQN's updates bit for bit, so its whole network *is* the
    baseline and the score ratio is the exits' alone (docs/results.md)."""
    plan = json.loads((exit_dir / "plan.json").read_text())
    plan["algo"] = "dqn"
    path.write_text(json.dumps(plan, indent=1))
    return path


def stored_sweep(exit_dir: Path) -> Any:
    """The sweep an exit run already has (``--swept``), which must have stored its choice in the run's
    final checkpoint. The sweep records that checkpoint's path as it was then, so a run directory copied
    or moved since (a workdir on another disk) is matched by the file's name within the run."""
    from hetrl.exits import SweepResult
    from hetrl.run.rundir import RunDir

    result = SweepResult.load(exit_dir / "exits" / "sweep.json")
    checkpoints = RunDir.open(exit_dir).checkpoints()
    if not checkpoints:
        raise RuntimeError(f"{exit_dir}: no checkpoint to measure; train the run again (drop --swept)")
    final = checkpoints[-1]
    if Path(result.checkpoint).name != final.name or not result.stored:
        raise RuntimeError(f"{exit_dir}: its sweep stored nothing in the final checkpoint {final.name}; run without --swept")
    return result


def measure(env: str, seed: int, base_dir: Path | None, exit_dir: Path, test_episodes: int, validation_episodes: int,
            min_score_ratio: float, widths: list[int] | None = None, margin: float = 1.0,
            swept: bool = False, shares: list[float] | None = None, fit_rounds: int | None = None,
            confidence_tolerance: float | None = None, max_episodes: int | None = None) -> dict[str, Any]:
    """Sweep the exit run on validation episodes (``swept``: take the sweep it has), then play both
    final policies on the test episodes. ``base_dir`` None: the baseline is the exit run's own whole
    network (``--own-baseline``)."""
    import torch

    import hetrl
    from hetrl.evaluation import evaluate_policy
    from hetrl.exits import ExitCounter, branch_key, branch_label, score_ratio, sweep
    from hetrl.nets.exits import NEVER
    from peer_runners import forward_macs  # bench/ is on the path of a script run from it

    if swept:
        result = stored_sweep(exit_dir)
    else:
        result = sweep(exit_dir, "final", validation_episodes, min_score_ratio=min_score_ratio, timing=False,
                       widths=widths, margin=margin, shares=shares, fit_rounds=fit_rounds,
                       confidence_tolerance=confidence_tolerance, max_episodes=max_episodes)
    exit_eval = hetrl.evaluate(exit_dir, test_episodes, checkpoint="final")
    stats = exit_eval.exits
    # latency: both policies on the observations the exit policy met in (some of) the test episodes
    policy = hetrl.load(exit_dir, "final")
    baseline = hetrl.load(base_dir, "final") if base_dir is not None else None
    if baseline is not None:
        base_mean = hetrl.evaluate(base_dir, test_episodes, checkpoint="final").mean
    else:  # the exit run's whole network on the same test episodes (hetrl.evaluate's seeds)
        if getattr(policy.algo.config, "exit_schedule", "staged") != "staged":
            raise RuntimeError(f"{exit_dir}: a joint-schedule run's whole network is not DQN's; train the baseline "
                               "(drop --own-baseline)")
        base_mean = float(evaluate_policy(ExitCounter(policy.algo, policy.network, NEVER), env, test_episodes,
                                          seed).mean())
    counter = ExitCounter(policy.algo, policy.network, keep=512, seed=seed)
    evaluate_policy(counter, env, min(test_episodes, 5), seed)
    obs = counter.observations()
    latency = latencies(policy, baseline, obs)
    best = latency[latency["fastest"]]
    torch_b1 = latency["torch"]
    mine: dict[str, Any] = {"baseline": "own whole network"}
    if baseline is not None:
        macs_dqn = forward_macs(baseline.network, obs[:1])
        whole = [v for k, v in policy.network.state_dict().items() if not k.startswith("branches.") and k != "exit_threshold"]
        base_weights = list(baseline.network.state_dict().values())
        same_network = len(whole) == len(base_weights) and all(torch.equal(a, b) for a, b in zip(whole, base_weights))
        assert macs_dqn == stats.baseline_macs, (macs_dqn, stats.baseline_macs)  # the same backbone
        # the exit run's backbone and final head are the baseline's, bit for bit
        mine = {"baseline": "dqn", "same_network": same_network}
    return {**mine,
        "env": env, "seed": seed, "threshold": result.chosen, "branch_width": result.chosen_width,
        "branch_share": result.chosen_share,
        "choice": {"validation_episodes": result.episodes, "max_validation_episodes": result.max_episodes,
                   "chosen_point_episodes": result.chosen_point.episodes or result.episodes,
                   "min_score_ratio": result.min_score_ratio,
                   "margin": result.margin, "widths": result.widths, "shares": result.shares,
                   "fit_rounds": result.fit.rounds if result.fit else 0,
                   "confidence_tolerance": result.fit.tolerance if result.fit else 0.0},
        "validation": {f"{branch_label(branch_key(p))}:{p.threshold:g}": {"score_ratio": p.score_ratio, "ops_ratio": p.ops_ratio}
                       for p in result.points},
        "base_return": base_mean, "exit_return": exit_eval.mean,
        "score_ratio": score_ratio(exit_eval.mean, base_mean),
        "macs_exit": stats.macs_mean, "macs_base": stats.baseline_macs, "ops_ratio": stats.ops_ratio,
        "exit_fractions": stats.fractions, "exit_names": stats.names,
        "fit_agreement": ([result.fit.agreement_before, result.fit.agreement_after] if result.fit is not None
                          else None),
        "latency_backend": latency["fastest"],
        "latency_b1_us_exit": 1e6 * best["exit"][0], "latency_b1_us_base": 1e6 * best["base"][0],
        "latency_b1_spread_exit": [1e6 * best["exit"][1], 1e6 * best["exit"][2]],
        "latency_b1_spread_base": [1e6 * best["base"][1], 1e6 * best["base"][2]],
        "latency_ratio_b1": best["exit"][0] / best["base"][0],
        "latency_b1_us_whole": 1e6 * best["whole"][0], "latency_ratio_b1_own": best["exit"][0] / best["whole"][0],
        "latency_b1_us_exit_torch": 1e6 * torch_b1["exit"][0], "latency_b1_us_base_torch": 1e6 * torch_b1["base"][0],
        "latency_ratio_b1_torch": torch_b1["exit"][0] / torch_b1["base"][0],
        "latency_b1_us_by_backend": {b: {k: 1e6 * v[0] for k, v in latency[b].items()}
                                     for b in latency if b != "fastest"},
    }


def latencies(policy: Any, baseline: Any | None, obs: Any, seconds: float = 0.3) -> dict[str, Any]:
    """Seconds per decision at batch 1 (median, p10, p90) on ``obs`` of the exit policy at its
    threshold ("exit"), of its own network at threshold 1 ("whole") and of the baseline DQN ("base";
    None: the whole pass is the baseline), on every host Act backend that serves both policies, all
    timed side by side (alternating blocks); "fastest": the backend with the least exit plus
    baseline time, where the ratio is reported."""
    from hetrl.exits import acting_policy, host_act_backends, time_decisions
    from hetrl.nets.exits import NEVER

    backends = host_act_backends(policy.algo, *([baseline.algo] if baseline is not None else []))
    acts = {}
    for b in backends:
        acts[(b, "exit")] = acting_policy(policy.algo, policy.network, b, policy.network.threshold)
        acts[(b, "whole")] = acting_policy(policy.algo, policy.network, b, NEVER)
        if baseline is not None:
            acts[(b, "base")] = acting_policy(baseline.algo, baseline.network, b)
    timed = time_decisions(acts, obs, 1, seconds * len(acts) / 3)
    base = "base" if baseline is not None else "whole"
    out: dict[str, Any] = {b: {"exit": timed[(b, "exit")], "whole": timed[(b, "whole")], "base": timed[(b, base)]}
                           for b in backends}
    out["fastest"] = min(backends, key=lambda b: out[b]["exit"][0] + out[b]["base"][0])
    return out


def agreement(fit: list[list[float]] | None) -> str:
    """Each branch's agreement with the final head's action on held-out replay states, before and
    after the sweep's branch fit ("-": the branches were swept as trained)."""
    if not fit:
        return "-"
    return ", ".join(f"{100 * a:.0f}% -> {100 * b:.0f}%" for a, b in zip(*fit))


def spread(values: list[float]) -> str:
    if len(values) == 1:
        return f"{values[0]:.3f}"
    return f"{statistics.mean(values):.3f} [{min(values):.3f}-{max(values):.3f}]"


def more(choice: dict[str, Any]) -> str:
    """Up to how many validation episodes a point the sweep could not yet tell played ("" where none could)."""
    most = choice.get("max_validation_episodes", 0)
    return f" (up to {most} where a point lay within the margin of the line)" if most > choice["validation_episodes"] else ""


def how_chosen(rows: list[dict[str, Any]]) -> str:
    """How the runs' sweeps chose (the same for all, or each run's own)."""
    def one(c: dict[str, Any]) -> str:
        spare = c["margin"]
        shares = c.get("shares") or [1.0] * len(c["widths"])
        branches = ", ".join(f"{w}" + (f" on {x:.3g}" if x != 1 else "") for w, x in zip(c["widths"], shares))
        rounds = c.get("fit_rounds", 0)
        fit = f", fit with {rounds} round{'s' if rounds != 1 else ''} on its own play" if rounds else ""
        tolerance = c.get("confidence_tolerance", 0.0)
        fit += f", confidence within {tolerance:g} of the Q spread" if tolerance else ""
        return (f"branch (of {branches} units{' on a share of the block' if any(x != 1 for x in shares) else ''}{fit}) and threshold chosen on "
                f"{c['validation_episodes']} validation episodes{more(c)} at score ratio >= {c['min_score_ratio']:g} with "
                f"{spare:g} standard error{'s' if spare != 1 else ''} to spare")
    texts = list(dict.fromkeys(one(r["choice"]) for r in rows if "choice" in r))
    return texts[0] if len(texts) == 1 else "; ".join(f"{r['env']} s{r['seed']}: {one(r['choice'])}" for r in rows)


def same_networks(rows: list[dict[str, Any]]) -> str:
    """Whether each exit run's whole network is its baseline DQN's, bit for bit (:func:`baseline_plan`),
    and which runs had no DQN trained (``--own-baseline``)."""
    own = [r for r in rows if r.get("baseline") == "own whole network"]
    names = ", ".join(f"{r['env']} s{r['seed']}" for r in own)
    text = (f"On {len(own)} of {len(rows)} runs ({names}) no DQN was "
            "trained: the baseline is the exit run's own whole network (threshold 1; under the staged schedule DQN's "
            "bit for bit), and the latency ratio is to its own whole pass. " if own else "")
    known = [r for r in rows if "same_network" in r]  # rows measured before the check have no answer
    same = sum(r["same_network"] for r in known)
    if not known:
        return text.rstrip()
    if own:
        return text + same_networks([r for r in rows if r not in own])
    if same == len(known):
        return (f"On all {same} runs the exit run's backbone and final head are the baseline DQN's, bit for bit "
                "(staged schedule, same backends): the score ratio is the exits' alone.")
    return (f"On {len(known) - same} of {len(known)} runs the exit run's backbone and final head differ from the "
            "baseline DQN's: their score ratio holds two trainings' spread as well as the exits'.")


def branch(row: dict[str, Any]) -> str:
    """A run's chosen branch: its hidden units, and its share of the block where it reads less than all."""
    share = row.get("branch_share", 1.0)
    return f"{row.get('branch_width', '-')}" + (f" on {share:.3g}" if share != 1.0 else "")


def report(rows: list[dict[str, Any]], args: argparse.Namespace) -> str:
    lines = [
        "## Early-exit DQN against DQN (bench/early_exit.py)",
        "",
        f"{datetime.date.today()}, {platform.processor() or platform.machine()}, torch threads {args.threads}; "
        f"{args.steps:,} env steps per run, seeds {', '.join(str(s) for s in range(args.seeds))}; "
        f"{how_chosen(rows)}; "
        f"{args.test_episodes} test episodes; final checkpoints. Settings: the tuned MinAtar row"
        + (f", then {', '.join(args.settings)}" if args.settings else "") + ". "
        + same_networks(rows),
        "",
        ("| game | seeds | ops ratio | score ratio | batch-1 latency ratio (Act backend) | latency ratio to its own "
         "whole pass | batch-1 latency ratio, Act/torch | thresholds (branch units, share) | aims on the mean over seeds "
         "(ops <= 0.35, score >= 0.9, latency <= 0.5) | aims on every seed |"),
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for game in dict.fromkeys(r["env"] for r in rows):
        mine = [r for r in rows if r["env"] == game]
        ops, score, lat, own, lat_torch = ([r[k] for r in mine] for k in (
            "ops_ratio", "score_ratio", "latency_ratio_b1", "latency_ratio_b1_own", "latency_ratio_b1_torch"))
        backends = ", ".join(dict.fromkeys(r["latency_backend"] for r in mine))
        on_mean = (statistics.mean(ops) <= AIM_OPS, statistics.mean(score) >= AIM_SCORE,
                   statistics.mean(lat) <= AIM_LATENCY)
        on_every = (max(ops) <= AIM_OPS, min(score) >= AIM_SCORE, max(lat) <= AIM_LATENCY)
        thresholds = ", ".join(f"{r['threshold']:g} ({branch(r)})" for r in mine)
        aims = " | ".join(" / ".join("met" if m else "not met" for m in met) for met in (on_mean, on_every))
        lines.append(f"| {game} | {len(mine)} | {spread(ops)} | {spread(score)} | {spread(lat)} ({backends}) | "
                     f"{spread(own)} | {spread(lat_torch)} | {thresholds} | {aims} |")
    lines += ["", "Per run (mean over seeds [min-max] above):", "",
              ("| game | seed | threshold | branch units (share) | DQN return | exit-dqn return | score ratio | MACs/decision (exit / DQN) | "
               "ops ratio | exits | Act backend | us/decision b1 (exit / DQN, p10-p90) | latency ratio | "
               "us/decision b1, Act/torch (exit / DQN) | latency ratio, Act/torch | branch agreement, as trained -> fit |"),
              "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        exits = ", ".join(f"{n} {100 * f:.0f}%" for n, f in zip(r["exit_names"], r["exit_fractions"]))
        le, lb = r["latency_b1_spread_exit"], r["latency_b1_spread_base"]
        lines.append(f"| {r['env']} | {r['seed']} | {r['threshold']:g} | {branch(r)} | {r['base_return']:.2f} | {r['exit_return']:.2f} | "
                     f"{r['score_ratio']:.3f} | {r['macs_exit']:,.0f} / {r['macs_base']:,} | {r['ops_ratio']:.3f} | {exits} | "
                     f"{r['latency_backend']} | {r['latency_b1_us_exit']:.1f} ({le[0]:.1f}-{le[1]:.1f}) / "
                     f"{r['latency_b1_us_base']:.1f} ({lb[0]:.1f}-{lb[1]:.1f}) | {r['latency_ratio_b1']:.2f} | "
                     f"{r['latency_b1_us_exit_torch']:.1f} / {r['latency_b1_us_base_torch']:.1f} | "
                     f"{r['latency_ratio_b1_torch']:.2f} | {agreement(r.get('fit_agreement'))} |")
    return "\n".join(lines)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--games", nargs="+", default=list(GAMES), help="MinAtar games (default: %(default)s)")
    p.add_argument("--seeds", type=int, default=3)
    p.add_argument("--steps", type=int, default=1_000_000, help="env steps per training run, both arms")
    p.add_argument("--threads", type=int, default=1, help="torch threads of each run's learner")
    p.add_argument("--set", dest="settings", action="append", default=[], metavar="KEY=VALUE",
                   help="a setting for both arms (exit-dqn's own exit_* settings go with --exit-set)")
    p.add_argument("--exit-set", dest="exit_settings", action="append", default=[], metavar="KEY=VALUE",
                   help="an exit-dqn setting, e.g. exit_schedule=joint")
    p.add_argument("--validation-episodes", type=int, default=20)
    p.add_argument("--max-validation-episodes", type=int,
                   help="validation episodes a point the sweep cannot yet tell plays in all (hetrl exits sweep "
                        "--max-episodes; default 4x --validation-episodes)")
    p.add_argument("--test-episodes", type=int, default=20)
    p.add_argument("--min-score-ratio", type=float, default=0.9)
    p.add_argument("--margin", type=float, default=1.0,
                   help="standard errors by which the chosen point's validation score ratio clears --min-score-ratio")
    p.add_argument("--swept", action="store_true",
                   help="measure the sweep each exit-dqn run of --workdir already has (its exits/sweep.json and the "
                        "final checkpoint it stored), without sweeping again: the test episodes and latencies alone")
    p.add_argument("--widths", type=int, nargs="+",
                   help="branch widths the sweep fits and chooses from (default: the run's and two narrower)")
    p.add_argument("--fit-rounds", type=int,
                   help="rounds of the sweep's branch fit on the branch's own play (DAgger; hetrl exits sweep "
                        "--fit-rounds; default 3)")
    p.add_argument("--confidence-tolerance", type=float,
                   help="the sweep fit's exit_confidence_tolerance (hetrl exits sweep --confidence-tolerance; "
                        "default: the run's)")
    p.add_argument("--shares", type=float, nargs="+",
                   help="shares of their block's outputs the sweep's branches read (default: the run's exit_share)")
    p.add_argument("--own-baseline", action="store_true",
                   help="train no DQN: the baseline is each exit run's own whole network (staged schedule only; "
                        "a DQN already in --workdir is still used)")
    p.add_argument("--jobs", type=int, default=1, help="(game, seed) pairs trained side by side (each --threads threads)")
    p.add_argument("--workdir", help="where the runs go (default: a temporary folder, removed at the end)")
    p.add_argument("--out", help="a markdown file to write (default: print only)")
    args = p.parse_args()
    if args.own_baseline and "exit_schedule=joint" in (x.replace(" ", "") for x in args.exit_settings):
        p.error("--own-baseline: a joint-schedule run's whole network is not DQN's; train the baseline (drop --own-baseline)")
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="early_exit_") as tmp:
        work = Path(args.workdir or tmp)
        runs = []  # (env, seed, baseline's run dir, exit-dqn's run dir)
        for game in args.games:
            env = game if game.startswith("MinAtar/") else f"MinAtar/{game}"
            for seed in range(args.seeds):
                stem = work / f"{env.replace('/', '-')}_s{seed}"
                runs.append((env, seed, stem.with_name(stem.name + "_dqn"), stem.with_name(stem.name + "_exit")))

        def train_pair(run: tuple[str, int, Path, Path]) -> tuple[str, int, Path, Path]:
            env, seed, base_dir, exit_dir = run
            if not (exit_dir / "summary.json").exists():  # a --workdir of an earlier, cut-short run keeps its runs
                print(f"{env} seed {seed}: exit-dqn", file=sys.stderr, flush=True)
                train("exit-dqn", env, seed, args.steps, exit_dir, args.threads, args.settings + args.exit_settings)
            if not args.own_baseline and not (base_dir / "summary.json").exists():
                print(f"{env} seed {seed}: dqn", file=sys.stderr, flush=True)
                plan = baseline_plan(exit_dir, base_dir.with_name(base_dir.name + "_plan.json"))
                train("dqn", env, seed, args.steps, base_dir, args.threads, args.settings, str(plan))
            return run

        # Training runs side by side (--jobs); the measurements (latency included) come after all of it,
        # one pair at a time, with no training beside them.
        with ThreadPoolExecutor(max_workers=args.jobs) as pool:
            trained = list(pool.map(train_pair, runs))
        for env, seed, base_dir, exit_dir in trained:
            trained_base = base_dir if (base_dir / "summary.json").exists() else None  # else --own-baseline's
            rows.append(measure(env, seed, trained_base, exit_dir, args.test_episodes, args.validation_episodes,
                                args.min_score_ratio, args.widths, args.margin, args.swept, args.shares,
                                args.fit_rounds, args.confidence_tolerance, args.max_validation_episodes))
            if args.out:  # kept as it goes: a benchmark cut short keeps what it measured
                Path(args.out).with_suffix(".json").write_text(json.dumps(rows, indent=1))
    text = report(rows, args)
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
