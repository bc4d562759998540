"""Learn/blas for SAC: the hand-written update computes what the torch learner computes, update by
update, from the same weights, batches and noise draws; its checkpoint resumes it bit for bit (and
moves to and from the torch learner: test_learn_blas.py); its squashed Gaussian kernels against
autograd."""

import copy

import numpy as np
import pytest
import torch

from test_learn_blas import WIDE, _batch, _torch  # DDPG's cases: the same batches, and the wide observation's env

from hetrl.algos import make_algorithm
from hetrl.algos.sac import SACConfig
from hetrl.envs import env_spec
from hetrl.nets import GaussianActor
from hetrl.primitives import build, get
from hetrl.primitives import learn_blas as blas_module
from hetrl.primitives.learn_blas import LearnBlas, SACBlasLearner
from hetrl.primitives.learn_torch import LearnTorch
from hetrl.protocol import Slot


def _close(a, b, name, atol=1e-5):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-4, atol=atol, err_msg=name)


def _clamp_some_log_stds(learners, act_dim):
    """Log std biases past the clamp's lower end (two) and just inside it, on every learner alike, so
    that the clamp's gradient (none outside, all inside) is exercised. Not past the upper end: a
    std of e^2 saturates the tanh, where log(1 - tanh^2 + eps) turns the last bit of a parameter into
    1e-3 of a log density, in torch's formula as in this one (test_the_squashed_gaussian_kernels_match_autograd
    covers the upper end)."""
    for learner in learners:
        bias = learner.actor.net[-1].bias
        with torch.no_grad():
            bias[act_dim:] = torch.tensor([-25.0, -30.0, -19.5][:act_dim])


CASES = {
    "Pendulum, tuned temperature": ("Pendulum-v1", SACConfig(hidden=(32, 24), lr=3e-3), False),
    "clipped, narrow hidden layer, policy delay 2": ("Pendulum-v1", SACConfig(hidden=(8, 48, 16), lr=3e-3, max_grad_norm=0.5,
                                                                              policy_delay=2, ent_coef="auto_0.3"), False),
    "wide obs, 3 actions, fixed temperature, Polyak 1": (WIDE, SACConfig(hidden=(32,), lr=3e-3, tau=1.0, ent_coef="0.2"), False),
    "wide obs, 3 actions, log stds clamped": (WIDE, SACConfig(hidden=(32, 32), lr=3e-3, target_entropy=-1.5), True),
}


@pytest.mark.parametrize("case", CASES)
def test_blas_sac_matches_torch_update_by_update(case):
    env, cfg, clamped = CASES[case]
    spec = env_spec(env) if isinstance(env, str) else env
    algo = make_algorithm("sac", spec, cfg)
    blas, plain = LearnBlas(algo, "cpu", seed=3), LearnTorch(algo, "cpu", seed=3)
    mine, theirs = blas.learner, plain.learner
    act_dim = spec.action_shape[0]
    if clamped:
        _clamp_some_log_stds([mine, theirs], act_dim)
    start = copy.deepcopy(mine.state_dict())
    rng = np.random.default_rng(0)
    actor_steps = 0
    for i in range(12):
        batch = _batch(rng, spec)
        a, b = blas.learn(**batch), plain.learn(**_torch(batch))
        _close(a["loss"].item(), b["loss"].item(), f"critic loss, update {i}", atol=1e-6)
        _close(a["td_errors"], b["td_errors"], f"td errors, update {i}")
        assert a.keys() == b.keys()  # the actor's loss on the same updates (every policy_delay)
        if "actor_loss" in b:
            _close(a["actor_loss"].item(), b["actor_loss"].item(), f"actor loss, update {i}", atol=1e-6)
            assert a["actor_loss"].shape == () and a["actor_loss"].dtype == torch.float32
            actor_steps += 1
            if theirs.alpha_loss is not None:
                _close(mine.alpha_loss.item(), theirs.alpha_loss.item(), f"alpha loss, update {i}", atol=1e-6)
        _close(mine.log_alpha, theirs.log_alpha.detach(), f"log alpha, update {i}", atol=1e-6)
    assert actor_steps == 12 // cfg.policy_delay and mine.updates == theirs.updates == 12
    assert torch.equal(mine.generator.get_state(), theirs.generator.get_state())  # the same draws, as many
    got, want = mine.state_dict(), theirs.state_dict()
    for net in ("actor", "critic", "critic_target"):
        for key, value in want[net].items():
            _close(got[net][key], value, f"{net}.{key}")
            if net == "actor" and clamped and key == "net.4.bias":  # no gradient past the clamp: those stay put
                assert torch.equal(got[net][key][act_dim:act_dim + 2], start[net][key][act_dim:act_dim + 2])
    for name in ("actor_optimizer", "critic_optimizer", "alpha_optimizer"):
        if want[name] is None:
            assert got[name] is None and mine.alpha == pytest.approx(0.2)
            continue
        assert got[name]["state"].keys() == want[name]["state"].keys()
        for i, moments in want[name]["state"].items():
            assert float(got[name]["state"][i]["step"]) == float(moments["step"]), name
            for kind in ("exp_avg", "exp_avg_sq"):
                _close(got[name]["state"][i][kind], moments[kind], f"{name}[{i}].{kind}", atol=1e-6)
    assert not torch.allclose(got["actor"]["net.0.weight"], start["actor"]["net.0.weight"])  # the actor did move
    assert not torch.allclose(got["critic_target"]["heads.1.0.weight"], start["critic_target"]["heads.1.0.weight"])


def _run(learn, batches):
    return [{k: v.clone() for k, v in learn.learn(**batch).items()} for batch in batches]


def test_a_checkpoint_resumes_the_blas_learner_bit_for_bit():
    """N updates, a checkpoint into a fresh learner (other seed), M more == N + M straight: the
    weights, moments, temperature and the noise generator's state are all in it."""
    algo = make_algorithm("sac", env_spec("Pendulum-v1"), SACConfig(hidden=(32, 32), policy_delay=2))
    rng = np.random.default_rng(1)
    batches = [_batch(rng, algo.spec) for _ in range(9)]
    straight = LearnBlas(algo, "cpu", seed=0)
    want = _run(straight, batches)
    first = LearnBlas(algo, "cpu", seed=0)
    _run(first, batches[:5])
    state = copy.deepcopy(first.learner.state_dict())
    resumed = LearnBlas(algo, "cpu", seed=7)
    resumed.learner.load_state_dict(state)
    got = _run(resumed, batches[5:])
    for a, b in zip(got, want[5:]):
        assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    mine, theirs = resumed.learner.state_dict(), straight.learner.state_dict()
    for name in ("actor", "critic", "critic_target"):
        assert all(torch.equal(v, theirs[name][k]) for k, v in mine[name].items()), name
    for name in ("actor_optimizer", "critic_optimizer", "alpha_optimizer"):
        for i, moments in theirs[name]["state"].items():
            assert all(torch.equal(v, mine[name]["state"][i][k]) for k, v in moments.items()), name
    assert torch.equal(mine["log_alpha"], theirs["log_alpha"]) and torch.equal(mine["generator"], theirs["generator"])
    assert mine["updates"] == theirs["updates"] == 9


def test_the_blas_learner_serves_sac_through_the_registry():
    algo = make_algorithm("sac", env_spec("Pendulum-v1"), SACConfig(hidden=(16, 16)))
    assert get("Learn", "blas").unsupported(algo) is None
    learn = build("Learn", Slot("blas"), algo, 0)
    assert isinstance(learn.learner, SACBlasLearner) and isinstance(learn.learner.policy_network, GaussianActor)
    obs = torch.ones(1, 3)
    before = learn.learner.policy_network(obs).detach().clone()
    first = learn.learn(**_batch(np.random.default_rng(3), algo.spec))
    kept = first["loss"].item(), first["td_errors"].clone(), first["actor_loss"].item()
    learn.learn(**_batch(np.random.default_rng(4), algo.spec))
    # acting reads the torch actor, whose parameters are the learner's; the executor keeps each update's losses
    assert not torch.equal(before, learn.learner.policy_network(obs).detach())
    assert first["loss"].item() == kept[0] and torch.equal(first["td_errors"], kept[1]) and first["actor_loss"].item() == kept[2]


def test_the_squashed_gaussian_kernels_match_autograd():
    """squashed_gaussian equals GaussianActor.sample on the same output and noise, and its backward
    equals autograd's gradient of a loss on the actions and log densities, the clamp's ends included."""
    rows, act_dim = 37, 3
    rng = np.random.default_rng(5)
    low, high = np.array([-1.0, -2.0, 0.0], np.float32), np.array([1.0, 2.0, 0.5], np.float32)
    actor = GaussianActor(1, act_dim, (), low, high)
    actor.net = torch.nn.Identity()  # sample() then reads its input as the network's output
    out = rng.standard_normal((rows, 2 * act_dim)).astype(np.float32)
    out[:4, act_dim:] = [[2.0, -20.0, 2.5], [-21.0, 3.0, 0.1], [1.9, -19.5, -30.0], [0.0, 0.0, 2.0]]
    noise = rng.standard_normal((rows, act_dim)).astype(np.float32)
    action_grad = rng.standard_normal((rows, act_dim)).astype(np.float32)
    coef = np.float32(0.37)
    out_t = torch.tensor(out, requires_grad=True)
    actions_t, log_prob_t = actor.sample(out_t, torch.tensor(noise))
    ((actions_t * torch.tensor(action_grad)).sum() + coef * log_prob_t.sum()).backward()
    actions, squashed = np.zeros((rows, act_dim), np.float32), np.zeros((rows, act_dim), np.float32)
    log_prob = np.zeros(rows, np.float32)
    blas_module.squashed_gaussian(out, noise, actor.scale.numpy(), actor.center.numpy(), actions, squashed, log_prob)
    _close(actions, actions_t.detach(), "actions", atol=1e-6)
    _close(log_prob, log_prob_t.detach(), "log densities")
    out_grad = np.zeros_like(out)
    blas_module.squashed_gaussian_backward(out, noise, squashed, action_grad, coef, actor.scale.numpy(), out_grad)
    _close(out_grad, out_t.grad, "output gradient")
    assert out_grad[0, act_dim] != 0 and out_grad[0, act_dim + 2] == 0 and out_grad[1, act_dim] == 0  # at the bound, past it
