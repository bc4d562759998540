"""Exploration that remembers between steps: gSDE's held matrices (SAC ``use_sde``) and
Ornstein-Uhlenbeck action noise (DDPG/TD3 ``noise_type``), in hetrl.algos.exploration and
hetrl.nets.SDEActor."""

import math

import numpy as np
import pytest
import torch

from hetrl.algos import DDPGConfig, SACConfig, make_algorithm
from hetrl.algos.exploration import FreshDraws, HeldDraws, OrnsteinUhlenbeck
from hetrl.envs import env_spec
from hetrl.errors import HetrlError
from hetrl.nets import SDEActor, numpy_params


def sde_sac(**settings):
    return make_algorithm("sac", env_spec("MountainCarContinuous-v0"), SACConfig(hidden=(8, 6), use_sde=True, **settings))


def trained_like_actor(use_expln: bool, seed: int = 0) -> SDEActor:
    """An SDE actor (2 actions) whose log std entries differ, some above 0 (where expln departs from exp)."""
    torch.manual_seed(seed)
    actor = SDEActor(3, 2, (8, 5), [-2.0, -1.0], [2.0, 3.0], log_std_init=-1.0, use_expln=use_expln)
    with torch.no_grad():
        actor.log_std.copy_(torch.linspace(-2.0, 1.5, 10).reshape(5, 2))
    return actor


@pytest.mark.parametrize("use_expln", [False, True])
def test_the_sde_actor_is_stable_baselines3s_distribution(use_expln):
    """Same weights, same noise matrix: the same actions and log densities as SB3's
    StateDependentNoiseDistribution (full std, squashed, features not learned through the noise)."""
    distributions = pytest.importorskip("stable_baselines3.common.distributions")
    actor = trained_like_actor(use_expln)
    obs, matrix = torch.randn(64, 3), torch.randn(5, 2)
    actions, log_prob = actor.sample(obs, matrix)

    dist = distributions.StateDependentNoiseDistribution(2, full_std=True, use_expln=use_expln, squash_output=True)
    latent = actor.latent(obs)
    mean = actor.mu(latent).clamp(-2, 2)
    dist.exploration_mat = dist.get_std(actor.log_std) * matrix  # what SB3 sample_weights draws, for this matrix
    dist.exploration_matrices = dist.exploration_mat.unsqueeze(0)
    dist.proba_distribution(mean, actor.log_std, latent)
    sb3_actions = dist.sample()
    torch.testing.assert_close((actions - actor.center) / actor.scale, sb3_actions, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(log_prob, dist.log_prob(sb3_actions), rtol=1e-4, atol=1e-3)


def test_the_sde_noise_is_gaussian_with_a_variance_set_by_the_state():
    """Over many matrices, the pre-squash action of one state has mean mu(s) and variance z(s)^2 @ sigma^2."""
    actor = trained_like_actor(use_expln=False)
    obs = torch.randn(4, 3)
    with torch.no_grad():
        z = actor.latent(obs)
        mu, var = actor.mu(z).clamp(-2, 2), z.square() @ actor.std().square()
        u = torch.stack([mu + z @ (actor.std() * torch.randn(5, 2)) for _ in range(20_000)])
    torch.testing.assert_close(u.mean(0), mu, atol=4 * float(var.max().sqrt()) / math.sqrt(20_000), rtol=0)
    torch.testing.assert_close(u.var(0), var, rtol=0.05, atol=1e-6)
    assert var[0, 0] != var[1, 0]  # the variance differs between states: state-dependent


@pytest.mark.parametrize("use_expln", [False, True])
def test_acting_with_a_held_matrix_is_the_learners_sample(use_expln):
    """An acting copy's numpy forward and SAC's action rule give the learner's sample for the same matrix,
    so the actions taken are draws of the distribution the learner trains."""
    algo = sde_sac(use_expln=use_expln)
    actor = algo.make_networks()["actor"]
    with torch.no_grad():
        actor.log_std.copy_(torch.linspace(-2.0, 1.5, 6).reshape(6, 1))
    obs = np.random.default_rng(0).standard_normal((5, 2)).astype(np.float32)
    out = actor.forward_numpy(numpy_params(actor), obs)
    np.testing.assert_allclose(out, actor(torch.from_numpy(obs)).detach().numpy(), rtol=1e-5, atol=1e-6)
    matrix = np.random.default_rng(1).standard_normal((6, 1)).astype(np.float32)
    acted = algo.action_rule(out, np.tile(matrix.reshape(1, -1), (5, 1)), np.zeros((5, 1), np.float32), 1.0)
    sampled, _ = actor.sample(torch.from_numpy(obs), torch.from_numpy(matrix))
    np.testing.assert_allclose(acted, sampled.detach().numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(algo.greedy_rule(out), np.tanh(out[:, :1]), rtol=1e-6)  # MountainCar: bounds [-1, 1]


def test_held_draws_hold_for_their_period_and_resume_where_they_were():
    algo = sde_sac(sde_sample_freq=3)
    process = algo.exploration_process(4)
    assert isinstance(process, HeldDraws) and process.period == 3
    rng = np.random.default_rng(0)
    draws = [process.draw(rng)[0].copy() for _ in range(7)]
    assert draws[0].shape == (4, 6)  # a (features x actions) matrix per env, flattened
    assert all(np.array_equal(draws[0], d) for d in draws[1:3]) and not np.array_equal(draws[2], draws[3])
    assert np.array_equal(draws[3], draws[5]) and not np.array_equal(draws[5], draws[6])
    assert not np.array_equal(draws[0][0], draws[0][1])  # each env its own matrix

    state, rng_state = process.state_dict(), rng.bit_generator.state
    later = [process.draw(rng)[0].copy() for _ in range(4)]
    resumed = algo.exploration_process(4)
    resumed.load_state_dict(state)
    rng.bit_generator.state = rng_state
    assert all(np.array_equal(a, resumed.draw(rng)[0]) for a in later)


def test_held_draws_follow_train_every_by_default():
    assert sde_sac(train_every=32).exploration_process(1).period == 32
    assert isinstance(make_algorithm("sac", env_spec("Pendulum-v1"), SACConfig()).exploration_process(2), FreshDraws)


def test_ornstein_uhlenbeck_noise_is_correlated_in_time_and_restarts_with_each_episode():
    algo = make_algorithm("td3", env_spec("MountainCarContinuous-v0"), DDPGConfig(noise_type="ornstein-uhlenbeck"))
    process = algo.exploration_process(2)
    assert isinstance(process, OrnsteinUhlenbeck)
    rng = np.random.default_rng(0)
    xs = np.array([process.draw(rng)[0][:, 0] for _ in range(20_000)])  # half range 1: units are actions
    theta, dt = OrnsteinUhlenbeck.THETA, OrnsteinUhlenbeck.DT
    # the process's discrete recursion: lag-1 correlation 1 - theta*dt, stationary variance dt / (1 - (1 - theta*dt)^2)
    lag1 = np.corrcoef(xs[1000:-1, 0], xs[1001:, 0])[0, 1]
    assert lag1 > 0.99
    steps = np.diff(xs[:, 0]) + theta * dt * xs[:-1, 0]  # the increments: sqrt(dt) * N(0, 1)
    assert abs(steps.std() - math.sqrt(dt)) < 0.03 * math.sqrt(dt)
    fresh = np.array([algo.draw_exploration(rng, 1)[0][0, 0] for _ in range(2000)])
    assert abs(np.corrcoef(fresh[:-1], fresh[1:])[0, 1]) < 0.1  # Gaussian noise: no memory
    before = process.x.copy()
    process.episodes_ended(np.array([True, False]))
    assert process.x[0, 0] == 0.0 and process.x[1, 0] == before[1, 0]
    assert process.draw(rng)[1].shape == (2, 1)
    assert isinstance(make_algorithm("td3", env_spec("Pendulum-v1"), DDPGConfig()).exploration_process(2), FreshDraws)


def test_ornstein_uhlenbeck_noise_is_in_units_of_half_the_action_range():
    algo = make_algorithm("ddpg", env_spec("Pendulum-v1"), DDPGConfig(noise_type="ornstein-uhlenbeck"))  # torque in [-2, 2]
    a, b = algo.exploration_process(1), OrnsteinUhlenbeck(algo, 1, np.ones(1, np.float32))
    for _ in range(5):
        np.testing.assert_allclose(a.draw(np.random.default_rng(7))[0], 2 * b.draw(np.random.default_rng(7))[0], rtol=1e-6)


@pytest.mark.parametrize("settings, message", [
    (dict(algo="ddpg", noise_type="ou"), "noise_type must be one of normal, ornstein-uhlenbeck"),
    (dict(algo="sac", use_sde=True, sde_sample_freq=0), "sde_sample_freq must be -1"),
])
def test_bad_exploration_settings_are_one_line(tmp_path, settings, message):
    import hetrl

    algo = settings.pop("algo")
    with pytest.raises(HetrlError, match=message) as info:
        hetrl.train(algo, "Pendulum-v1", steps=10, run_dir=tmp_path / "run", progress=False, **settings)
    assert "\n" not in str(info.value)


def test_host_learners_and_graphs_refuse_gsde_and_say_what_runs_it():
    from hetrl.primitives import implementations

    algo = sde_sac()
    learn = implementations("Learn")
    assert "gSDE" in learn["blas"].unsupported(algo) and "torch learner" in learn["blas"].unsupported(algo)
    assert "gSDE" in learn["cudagraph"].unsupported(algo)
    assert learn["torch"].unsupported(algo) is None and implementations("Act")["numpy"].unsupported(algo) is None
    assert learn["blas"].unsupported(make_algorithm("sac", env_spec("Pendulum-v1"), SACConfig())) is None


def test_a_gsde_run_trains_and_acts_under_the_automatic_plan(tmp_path):
    """plan=auto profiles only what runs gSDE (Learn/torch, Act/numpy or torch) and the run learns something."""
    import hetrl

    result = hetrl.train("sac", "MountainCarContinuous-v0", steps=600, run_dir=tmp_path / "run", progress=False,
                         eval_every=0, eval_episodes=1, hidden=(16, 16), batch_size=32, train_every=8)
    assert result.updates > 0 and result.placement["Learn"].startswith("torch"), result.placement
