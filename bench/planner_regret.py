"""How good are the planner's choices? Predicted against measured env steps/s, and regret.

For each workload this script profiles the machine (or reuses its cached profile), asks the planner
for its choice among the inline and local executors, and then measures every candidate of a small
grid around it, by running `hetrl train` with each plan, one run at a time. The workloads:

- ``dqn`` (CartPole-v1) and ``ddpg`` (Pendulum-v1), default configs: inline, and local with 1 or 2
  actor processes acting in each actor (numpy) or centrally in the learner's process (batched, with
  the fastest host Act backend the profile measured), each with every host learner the profile
  measured at 1 or 2 threads (torch at 1 and 2, the one-threaded numba learner where the algorithm
  has one); the planner searches inline and local with one env per actor.
- ``minatar`` (DQN on MinAtar/Breakout-v1, its tuned row) and ``atari`` (DQN on ALE/Breakout-v5,
  the zoo's atari row with a 1,000-step replay start, so that a short run learns): the plan is the
  one ``hetrl train --plan auto`` makes (envs per actor, EnvStep backend and replay chosen too), and
  the grid keeps its EnvStep, replay and envs per actor and varies the rest as above, with the
  chosen learner backend at 1 and 2 threads (``--all-learners``: every host learner measured).

It reports, per workload:

- the model's error on each candidate and the chosen plan: predicted / measured learning-phase env
  steps/s - 1;
- the regret: how much slower the chosen plan measured than the best candidate measured, on the
  rate the planner ranks by: the learning phase's for ``dqn`` and ``ddpg`` (planned without a run
  length), the whole run's, start-up and warm-up included, for the pixel workloads (planned, as
  `hetrl train` plans, for the run's length, so actor start-up is weighed against it).

    python bench/planner_regret.py                               # dqn and ddpg
    python bench/planner_regret.py --workloads minatar atari     # pixels, about 40 min on 2 cores
    python bench/planner_regret.py --workloads dqn --dqn-steps 20000
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass, replace
from pathlib import Path

from hetrl.config import make_config
from hetrl.planner.choice import cached_profile, plan_from_profile
from hetrl.planner.model import predict
from hetrl.planner.model_local import predict_parallel
from hetrl.planner.plan_file import Candidate, Plan
from hetrl.planner.search import make_plan
from hetrl.profile import Profile, default_path, profile_workload
from hetrl.hardware import describe_machine
from hetrl.protocol import Slot
from hetrl.training import checked_algorithm


@dataclass(frozen=True)
class Workload:
    algo: str
    env: str
    steps: int  # env steps per measured run
    settings: tuple[str, ...] = ()  # --set KEY=VALUE for the profile, the plan and every run
    pixels: bool = False  # planned as `hetrl train --plan auto` plans it; the grid keeps its envs and replay


WORKLOADS = {
    "dqn": Workload("dqn", "CartPole-v1", 20_000),
    "ddpg": Workload("ddpg", "Pendulum-v1", 14_000),  # 10k of them are random warm-up
    "minatar": Workload("dqn", "MinAtar/Breakout-v1", 20_000, pixels=True),  # 5k warm-up (the tuned row)
    "atari": Workload("dqn", "ALE/Breakout-v5", 8_000, ("learning_starts=1000",), pixels=True),
}


def measure(work: Workload, steps: int, plan: Plan, root: Path, tag: str) -> dict:
    plan_path = plan.save(root / f"{tag}.plan.json")
    run = root / tag
    cmd = [sys.executable, "-m", "hetrl", "train", work.algo, work.env, "--steps", str(steps), "--plan", str(plan_path),
           "--executor", "auto", "--run-dir", str(run), "--no-progress", "--set", "eval_every=0",
           "--set", "eval_episodes=1", *[arg for kv in work.settings for arg in ("--set", kv)]]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"{tag} failed:\n{proc.stderr[-3000:]}")
    return json.loads((run / "summary.json").read_text())


def grid(plan: Plan, profile: Profile, learner_backends: set[str] | None = None) -> list[Candidate]:
    """inline, local (1, 2 actors) acting in the actors, and local (1, 2 actors) acting centrally,
    x every host learner the profile measured at 1 or 2 threads (Learn/torch at 1 and 2;
    Learn/numba, one-threaded, at 1), or only ``learner_backends``' of them, around the chosen
    host placement and its envs per actor."""
    host = plan.placement
    if host.learn.device != "cpu":
        return []
    learners = sorted({(t.backend, t.threads) for t in profile.timings
                       if t.primitive == "Learn" and t.device == "cpu" and t.threads in (1, 2)
                       and (learner_backends is None or t.backend in learner_backends)}, key=lambda bt: (bt[1], bt[0]))
    acts = {t.backend: t.median_s for t in profile.timings if t.primitive == "Act" and t.device == "cpu" and t.size == 1}
    central_act = Slot(min(acts, key=acts.get), "cpu")  # the fastest host acting copy, batched in the learner
    out = []
    for backend, threads in learners:
        placement = replace(host, act=Slot("numpy", "cpu"), learn=Slot(backend, "cpu", threads))
        central = replace(placement, act=central_act)
        n = plan.num_envs
        out += [Candidate("inline", 0, placement, num_envs=n), Candidate("local", 1, placement, num_envs=n),
                Candidate("local", 2, placement, num_envs=n), Candidate("local", 1, central, "central", n),
                Candidate("local", 2, central, "central", n)]
    return out


def as_candidate(plan: Plan) -> Candidate:
    """The grid's description of a plan (a plan's own repr is its whole prediction)."""
    return Candidate(plan.executor, plan.actors, plan.placement, plan.inference, plan.num_envs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workloads", "--algos", nargs="+", default=["dqn", "ddpg"], choices=list(WORKLOADS))
    for name, work in WORKLOADS.items():
        parser.add_argument(f"--{name}-steps", type=int, default=work.steps)
    parser.add_argument("--all-learners", action="store_true",
                        help="pixel workloads: every host learner the profile measured, not only the chosen backend")
    args = parser.parse_args()
    machine = describe_machine()
    cores = os.cpu_count() or 1
    report = []
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        for name in args.workloads:
            work = WORKLOADS[name]
            cfg = make_config(work.algo, work.env, None, list(work.settings))
            steps = getattr(args, f"{name}_steps")
            path = default_path(machine, work.algo, work.env, cfg.agent)
            # as `hetrl train --plan auto` takes it: measured again where it is older or misses a backend
            profile = cached_profile(path, checked_algorithm(cfg))
            if profile is None:
                profile = profile_workload(work.algo, work.env, cfg.agent, machine=machine)
                profile.save(path)
            if work.pixels:  # as `hetrl train --plan auto` plans it (steps: the measured run's)
                cfg.steps = steps
                chosen = plan_from_profile(profile, cfg, checked_algorithm(cfg), cores=cores)
                backends = None if args.all_learners else {chosen.placement.learn.backend}
            else:
                chosen = make_plan(profile, cfg.agent, 1, executors=("inline", "local"), cores=cores, learn_device="cpu")
                backends = None
            rows = []
            for cand in grid(chosen, profile, backends):
                if cand.executor == "inline":
                    pred = predict(cand.placement, profile, cfg.agent, cand.num_envs)
                else:
                    pred = predict_parallel(cand.placement, profile, cfg.agent, cand.num_envs, cand.actors, cores,
                                            inference=cand.inference)
                plan = Plan(work.algo, work.env, cand.num_envs, "throughput", profile.fingerprint, cand.placement, pred, [],
                            cand.executor, cand.actors, inference=cand.inference)
                tag = (f"{name}_{cand.executor}{cand.actors}_{cand.inference}_{cand.placement.learn.backend}"
                       f"_t{cand.placement.learn.threads}")
                summary = measure(work, steps, plan, root, tag)
                rows.append((cand, pred.env_steps_per_s, summary["learning_env_steps_per_s"], summary["env_steps_per_s"]))
                print(f"{name}: {cand}, learner {cand.placement.learn}: predicted {pred.env_steps_per_s:,.0f}, "
                      f"measured {summary['learning_env_steps_per_s']:,.0f} env steps/s", file=sys.stderr, flush=True)
            match = [r for r in rows if (r[0].executor, r[0].actors, r[0].placement, r[0].inference, r[0].num_envs)
                     == (chosen.executor, chosen.actors, chosen.placement, chosen.inference, chosen.num_envs)]
            if match:
                chosen_row = match[0]
            else:  # the planner chose outside the grid (e.g. a numba acting copy): measure it too
                summary = measure(work, steps, chosen, root, f"{name}_chosen")
                chosen_row = (as_candidate(chosen), chosen.prediction.env_steps_per_s, summary["learning_env_steps_per_s"],
                              summary["env_steps_per_s"])
            ranked_by = 3 if work.pixels else 2  # the rate the planner ranked by (see the docstring)
            best = max(rows + [chosen_row], key=lambda r: r[ranked_by])
            report.append((work, chosen, chosen_row, best, rows, ranked_by))
    print(f"\nmachine: {machine.fingerprint()} ({cores} logical CPUs); learning-phase env steps/s\n")
    for work, chosen, chosen_row, best, rows, ranked_by in report:
        print(f"### {work.algo} {work.env}" + (f" (--set {' '.join(work.settings)})" if work.settings else "") + "\n")
        print(f"EnvStep {chosen.placement.env}, replay {chosen.placement.replay}\n")
        print("| executor | act | learner | predicted (learning phase) | measured (learning phase) | model error | "
              "measured (whole run) |")
        print("| --- | --- | --- | --- | --- | --- | --- |")
        for cand, pred, meas, whole in rows:
            print(f"| {cand} | {cand.placement.act} | {cand.placement.learn} | {pred:,.0f} | {meas:,.0f} | "
                  f"{100 * (pred / meas - 1):+.0f}% | {whole:,.0f} |")
        how = str(as_candidate(chosen))
        _, pred, meas, _ = chosen_row
        which = "whole-run" if ranked_by == 3 else "learning-phase"
        print(f"\nplanner's choice: {how}, learner {chosen.placement.learn}, act {chosen.placement.act}: "
              f"predicted {pred:,.0f}, measured {meas:,.0f} env steps/s in the learning phase "
              f"(model error {100 * (pred / meas - 1):+.0f}%); by the {which} rate it ranked by: "
              f"{chosen_row[ranked_by]:,.0f} against the best measured, {best[0]}, learner {best[0].placement.learn}, "
              f"at {best[ranked_by]:,.0f} (regret {100 * (1 - chosen_row[ranked_by] / best[ranked_by]):.0f}%)\n")


if __name__ == "__main__":
    main()
