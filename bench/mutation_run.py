"""A mutation run by hand (issue 24): realistic one-line bugs planted one at a time in a scratch copy
of the committed tree, each against the fast tests that should catch it.

    python bench/mutation_run.py                  # every mutant; a table for docs/results.md
    python bench/mutation_run.py --only A1 R3     # some of them

The scratch copy is ``git archive HEAD`` (uncommitted edits are not in it) under ``--scratch``;
the working tree is never touched. Each mutant edits one line, runs its test files with
``pytest -x -m "not slow"`` (stopping at the first failure) under a time limit, and is undone.
The tests' numba cache is keyed by the sources (tests/conftest.py), so a mutant of a kernel
compiles afresh. ``--stale-demo`` also runs the issue's stale-cache case without that conftest.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

ALGO_TESTS = ["tests/test_update_rules.py", "tests/test_schedules.py", "tests/primitives/test_agreement.py"]
SAC_TESTS = ALGO_TESTS + ["tests/test_sac.py"]
REPLAY_TESTS = ["tests/primitives/test_replay.py", "tests/test_schedules.py"]
NSTEP_TESTS = ["tests/test_nstep.py"]
INLINE_TESTS = ["tests/test_schedules.py", "tests/test_inline.py"]
LOCAL_TESTS = ["tests/test_local.py"]
PLANNER_TESTS = ["tests/test_plan.py"]
TABULAR_TESTS = ["tests/tabular"]

# id, area, file (under src/hetrl), line as it is, line as the bug makes it, tests, what the bug does
MUTANTS = [
    ("A1", "algos", "algos/dqn.py", 'best = self.q(batch["next_obs"]).argmax(dim=1, keepdim=True)',
     'best = self.q_target(batch["next_obs"]).argmax(dim=1, keepdim=True)', ALGO_TESTS,
     "double DQN picks the next action with the target network (plain max Q)"),
    ("A2", "algos", "algos/dqn.py", 'F.huber_loss(q, target, reduction="none")', 'F.mse_loss(q, target, reduction="none")',
     ALGO_TESTS, "DQN: squared error instead of Huber"),
    ("A3", "algos", "algos/dqn.py", "return cfg.eps_start + frac * (cfg.eps_end - cfg.eps_start)", "return cfg.eps_start",
     ALGO_TESTS, "epsilon never decays"),
    ("A4", "algos", "algos/dqn.py", "self.updates % self.cfg.target_update_every == 0",
     "self.updates % self.cfg.target_update_every == 1", ALGO_TESTS, "hard target copy one update late"),
    ("A5", "algos", "algos/dqn.py", 'loss = (batch["weights"] * F.huber_loss(', "loss = (1.0 * F.huber_loss(", ALGO_TESTS,
     "DQN ignores the importance-sampling weights"),
    ("A6", "algos", "algos/ddpg.py", "next_q = torch.stack(self.critic_target(next_obs, next_actions)).min(dim=0).values",
     "next_q = torch.stack(self.critic_target(next_obs, next_actions)).max(dim=0).values", ALGO_TESTS,
     "TD3 bootstraps from the larger twin"),
    ("A7", "algos", "algos/ddpg.py", ".clamp(-cfg.target_noise_clip, cfg.target_noise_clip) * scale",
     ".clamp(-cfg.target_noise_clip, cfg.target_noise_clip)", ALGO_TESTS,
     "TD3's smoothing noise not scaled to the action range"),
    ("A8", "algos", "algos/ddpg.py", "actor_loss = -self.critic(obs, self.actor(obs))[0].mean()",
     "actor_loss = -self.critic_target(obs, self.actor(obs))[0].mean()", ALGO_TESTS,
     "DDPG's actor follows the target critic"),
    ("A9", "algos", "algos/ddpg.py", "return self.updates % self.cfg.policy_delay == 0",
     "return (self.updates + 1) % self.cfg.policy_delay == 0", ALGO_TESTS, "TD3's delayed actor on the wrong updates"),
    ("A10", "algos", "algos/sac.py", "soft_q = next_q - self.log_alpha.exp() * next_log_prob",
     "soft_q = next_q + self.log_alpha.exp() * next_log_prob", SAC_TESTS, "SAC's entropy bonus with the wrong sign"),
    ("A11", "algos", "algos/sac.py", "(log_prob.detach() + self.target_entropy)", "(log_prob.detach() - self.target_entropy)",
     SAC_TESTS, "SAC's temperature towards minus the target entropy"),
    ("A12", "algos", "algos/sac.py", "q = torch.stack(self.critic(obs, actions)).min(dim=0).values",
     "q = torch.stack(self.critic(obs, actions)).max(dim=0).values", SAC_TESTS, "SAC's actor maximises the larger critic"),
    ("A13", "algos", "nets/mlp.py", "log_prob = (gaussian - torch.log(1 - y.square() + TANH_EPS)).sum(dim=1)",
     "log_prob = (gaussian + torch.log(1 - y.square() + TANH_EPS)).sum(dim=1)", SAC_TESTS,
     "tanh correction of the log density with the wrong sign"),
    ("A14", "algos", "algos/base.py", "return self.beta0 + frac * (1.0 - self.beta0)", "return self.beta0", ALGO_TESTS,
     "PER's beta never annealed"),
    ("A15", "algos", "algos/base.py", "torch._foreach_lerp_(t_params, s_params, tau)",
     "torch._foreach_lerp_(t_params, s_params, 1 - tau)", ALGO_TESTS, "Polyak averaging with 1 - tau"),
    ("R1", "replay", "replay/ring.py", "/ self.tree.total) ** -beta", "/ self.tree.total) ** beta", REPLAY_TESTS,
     "importance weights with the exponent's sign flipped"),
    ("R2", "replay", "replay/ring.py", 'priorities = (abs(self._ops.asarray(td_errors, "float64")) + self.eps) ** self.alpha',
     'priorities = abs(self._ops.asarray(td_errors, "float64")) ** self.alpha', REPLAY_TESTS,
     "priorities without eps (a zero TD error is never drawn again)"),
    ("R3", "replay", "replay/sum_tree.py", "go_right = targets >= left", "go_right = targets > left", REPLAY_TESTS,
     "sum-tree descent: a target on a boundary goes left"),
    ("R4", "replay", "replay/ring.py", 'weights = self._ops.asarray(weights / weights.max(), "float32")',
     'weights = self._ops.asarray(weights / weights.min(), "float32")', REPLAY_TESTS, "weights normalised by their min"),
    ("R5", "replay", "runtime/nstep.py", "discounts = (self.gamma * ~terminated).astype(np.float32)",
     "discounts = (self.gamma * ~(terminated | truncated)).astype(np.float32)", NSTEP_TESTS,
     "a truncated episode does not bootstrap"),
    ("R6", "replay", "runtime/nstep.py", "discount = 0.0 if terminated[i] else self.gamma ** len(queue)",
     "discount = 0.0 if terminated[i] else self.gamma ** (len(queue) - 1)", NSTEP_TESTS, "n-step bootstrap discount one power short"),
    ("U1", "runtime", "runtime/local.py", '        self.rng.bit_generator.state = state["rng"]\n        self.finished',
     "        self.finished", LOCAL_TESTS, "the local executor's generator saved but not restored"),
    ("U2", "runtime", "runtime/learner_role.py", "self.config.beta(env_steps)", "self.config.beta(0)", INLINE_TESTS,
     "ReplaySample always gets beta0"),
    ("U3", "runtime", "runtime/acting_role.py", "algo.exploration(env_steps)", "algo.exploration(0)", INLINE_TESTS,
     "Act always gets the first epsilon"),
    ("U4", "runtime", "runtime/inline.py", "self.learning.update(self.env_steps)", "self.learning.update(self.iterations)",
     INLINE_TESTS, "the learner's schedules count iterations, not env steps (wrong with several envs)"),
    ("U5", "runtime", "runtime/schedule.py", "target = math.floor(self.ratio * max(0, env_steps - self.learning_starts))",
     "target = math.ceil(self.ratio * max(0, env_steps - self.learning_starts))", INLINE_TESTS,
     "the limiter lets the learner run a fraction of an update ahead"),
    ("U6", "runtime", "runtime/inline.py", "            acting.sync()\n            self.synced_at", "            self.synced_at",
     INLINE_TESTS, "the inline acting copy never follows the learner"),
    ("U7", "runtime", "runtime/inline.py", 'self.updates_due = state["updates_due"]', "self.updates_due = 0.0",
     ["tests/test_resume.py"], "a resumed inline run forgets the updates it owed"),
    ("U8", "runtime", "runtime/schedule.py", "starts = max(agent.learning_starts, agent.batch_size)",
     "starts = agent.learning_starts", LOCAL_TESTS, "the limiter counts from learning_starts below a batch (a stall)"),
    ("P1", "planner", "planner/model.py", '"WeightSync": call["WeightSync"] * syncs_per_iteration / n,',
     '"WeightSync": call["WeightSync"] / n,', PLANNER_TESTS, "the model syncs the policy every iteration"),
    ("P2", "planner", "planner/model.py", "per_step[name] = ratio * call[name]", "per_step[name] = call[name]",
     PLANNER_TESTS, "the model ignores the replay ratio"),
    ("P3", "planner", "planner/model_local.py", 'actor["WeightFetch"] = fetch * min(1.0 / n, ratio / weight_sync_every)',
     'actor["WeightFetch"] = fetch * max(1.0 / n, ratio / weight_sync_every)', PLANNER_TESTS,
     "actors fetch weights more often than the learner moves"),
    ("P4", "planner", "planner/search.py", "key=lambda pair: -pair[1].run_env_steps_per_s(steps))",
     "key=lambda pair: pair[1].run_env_steps_per_s(steps))", PLANNER_TESTS, "the planner picks the slowest plan"),
    ("P5", "planner", "planner/model.py", "return min(self.stage_rates, key=self.stage_rates.get)",
     "return max(self.stage_rates, key=self.stage_rates.get)", PLANNER_TESTS, "the fastest stage named the bottleneck"),
    ("P6", "planner", "planner/model.py", "(size - s0) / (s1 - s0))", "(size - s0) / (s1 + s0))", PLANNER_TESTS,
     "cost interpolation between profiled sizes"),
    ("T1", "tabular", "tabular/kernels.py", "target = rewards[i, 3] + gamma * best", "target = rewards[i, 3] + best",
     TABULAR_TESTS, "fp32 Q-learning without the discount"),
    ("T2", "tabular", "tabular/kernels.py", "value = current + ((alpha * (target - current) + COEF_HALF) >> COEF_BITS)",
     "value = current + ((alpha * (target - current)) >> COEF_BITS)", TABULAR_TESTS,
     "int32 update truncates instead of rounding"),
    ("T3", "tabular", "tabular/merge.py", "return ((2 * total + units) // (2 * units)).astype(np.int32)",
     "return (total // units).astype(np.int32)", TABULAR_TESTS, "int32 merge floors instead of rounding half up"),
    ("T4", "tabular", "tabular/kernels.py", "best = q[row + packed[i, 2]]", "best = q[row]", TABULAR_TESTS,
     "fp32 SARSA bootstraps from the first action"),
    ("T5", "tabular", "tabular/schedule.py", "u * n // units for u in range(units + 1)",
     "u * (n // units) for u in range(units + 1)", TABULAR_TESTS, "shards drop the remainder of n / units"),
    ("N1", "nets", "nets/fused_mlp.py", "if x[b, k] <= 0.0:", "if x[b, k] < 0.0:",
     ["tests/primitives/test_learn_numba.py"], "fused backward lets gradient through dead ReLUs (inlined into the DQN kernel)"),
]


def pytest_cmd(tests: list[str], extra: list[str] = ()) -> list[str]:
    return [sys.executable, "-m", "pytest", "-x", "-q", "-m", "not slow", "-p", "no:cacheprovider", *extra, *tests]


def run(scratch: Path, tests: list[str], limit: int, extra: list[str] = ()) -> tuple[str, float, str]:
    env = {**os.environ, "PYTHONPATH": str(scratch / "src")}
    start = time.perf_counter()
    try:
        proc = subprocess.run(pytest_cmd(tests, extra), cwd=scratch, env=env, capture_output=True, text=True,
                              timeout=limit, check=False)
    except subprocess.TimeoutExpired:
        return "timeout", time.perf_counter() - start, ""
    lines = [line for line in proc.stdout.splitlines() if line.startswith("FAILED")] or proc.stdout.splitlines()[-1:]
    verdict = {0: "missed", 1: "caught"}.get(proc.returncode, f"error {proc.returncode}")
    return verdict, time.perf_counter() - start, lines[0] if lines else ""


def scratch_copy(scratch: Path) -> None:
    if scratch.exists():
        shutil.rmtree(scratch)
    scratch.mkdir(parents=True)
    archive = subprocess.run(["git", "archive", "HEAD"], cwd=REPO, capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(scratch)], input=archive, check=True)


def mutate(path: Path, old: str, new: str) -> str:
    text = path.read_text()
    if text.count(old) != 1:
        raise SystemExit(f"{path}: the line to mutate occurs {text.count(old)} times: {old!r}")
    path.write_text(text.replace(old, new))
    return text


def stale_demo(scratch: Path, limit: int) -> list[str]:
    """The issue's case: warm the default numba cache (beside the sources), plant N1, and run the
    numba tests without tests/conftest.py (so without its keyed cache), then with it."""
    _, _, file, old, new, tests, _ = next(m for m in MUTANTS if m[0] == "N1")
    out = []
    verdict, seconds, _ = run(scratch, tests, limit, ["--noconftest"])
    out.append(f"warm-up without the conftest (unmutated): {verdict} in {seconds:.0f} s")
    path = scratch / "src" / "hetrl" / file
    original = mutate(path, old, new)
    try:
        for label, extra in (("without the conftest, warm default cache", ["--noconftest"]), ("with the conftest", [])):
            verdict, seconds, line = run(scratch, tests, limit, extra)
            out.append(f"N1 {label}: {verdict} in {seconds:.0f} s {line}")
    finally:
        path.write_text(original)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="*", default=None)
    parser.add_argument("--scratch", type=Path, default=Path("/tmp/hetrl-mutants"))
    parser.add_argument("--limit", type=int, default=600, help="seconds per mutant")
    parser.add_argument("--results", type=Path, default=None, help="append one JSON line per mutant here")
    parser.add_argument("--stale-demo", action="store_true")
    args = parser.parse_args()
    scratch = args.scratch / "repo"
    scratch_copy(scratch)
    if args.stale_demo:
        for line in stale_demo(scratch, args.limit):
            print(line, flush=True)
        return
    chosen = [m for m in MUTANTS if not args.only or m[0] in args.only]
    everything = sorted({t for m in chosen for t in m[5]})
    verdict, seconds, line = run(scratch, everything, 3 * args.limit)  # unmutated, every test used must pass
    print(f"baseline ({len(everything)} test paths): {verdict} in {seconds:.0f} s {line}", flush=True)
    if verdict != "missed":
        raise SystemExit("the unmutated tree fails its tests: fix that first")
    rows = []
    for mid, area, file, old, new, tests, what in chosen:
        path = scratch / "src" / "hetrl" / file
        original = mutate(path, old, new)
        try:
            verdict, seconds, line = run(scratch, tests, args.limit)
        finally:
            path.write_text(original)
        row = {"id": mid, "area": area, "file": file, "what": what, "tests": tests, "verdict": verdict,
               "seconds": round(seconds, 1), "first_failure": line}
        rows.append(row)
        print(json.dumps(row), flush=True)
        if args.results:
            with args.results.open("a") as f:
                f.write(json.dumps(row) + "\n")
    caught = sum(r["verdict"] == "caught" for r in rows)
    print(f"\ncaught {caught} of {len(rows)}")
    print("| id | area | bug | tests | result |\n|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['id']} | {r['area']} | {r['what']} (`{r['file']}`) | {', '.join(Path(t).name for t in r['tests'])} "
              f"| {r['verdict']} |")


if __name__ == "__main__":
    main()
