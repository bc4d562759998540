"""The ray executor on a local 2-CPU Ray cluster: explicit resources, the replay-ratio bound,
checkpoints, and learning (slow)."""

import json
import os
import subprocess
import sys

import pytest
import torch

ray = pytest.importorskip("ray")

from hetrl.algos import make_algorithm  # noqa: E402
from hetrl.config import make_config  # noqa: E402
from hetrl.envs import env_spec  # noqa: E402
from hetrl.errors import HetrlError  # noqa: E402
from hetrl.planner.rule import default_placement  # noqa: E402
from hetrl.runtime.ray_executor import RayExecutor  # noqa: E402


@pytest.fixture(scope="module")
def cluster():
    ray.init(num_cpus=2, include_dashboard=False, logging_level="ERROR")
    yield
    ray.shutdown()


def executor(actors=1, ratio=0.5):
    cfg = make_config("dqn", "CartPole-v1", overrides=["hidden=32,32", "batch_size=32", "learning_starts=500",
                                                         f"replay_ratio={ratio}", "train_every=1"])
    algo = make_algorithm("dqn", env_spec("CartPole-v1"), cfg.agent)
    return RayExecutor(algo, default_placement(torch.device("cpu"), (1, 1), threads=1), 1, 0, actors, log=lambda m: None)


def test_a_plan_the_cluster_cannot_hold_fails_at_start_naming_the_resource(cluster):
    ex = executor(actors=2)  # 2 actors + a learner need 3 CPUs
    with pytest.raises(HetrlError, match=r"has 2 CPU but this plan needs 3"):
        ex.iteration()
    ex.close()


def test_ray_executor_holds_the_ratio_and_checkpoints(cluster):
    ex = executor()
    try:
        while ex.env_steps < 3_000:
            ex.iteration()
        error = ex.ratio_error()
        assert error is not None and error <= 0.05, error
        state = ex.state_dict()
        assert state["learner"]["updates"] == ex.updates > 0
        totals = ex.timer_totals()
        for name in ("EnvStep", "Act", "ReplayAdd", "ReplaySample", "Learn", "WeightSync"):
            assert totals[name][1] > 0, name
    finally:
        ex.close()
    fresh = executor()
    fresh.load_state_dict(state)
    for name, value in state["learner"]["q"].items():  # evaluation sees the checkpoint before any start
        assert torch.equal(fresh.policy_network.state_dict()[name], value)
    try:
        fresh.iteration()  # starts the roles and restores the learner
        again = fresh.state_dict()
        assert again["env_steps"] == state["env_steps"] and again["learner"]["updates"] == state["learner"]["updates"]
        for name, value in state["learner"]["q"].items():
            assert torch.equal(again["learner"]["q"][name], value)
        assert (again["replay"]["obs"][: state["env_steps"] - 1] == state["replay"]["obs"][: state["env_steps"] - 1]).all()
    finally:
        fresh.close()


def test_a_killed_ray_actor_is_restarted_and_the_run_goes_on(cluster):
    ex = executor()
    try:
        while ex.env_steps < 1_000:
            ex.iteration()
        ray.kill(ex._handles[0])  # what a crashed node or an OOM kill does to an actor
        while ex.env_steps < 2_500:
            ex.iteration()
        assert ex.restarts == 1 and ex.updates > 0
    finally:
        ex.close()


@pytest.mark.slow
def test_dqn_learns_cartpole_under_ray(tmp_path):
    """`hetrl train dqn CartPole-v1 --executor ray` reaches the inline threshold (2 of 2 seeds), with
    the zoo's fast-learning CartPole row (test_learning.FAST_CARTPOLE)."""
    solved = []
    for seed in (0, 1):
        run = tmp_path / f"s{seed}"
        proc = subprocess.run(
            [sys.executable, "-m", "hetrl", "train", "dqn", "CartPole-v1", "--executor", "ray", "--actors", "1",
             "--steps", "100000", "--seed", str(seed), "--stop-at-return", "475", "--run-dir", str(run), "--no-progress",
             "--device", "cpu", "--set", "eval_every=2500", "--set", "lr=2.3e-3", "--set", "tau=1.0",
             "--set", "eps_decay_steps=16000"],
            capture_output=True, text=True, env={**os.environ, "OMP_NUM_THREADS": "1"}, timeout=1200,
        )
        assert proc.returncode == 0, proc.stderr[-3000:]
        summary = json.loads((run / "summary.json").read_text())
        solved.append((seed, summary["solved_at"], summary["replay_ratio_window_error"]))
    print(solved)
    assert all(s[1] is not None for s in solved), solved
    assert all(s[2] is not None and s[2] <= 0.05 for s in solved), solved


def test_ray_actors_run_the_placements_act_backend(cluster):
    """Moving Act in the placement changes what the Ray actors run; they report it."""
    from dataclasses import replace

    from hetrl.protocol import Slot

    cfg = make_config("dqn", "CartPole-v1", overrides=["hidden=32,32", "batch_size=32", "learning_starts=500", "replay_ratio=0.5"])
    algo = make_algorithm("dqn", env_spec("CartPole-v1"), cfg.agent)
    placement = replace(default_placement(torch.device("cpu"), (1, 1), threads=1), act=Slot("numba", "cpu"))
    ex = RayExecutor(algo, placement, 1, 0, 1, log=lambda m: None)
    try:
        while ex.env_steps < 1_500:
            ex.iteration()
        ran = ex.ran()
        assert ran["Act"] == "numba on cpu, 1 actor", ran
        assert ran["EnvStep"] == "gymnasium on cpu, 1 actor", ran
        assert ran["Learn"] == "torch on cpu (1 thread)", ran
        assert ex.timer_totals()["Act"][1] > 0
    finally:
        ex.close()
