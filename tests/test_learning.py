"""They learn: the default DQN on CartPole-v1 is solved at the end of its default budget (1 of 2 seeds,
neither collapsed);
DDPG, TD3 and SAC solve Pendulum-v1 in at least 2 of 3 seeds; DQN solves CartPole-v1 with actor
processes, and learns MinAtar Breakout.

Each seed is a real `hetrl train` run in its own process (two at a time, one torch thread each),
stopping early once a greedy evaluation reaches the threshold; a seed counts only if that happens
within the step budget. Settings are the documented defaults except where a line says otherwise.
Seeds run in rounds of two and stop once enough have solved (or too few are left to): "2 of 3"
fails less often than the former "3 of 4" for a per-seed success rate above about 0.8 (at 0.95:
0.7% against 1.4%) and mostly ends after one round, which keeps CI inside its 30 minutes.
"""

import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

import pytest

pytestmark = pytest.mark.slow


def solved_seeds(tmp_path, algo, env, steps, threshold, settings, seeds=range(3), need=None, per_round=2):
    """The seeds that reached ``threshold`` within ``steps``, and every seed's result; rounds of
    ``per_round`` seeds side by side, stopping once ``need`` have solved or can no longer."""
    seeds = list(seeds)
    need = len(seeds) if need is None else need
    solved, results = [], []
    for start in range(0, len(seeds), per_round):
        round_solved, round_results = _solved_round(tmp_path, algo, env, steps, threshold, settings,
                                                    seeds[start:start + per_round])
        solved += round_solved
        results += round_results
        left = len(seeds) - start - per_round
        if len(solved) >= need or len(solved) + left < need:
            break
    return solved, results


def _solved_round(tmp_path, algo, env, steps, threshold, settings, seeds):
    def one(seed):
        run = tmp_path / f"{algo}_{seed}"
        cmd = [sys.executable, "-m", "hetrl", "train", algo, env, "--steps", str(steps), "--seed", str(seed),
               "--stop-at-return", str(threshold), "--run-dir", str(run), "--no-progress", "--device", "cpu"]
        for key, value in settings.items():
            cmd += ["--set", f"{key}={value}"]
        proc = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "OMP_NUM_THREADS": "1"})
        assert proc.returncode == 0, proc.stderr[-2000:]
        summary = json.loads((run / "summary.json").read_text())
        return seed, summary["solved_at"], summary["eval_return_mean"]

    with ThreadPoolExecutor(len(seeds)) as pool:
        results = list(pool.map(one, seeds))
    print(f"{algo} {env}: (seed, solved at env step, eval return) = {results}")
    return [r for r in results if r[1] is not None and r[1] <= steps], results


@pytest.mark.parametrize("algo", ["ddpg", "td3"])
def test_ddpg_and_td3_solve_pendulum(tmp_path, algo, fixed_plan):
    # smaller networks than the 400x300 default keep CI fast; Pendulum does not need more
    settings = {"hidden": "64,64", "eval_every": 1000, "plan": fixed_plan(algo, "Pendulum-v1")}
    solved, results = solved_seeds(tmp_path, algo, "Pendulum-v1", 20_000, -200, settings, seeds=range(3), need=2)
    assert len(solved) >= 2, results


def test_sac_solves_pendulum(tmp_path, fixed_plan):
    # 64x64 instead of the 256x256 default keeps CI fast (as for DDPG and TD3 above); the rest are SAC's defaults
    settings = {"hidden": "64,64", "eval_every": 1000, "plan": fixed_plan("sac", "Pendulum-v1")}
    solved, results = solved_seeds(tmp_path, "sac", "Pendulum-v1", 20_000, -200, settings, seeds=range(3), need=2)
    assert len(solved) >= 2, results


# The zoo's CartPole row as published (lr 2.3e-3, hard target copies, epsilon over 16k steps): it
# solves CartPole fastest (then may collapse, which a run stopped at the threshold never sees), so
# the executors' learning tests take it rather than the slower, stable tuned default.
FAST_CARTPOLE = {"lr": 2.3e-3, "tau": 1.0, "eps_decay_steps": 16_000}


def test_dqn_solves_cartpole_with_actor_processes(tmp_path, fixed_plan):
    """The local executor (2 actor processes) reaches the inline threshold in 1 of 2 seeds, one seed
    at a time (each run already uses both cores), no second once one has solved: what this shows is
    that learning works through actor processes and shared memory; how reliably the settings learn
    is the inline tests' to show."""
    settings = {"eval_every": 2500, "executor": "local", "actors": 2, **FAST_CARTPOLE,
                "plan": fixed_plan("dqn", "CartPole-v1", "local", 2)}
    solved, results = solved_seeds(tmp_path, "dqn", "CartPole-v1", 100_000, 475, settings, seeds=range(2), need=1,
                                   per_round=1)
    assert len(solved) >= 1, results


def test_dqn_cartpole_defaults_stay_solved_to_the_end(tmp_path, fixed_plan):
    """The FINAL policy of a default run (not the best one, which best.pt keeps) has not collapsed,
    and the run solved CartPole-v1 on its way: the tuned defaults must not learn and then collapse
    (docs/results.md measures 10 seeds). Seeds 0 and 1 run together (one torch thread each, one per
    core); each evaluated once, at the end (20 episodes). Both final policies are far from a collapse
    (>= 200: the old defaults' collapsed runs ended at 16-22), and each run's training episodes
    reached a mean return of 475 (the defaults solve CartPole-v1 at all). Whether the last snapshot
    itself scores 475 is a coin the CPU's rounding tosses: on Learn/blas, 5 of 6 seeds did on an
    AVX-512 machine and 5 of 8 on an AVX2 one, where seeds 0 and 1 end at 308 and 211 after solving
    (docs/results.md). The placement is fixed, so each seed trains as measured: the fixed rule's,
    with Learn/blas, the learner the automatic plan picks for this network on the CPU."""
    from hetrl.run.metrics import read_metrics

    plan = fixed_plan("dqn", "CartPole-v1")

    def one(seed):
        run = tmp_path / f"final_{seed}"
        cmd = [sys.executable, "-m", "hetrl", "train", "dqn", "CartPole-v1", "--seed", str(seed), "--run-dir", str(run),
               "--no-progress", "--device", "cpu", "--plan", str(plan), "--set", "eval_every=0"]
        proc = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "OMP_NUM_THREADS": "1"})
        assert proc.returncode == 0, proc.stderr[-2000:]
        assert proc.stderr.startswith("defaults: tuned for CartPole-v1, from rl-baselines3-zoo")
        summary = json.loads((run / "summary.json").read_text())
        assert json.loads((run / "plan.json").read_text())["placement"]["learn"]["backend"] == "blas"
        training = [r["return_mean"] for r in read_metrics(run / "metrics.csv") if r["return_mean"] is not None]
        return seed, summary["env_steps"], max(training), summary["eval_return_mean"]

    with ThreadPoolExecutor(2) as pool:
        results = list(pool.map(one, range(2)))
    print(f"dqn CartPole-v1 defaults: (seed, env steps, best training return, final eval return) = {results}")
    assert all(steps == 100_000 for _, steps, _, _ in results), results
    assert all(best >= 475 for _, _, best, _ in results), results  # solved on the way
    assert all(final >= 200 for _, _, _, final in results), results  # no collapse


def test_dqn_learns_minatar_breakout(tmp_path):
    """DQN on MinAtar/Breakout-v1 (inline, CPU, the MinAtar network) reaches a greedy return of 2.0
    within 20k env steps, in 2 of 2 seeds. A random policy scores 0.40 (100 episodes; docs/results.md),
    so 2.0 is 5x random. The MinAtar reference defaults except a shorter schedule, to fit CI's budget
    (at most ~5 minutes on a 2-core machine): replay start 1k, epsilon to 0.1 by 20k, target every
    500 updates, lr 2.5e-4 (the reference's); docs/results.md has the curves this threshold is taken from."""
    pytest.importorskip("minatar")
    settings = {"eval_every": 2500, "eval_episodes": 10, "learning_starts": 1000, "eps_decay_steps": 20_000,
                "target_update_every": 500, "lr": 2.5e-4, "plan": "rule"}
    solved, results = solved_seeds(tmp_path, "dqn", "MinAtar/Breakout-v1", 20_000, 2.0, settings, seeds=range(2))
    assert len(solved) == 2, results  # need defaults to every seed: one round of two
