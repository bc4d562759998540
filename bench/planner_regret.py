"""How good are the planner's choices? Predicted against measured env steps/s, and regret.

For each workload (the default configs of DQN on CartPole-v1 and DDPG on Pendulum-v1) this script
profiles the machine (or reuses its cached profile), asks the planner for its choice among the
inline and local executors, and then measures every candidate of a small grid — inline, and local
with 1 or 2 actor processes acting in each actor (numpy) or centrally in the learner's process
(batched, with the fastest host Act backend the profile measured), each with every host learner
the profile measured at 1 or 2 threads (torch at 1 and 2, the one-threaded numba learner where
the algorithm has one) — and the planner's own choice where it lies outside that grid, by running
`hetrl train` with that plan, one run at a time. It reports, per workload:

- the model's error on the chosen plan: predicted / measured learning-phase env steps/s - 1;
- the regret: how much slower the chosen plan measured than the best candidate measured.

    python bench/planner_regret.py                    # both workloads
    python bench/planner_regret.py --algos dqn --dqn-steps 20000
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from dataclasses import replace
from pathlib import Path

from hetrl.config import default_config
from hetrl.errors import HetrlError
from hetrl.planner.model import predict
from hetrl.planner.model_local import predict_parallel
from hetrl.planner.plan_file import Candidate, Plan
from hetrl.planner.search import make_plan
from hetrl.profile import Profile, default_path, profile_workload
from hetrl.hardware import describe_machine
from hetrl.protocol import Slot

WORKLOADS = {"dqn": "CartPole-v1", "ddpg": "Pendulum-v1"}


def measure(algo: str, env: str, steps: int, plan: Plan, root: Path, tag: str) -> dict:
    plan_path = plan.save(root / f"{tag}.plan.json")
    run = root / tag
    cmd = [sys.executable, "-m", "hetrl", "train", algo, env, "--steps", str(steps), "--plan", str(plan_path),
           "--executor", "auto", "--run-dir", str(run), "--no-progress", "--set", "eval_every=0",
           "--set", "eval_episodes=1"]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"{tag} failed:\n{proc.stderr[-3000:]}")
    return json.loads((run / "summary.json").read_text())


def grid(plan: Plan, profile: Profile) -> list[Candidate]:
    """inline, local (1, 2 actors) acting in the actors, and local (1, 2 actors) acting centrally,
    x every host learner the profile measured at 1 or 2 threads (Learn/torch at 1 and 2;
    Learn/numba, one-threaded, at 1), around the chosen host placement."""
    host = plan.placement
    if host.learn.device != "cpu":
        return []
    learners = sorted({(t.backend, t.threads) for t in profile.timings
                       if t.primitive == "Learn" and t.device == "cpu" and t.threads in (1, 2)}, key=lambda bt: (bt[1], bt[0]))
    acts = {t.backend: t.median_s for t in profile.timings if t.primitive == "Act" and t.device == "cpu" and t.size == 1}
    central_act = Slot(min(acts, key=acts.get), "cpu")  # the fastest host acting copy, batched in the learner
    out = []
    for backend, threads in learners:
        placement = replace(host, act=Slot("numpy", "cpu"), learn=Slot(backend, "cpu", threads))
        central = replace(placement, act=central_act)
        out += [Candidate("inline", 0, placement), Candidate("local", 1, placement), Candidate("local", 2, placement),
                Candidate("local", 1, central, "central"), Candidate("local", 2, central, "central")]
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--algos", nargs="+", default=list(WORKLOADS))
    parser.add_argument("--dqn-steps", type=int, default=20_000)
    parser.add_argument("--ddpg-steps", type=int, default=14_000)  # 10k of them are random warm-up
    args = parser.parse_args()
    machine = describe_machine()
    cores = os.cpu_count() or 1
    report = []
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        for algo in args.algos:
            env = WORKLOADS[algo]
            cfg = default_config(algo, env)
            steps = args.dqn_steps if algo == "dqn" else args.ddpg_steps
            path = default_path(machine, algo, env, cfg.agent)
            try:
                profile = Profile.load(path) if path.exists() else None
            except HetrlError:  # an older profile format: measured again
                profile = None
            if profile is None:
                profile = profile_workload(algo, env, cfg.agent, machine=machine)
                profile.save(path)
            chosen = make_plan(profile, cfg.agent, 1, executors=("inline", "local"), cores=cores, learn_device="cpu")
            rows = []
            for cand in grid(chosen, profile):
                if cand.executor == "inline":
                    pred = predict(cand.placement, profile, cfg.agent, 1)
                else:
                    pred = predict_parallel(cand.placement, profile, cfg.agent, 1, cand.actors, cores, inference=cand.inference)
                plan = Plan(algo, env, 1, "throughput", profile.fingerprint, cand.placement, pred, [], cand.executor, cand.actors,
                            inference=cand.inference)
                tag = f"{algo}_{cand.executor}{cand.actors}_{cand.inference}_{cand.placement.learn.backend}_t{cand.placement.learn.threads}"
                summary = measure(algo, env, steps, plan, root, tag)
                rows.append((cand, pred.env_steps_per_s, summary["learning_env_steps_per_s"]))
                print(f"{algo}: {cand}, learner {cand.placement.learn}: predicted {pred.env_steps_per_s:,.0f}, "
                      f"measured {summary['learning_env_steps_per_s']:,.0f} env steps/s", file=sys.stderr, flush=True)
            match = [r for r in rows if (r[0].executor, r[0].actors, r[0].placement, r[0].inference)
                     == (chosen.executor, chosen.actors, chosen.placement, chosen.inference)]
            if match:
                chosen_measured = match[0][2]
            else:  # the planner chose outside the grid (e.g. a torch acting copy): measure it too
                chosen_measured = measure(algo, env, steps, chosen, root, f"{algo}_chosen")["learning_env_steps_per_s"]
            best = max(rows, key=lambda r: r[2])
            report.append((algo, env, chosen, chosen_measured, best, rows))
    print(f"\nmachine: {machine.fingerprint()} ({cores} logical CPUs); learning-phase env steps/s, default configs\n")
    for algo, env, chosen, measured, best, rows in report:
        predicted = chosen.prediction.env_steps_per_s
        print(f"### {algo} {env}\n")
        print("| executor | act | learner | predicted | measured | model error |")
        print("| --- | --- | --- | --- | --- | --- |")
        for cand, pred, meas in rows:
            print(f"| {cand} | {cand.placement.act} | {cand.placement.learn} | {pred:,.0f} | {meas:,.0f} | {100 * (pred / meas - 1):+.0f}% |")
        how = str(Candidate(chosen.executor, chosen.actors, chosen.placement, chosen.inference))
        print(f"\nplanner's choice: {how}, learner {chosen.placement.learn}, act {chosen.placement.act}: "
              f"predicted {predicted:,.0f}, measured {measured:,.0f} env steps/s "
              f"(model error {100 * (predicted / measured - 1):+.0f}%); best measured: {best[0]}, learner "
              f"{best[0].placement.learn}, at {best[2]:,.0f} (regret {100 * (1 - measured / best[2]):.0f}%)\n")


if __name__ == "__main__":
    main()
