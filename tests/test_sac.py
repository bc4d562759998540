"""SAC: the learner's update against a plain SAC update written out here, CleanRL-style, on the same
batch, weights and noise; the Gaussian actor's numpy forward and action rules; the update's split
as the CUDA-graph learner drives it; its checkpoint; and the backends that must refuse it."""

import copy
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from hetrl.algos import SACConfig, make_algorithm
from hetrl.primitives.learn_torch import LearnTorch
from hetrl.envs import env_spec
from hetrl.errors import HetrlError
from hetrl.nets import GaussianActor, numpy_params
from hetrl.primitives import build, get
from hetrl.protocol import Slot


def _sac(env="Pendulum-v1", **settings):
    return make_algorithm("sac", env_spec(env), SACConfig(**{"hidden": (32, 24), "batch_size": 40, **settings}))


def _batch(algo, b=40, seed=0):
    rng = np.random.default_rng(seed)
    spec = algo.spec
    return {
        "obs": torch.as_tensor(rng.standard_normal((b,) + spec.obs_shape), dtype=torch.float32),
        "actions": torch.as_tensor(algo.random_actions(rng, b)),
        "rewards": torch.as_tensor(rng.standard_normal(b), dtype=torch.float32),
        "next_obs": torch.as_tensor(rng.standard_normal((b,) + spec.obs_shape), dtype=torch.float32),
        "discounts": torch.as_tensor(rng.choice([0.0, 0.99], b), dtype=torch.float32),
        "weights": torch.as_tensor(rng.uniform(0.3, 1.0, b), dtype=torch.float32),
    }


# ---------------------------------------------------------------------------------------------
# A plain SAC, written independently of hetrl's modules (CleanRL's sac_continuous_action.py layout,
# SB3's order and losses: 0.5 * sum of the critics' MSE, alpha of the update's start in the critic's
# target and the actor's loss, the log-alpha loss from the actor step's log densities).


class SoftQ(nn.Module):
    def __init__(self, obs_dim, act_dim, hidden):
        super().__init__()
        self.fc1, self.fc2, self.fc3 = nn.Linear(obs_dim + act_dim, hidden[0]), nn.Linear(*hidden), nn.Linear(hidden[1], 1)

    def forward(self, x, a):
        x = torch.cat([x, a], 1)
        return self.fc3(F.relu(self.fc2(F.relu(self.fc1(x))))).view(-1)


class RefActor(nn.Module):
    def __init__(self, obs_dim, act_dim, hidden, low, high):
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(obs_dim, hidden[0]), nn.Linear(*hidden)
        self.fc_mean, self.fc_logstd = nn.Linear(hidden[1], act_dim), nn.Linear(hidden[1], act_dim)
        self.action_scale = torch.tensor((high - low) / 2.0, dtype=torch.float32)
        self.action_bias = torch.tensor((high + low) / 2.0, dtype=torch.float32)

    def get_action(self, x, eps):
        x = F.relu(self.fc2(F.relu(self.fc1(x))))
        mean, log_std = self.fc_mean(x), torch.clamp(self.fc_logstd(x), -20, 2)
        std = log_std.exp()
        x_t = mean + std * eps  # rsample, with the noise given
        y_t = torch.tanh(x_t)
        log_prob = torch.distributions.Normal(mean, std).log_prob(x_t) - torch.log(1 - y_t.pow(2) + 1e-6)
        return y_t * self.action_scale + self.action_bias, log_prob.sum(1)


def _as_reference_actor(state, act_dim):
    """hetrl's GaussianActor (one output layer: mean rows, then log std rows) as RefActor's parameters."""
    out_w, out_b = state["net.4.weight"], state["net.4.bias"]
    return {"fc1.weight": state["net.0.weight"], "fc1.bias": state["net.0.bias"], "fc2.weight": state["net.2.weight"],
            "fc2.bias": state["net.2.bias"], "fc_mean.weight": out_w[:act_dim], "fc_mean.bias": out_b[:act_dim],
            "fc_logstd.weight": out_w[act_dim:], "fc_logstd.bias": out_b[act_dim:]}


def _reference(learner, algo):
    """The plain modules and optimisers, holding the learner's initial weights."""
    spec, hidden = algo.spec, algo.config.hidden
    obs_dim, act_dim = spec.obs_shape[0], spec.action_shape[0]
    actor = RefActor(obs_dim, act_dim, hidden, np.asarray(spec.action_low), np.asarray(spec.action_high))
    actor.load_state_dict(_as_reference_actor(learner.actor.state_dict(), act_dim))

    def q_from(state, i):
        q = SoftQ(obs_dim, act_dim, hidden)
        q.load_state_dict({f"fc{j // 2 + 1}.{kind}": state[f"heads.{i}.{j}.{kind}"] for j in (0, 2, 4) for kind in ("weight", "bias")})
        return q

    qf1, qf2 = q_from(learner.critic.state_dict(), 0), q_from(learner.critic.state_dict(), 1)
    qf1_target, qf2_target = copy.deepcopy(qf1), copy.deepcopy(qf2)
    lr = algo.config.lr
    log_alpha = torch.zeros(1, requires_grad=True)
    return dict(actor=actor, qf1=qf1, qf2=qf2, qf1_target=qf1_target, qf2_target=qf2_target, log_alpha=log_alpha,
                q_optimizer=torch.optim.Adam(list(qf1.parameters()) + list(qf2.parameters()), lr=lr),
                actor_optimizer=torch.optim.Adam(actor.parameters(), lr=lr), a_optimizer=torch.optim.Adam([log_alpha], lr=lr),
                target_entropy=-float(act_dim), tau=algo.config.tau)


def _reference_update(ref, data, next_noise, actor_noise):
    actor, qf1, qf2, qf1_target, qf2_target = (ref[k] for k in ("actor", "qf1", "qf2", "qf1_target", "qf2_target"))
    alpha = ref["log_alpha"].exp().item()
    with torch.no_grad():
        next_state_actions, next_state_log_pi = actor.get_action(data["next_obs"], next_noise)
        min_qf_next_target = torch.min(qf1_target(data["next_obs"], next_state_actions),
                                       qf2_target(data["next_obs"], next_state_actions)) - alpha * next_state_log_pi
        next_q_value = data["rewards"] + data["discounts"] * min_qf_next_target
    qf1_a_values, qf2_a_values = qf1(data["obs"], data["actions"]), qf2(data["obs"], data["actions"])
    qf1_loss = (data["weights"] * (qf1_a_values - next_q_value) ** 2).mean()
    qf2_loss = (data["weights"] * (qf2_a_values - next_q_value) ** 2).mean()
    qf_loss = 0.5 * (qf1_loss + qf2_loss)
    ref["q_optimizer"].zero_grad()
    qf_loss.backward()
    ref["q_optimizer"].step()
    with torch.no_grad():
        for net, target in ((qf1, qf1_target), (qf2, qf2_target)):
            for p, tp in zip(net.parameters(), target.parameters()):
                tp.data.copy_(ref["tau"] * p.data + (1 - ref["tau"]) * tp.data)
    pi, log_pi = actor.get_action(data["obs"], actor_noise)
    min_qf_pi = torch.min(qf1(data["obs"], pi), qf2(data["obs"], pi))
    actor_loss = ((alpha * log_pi) - min_qf_pi).mean()
    ref["actor_optimizer"].zero_grad()
    actor_loss.backward()
    ref["actor_optimizer"].step()
    alpha_loss = (-ref["log_alpha"] * (log_pi.detach() + ref["target_entropy"])).mean()
    ref["a_optimizer"].zero_grad()
    alpha_loss.backward()
    ref["a_optimizer"].step()
    return {"loss": qf_loss.detach(), "td_errors": (next_q_value - qf1_a_values).detach().abs(),
            "actor_loss": actor_loss.detach(), "alpha_loss": alpha_loss.detach()}


def _close(a, b, name):
    torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5, msg=name)


@pytest.mark.parametrize("env", ["Pendulum-v1", "MountainCarContinuous-v0"])
def test_the_update_equals_a_plain_sac_update(env):
    algo = _sac(env, lr=3e-3)  # a large step, so that three updates move everything visibly
    learner = LearnTorch(algo, "cpu", seed=4).learner
    ref = _reference(learner, algo)
    act_dim = algo.spec.action_shape[0]
    start = copy.deepcopy(learner.state_dict())
    noise = torch.Generator().manual_seed(9)
    for i in range(3):
        data = _batch(algo, seed=i)
        next_noise, actor_noise = (torch.randn(40, act_dim, generator=noise) for _ in range(2))
        learner.draw_inputs = lambda batch, n=next_noise, a=actor_noise: {"next_noise": n, "actor_noise": a}
        got = learner.update(data)
        want = _reference_update(ref, data, next_noise, actor_noise)
        _close(got["loss"], want["loss"], f"critic loss, update {i}")
        _close(got["td_errors"], want["td_errors"], f"td errors, update {i}")
        _close(learner.actor_loss, want["actor_loss"], f"actor loss, update {i}")
        _close(got["actor_loss"], want["actor_loss"], f"reported actor loss, update {i}")  # what metrics.csv averages
        _close(learner.alpha_loss, want["alpha_loss"], f"alpha loss, update {i}")
        _close(learner.log_alpha.detach(), ref["log_alpha"].detach(), f"log alpha, update {i}")
    state = learner.state_dict()
    for key, value in _as_reference_actor(state["actor"], act_dim).items():
        _close(value, ref["actor"].state_dict()[key], f"actor {key}")
        assert not torch.equal(value, _as_reference_actor(start["actor"], act_dim)[key]), key
    for head, q in ((0, "qf1"), (1, "qf2")):
        for j in (0, 2, 4):
            for kind in ("weight", "bias"):
                key, theirs = f"heads.{head}.{j}.{kind}", f"fc{j // 2 + 1}.{kind}"
                _close(state["critic"][key], ref[q].state_dict()[theirs], f"critic {key}")
                _close(state["critic_target"][key], ref[f"{q}_target"].state_dict()[theirs], f"critic target {key}")
                assert not torch.equal(state["critic"][key], start["critic"][key]), key  # the comparison is not vacuous
                assert not torch.equal(state["critic_target"][key], start["critic_target"][key]), key
    assert learner.alpha != 1.0 and learner.updates == 3


def test_the_temperature_follows_the_target_entropy():
    """Log densities above the target entropy's negative lower alpha, below it raise it."""
    for target, direction in ((-50.0, -1), (50.0, 1)):
        algo = _sac(target_entropy=target)
        learner = LearnTorch(algo, "cpu", seed=0).learner
        assert learner.target_entropy == target
        learner.update(_batch(algo))
        assert np.sign(learner.alpha - 1.0) == direction, (target, learner.alpha)
    assert LearnTorch(_sac(), "cpu", seed=0).learner.target_entropy == -1.0  # -dim(A) for Pendulum's one action


def test_a_fixed_temperature_stays_and_has_no_optimizer():
    algo = _sac(ent_coef="0.2")
    learn = LearnTorch(algo, "cpu", seed=0)
    for i in range(3):
        learn.learner.update(_batch(algo, seed=i))
    assert learn.learner.alpha == pytest.approx(0.2) and learn.learner.alpha_optimizer is None
    assert len(learn.learner.optimizers()) == 2 and learn.learner.state_dict()["alpha_optimizer"] is None
    tuned = LearnTorch(_sac(ent_coef="auto_0.1"), "cpu", seed=0).learner
    assert tuned.alpha == pytest.approx(0.1) and tuned.alpha_optimizer is not None


@pytest.mark.parametrize("bad", ["auto_-1", "autox", "auto1", "auto_", "0", "-0.5", "nan", ""])
def test_a_bad_ent_coef_is_a_clear_error(bad):
    with pytest.raises(HetrlError, match="ent_coef must be 'auto', 'auto_X' or a number X"):
        _sac(ent_coef=bad)


def test_sac_refuses_discrete_actions_and_n_step():
    with pytest.raises(HetrlError, match="sac needs a continuous .* CartPole-v1 has discrete actions; use dqn"):
        make_algorithm("sac", env_spec("CartPole-v1"), SACConfig())
    with pytest.raises(HetrlError, match="n_step must be 1 for sac"):
        _sac(n_step=3)


def test_the_policy_delay_spaces_the_actor_and_temperature_steps():
    learner = LearnTorch(_sac(policy_delay=3), "cpu", seed=0).learner
    actor_moved, critic_moved = [], []
    for i in range(6):
        actor, critic = copy.deepcopy(learner.actor.state_dict()), copy.deepcopy(learner.critic.state_dict())
        alpha = learner.alpha
        learner.update(_batch(_sac(), seed=i))
        moved = not torch.equal(actor["net.4.weight"], learner.actor.state_dict()["net.4.weight"])
        assert moved == (learner.alpha != alpha)
        actor_moved.append(moved)
        critic_moved.append(not torch.equal(critic["heads.0.0.weight"], learner.critic.state_dict()["heads.0.0.weight"]))
    assert actor_moved == [False, False, True, False, False, True] and all(critic_moved)


def test_the_noise_comes_from_the_learners_seeded_generator():
    algo = _sac()
    batch = _batch(algo)
    a, b, c = (LearnTorch(algo, "cpu", seed=s).learner for s in (1, 1, 2))
    da, db, dc = a.draw_inputs(batch), b.draw_inputs(batch), c.draw_inputs(batch)
    assert set(da) == {"next_noise", "actor_noise"} and da["next_noise"].shape == batch["actions"].shape
    assert all(torch.equal(da[k], db[k]) for k in da) and not torch.equal(da["next_noise"], dc["next_noise"])
    assert not torch.equal(da["next_noise"], da["actor_noise"])
    big = a.draw_inputs({"actions": torch.zeros(20_000, 1)})["next_noise"]
    assert abs(float(big.mean())) < 0.03 and abs(float(big.std()) - 1) < 0.03


def test_the_update_as_the_graphed_learner_drives_it():
    """Learn/cudagraph calls ``step`` and ``periodic`` itself on one dict of static inputs, the draws
    included (algos/graphed.py); that must equal ``update``."""
    algo = _sac(policy_delay=2)
    plain, driven = (LearnTorch(algo, "cpu", seed=5).learner for _ in range(2))
    for i in range(4):
        batch = _batch(algo, seed=i)
        want = plain.update(batch)
        static = dict(batch)
        static.update(driven.draw_inputs(static))
        got = driven.step(static)
        driven.updates += 1
        if driven.periodic_due():
            driven.periodic(static)
        assert torch.equal(got["loss"], want["loss"]) and torch.equal(got["td_errors"], want["td_errors"])
    for name in ("actor", "critic", "critic_target"):
        for key, value in plain.state_dict()[name].items():
            assert torch.equal(value, driven.state_dict()[name][key]), f"{name}.{key}"
    assert torch.equal(plain.log_alpha, driven.log_alpha)


def test_a_checkpoint_restores_the_learner_exactly():
    algo = _sac()
    learner = LearnTorch(algo, "cpu", seed=0).learner
    for i in range(3):
        learner.update(_batch(algo, seed=i))
    state = copy.deepcopy(learner.state_dict())
    assert state["updates"] == 3 and state["log_alpha"].item() != 0.0 and state["alpha_optimizer"]["state"]
    other = LearnTorch(algo, "cpu", seed=7).learner
    other.load_state_dict(state)
    batch = _batch(algo, seed=10)
    a, b = learner.update(batch), other.update(batch)
    assert torch.equal(a["td_errors"], b["td_errors"]) and torch.equal(learner.log_alpha, other.log_alpha)
    assert all(torch.equal(v, other.actor.state_dict()[k]) for k, v in learner.actor.state_dict().items())
    fixed = LearnTorch(_sac(ent_coef="0.5"), "cpu", seed=0).learner
    with pytest.raises(ValueError, match="temperature was fixed"):
        other.load_state_dict(fixed.state_dict())


# ---------------------------------------------------------------------------------------------
# Acting


def test_the_gaussian_actors_numpy_forward_matches_torch():
    torch.manual_seed(0)
    actor = GaussianActor(5, 2, (32, 16), low=(-2.0, 0.0), high=(2.0, 1.0))
    with torch.no_grad():
        actor.net[-1].bias[2] = -30.0  # the first action's log std below the clamp
        actor.net[-1].bias[3] = 0.0
    obs = 3 * np.random.default_rng(0).standard_normal((50, 5)).astype(np.float32)
    got = actor.forward_numpy(numpy_params(actor), obs)
    with torch.no_grad():
        want = actor(torch.as_tensor(obs)).numpy()
    assert got.shape == (50, 4)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    assert got[:, 2].min() == -20.0 and got[:, 3].min() > -20  # clamped in both


def test_the_action_rules_sample_the_squashed_gaussian():
    algo = _sac("MountainCarContinuous-v0")  # bounds [-1, 1]
    pendulum = _sac()  # bounds [-2, 2]
    rng = np.random.default_rng(0)
    out = np.array([[0.3, math.log(0.5)], [-4.0, math.log(2.0)]], np.float32)
    eps = rng.standard_normal((2, 1)).astype(np.float32)
    np.testing.assert_allclose(algo.action_rule(out, eps, np.zeros_like(eps), 1.0), np.tanh(out[:, :1] + np.exp(out[:, 1:]) * eps), rtol=1e-6)
    np.testing.assert_allclose(pendulum.action_rule(out, eps, np.zeros_like(eps), 1.0),
                               2 * np.tanh(out[:, :1] + np.exp(out[:, 1:]) * eps), rtol=1e-6)
    np.testing.assert_allclose(pendulum.greedy_rule(out), 2 * np.tanh(out[:, :1]), rtol=1e-6)
    explore, random = pendulum.draw_exploration(rng, 50_000)
    assert explore.dtype == np.float32 and explore.shape == (50_000, 1) and abs(explore.std() - 1) < 0.02
    many = pendulum.action_rule(np.repeat(out[:1], 50_000, 0), explore, random, 1.0)
    assert many.min() >= -2 and many.max() <= 2 and many.dtype == np.float32
    samples = 2 * np.tanh(0.3 + 0.5 * rng.standard_normal(200_000))
    assert abs(many.mean() - samples.mean()) < 0.02  # the behaviour policy is the learner's distribution


def test_the_learner_samples_what_acting_samples():
    """The learner's reparameterised action for noise eps equals the action rule's for the same eps."""
    algo = _sac()
    learner = LearnTorch(algo, "cpu", seed=0).learner
    obs = torch.randn(8, 3)
    eps = torch.randn(8, 1)
    with torch.no_grad():
        actions, _ = learner.actor.sample(obs, eps)
        out = learner.actor(obs).numpy()
    np.testing.assert_allclose(algo.action_rule(out, eps.numpy(), np.zeros((8, 1), np.float32), 1.0), actions.numpy(), rtol=1e-5, atol=1e-6)


def test_numba_acting_and_the_numba_learner_refuse_sac():
    """Learn/blas serves SAC (tests/primitives/test_learn_blas_sac.py); Act/numba and Learn/numba do not."""
    algo = _sac()
    assert "Gaussian policy; use the numpy or torch policy" in get("Act", "numba").unsupported(algo)
    assert "implements DQN only, not sac" in get("Learn", "numba").unsupported(algo)
    assert get("Act", "numpy").unsupported(algo) is None and get("Learn", "torch").unsupported(algo) is None
    assert get("Learn", "blas").unsupported(algo) is None
    with pytest.raises(HetrlError, match="implements DQN only"):
        build("Learn", Slot("numba"), algo, 0)


def test_a_checkpoint_from_another_device_type_reseeds_the_generator():
    """A GPU run's state (a CUDA generator's) loads into a host learner, reseeded the same way each time."""
    algo = _sac()
    state = LearnTorch(algo, "cpu", seed=0).learner.state_dict()
    state["generator"], state["generator_device"] = torch.arange(16, dtype=torch.uint8), "cuda"
    draws = []
    for _ in range(2):
        learner = LearnTorch(algo, "cpu", seed=1).learner
        learner.load_state_dict(state)
        draws.append(learner.draw_inputs({"actions": torch.zeros(4, 1)})["next_noise"])
    assert torch.equal(draws[0], draws[1])
    fresh = LearnTorch(algo, "cpu", seed=1).learner
    assert not torch.equal(draws[0], fresh.draw_inputs({"actions": torch.zeros(4, 1)})["next_noise"])
