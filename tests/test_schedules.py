"""Every schedule against values by hand: each algorithm's exploration level and the level Act is
given, PER's importance-sampling exponent and the one ReplaySample is given, the weights that reach
Learn, and how often targets, actors and temperatures move."""

import numpy as np
import pytest
import torch

from hetrl.algos import DDPGConfig, DQNConfig, SACConfig, TD3Config, make_algorithm
from hetrl.envs import env_spec
from hetrl.envs.spec import EnvSpec
from hetrl.planner.rule import default_placement
from hetrl.runtime.inline import InlineExecutor

DISCRETE = EnvSpec("hand-discrete", (3,), True, 2, (), (), (), None, False)
CONTINUOUS = EnvSpec("hand-continuous", (3,), False, 0, (1,), (-1.0,), (3.0,), None, False)  # half range 2


# --- exploration ------------------------------------------------------------------------------------
def test_dqn_epsilon_falls_linearly_then_stays():
    algo = make_algorithm("dqn", DISCRETE, DQNConfig(eps_start=0.9, eps_end=0.1, eps_decay_steps=1_000))
    for step, eps in [(0, 0.9), (250, 0.7), (500, 0.5), (999, 0.1008), (1_000, 0.1), (5_000, 0.1)]:
        assert algo.exploration(step) == pytest.approx(eps, abs=1e-12), step
    default = make_algorithm("dqn", DISCRETE, DQNConfig())  # 1 -> 0.04 over 16k steps
    assert default.exploration(8_000) == pytest.approx(0.52) and default.exploration(10**6) == pytest.approx(0.04)
    at_once = make_algorithm("dqn", DISCRETE, DQNConfig(eps_start=0.5, eps_end=0.2, eps_decay_steps=0))
    assert at_once.exploration(0) == 0.5 and at_once.exploration(1) == 0.2


def test_dqn_epsilon_greedy_rule():
    algo = make_algorithm("dqn", DISCRETE, DQNConfig())
    out = np.array([[0.0, 1.0], [2.0, 1.0], [0.0, 1.0]])
    explore = np.array([0.05, 0.29, 0.31], np.float32)
    random_actions = np.array([0, 1, 0])
    # below the level: the random action; above: the greedy one
    np.testing.assert_array_equal(algo.action_rule(out, explore, random_actions, 0.3), [0, 1, 1])
    np.testing.assert_array_equal(algo.greedy_rule(out), [1, 0, 1])


def test_ddpg_noise_is_constant_and_scaled_to_the_action_range():
    algo = make_algorithm("ddpg", CONTINUOUS, DDPGConfig(action_noise=0.3))
    assert [algo.exploration(s) for s in (0, 10**3, 10**6)] == [0.3, 0.3, 0.3]
    explore, _ = algo.draw_exploration(np.random.default_rng(0), 40_000)
    assert abs(explore.std() - 2.0) < 0.03 and abs(explore.mean()) < 0.03  # N(0, 1) times half the range
    out = np.array([[0.5], [2.9], [-0.9]], np.float32)
    noise = np.array([[1.0], [1.0], [-1.0]], np.float32)
    # 0.5 + 0.3; 3.2 clipped to the high bound 3; -1.2 clipped to the low bound -1
    np.testing.assert_allclose(algo.action_rule(out, noise, noise, 0.3), [[0.8], [3.0], [-1.0]], rtol=1e-6)


def test_sac_acts_with_its_own_unscaled_noise():
    algo = make_algorithm("sac", CONTINUOUS, SACConfig())
    assert [algo.exploration(s) for s in (0, 10**6)] == [1.0, 1.0]
    out = np.array([[0.2, np.log(0.5)], [0.0, 5.0]], np.float32)  # (mu, log std)
    eps = np.array([[1.0], [0.0]], np.float32)
    want = np.tanh([[0.2 + 0.5], [0.0]]) * 2 + 1  # tanh(mu + std * eps) * scale + centre
    np.testing.assert_allclose(algo.action_rule(out, eps, eps, 1.0), want, rtol=1e-6)
    np.testing.assert_allclose(algo.greedy_rule(out), np.tanh([[0.2], [0.0]]) * 2 + 1, rtol=1e-6)


def inline(cfg, num_envs=2):
    """An inline DQN executor on CartPole: 30 random steps, batches of 8, an update per env step.
    Two envs, so that env steps and loop iterations differ (the schedules count env steps)."""
    cfg.learning_starts, cfg.batch_size, cfg.hidden, cfg.train_every, cfg.replay_ratio = 30, 8, (8,), 1, 1.0
    algorithm = make_algorithm("dqn", env_spec("CartPole-v1"), cfg)
    return InlineExecutor(algorithm, default_placement(torch.device("cpu"), (1, 1), threads=1), num_envs, seed=0)


def test_act_gets_the_epsilon_of_the_current_env_step():
    ex = inline(DQNConfig(eps_start=1.0, eps_end=0.0, eps_decay_steps=60))
    levels = []
    act = ex.policy.act
    ex.policy.act = lambda obs, explore, random_actions, level: levels.append((ex.env_steps, level)) or act(
        obs, explore, random_actions, level)
    while ex.env_steps < 80:
        ex.iteration()
    assert [s for s, _ in levels] == list(range(30, 80, 2))  # every iteration (of 2 envs) from learning_starts on
    for step, level in levels:
        assert level == pytest.approx(max(0.0, 1.0 - step / 60)), step


# --- prioritized replay: beta --------------------------------------------------------------------------
def test_beta_anneals_linearly_to_one():
    cfg = DQNConfig(beta0=0.4, beta_anneal_steps=1_000)
    for step, beta in [(0, 0.4), (250, 0.55), (500, 0.7), (1_000, 1.0), (50_000, 1.0)]:
        assert cfg.beta(step) == pytest.approx(beta, abs=1e-12), step
    assert DQNConfig(beta0=0.6, beta_anneal_steps=0).beta(0) == 0.6 and DQNConfig(beta0=0.6, beta_anneal_steps=0).beta(1) == 1.0


def test_replay_sample_gets_the_annealed_beta_and_learn_its_weights():
    ex = inline(DQNConfig(prioritized=True, beta0=0.2, beta_anneal_steps=80))
    seen, learned = [], []
    sample, learn = ex.replay.sample, ex.learning.learn.learn

    def spy_sample(uniform, beta):
        out = sample(uniform, beta)
        seen.append((ex.env_steps, beta, np.asarray(out["weights"]).copy()))
        return out

    def spy_learn(**batch):
        learned.append(batch["weights"].numpy().copy())
        return learn(**batch)

    ex.replay.sample, ex.learning.learn.learn = spy_sample, spy_learn
    while ex.env_steps < 100:
        ex.iteration()
    assert [s for s, _, _ in seen] == [s for s in range(30, 101, 2) for _ in range(2)]  # 2 updates per iteration of 2 envs
    for step, beta, _ in seen:
        assert beta == pytest.approx(0.2 + 0.8 * min(1.0, step / 80)), step
    assert len(learned) == len(seen)
    for (_, _, weights), got in zip(seen, learned):
        np.testing.assert_array_equal(got, weights)  # the importance weights reach the update as sampled
    assert any((w < 1).any() for _, _, w in seen[1:])  # and they are not all ones (priorities differ)


def test_uniform_replay_weights_are_ones():
    ex = inline(DQNConfig(prioritized=False))
    learned = []
    learn = ex.learning.learn.learn
    ex.learning.learn.learn = lambda **batch: learned.append(batch["weights"].numpy().copy()) or learn(**batch)
    while ex.env_steps < 60:
        ex.iteration()
    assert learned and all((w == 1).all() for w in learned)


# --- target networks, delayed actors and temperatures --------------------------------------------------
def batch_for(algo, rng, b=4):
    return {
        "obs": torch.as_tensor(rng.standard_normal((b, 3)), dtype=torch.float32),
        "actions": torch.as_tensor(algo.random_actions(rng, b)),
        "rewards": torch.as_tensor(rng.standard_normal(b), dtype=torch.float32),
        "next_obs": torch.as_tensor(rng.standard_normal((b, 3)), dtype=torch.float32),
        "discounts": torch.full((b,), 0.9),
        "weights": torch.ones(b),
    }


def params(module):
    return [p.detach().clone() for p in module.state_dict().values()]


def same(a, b):
    return all(torch.equal(x, y) for x, y in zip(a, b))


def test_dqn_hard_target_copies_every_n_updates():
    algo = make_algorithm("dqn", DISCRETE, DQNConfig(hidden=(8,), target_update_every=3, tau=1.0))
    learner = algo.build_learner(torch.device("cpu"), seed=0)
    rng = np.random.default_rng(0)
    copied = params(learner.q_target)
    for update in range(1, 10):
        learner.update(batch_for(algo, rng))
        if update % 3 == 0:
            copied = params(learner.q)
        assert same(params(learner.q_target), copied), update
        assert not same(params(learner.q), params(learner.q_target)) or update % 3 == 0, update


def test_dqn_polyak_target_moves_every_update():
    algo = make_algorithm("dqn", DISCRETE, DQNConfig(hidden=(8,), tau=0.25, target_update_every=1000))
    learner = algo.build_learner(torch.device("cpu"), seed=0)
    rng = np.random.default_rng(0)
    for _ in range(3):
        before = params(learner.q_target)
        learner.update(batch_for(algo, rng))
        for t, old, q in zip(params(learner.q_target), before, params(learner.q)):
            torch.testing.assert_close(t, 0.75 * old + 0.25 * q)


@pytest.mark.parametrize("name, config", [("ddpg", DDPGConfig(policy_delay=1)), ("td3", TD3Config(policy_delay=3))])
def test_the_actor_and_targets_move_every_policy_delay_updates(name, config):
    config.hidden, config.tau = (8,), 0.5
    algo = make_algorithm(name, CONTINUOUS, config)
    learner = algo.build_learner(torch.device("cpu"), seed=0)
    rng = np.random.default_rng(0)
    for update in range(1, 8):
        actor, actor_t, critic, critic_t = (params(m) for m in (learner.actor, learner.actor_target, learner.critic,
                                                                learner.critic_target))
        learner.update(batch_for(algo, rng))
        due = update % config.policy_delay == 0
        assert not same(params(learner.critic), critic), update  # the critic every update
        assert same(params(learner.actor), actor) != due, update
        if due:
            for t, old, new in zip(params(learner.actor_target), actor_t, params(learner.actor)):
                torch.testing.assert_close(t, 0.5 * old + 0.5 * new)
            for t, old, new in zip(params(learner.critic_target), critic_t, params(learner.critic)):
                torch.testing.assert_close(t, 0.5 * old + 0.5 * new)
        else:
            assert same(params(learner.actor_target), actor_t) and same(params(learner.critic_target), critic_t), update


def test_sac_critic_targets_every_update_actor_and_temperature_every_policy_delay():
    algo = make_algorithm("sac", CONTINUOUS, SACConfig(hidden=(8,), tau=0.5, policy_delay=2))
    learner = algo.build_learner(torch.device("cpu"), seed=0)
    rng = np.random.default_rng(0)
    for update in range(1, 6):
        actor, critic_t, alpha = params(learner.actor), params(learner.critic_target), learner.alpha
        learner.update(batch_for(algo, rng))
        for t, old, new in zip(params(learner.critic_target), critic_t, params(learner.critic)):
            torch.testing.assert_close(t, 0.5 * old + 0.5 * new)
        due = update % 2 == 0
        assert same(params(learner.actor), actor) != due and (learner.alpha == alpha) != due, update


# --- the replay ratio's limiter (concurrent executors) ------------------------------------------------
def test_the_limiter_rounds_owed_updates_down_and_allowed_steps_up():
    """The learner may not run ahead of the data by even a fraction of an update, and the actors may
    take the steps that the updates done need, rounded up, plus the lead."""
    from hetrl.runtime.schedule import ReplaySchedule

    limiter = ReplaySchedule(0.25, learning_starts=100, lead=32)
    assert [limiter.updates_owed(steps, 0) for steps in (50, 100, 103, 106, 108)] == [0, 0, 0, 1, 2]  # floor(0.25 x)
    assert limiter.updates_owed(108, 1) == 1 and limiter.updates_owed(108, 5) == 0
    assert limiter.allowed_env_steps(1) == 100 + 4 + 32
    fast = ReplaySchedule(2.5, learning_starts=100, lead=32)
    assert fast.updates_owed(101, 0) == 2 and fast.allowed_env_steps(3) == 100 + 2 + 32  # ceil(3 / 2.5)
    assert ReplaySchedule(0.0, 100).allowed_env_steps(7) == -1  # no updates: no limit
