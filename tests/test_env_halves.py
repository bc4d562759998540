"""Async env stepping (``async_envs``, runtime/env_halves.py): every env's transitions equal sync
stepping's for the same seeds and the same actions, for each EnvStep that steps in the background
(ale-vector, envpool), through an acting role with frame ids and n-step rows too; the setting is
refused where it cannot run.

The tests that step Atari skip when ale-py (or envpool) is not installed."""

from __future__ import annotations

import dataclasses
import importlib.util

import numpy as np
import pytest
import torch

from hetrl.algos import make_algorithm
from hetrl.config import make_config
from hetrl.envs import AtariOptions, env_spec
from hetrl.errors import HetrlError
from hetrl.planner.rule import default_placement
from hetrl.protocol import Slot
from hetrl.runtime.acting_role import ActingRole
from hetrl.runtime.env_halves import EnvHalves

BREAKOUT = "ALE/Breakout-v5"
HAS_ALE = importlib.util.find_spec("ale_py") is not None
HAS_ENVPOOL = importlib.util.find_spec("envpool") is not None
BACKENDS = [pytest.param("ale-vector", marks=pytest.mark.skipif(not HAS_ALE, reason="ale-py is not installed")),
            pytest.param("envpool", marks=pytest.mark.skipif(not HAS_ENVPOOL, reason="envpool is not installed"))]
# sticky actions and no-op starts on (each env's own seeded draws), and games cut short so that
# episodes end by lost lives, by game over and by the time limit within the test
OPTIONS = AtariOptions(max_episode_frames=600)


def make_env(backend: str, seed: int, n: int):
    if backend == "ale-vector":
        from hetrl.primitives.env_step_ale_vector import EnvStepAleVector

        return EnvStepAleVector(BREAKOUT, n, seed, OPTIONS, threads=1)
    from hetrl.primitives.env_step_envpool import EnvStepEnvpool

    return EnvStepEnvpool(BREAKOUT, n, seed, OPTIONS, threads=1)


def policy(obs: np.ndarray, first: int) -> np.ndarray:
    """Actions that depend on each env's observation and index only (Breakout has 4 actions)."""
    return ((obs.reshape(len(obs), -1).sum(axis=1, dtype=np.int64) // 7 + first + np.arange(len(obs))) % 4)


@pytest.mark.parametrize("backend", BACKENDS)
def test_async_halves_give_every_env_the_transitions_sync_stepping_gives(backend):
    n, steps = 5, 260  # odd: halves of 2 and 3 envs
    sync = make_env(backend, 11, n)
    halves = EnvHalves(lambda seed, k: make_env(backend, seed, k), n, 11)
    try:
        obs = sync.reset()
        assert np.array_equal(halves.reset(), obs)
        ended = {"terminated": 0, "truncated": 0}
        for _ in range(steps):
            actions = policy(obs, 0)
            out = sync.step(actions)
            async_actions, async_out = halves.step(policy)
            assert np.array_equal(async_actions, actions)
            for key, value in out.items():
                assert np.array_equal(async_out[key], value), key
            assert sorted(halves.finished) == sorted(sync.finished)
            ended = {key: count + int(out[key].sum()) for key, count in ended.items()}
            obs = out["next_obs"]
        assert ended["terminated"] > 0 and ended["truncated"] > 0  # the test saw both kinds of ends
    finally:
        sync.close()
        halves.close()


def acting(backend: str, num_envs: int, async_envs: bool, seed: int = 5) -> ActingRole:
    cfg = make_config("dqn", BREAKOUT, overrides=["n_step=3", "learning_starts=0", "eps_start=0", "eps_end=0"]).agent
    algo = make_algorithm("dqn", env_spec(BREAKOUT, AtariOptions(max_episode_frames=160)), cfg)
    placement = default_placement(torch.device("cpu"), (1, 1), threads=1, mlp_policy=False, frames=True)
    placement = dataclasses.replace(placement, env=Slot(backend))
    with torch.random.fork_rng():
        torch.manual_seed(0)  # both roles act with the same network
        network = algo.make_policy_network()
    return ActingRole(algo, placement, num_envs, seed, np.random.default_rng(seed), NoTimers(), network,
                      frames=True, async_envs=async_envs)


class NoTimers:
    def add(self, name, seconds, calls=1):
        pass


@pytest.mark.parametrize("backend", BACKENDS)
def test_an_acting_role_emits_the_same_rows_frames_and_episodes_async(backend):
    """Greedy actions from one network: the frame ids, n-step rows, new frames and finished
    episodes of every step equal sync stepping's."""
    sync, halves = acting(backend, 4, False), acting(backend, 4, True)
    try:
        assert "async halves of 2 + 2 envs" in halves.ran()["EnvStep"]
        rows, episodes = 0, 0
        for step in range(50):
            ready, finished = sync.step(step * 4)
            async_ready, async_finished = halves.step(step * 4)
            assert sorted(async_finished) == sorted(finished)
            episodes += len(finished)
            assert np.array_equal(halves.new_frames(), sync.new_frames())
            assert (ready is None) == (async_ready is None)
            if ready is not None:
                rows += len(ready["actions"])
                for key, value in ready.items():
                    assert np.array_equal(async_ready[key], value), key
        assert rows > 0 and episodes > 0
    finally:
        sync.close()
        halves.close()


def test_async_envs_is_refused_where_it_cannot_run():
    gym_role = pytest.raises(HetrlError, match="async_envs needs an EnvStep that steps in the background.*not gymnasium")
    with gym_role:
        cfg = make_config("dqn", "CartPole-v1").agent
        algo = make_algorithm("dqn", env_spec("CartPole-v1"), cfg)
        placement = default_placement(torch.device("cpu"), (1, 1), threads=1, mlp_policy=True)
        ActingRole(algo, placement, 4, 0, np.random.default_rng(0), NoTimers(), algo.make_policy_network(),
                   async_envs=True)
    if HAS_ALE:
        with pytest.raises(HetrlError, match=r"num_envs >= 2 \(got 1\)"):
            acting("ale-vector", 1, True)


def test_async_envs_is_refused_with_noise_correlated_in_time():
    cfg = make_config("ddpg", "Pendulum-v1", overrides=["noise_type=ornstein-uhlenbeck"]).agent
    algo = make_algorithm("ddpg", env_spec("Pendulum-v1"), cfg)
    placement = default_placement(torch.device("cpu"), (1, 1), threads=1, mlp_policy=True)
    with pytest.raises(HetrlError, match="correlated in time; set async_envs=false"):
        ActingRole(algo, placement, 4, 0, np.random.default_rng(0), NoTimers(), algo.make_policy_network(),
                   async_envs=True)


def test_the_setting_takes_a_bool_only():
    with pytest.raises(HetrlError, match="async_envs"):
        make_config("dqn", "CartPole-v1", overrides=["async_envs=sometimes"]).validate()
    assert make_config("dqn", "CartPole-v1", overrides=["async_envs=true"]).async_envs is True


@pytest.mark.skipif(not HAS_ALE, reason="ale-py is not installed")
def test_the_setting_reaches_the_executors_an_actor_process_steps_halves_and_inline_resumes():
    from hetrl.planner.choice import RunPlan
    from hetrl.planner.plan_file import Plan
    from hetrl.runtime.executors import make_executor

    config = make_config("dqn", BREAKOUT, overrides=["async_envs=true", "learning_starts=1000000", "buffer_size=1000",
                                                          "n_step=1"])
    algo = make_algorithm("dqn", env_spec(BREAKOUT, OPTIONS), config.agent)
    placement = dataclasses.replace(
        default_placement(torch.device("cpu"), (1, 1), threads=1, mlp_policy=False, frames=True), env=Slot("ale-vector"))
    plan = Plan("dqn", BREAKOUT, 4, "throughput", "", placement, None, [])
    local = make_executor(RunPlan(plan, "local", 1, "actor", 4), config, algo, log=lambda _: None)
    try:  # an actor process steps halves and sends frames: the replay's stacks are still frame stacks
        assert local.spec.async_envs is True
        while len(local.replay) < 200:
            local.iteration()
        assert "async halves of 2 + 2 envs" in local.ran()["EnvStep"]
        out = local.replay.sample(np.random.default_rng(0).random(64))
        assert np.array_equal(out["next_obs"][:, :-1], out["obs"][:, 1:])
    finally:
        local.close()
    inline = make_executor(RunPlan(plan, "inline", 0, "actor", 4), config, algo, log=lambda _: None)
    resumed = make_executor(RunPlan(plan, "inline", 0, "actor", 4), config, algo, log=lambda _: None)
    try:
        assert isinstance(inline.acting.env, EnvHalves)
        for _ in range(5):
            inline.iteration()
        with pytest.warns(UserWarning, match="cannot be saved"):
            state = inline.state_dict()
        resumed.load_state_dict(state)  # the halves are reseeded and reset, as one EnvStep that cannot be pickled is
        assert resumed.acting.obs.shape == (4, *algo.spec.obs_shape)
        for _ in range(3):
            resumed.iteration()
        assert resumed.env_steps == inline.env_steps + 12
    finally:
        inline.close()
        resumed.close()


@pytest.mark.skipif(not HAS_ALE, reason="ale-py is not installed")
def test_the_plans_keep_to_envsteps_that_step_in_the_background():
    """With async_envs the automatic plan chooses among the EnvSteps that can step in the background
    (here the dearer ale-vector over gymnasium) and the fixed rule takes the first of them; an env
    none of them steps is a one-line error at planning, not at the actors' start."""
    from test_plan_pixels import pixels

    from hetrl.planner.choice import plan_for_run, plan_from_profile

    extra = [("EnvStep", "ale-vector", "cpu", n, None, 20_000 * n) for n in (1, 4, 16)]  # the bottleneck where chosen
    profile = pixels(extra=extra)
    for async_envs, chosen in ((False, "gymnasium"), (True, "ale-vector")):
        config = make_config("dqn", BREAKOUT, None, [f"async_envs={str(async_envs).lower()}", "buffer_size=10000",
                                                     "executor=auto", "num_envs=4"])
        algo = make_algorithm("dqn", env_spec(BREAKOUT), config.agent)
        assert plan_from_profile(profile, config, algo, memory={"cpu": 64 * GIB, "cuda": 80 * GIB}).placement.env.backend == chosen
        rule = make_config("dqn", BREAKOUT, None, [f"async_envs={str(async_envs).lower()}", "plan=rule", "num_envs=4"])
        assert plan_for_run(rule, algo).placement.env.backend == chosen
    config = make_config("dqn", "CartPole-v1", None, ["async_envs=true", "plan=rule", "num_envs=4"])
    algo = make_algorithm("dqn", env_spec("CartPole-v1"), config.agent)
    with pytest.raises(HetrlError, match="none can step CartPole-v1; set async_envs=false"):
        plan_for_run(config, algo)


GIB = 2**30
