"""Each algorithm's update rule against a computation by hand: one update (two for TD3's delayed
actor) of a tiny network on a batch of 2, on the torch learner, checked against targets, losses,
gradients, Adam steps and target networks written here in numpy, from the papers' formulas and
independently of hetrl's code. The other learner backends are checked against the torch learner
(tests/primitives), so a rule wrong in every backend fails here.

Weights are drawn by the test (targets differ from the online networks), the batch is written out,
and the arithmetic is float64; the learner's is float32.
"""

import math

import numpy as np
import pytest
import torch
from torch import nn

from hetrl.algos import DDPGConfig, DQNConfig, SACConfig, TD3Config, make_algorithm
from hetrl.envs.spec import EnvSpec

DISCRETE = EnvSpec("hand-discrete", (3,), True, 2, (), (), (), None, False)
# asymmetric bounds: scale 2, centre 1
CONTINUOUS = EnvSpec("hand-continuous", (3,), False, 0, (1,), (-1.0,), (3.0,), None, False)
SCALE, CENTER, LOW, HIGH = 2.0, 1.0, -1.0, 3.0

OBS = np.array([[0.5, -1.0, 2.0], [1.5, 0.3, -0.7]])
NEXT_OBS = np.array([[-0.2, 0.8, 1.1], [0.9, -1.4, 0.4]])
DISCOUNTS = np.array([0.9, 0.0])  # the second transition ended its episode
WEIGHTS = np.array([1.0, 0.4])  # importance-sampling weights
B = 2


# --- numpy: an MLP of Linear layers with ReLU between, its backward pass, Adam ------------------
def forward(layers, x):
    """Output and every layer's activation (the input first)."""
    acts = [x]
    for i, (w, b) in enumerate(layers):
        z = acts[-1] @ w.T + b
        acts.append(np.maximum(z, 0) if i < len(layers) - 1 else z)
    return acts[-1], acts


def backward(layers, acts, dout):
    """Gradients [(dW, db), ...] for the output gradient ``dout``, and the gradient of the input."""
    grads = []
    for i in reversed(range(len(layers))):
        if i < len(layers) - 1:
            dout = dout * (acts[i + 1] > 0)
        grads.append((dout.T @ acts[i], dout.sum(axis=0)))
        dout = dout @ layers[i][0]
    return grads[::-1], dout


class Adam:
    """Kingma and Ba's Adam (torch's defaults: betas 0.9, 0.999, eps 1e-8), for a list of arrays."""

    def __init__(self, lr):
        self.lr, self.t, self.m, self.v = lr, 0, None, None

    def step(self, params, grads):
        flat_p, flat_g = [p for pair in params for p in pair], [g for pair in grads for g in pair]
        if self.m is None:
            self.m, self.v = [np.zeros_like(g) for g in flat_g], [np.zeros_like(g) for g in flat_g]
        self.t += 1
        out = []
        for k, (p, g) in enumerate(zip(flat_p, flat_g)):
            self.m[k] = 0.9 * self.m[k] + 0.1 * g
            self.v[k] = 0.999 * self.v[k] + 0.001 * g * g
            m_hat, v_hat = self.m[k] / (1 - 0.9 ** self.t), self.v[k] / (1 - 0.999 ** self.t)
            out.append(p - self.lr * m_hat / (np.sqrt(v_hat) + 1e-8))
        return [(out[i], out[i + 1]) for i in range(0, len(out), 2)]


def polyak(target, source, tau):
    return [((1 - tau) * tw + tau * sw, (1 - tau) * tb + tau * sb) for (tw, tb), (sw, sb) in zip(target, source)]


# --- torch modules <-> numpy layers ---------------------------------------------------------------
def linears(seq: nn.Sequential):
    return [m for m in seq if isinstance(m, nn.Linear)]


def randomise(seq: nn.Sequential, rng):
    """Weights of the test's choosing (so that targets differ from the online networks)."""
    with torch.no_grad():
        for m in linears(seq):
            m.weight.copy_(torch.as_tensor(rng.uniform(-1, 1, m.weight.shape)))
            m.bias.copy_(torch.as_tensor(rng.uniform(-0.5, 0.5, m.bias.shape)))
    return read(seq)


def read(seq: nn.Sequential):
    return [(m.weight.detach().double().numpy().copy(), m.bias.detach().double().numpy().copy()) for m in linears(seq)]


def read_grads(seq: nn.Sequential):
    return [(m.weight.grad.double().numpy(), m.bias.grad.double().numpy()) for m in linears(seq)]


def assert_layers(got, want, what, rtol=1e-4, atol=1e-6):
    assert len(got) == len(want), what
    for i, ((gw, gb), (ww, wb)) in enumerate(zip(got, want)):
        np.testing.assert_allclose(gw, ww, rtol=rtol, atol=atol, err_msg=f"{what} layer {i} weight")
        np.testing.assert_allclose(gb, wb, rtol=rtol, atol=atol, err_msg=f"{what} layer {i} bias")


def assert_moves(grads, what):
    """The hand computation exercises this network: not every gradient is zero (a dead ReLU layer)."""
    assert all(np.abs(g).sum() > 1e-3 for pair in grads for g in pair), f"{what}: a zero gradient; pick other weights"


def tensors(**arrays):
    return {k: torch.as_tensor(v, dtype=torch.int64 if k == "actions" and v.dtype.kind == "i" else torch.float32)
            for k, v in arrays.items()}


# --- DQN ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("double", [True, False])
@pytest.mark.parametrize("max_grad_norm", [None, 0.2])
def test_dqn_update_by_hand(double, max_grad_norm):
    """Double (or max) Q-learning target, Huber loss weighted by the IS weights, clipping by the
    global norm, one Adam step; a hard target copy not yet due."""
    cfg = DQNConfig(hidden=(3,), lr=0.01, double=double, max_grad_norm=max_grad_norm, target_update_every=100)
    learner = make_algorithm("dqn", DISCRETE, cfg).build_learner(torch.device("cpu"), seed=0)
    rng = np.random.default_rng(1)
    q_net, target_net = randomise(learner.q.trunk, rng), randomise(learner.q_target.trunk, rng)
    actions, rewards = np.array([1, 0]), np.array([-0.55, -2.0])

    q_all, acts = forward(q_net, OBS)
    q = q_all[np.arange(B), actions]
    next_target = forward(target_net, NEXT_OBS)[0]
    if double:  # the online network picks the action, the target network values it
        next_q = next_target[np.arange(B), forward(q_net, NEXT_OBS)[0].argmax(axis=1)]
    else:
        next_q = next_target.max(axis=1)
    target = rewards + DISCOUNTS * next_q
    delta = q - target
    assert (np.abs(delta) < 1).any() and (np.abs(delta) > 1).any(), delta  # both branches of the Huber loss
    huber = np.where(np.abs(delta) < 1, 0.5 * delta**2, np.abs(delta) - 0.5)
    loss = np.mean(WEIGHTS * huber)
    dout = np.zeros_like(q_all)
    dout[np.arange(B), actions] = WEIGHTS * np.clip(delta, -1, 1) / B
    grads, _ = backward(q_net, acts, dout)
    assert_moves(grads, "q")
    if max_grad_norm is not None:
        norm = math.sqrt(sum((g**2).sum() for pair in grads for g in pair))
        assert norm > max_grad_norm  # the clip is taken
        grads = [(w * max_grad_norm / (norm + 1e-6), b * max_grad_norm / (norm + 1e-6)) for w, b in grads]

    out = learner.update(tensors(obs=OBS, actions=actions, rewards=rewards, next_obs=NEXT_OBS, discounts=DISCOUNTS,
                                 weights=WEIGHTS))
    np.testing.assert_allclose(out["loss"].item(), loss, rtol=1e-5)
    np.testing.assert_allclose(out["td_errors"].numpy(), np.abs(delta), rtol=1e-5, atol=1e-6)
    assert_layers(read_grads(learner.q.trunk), grads, "q gradient")
    assert_layers(read(learner.q.trunk), Adam(cfg.lr).step(q_net, grads), "q after Adam")
    assert_layers(read(learner.q_target.trunk), target_net, "target (no copy due)", atol=0)


# --- DDPG, TD3 ------------------------------------------------------------------------------------
def critic_input(obs, actions):
    return np.concatenate([obs, actions], axis=1)


def actor_forward(layers, obs):
    pre, acts = forward(layers, obs)
    return np.tanh(pre) * SCALE + CENTER, pre, acts


def actor_step(actor, critic, obs, adam):
    """DDPG's actor step: minimise -mean(Q_1(s, mu(s))) through the (just updated) first critic."""
    action, pre, acts = actor_forward(actor, obs)
    q, c_acts = forward(critic, critic_input(obs, action))
    _, dx = backward(critic, c_acts, -np.ones((B, 1)) / B)
    grads, _ = backward(actor, acts, dx[:, obs.shape[1]:] * SCALE * (1 - np.tanh(pre) ** 2))
    return -q.mean(), grads, adam.step(actor, grads)


def test_ddpg_update_by_hand():
    """Target from the target actor and critic, weighted squared error, Adam; then the actor's
    step through the updated critic; then both targets' Polyak average."""
    cfg = DDPGConfig(hidden=(3,), lr=0.01, tau=0.1, max_grad_norm=None)
    learner = make_algorithm("ddpg", CONTINUOUS, cfg).build_learner(torch.device("cpu"), seed=0)
    rng = np.random.default_rng(2)
    actor, critic = randomise(learner.actor.net, rng), randomise(learner.critic.heads[0], rng)
    actor_t, critic_t = randomise(learner.actor_target.net, rng), randomise(learner.critic_target.heads[0], rng)
    actions, rewards = np.array([[0.5], [-0.8]]), np.array([0.3, -1.2])

    next_actions = actor_forward(actor_t, NEXT_OBS)[0]
    target = rewards + DISCOUNTS * forward(critic_t, critic_input(NEXT_OBS, next_actions))[0][:, 0]
    q, c_acts = forward(critic, critic_input(OBS, actions))
    delta = q[:, 0] - target
    loss = np.mean(WEIGHTS * delta**2)
    critic_grads, _ = backward(critic, c_acts, (2 * WEIGHTS * delta / B)[:, None])
    assert_moves(critic_grads, "critic")
    critic_new = Adam(cfg.lr).step(critic, critic_grads)
    _, actor_grads, actor_new = actor_step(actor, critic_new, OBS, Adam(cfg.lr))
    assert_moves(actor_grads, "actor")

    out = learner.update(tensors(obs=OBS, actions=actions, rewards=rewards, next_obs=NEXT_OBS, discounts=DISCOUNTS,
                                 weights=WEIGHTS))
    np.testing.assert_allclose(out["loss"].item(), loss, rtol=1e-5)
    np.testing.assert_allclose(out["td_errors"].numpy(), np.abs(delta), rtol=1e-5, atol=1e-6)
    assert_layers(read_grads(learner.critic.heads[0]), critic_grads, "critic gradient")
    assert_layers(read(learner.critic.heads[0]), critic_new, "critic after Adam")
    assert_layers(read_grads(learner.actor.net), actor_grads, "actor gradient")
    assert_layers(read(learner.actor.net), actor_new, "actor after Adam")
    assert_layers(read(learner.actor_target.net), polyak(actor_t, actor_new, 0.1), "actor target")
    assert_layers(read(learner.critic_target.heads[0]), polyak(critic_t, critic_new, 0.1), "critic target")


def test_td3_two_updates_by_hand():
    """Twin critics towards the smaller target Q, at a target action smoothed by clipped noise and
    clipped to the bounds; the actor (through the first critic) and both targets move on every
    second update only."""
    cfg = TD3Config(hidden=(3,), lr=0.01, tau=0.1, target_noise=0.2, target_noise_clip=1.5, policy_delay=2,
                    max_grad_norm=None)
    learner = make_algorithm("td3", CONTINUOUS, cfg).build_learner(torch.device("cpu"), seed=0)
    rng = np.random.default_rng(7)
    actor, actor_t = randomise(learner.actor.net, rng), randomise(learner.actor_target.net, rng)
    critics = [randomise(head, rng) for head in learner.critic.heads]
    critics_t = [randomise(head, rng) for head in learner.critic_target.heads]
    actions, rewards = np.array([[0.5], [-0.8]]), np.array([0.3, -1.2])
    # standard normal draws: 10 * 0.2 is clipped to 1.5, which pushes the action past the upper bound; -40
    # past the lower one
    draws = [np.array([[10.0], [-1.0]]), np.array([[0.5], [-40.0]])]
    learner.draw_inputs = lambda batch: {"target_noise": torch.as_tensor(draws[learner.updates], dtype=torch.float32)}

    adams = [Adam(cfg.lr), Adam(cfg.lr)]
    actor_adam = Adam(cfg.lr)
    batch = tensors(obs=OBS, actions=actions, rewards=rewards, next_obs=NEXT_OBS, discounts=DISCOUNTS, weights=WEIGHTS)
    for update in (1, 2):
        noise = np.clip(draws[update - 1] * 0.2, -1.5, 1.5) * SCALE
        next_actions = np.clip(actor_forward(actor_t, NEXT_OBS)[0] + noise, LOW, HIGH)
        assert next_actions[0, 0] == HIGH if update == 1 else next_actions[1, 0] == LOW  # the bounds are exercised
        next_q = np.minimum(*(forward(c, critic_input(NEXT_OBS, next_actions))[0][:, 0] for c in critics_t))
        target = rewards + DISCOUNTS * next_q
        loss, deltas = 0.0, []
        for k, critic in enumerate(critics):
            q, c_acts = forward(critic, critic_input(OBS, actions))
            delta = q[:, 0] - target
            deltas.append(delta)
            loss += np.mean(WEIGHTS * delta**2)
            grads, _ = backward(critic, c_acts, (2 * WEIGHTS * delta / B)[:, None])
            critics[k] = adams[k].step(critic, grads)
        actor_before = read(learner.actor.net)
        out = learner.update(batch)
        np.testing.assert_allclose(out["loss"].item(), loss, rtol=1e-5)
        np.testing.assert_allclose(out["td_errors"].numpy(), np.abs(deltas[0]), rtol=1e-5, atol=1e-6)
        for k, head in enumerate(learner.critic.heads):
            assert_layers(read(head), critics[k], f"critic {k} after update {update}")
        if update == 1:  # the actor and the targets wait
            assert_layers(read(learner.actor.net), actor_before, "actor after update 1", atol=0)
            assert_layers(read(learner.actor_target.net), actor_t, "actor target after update 1", atol=0)
            for k, head in enumerate(learner.critic_target.heads):
                assert_layers(read(head), critics_t[k], f"critic target {k} after update 1", atol=0)
    _, actor_grads, actor = actor_step(actor, critics[0], OBS, actor_adam)
    assert_moves(actor_grads, "actor")
    assert_layers(read_grads(learner.actor.net), actor_grads, "actor gradient")
    assert_layers(read(learner.actor.net), actor, "actor after update 2")
    assert_layers(read(learner.actor_target.net), polyak(actor_t, actor, 0.1), "actor target after update 2")
    for k, head in enumerate(learner.critic_target.heads):
        assert_layers(read(head), polyak(critics_t[k], critics[k], 0.1), f"critic target {k} after update 2")


# --- SAC ------------------------------------------------------------------------------------------
def squashed(layers, obs, eps):
    """A squashed Gaussian's reparameterised action and its log density (Haarnoja et al. 2018, app. C),
    with the pieces the backward pass needs."""
    out, acts = forward(layers, obs)
    mu, log_std = out[:, :1], np.clip(out[:, 1:], -20, 2)
    std = np.exp(log_std)
    y = np.tanh(mu + std * eps)
    log_prob = (-0.5 * eps**2 - log_std - 0.5 * np.log(2 * np.pi) - np.log(1 - y**2 + 1e-6)).sum(axis=1)
    return y * SCALE + CENTER, log_prob, (acts, std, y)


def test_sac_update_by_hand():
    """Critics towards r + discount * (min target Q - alpha * log pi) at a fresh next action, halved
    squared error; the critics' targets follow by Polyak; the actor minimises alpha * log pi - min Q
    through the updated critics; the temperature steps on -(log alpha * (log pi + target entropy)),
    all with the temperature of the update's start."""
    cfg = SACConfig(hidden=(3,), lr=0.01, tau=0.1, ent_coef="auto_0.5", max_grad_norm=None)
    learner = make_algorithm("sac", CONTINUOUS, cfg).build_learner(torch.device("cpu"), seed=0)
    rng = np.random.default_rng(5)
    actor = randomise(learner.actor.net, rng)
    critics = [randomise(head, rng) for head in learner.critic.heads]
    critics_t = [randomise(head, rng) for head in learner.critic_target.heads]
    actions, rewards = np.array([[0.5], [-0.8]]), np.array([0.3, -1.2])
    next_eps, eps = np.array([[0.7], [-1.3]]), np.array([[-0.4], [1.1]])
    learner.draw_inputs = lambda batch: {"next_noise": torch.as_tensor(next_eps, dtype=torch.float32),
                                         "actor_noise": torch.as_tensor(eps, dtype=torch.float32)}
    alpha, target_entropy = 0.5, -1.0  # -dim(A)

    next_actions, next_log_prob, _ = squashed(actor, NEXT_OBS, next_eps)
    next_q = np.minimum(*(forward(c, critic_input(NEXT_OBS, next_actions))[0][:, 0] for c in critics_t))
    target = rewards + DISCOUNTS * (next_q - alpha * next_log_prob)
    loss, deltas, critics_new = 0.0, [], []
    for critic in critics:
        q, c_acts = forward(critic, critic_input(OBS, actions))
        delta = q[:, 0] - target
        deltas.append(delta)
        loss += 0.5 * np.mean(WEIGHTS * delta**2)
        grads, _ = backward(critic, c_acts, (WEIGHTS * delta / B)[:, None])
        assert_moves(grads, "critic")
        critics_new.append(Adam(cfg.lr).step(critic, grads))

    new_actions, log_prob, (acts, std, y) = squashed(actor, OBS, eps)
    qs = [forward(c, critic_input(OBS, new_actions)) for c in critics_new]
    values = np.stack([q[:, 0] for q, _ in qs])
    lower = values.argmin(axis=0)  # the gradient of min Q goes to the smaller critic, per sample
    assert set(lower) == {0, 1}, values  # both critics carry some of it
    dq_da = np.zeros((B, 1))
    for k, (critic, (_, c_acts)) in enumerate(zip(critics_new, qs)):
        _, dx = backward(critic, c_acts, np.where(lower == k, 1.0, 0.0)[:, None])
        dq_da += dx[:, 3:]
    actor_loss = np.mean(alpha * log_prob - values.min(axis=0))
    dlogp_du = 2 * y * (1 - y**2) / (1 - y**2 + 1e-6)
    du = (alpha * dlogp_du - dq_da * SCALE * (1 - y**2)) / B
    dout = np.concatenate([du, du * std * eps - alpha / B], axis=1)  # d/dmu, d/dlog_std (within the clamp)
    actor_grads, _ = backward(actor, acts, dout)
    assert_moves(actor_grads, "actor")
    alpha_grad = -np.mean(log_prob + target_entropy)
    alpha_loss = -np.mean(np.log(alpha) * (log_prob + target_entropy))

    out = learner.update(tensors(obs=OBS, actions=actions, rewards=rewards, next_obs=NEXT_OBS, discounts=DISCOUNTS,
                                 weights=WEIGHTS))
    np.testing.assert_allclose(out["loss"].item(), loss, rtol=1e-5)
    np.testing.assert_allclose(out["td_errors"].numpy(), np.abs(deltas[0]), rtol=1e-5, atol=1e-6)
    for k, head in enumerate(learner.critic.heads):
        assert_layers(read(head), critics_new[k], f"critic {k} after Adam")
    for k, head in enumerate(learner.critic_target.heads):
        assert_layers(read(head), polyak(critics_t[k], critics_new[k], 0.1), f"critic target {k}")
    np.testing.assert_allclose(learner.actor_loss.item(), actor_loss, rtol=1e-5)
    assert_layers(read_grads(learner.actor.net), actor_grads, "actor gradient")
    assert_layers(read(learner.actor.net), Adam(cfg.lr).step(actor, actor_grads), "actor after Adam")
    np.testing.assert_allclose(learner.alpha_loss.item(), alpha_loss, rtol=1e-5)
    np.testing.assert_allclose(learner.log_alpha.grad.item(), alpha_grad, rtol=1e-5)
    np.testing.assert_allclose(learner.log_alpha.item(), np.log(alpha) - cfg.lr * np.sign(alpha_grad), rtol=1e-6)
