"""Learn / blas: DDPG's, TD3's and SAC's update (and DQN's: hetrl.nets.flat_q) written out as matrix
products into buffers made once.

At DDPG's usual sizes (256x256 layers, batch 256) an update is ten 256^3 matrix products, which
MKL runs on one core near this CPU's fp32 peak, and some 150 small operations, which in Learn/torch
(autograd's graph, a new tensor for every result, two optimisers walking their per-tensor state)
add a large share on top; here that share is much smaller (bench/fused.py; the figures are in
docs/benchmarks.md, 'Measurements behind the code'). Here:

- the backward pass is written out, so no graph is built, and no gradient nobody reads is
  computed (the actor's step takes the critic's gradient for its action inputs only);
- every intermediate lives in a buffer allocated at the first update of a batch size, on a cache
  line (MKL is slower on operands off one), written with ``out=`` or in place (only the
  returned losses and TD errors are new tensors: the executor keeps them);
- what is not a hidden layer's product is a compiled kernel (hetrl.nets.narrow, and here the loss
  heads, the tanh's backward and SAC's squashed Gaussian sample and its backward), and
  neighbouring steps share a pass where they meet in one row;
- each network's parameters, target, gradient and Adam moments are flat vectors (the torch
  modules' parameters are views of them, so acting, evaluation and state dicts work unchanged), and
  Adam and the Polyak average are one compiled loop per network
  (:class:`hetrl.nets.fused_mlp.FlatAdam`);
- a twin critic's heads lie side by side in those vectors, layer by layer, and each of their hidden
  products is one batched product over both heads (:class:`Stacked`, :class:`MLPPass`).

It computes what :class:`hetrl.algos.ddpg.DDPGLearner` and :class:`hetrl.algos.sac.SACLearner`
compute, to float32 tolerance (tests/primitives/test_learn_blas.py checks DDPG, TD3 and SAC update
by update), and keeps their checkpoint formats, so a run resumes on either backend. The products are
torch's (MKL), so torch's thread count applies.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numba
import numpy as np
import torch
from torch import nn

from hetrl.algos.base import Algorithm, Learner, seeded_init
from hetrl.algos.ddpg import DDPG, DDPGCheckpoint, DDPGConfig
from hetrl.algos.dqn import DQN, DQNCheckpoint, DQNConfig
from hetrl.algos.sac import SAC, SACCheckpoint, SACConfig
from hetrl.nets import Actor, Critic, GaussianActor, narrow
from hetrl.nets.flat_q import FlatQ, QPass
from hetrl.nets.fused_mlp import CACHE_LINE, FlatAdam, FlatMLP, aligned_zeros
from hetrl.nets.mlp import LOG_STD_MAX, LOG_STD_MIN, TANH_EPS
from hetrl.nets.narrow import FOUR, NARROW
from hetrl.primitives.learn_host import LearnOnHost, host_array
from hetrl.protocol import LEARN_INPUTS, implements


@dataclass(frozen=True)
class Dense:
    """One layer's weight (out x in) and bias in a flat vector: torch views, and numpy views for the
    kernels; and which kernels its shape calls for (read on every pass, so computed once)."""

    w: torch.Tensor
    b: torch.Tensor
    w_np: np.ndarray
    b_np: np.ndarray
    few_outputs: bool = field(init=False)  # products as dot products by a compiled kernel (hetrl.nets.narrow), not BLAS
    few_inputs: bool = field(init=False)
    four_inputs: bool = field(init=False)  # forward and weight gradient by unrolled kernels, not BLAS

    def __post_init__(self) -> None:
        n_out, n_in = self.w_np.shape
        object.__setattr__(self, "few_outputs", n_out <= NARROW)
        object.__setattr__(self, "few_inputs", n_in <= NARROW)
        object.__setattr__(self, "four_inputs", n_in <= FOUR)


@dataclass(frozen=True)
class Stacked:
    """Layer l of one or more nets of one shape (a twin critic's heads): each net's :class:`Dense`,
    and all their weights as one (nets x out x in) tensor, so that one batched product (torch.bmm)
    covers every net. On two threads a batched product splits by net, where one product at these
    sizes splits less well (docs/results.md, 'Twin heads in one batched product')."""

    nets: tuple[Dense, ...]
    w: torch.Tensor  # (nets x out x in), contiguous: a batched product writes a weight gradient into it in place
    wt: torch.Tensor = field(init=False)  # w transposed per net (a view), as the forward product reads it
    few_outputs: bool = field(init=False)
    few_inputs: bool = field(init=False)
    four_inputs: bool = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "wt", self.w.transpose(1, 2))
        for name in ("few_outputs", "few_inputs", "four_inputs"):
            object.__setattr__(self, name, getattr(self.nets[0], name))

    def first(self, count: int) -> Stacked:
        """The first ``count`` nets' layer (views of the same numbers)."""
        return Stacked(self.nets[:count], self.w[:count])


class FlatNets:
    """One or more MLPs of one shape (a critic's heads, an actor's trunk) in one flat vector, with a
    target copy (unless ``targets`` is None: SAC's actor has none), a gradient and Adam's moments laid
    out alike: what one optimiser steps and one Polyak average moves (in the same compiled pass).
    The modules' parameters become views of the vectors.

    The layout is by layer: layer l's weights of every net side by side (one contiguous block, which
    a batched product reads and writes whole), then their biases, each block on a cache line."""

    def __init__(self, nets: list[nn.Sequential], targets: list[nn.Sequential] | None, lr: float) -> None:
        self.layouts = [FlatMLP(net) for net in nets]
        self.dims, self.count = self.layouts[0].dims, len(nets)
        if any(not np.array_equal(layout.dims, self.dims) for layout in self.layouts):
            raise ValueError(f"FlatNets holds nets of one shape, got {[layout.dims.tolist() for layout in self.layouts]}")
        line, at = CACHE_LINE // 4, 0
        self.blocks: list[tuple[int, int, int, int]] = []  # per layer: weights' start, biases' start, out, in
        for n_in, n_out in zip(self.dims[:-1].tolist(), self.dims[1:].tolist()):
            w_at, at = at, at + -(-self.count * n_out * n_in // line) * line
            b_at, at = at, at + -(-self.count * n_out // line) * line
            self.blocks.append((w_at, b_at, n_out, n_in))
        self.params, self.grads = aligned_zeros(at), aligned_zeros(at)
        self.target: np.ndarray | None = None if targets is None else aligned_zeros(at)
        for k, layout in enumerate(self.layouts):
            layout.adopt_views(self._net_views(self.params, k))
            if targets is not None:
                FlatMLP(targets[k]).adopt_views(self._net_views(self.target, k))
        self.adam = FlatAdam(at, self.views, lr)
        self.layers, self.grad_layers = self._stacked(self.params), self._stacked(self.grads)
        self.target_layers = [] if self.target is None else self._stacked(self.target)

    def _blocks(self, flat: np.ndarray) -> list[tuple[np.ndarray, np.ndarray]]:
        """Each layer's (nets x out x in) weights and (nets x out) biases in ``flat``."""
        c = self.count
        return [(flat[w:w + c * o * i].reshape(c, o, i), flat[b:b + c * o].reshape(c, o)) for w, b, o, i in self.blocks]

    def _net_views(self, flat: np.ndarray, k: int) -> list[np.ndarray]:
        """Net k's weight and bias views in ``flat``, in its module's parameter order."""
        return [view for w, b in self._blocks(flat) for view in (w[k], b[k])]

    def _stacked(self, flat: np.ndarray) -> list[Stacked]:
        """Every layer of the nets in ``flat`` (the parameters, the target or the gradient)."""
        return [Stacked(tuple(Dense(torch.from_numpy(w[k]), torch.from_numpy(b[k]), w[k], b[k]) for k in range(self.count)),
                        torch.from_numpy(w)) for w, b in self._blocks(flat)]

    def views(self, flat: np.ndarray) -> list[np.ndarray]:
        """Per-tensor views of ``flat`` in the modules' parameter order (the torch optimiser's)."""
        return [view for k in range(self.count) for view in self._net_views(flat, k)]

    def step(self, max_norm: float | None, tau: float = 0.0) -> None:
        """Adam on the gradient the backward passes wrote (clipped over all of it first, if asked),
        then target <- (1 - tau) * target + tau * params (hetrl.algos.base.polyak_), in one pass
        (no target: Adam alone)."""
        self.adam.step(self.params, self.grads, max_norm, self.target, tau)


def _buffer(*shape: int) -> tuple[np.ndarray, torch.Tensor]:
    """A float32 buffer seen by numpy (the kernels) and torch (BLAS) alike."""
    array = aligned_zeros(shape)
    return array, torch.from_numpy(array)


@narrow.jit
def td_loss(q, target, weights, q_grad, td_abs, scale):  # pragma: no cover - compiled
    """One critic head's loss, scale * mean(w * (q - target)^2), returned (``scale``: 1 for DDPG,
    SAC's 0.5); its gradient with respect to ``q`` into ``q_grad``; and |q - target| into ``td_abs``
    (five numpy calls in one pass). ``q`` and ``q_grad`` are (batch x 1)."""
    n = target.shape[0]
    loss = 0.0
    two_n = np.float32(2.0 * scale / n)
    for r in range(n):
        d = q[r, 0] - target[r]
        wd = weights[r] * d
        loss += wd * d
        q_grad[r, 0] = wd * two_n
        td_abs[r] = abs(d)
    return scale * loss / n


@narrow.jit
def squash_backward(g, scale, tanh, out):  # pragma: no cover - compiled
    """out = g * scale * (1 - tanh^2): from d(action) to d(pre-activation) through the actor's
    tanh(pre) * scale + center, as torch's tanh_backward."""
    for r in range(g.shape[0]):
        for c in range(g.shape[1]):
            t = tanh[r, c]
            out[r, c] = g[r, c] * scale[c] * (np.float32(1.0) - t * t)


# no fastmath: reassociated or fused, 1 - tanh^2 + eps would round otherwise than in torch, and the
# log density magnifies that where the tanh saturates
_exact = numba.njit(cache=True, error_model="numpy")


@_exact
def squashed_gaussian(out, noise, scale, center, actions, squashed, log_prob):  # pragma: no cover - compiled
    """GaussianActor.sample from the actor's output ``out`` (the means, then the log stds before their
    clamp) and standard normal ``noise``: actions tanh(mean + std * noise) * scale + center into
    ``actions``, the tanh into ``squashed``, the log densities (of the action in [-1, 1]) into
    ``log_prob``; each step as torch rounds it."""
    n = noise.shape[1]
    low, high, eps = np.float32(LOG_STD_MIN), np.float32(LOG_STD_MAX), np.float32(TANH_EPS)
    half, one, half_log_2pi = np.float32(0.5), np.float32(1.0), np.float32(0.5 * math.log(2 * math.pi))
    for r in range(noise.shape[0]):
        total = np.float32(0.0)
        for j in range(n):
            log_std = min(max(out[r, n + j], low), high)
            e = noise[r, j]
            y = np.tanh(out[r, j] + np.exp(log_std) * e)
            squashed[r, j] = y
            actions[r, j] = y * scale[j] + center[j]
            total += (-half * e * e - log_std - half_log_2pi) - np.log(one - y * y + eps)
        log_prob[r] = total


@_exact
def squashed_gaussian_backward(out, noise, squashed, action_grad, coef, scale, out_grad):  # pragma: no cover - compiled
    """Back through squashed_gaussian: the gradient with respect to ``out`` (means, then log stds) of a
    loss with gradient ``action_grad`` for the actions and ``coef`` for each log density, into
    ``out_grad``; none for a log std outside its clamp (torch's clamp passes it at the bounds)."""
    n = noise.shape[1]
    low, high, eps = np.float32(LOG_STD_MIN), np.float32(LOG_STD_MAX), np.float32(TANH_EPS)
    one, two, zero = np.float32(1.0), np.float32(2.0), np.float32(0.0)
    for r in range(noise.shape[0]):
        for j in range(n):
            raw, y = out[r, n + j], squashed[r, j]
            g_y = action_grad[r, j] * scale[j] + coef * two * y / (one - y * y + eps)  # the log density's -log(1 - y^2 + eps)
            g_u = g_y * (one - y * y)
            out_grad[r, j] = g_u
            out_grad[r, n + j] = g_u * np.exp(raw) * noise[r, j] - coef if low <= raw <= high else zero


@narrow.jit
def soft_actor_loss(q0, q1, log_prob, alpha, g0, g1):  # pragma: no cover - compiled
    """SAC's actor loss, mean(alpha * log_prob - min(q0, q1)), returned; its gradient with respect to
    each head's Q-values (batch x 1) into ``g0`` and ``g1``: -1/batch at the smaller (the first where
    they tie), 0 at the other."""
    n = log_prob.shape[0]
    loss = 0.0
    step, zero = np.float32(-1.0 / n), np.float32(0.0)
    for r in range(n):
        first = q0[r, 0] <= q1[r, 0]
        loss += alpha * log_prob[r] - (q0[r, 0] if first else q1[r, 0])
        g0[r, 0] = step if first else zero
        g1[r, 0] = zero if first else step
    return loss / n


def _compile_now() -> None:
    """This module's kernels, as hetrl.nets.narrow.compile_now."""
    one, col = np.zeros(2, np.float32), np.zeros((2, 1), np.float32)
    td_loss(col, one, one, col, one, 1.0)
    two = np.zeros((2, 2), np.float32)
    squashed_gaussian(two, col, one[:1], one[:1], two[:, 1:], col, one)  # the actions go into a pass's input columns
    squashed_gaussian_backward(two, col, col, col, np.float32(1.0), one[:1], two)
    soft_actor_loss(col, col, one, np.float32(1.0), col, col)
    q, index = np.zeros((2, 2), np.float32), np.zeros(2, np.int64)
    dqn_td_loss(q, index, one, one, q, q, one, q, one)
    dqn_td_loss(q, index, one, one, q, q[:0], one, q, one)
    squash_backward(col, one, col, col)


class MLPPass:
    """Forward and hand-written backward passes of a ReLU MLP, or of ``nets`` MLPs of one shape side by
    side (a twin critic's heads, each on its own input), at one batch size, into buffers.

    ``h[0]`` is the input buffer (callers fill ``h_np[0]``), ``h[l]`` layer l's output (after its
    ReLU for hidden layers, whose positive entries are where the ReLU passed); ``g[l]`` holds the
    gradient with respect to ``h[l]`` on the way back. Each is (nets x batch x width), net k's rows at
    ``[k]``. Hidden products go to torch's BLAS, one batched product for all the nets; a layer with
    few outputs, or at most four inputs, and what surrounds the products, to hetrl.nets.narrow's
    kernels, net by net. Each buffer is a numpy array (``_np``) and a torch view of it. The layers
    passed in cover exactly ``nets`` nets (:meth:`Stacked.first` picks some of a FlatNets').
    """

    def __init__(self, dims: np.ndarray, batch: int, nets: int = 1, input_grad_columns: int = 0) -> None:
        self.h_np, self.h = zip(*(_buffer(nets, batch, int(d)) for d in dims))
        self.g_np, self.g = (list(pair) for pair in zip(*(_buffer(nets, batch, int(d)) for d in dims[:-1])))
        self.g_np[0], self.g[0] = _buffer(nets, batch, input_grad_columns)  # only the input columns asked for
        # the weight gradient of a layer with few inputs, but more than the four grads_four_inputs takes, before its transpose
        self.transposed = {i: torch.empty(int(dims[i]), int(dims[i + 1])) for i in range(len(dims) - 1) if FOUR < dims[i] <= NARROW}
        self.input_w = np.zeros((input_grad_columns, int(dims[1])), np.float32)  # the input gradient's weights, transposed
        # where weight and bias gradients nobody asked for are not written (the kernels take an array all the same)
        self.unused_w, self.unused_b = np.zeros((1, 1), np.float32), np.zeros(1, np.float32)
        self.unused_sums = [np.zeros(int(d), np.float32) for d in dims[:-1]]

    def forward(self, layers: list[Stacked]) -> np.ndarray:
        """Every net's output, (nets x batch x outputs)."""
        last = len(layers) - 1
        unfinished = None  # the biases of a BLAS product whose bias and ReLU the next layer's kernel adds
        for i, layer in enumerate(layers):
            x, out, relu = self.h_np[i], self.h_np[i + 1], i < last
            if layer.four_inputs:
                for k, net in enumerate(layer.nets):
                    narrow.forward_four_inputs(x[k], net.w_np, net.b_np, out[k], relu)
            elif layer.few_outputs and unfinished is not None:
                for k, net in enumerate(layer.nets):
                    narrow.finish_then_few_outputs(x[k], unfinished[k].b_np, net.w_np, net.b_np, out[k], relu)
            elif layer.few_outputs:
                for k, net in enumerate(layer.nets):
                    narrow.forward_few_outputs(x[k], net.w_np, net.b_np, out[k], relu)
            else:  # the product alone (addmm would first copy the bias into every row)
                torch.bmm(self.h[i], layer.wt, out=self.h[i + 1])
                if relu and layers[i + 1].few_outputs:
                    unfinished = layer.nets
                    continue
                for k, net in enumerate(layer.nets):
                    narrow.add_bias(out[k], net.b_np, relu)
            unfinished = None
        return self.h_np[-1]

    def backward(self, layers: list[Stacked], g_out: np.ndarray, grads: list[Stacked] | None,
                 input_from: int | None = None) -> np.ndarray | None:
        """Back from dLoss/d(output) ``g_out`` (nets x batch x outputs): weight and bias gradients
        into ``grads`` (None: skip them), and, if ``input_from`` is given, the gradient for the input
        columns from it on (into ``g_np[0]``, sized by ``input_grad_columns``).

        On the way down ``g_np`` is dLoss/d(h[i + 1]); for the first layer the ReLU's mask is left
        to the kernels that read it (``unmasked``), and a bias gradient that a kernel above already
        summed is not summed again (``bias_summed``)."""
        g_np, g = g_out, torch.from_numpy(g_out)
        unmasked = bias_summed = False
        for i in range(len(layers) - 1, -1, -1):
            layer = layers[i]
            if i > 0 and layer.few_outputs:  # weight grads, the gradient back through the ReLU and its sum, in one kernel
                for k, net in enumerate(layer.nets):
                    gw, gb = (grads[i].nets[k].w_np, grads[i].nets[k].b_np) if grads is not None else (self.unused_w, self.unused_b)
                    below = grads[i - 1].nets[k].b_np if grads is not None else self.unused_sums[i]
                    narrow.backward_few_outputs(g_np[k], self.h_np[i][k], net.w_np, gw, gb, self.g_np[i][k], grads is not None, below)
                g_np, g, bias_summed = self.g_np[i], self.g[i], grads is not None
                continue
            if grads is not None:
                into = grads[i].nets
                if layer.four_inputs:
                    for k in range(len(into)):
                        narrow.grads_four_inputs(g_np[k], self.h_np[i][k], into[k].w_np, into[k].b_np, self.h_np[i + 1][k], unmasked)
                else:
                    if unmasked:
                        for k in range(len(into)):
                            narrow.relu_mask(g_np[k], self.h_np[i + 1][k])
                        unmasked = False
                    if layer.few_inputs:  # MKL is far slower at (out x B)(B x few) than at (few x B)(B x out) and a copy (docs/benchmarks.md, 'Measurements behind the code')
                        for k in range(len(into)):
                            torch.mm(self.h[i][k].t(), g[k], out=self.transposed[i])
                            into[k].w.copy_(self.transposed[i].t())
                    else:
                        torch.bmm(g.transpose(1, 2), self.h[i], out=grads[i].w)
                    if not bias_summed:
                        for k in range(len(into)):
                            narrow.column_sum(g_np[k], into[k].b_np)
            bias_summed = False
            if i > 0:
                torch.bmm(g, layer.w, out=self.g[i])
                g_np, g = self.g_np[i], self.g[i]
                if i > 1:
                    for k in range(len(g_np)):
                        narrow.relu_mask(g_np[k], self.h_np[i][k])
                else:
                    unmasked = True
        if input_from is None:
            return None
        for k, net in enumerate(layers[0].nets):
            np.copyto(self.input_w, net.w_np[:, input_from:].T)
            narrow.input_grads(g_np[k], self.h_np[1][k], self.input_w, self.g_np[0][k], unmasked)
        return self.g_np[0]


class ActorCriticBlas(Learner):
    """What the hand-written actor-critic learners share (DDPG/TD3's, SAC's): the actor's MLP and the
    critic's heads in :class:`FlatNets` (the torch modules' parameters are views of them), a generator
    for the update's noise seeded as the torch learner's, buffers made once per batch size, and the
    critic's step: the target heads' minimum, each head's weighted squared error and backward pass,
    then Adam and the targets' Polyak average in one pass.

    A subclass writes ``_update`` (one update on host arrays) and allocates its own buffers in
    ``_own_scratch``; ``has_actor_target`` says whether the actor has a target (DDPG's) or not (SAC's)."""

    has_actor_target: ClassVar[bool]
    actor: Actor | GaussianActor
    critic: Critic

    def __init__(self, algo: DDPG | SAC, seed: int) -> None:
        cfg = algo.config
        with seeded_init(seed):  # the same initial weights as the torch learner for this seed
            nets = algo.make_networks()
        self.actor, self.critic = nets["actor"], nets["critic"]  # type: ignore[assignment]
        self.critic_target = copy.deepcopy(self.critic).requires_grad_(False)
        actor_targets = None
        if self.has_actor_target:
            self.actor_target = copy.deepcopy(self.actor).requires_grad_(False)
            actor_targets = [self.actor_target.net]
        self.actor_flat = FlatNets([self.actor.net], actor_targets, cfg.lr)
        self.critic_flat = FlatNets(list(self.critic.heads), list(self.critic_target.heads), cfg.lr)
        self.actor_optimizer, self.critic_optimizer = self.actor_flat.adam, self.critic_flat.adam  # as the checkpoints name them
        self.generator = torch.Generator()  # the update's noise (TD3's smoothing, SAC's samples), seeded as the torch learner's
        self.generator.manual_seed(seed + 1)
        self.obs_dim, self.act_dim = int(self.actor_flat.dims[0]), len(self.actor.scale)
        self.scale, self.center = self.actor.scale.numpy(), self.actor.center.numpy()  # views of the actor's buffers
        self.cfg, self.updates, self._batch = cfg, 0, -1
        narrow.compile_now()
        _compile_now()

    @property
    def policy_network(self) -> nn.Module:
        return self.actor

    def _scratch(self, batch: int) -> None:
        """Buffers for a batch size, allocated once (a run's batch size does not change)."""
        if batch == self._batch:
            return
        self._batch = batch
        critic_dims, heads = self.critic_flat.dims, self.critic_flat.count
        self.actor_pass = MLPPass(self.actor_flat.dims, batch)
        # every head's pass at once; it also serves the actor's step, which asks the heads for the actions' gradient
        self.critic_pass = MLPPass(critic_dims, batch, heads, self.act_dim)
        self.critic_target_pass = MLPPass(critic_dims, batch, heads)
        self.next_q, self.target, self.td_abs = (np.zeros(batch, np.float32) for _ in range(3))
        self.q_grad = np.zeros((heads, batch, 1), np.float32)
        self._own_scratch(batch)

    def _own_scratch(self, batch: int) -> None:
        """The subclass's buffers for a batch size."""

    def update(self, batch: dict[str, Any]) -> dict[str, torch.Tensor]:
        """One update from host arrays (numpy, or CPU tensors, read without a copy)."""
        b = {k: host_array(batch[k]) for k in LEARN_INPUTS}
        size = len(b["rewards"])
        self._scratch(size)
        return self._update(b["obs"].reshape(size, -1), b["actions"], b["rewards"], b["next_obs"].reshape(size, -1),
                            b["discounts"], b["weights"])

    def _update(self, obs: np.ndarray, actions: np.ndarray, rewards: np.ndarray, next_obs: np.ndarray,
                discounts: np.ndarray, weights: np.ndarray) -> dict[str, torch.Tensor]:
        raise NotImplementedError

    def _target_q(self, next_obs: np.ndarray) -> np.ndarray:
        """The minimum over the target heads of Q'(s', a'), into ``self.next_q``; a' is what the
        caller wrote into the first target head's action columns."""
        net = self.critic_target_pass
        inputs = net.h_np[0]
        inputs[0, :, :self.obs_dim] = next_obs
        inputs[1:] = inputs[0]  # every head reads (s', a')
        np.min(net.forward(self.critic_flat.target_layers)[:, :, 0], axis=0, out=self.next_q)
        return self.next_q

    def _critic_step(self, obs: np.ndarray, actions: np.ndarray, weights: np.ndarray, loss_scale: float,
                     tau: float) -> dict[str, torch.Tensor]:
        """The critic's step on loss_scale * sum over heads of mean(w * (Q(s, a) - target)^2), with
        ``self.target`` set; its targets move by ``tau`` in the same pass as Adam."""
        od, critic, net = self.obs_dim, self.critic_flat, self.critic_pass
        loss, td_errors = 0.0, np.empty(len(weights), np.float32)  # new arrays: the executor keeps them
        net.h_np[0][:, :, :od] = obs
        net.h_np[0][:, :, od:] = actions
        q = net.forward(critic.layers)
        for k in range(critic.count):
            loss += td_loss(q[k], self.target, weights, self.q_grad[k], td_errors if k == 0 else self.td_abs, loss_scale)
        net.backward(critic.layers, self.q_grad, critic.grad_layers)
        critic.step(self.cfg.max_grad_norm, tau)
        return {"td_errors": torch.from_numpy(td_errors), "loss": torch.from_numpy(np.array(loss, np.float32))}


class DDPGBlasLearner(DDPGCheckpoint, ActorCriticBlas):
    """DDPG's (or TD3's) learner with a hand-written update; its checkpoints are DDPGLearner's."""

    has_actor_target = True
    actor: Actor
    actor_target: Actor
    cfg: DDPGConfig

    def _own_scratch(self, batch: int) -> None:
        self.actor_target_pass = MLPPass(self.actor_flat.dims, batch)
        # the actor's step reads the first head alone (TD3's too)
        self.first_head = [layer.first(1) for layer in self.critic_flat.layers]
        one_head = self.critic_flat.count == 1
        self.first_head_pass = self.critic_pass if one_head else MLPPass(self.critic_flat.dims, batch, 1, self.act_dim)
        self.tanh = np.zeros((batch, self.act_dim), np.float32)
        self.action_grad = np.zeros((1, batch, self.act_dim), np.float32)
        self.noise = torch.empty(batch, self.act_dim)  # drawn by torch's generator, as DDPGLearner draws it
        self.actor_q_grad = np.full((1, batch, 1), -1.0 / batch, np.float32)  # d(-mean Q)/dQ

    def _act(self, net: MLPPass, layers: list[Stacked], obs: np.ndarray, into: np.ndarray) -> None:
        """The actor's actions for ``obs`` into ``into`` (tanh(output) * scale + center); keeps tanh in self.tanh."""
        net.h_np[0][0] = obs
        np.tanh(net.forward(layers)[0], out=self.tanh)
        np.multiply(self.tanh, self.scale, out=into)
        into += self.center

    def _update(self, obs: np.ndarray, actions: np.ndarray, rewards: np.ndarray, next_obs: np.ndarray,
                discounts: np.ndarray, weights: np.ndarray) -> dict[str, torch.Tensor]:
        self.updates += 1
        targets_move = self.updates % self.cfg.policy_delay == 0  # with the actor's step (TD3: every policy_delay updates)
        self._set_target(rewards, next_obs, discounts)
        # the critic's target moves in the same pass as its Adam step (the actor's step, which follows, does not read it)
        out = self._critic_step(obs, actions, weights, 1.0, self.cfg.tau if targets_move else 0.0)
        if targets_move:
            out["actor_loss"] = self._actor_step(obs)
        return out

    def _set_target(self, rewards: np.ndarray, next_obs: np.ndarray, discounts: np.ndarray) -> None:
        """self.target = r + discount * min over heads of Q'(s', mu'(s')), with TD3's clipped noise on mu'(s')."""
        cfg, od = self.cfg, self.obs_dim
        next_actions = self.critic_target_pass.h_np[0][0, :, od:]
        self._act(self.actor_target_pass, self.actor_flat.target_layers, next_obs, next_actions)
        if cfg.target_noise > 0:
            scale, center = self.scale, self.center
            torch.randn(self.noise.shape, generator=self.generator, out=self.noise)
            noise = self.noise.numpy()
            noise *= cfg.target_noise
            np.clip(noise, -cfg.target_noise_clip, cfg.target_noise_clip, out=noise)
            noise *= scale
            next_actions += noise
            np.clip(next_actions, center - scale, center + scale, out=next_actions)
        np.multiply(discounts, self._target_q(next_obs), out=self.target)
        self.target += rewards

    def _actor_step(self, obs: np.ndarray) -> torch.Tensor:
        """The actor ascends Q(s, mu(s)) of the first head; its target moves by Polyak averaging.
        Returns the step's loss, -mean Q(s, mu(s)), from the forward pass it runs anyway."""
        cfg, od = self.cfg, self.obs_dim
        critic, actor = self.critic_flat, self.actor_flat
        net = self.first_head_pass  # the critic's pass, where it is one head: its buffers are free again after the critic's step
        inputs = net.h_np[0][0]
        inputs[:, :od] = obs
        self._act(self.actor_pass, actor.layers, obs, inputs[:, od:])
        loss = -net.forward(self.first_head).mean(dtype=np.float32)  # before the backward pass reuses any buffer
        action_grad = net.backward(self.first_head, self.actor_q_grad, None, input_from=od)  # the critic's weights stay put
        squash_backward(action_grad[0], self.scale, self.tanh, self.action_grad[0])
        self.actor_pass.backward(actor.layers, self.action_grad, actor.grad_layers)
        actor.step(cfg.max_grad_norm, cfg.tau)
        return torch.from_numpy(np.array(loss, np.float32))  # a new tensor: the executor keeps it


class SACBlasLearner(SACCheckpoint, ActorCriticBlas):
    """SAC's learner with a hand-written update: :class:`hetrl.algos.sac.SACLearner`'s, to float32
    tolerance, with its noise drawn alike from a generator seeded alike, and its checkpoint format.
    The critic is always twin (SAC's), so the actor's step takes the minimum of two heads."""

    has_actor_target = False
    actor: GaussianActor
    cfg: SACConfig

    def __init__(self, algo: SAC, seed: int) -> None:
        super().__init__(algo, seed)
        self.tuned, alpha = self.cfg.temperature()
        self._log_alpha = np.full(1, math.log(alpha), np.float32)
        self.log_alpha = torch.from_numpy(self._log_alpha)  # the checkpoint's view of it
        self.alpha_optimizer = FlatAdam(1, lambda flat: [flat], self.cfg.lr) if self.tuned else None
        self._alpha_grad = np.zeros(1, np.float32)
        self.target_entropy = algo.target_entropy()
        # the latest actor and temperature losses, as SACLearner keeps them (None before the first)
        self.actor_loss: torch.Tensor | None = None
        self.alpha_loss: torch.Tensor | None = None

    @property
    def alpha(self) -> float:
        return float(np.exp(self._log_alpha[0]))

    def _own_scratch(self, batch: int) -> None:
        # drawn by torch's generator, in SACLearner.draw_inputs's order
        self.next_noise, self.actor_noise = torch.empty(batch, self.act_dim), torch.empty(batch, self.act_dim)
        self.squashed, self.action_grad = (np.zeros((batch, self.act_dim), np.float32) for _ in range(2))
        self.log_prob = np.zeros(batch, np.float32)
        self.head_grads = np.zeros((self.critic_flat.count, batch, 1), np.float32)
        self.actor_out_grad = aligned_zeros((1, batch, 2 * self.act_dim))

    def _sample(self, obs: np.ndarray, noise: torch.Tensor, into: np.ndarray) -> None:
        """GaussianActor.sample: actions for ``obs`` and ``noise`` into ``into``, their tanh into
        ``self.squashed``, their log densities into ``self.log_prob``."""
        net = self.actor_pass
        net.h_np[0][0] = obs
        out = net.forward(self.actor_flat.layers)[0]
        squashed_gaussian(out, noise.numpy(), self.scale, self.center, into, self.squashed, self.log_prob)

    def _update(self, obs: np.ndarray, actions: np.ndarray, rewards: np.ndarray, next_obs: np.ndarray,
                discounts: np.ndarray, weights: np.ndarray) -> dict[str, torch.Tensor]:
        cfg = self.cfg
        for noise in (self.next_noise, self.actor_noise):  # both every update, as SACLearner draws them
            torch.randn(noise.shape, generator=self.generator, out=noise)
        alpha = np.exp(self._log_alpha[0])  # the update's starting temperature, for the critics' target and the actor alike
        # the target: r + discount * (min over heads of Q'(s', a') - alpha * log pi(a'|s')), a' ~ pi(.|s')
        self._sample(next_obs, self.next_noise, self.critic_target_pass.h_np[0][0, :, self.obs_dim:])
        soft_q = self._target_q(next_obs)
        self.log_prob *= alpha
        soft_q -= self.log_prob
        np.multiply(discounts, soft_q, out=self.target)
        self.target += rewards
        out = self._critic_step(obs, actions, weights, 0.5, cfg.tau)
        self.updates += 1
        if self.updates % cfg.policy_delay == 0:
            out["actor_loss"] = self._actor_step(obs, alpha)
        return out

    def _actor_step(self, obs: np.ndarray, alpha: np.float32) -> torch.Tensor:
        """The actor's step on mean(alpha * log pi(a|s) - min over heads of Q(s, a)), a ~ pi(.|s), against
        the critics just stepped (whose weights stay put), then the temperature's on
        -mean(log_alpha * (log pi(a|s) + target entropy)). Returns the actor's loss."""
        cfg, od = self.cfg, self.obs_dim
        net, layers = self.critic_pass, self.critic_flat.layers  # its buffers are free again after the critic's step
        inputs = net.h_np[0]
        inputs[0, :, :od] = obs
        self._sample(obs, self.actor_noise, inputs[0, :, od:])
        inputs[1:] = inputs[0]  # both heads read (s, a)
        q = net.forward(layers)
        loss = soft_actor_loss(q[0], q[1], self.log_prob, alpha, self.head_grads[0], self.head_grads[1])
        action_grads = net.backward(layers, self.head_grads, None, input_from=od)
        np.add(action_grads[0], action_grads[1], out=self.action_grad)
        coef = np.float32(alpha / len(obs))  # d(loss)/d(log pi) of each sample
        squashed_gaussian_backward(self.actor_pass.h_np[-1][0], self.actor_noise.numpy(), self.squashed, self.action_grad, coef,
                                   self.scale, self.actor_out_grad[0])
        self.actor_pass.backward(self.actor_flat.layers, self.actor_out_grad, self.actor_flat.grad_layers)
        self.actor_flat.step(cfg.max_grad_norm)
        self.actor_loss = torch.from_numpy(np.array(loss, np.float32))  # a new tensor: the executor keeps it
        if self.alpha_optimizer is not None:
            gap = np.mean(self.log_prob + np.float32(self.target_entropy), dtype=np.float32)  # log pi + target entropy
            self.alpha_loss = torch.from_numpy(np.array(-self._log_alpha[0] * gap, np.float32))
            self._alpha_grad[0] = -gap
            self.alpha_optimizer.step(self._log_alpha, self._alpha_grad, None)
        return self.actor_loss


@narrow.jit
def dqn_td_loss(q, actions, rewards, discounts, next_q_all, next_q_online, weights, q_grad, td_abs):  # pragma: no cover - compiled
    """DQN's loss, mean(w * huber(Q(s, a) - target)), returned, from Q-values laid out (actions, batch), with target = r + discount * Q'(s', b)
    where b is the argmax of the online network's ``next_q_online`` (double Q-learning; the first of
    equal maxima, as torch's argmax) or, where that has no rows, of Q'(s', .); its gradient with
    respect to every Q-value into ``q_grad`` (zero but at the taken action); |target - Q(s, a)| into
    ``td_abs``. As DQNLearner.step with F.huber_loss (delta 1). The argmax is here, not a torch call:
    torch's argmax across the rows of a (actions, batch) array costs several times this whole pass."""
    n_actions, n = q.shape  # (actions, batch): feature-major, as hetrl.nets.flat_q computes them
    loss = 0.0
    inv_n = np.float32(1.0 / n)
    for r in range(n):
        if next_q_online.shape[0]:
            b, top = 0, next_q_online[0, r]
            for a in range(1, n_actions):
                if next_q_online[a, r] > top:
                    b, top = a, next_q_online[a, r]
            nq = next_q_all[b, r]
        else:
            nq = next_q_all[0, r]
            for a in range(1, n_actions):
                nq = max(nq, next_q_all[a, r])
        d = q[actions[r], r] - (rewards[r] + discounts[r] * nq)
        ad = abs(d)
        td_abs[r] = ad
        loss += weights[r] * (0.5 * d * d if ad < 1.0 else ad - 0.5)
        for a in range(n_actions):
            q_grad[a, r] = 0.0
        q_grad[actions[r], r] = weights[r] * max(np.float32(-1.0), min(np.float32(1.0), d)) * inv_n
    return loss / n


class DQNBlasLearner(DQNCheckpoint, Learner):
    """DQN's update with the Q-network written out (:mod:`hetrl.nets.flat_q`): convolutions as gathers
    and products, the backward pass by hand, Adam and the target update in one compiled pass. It
    computes what :class:`hetrl.algos.dqn.DQNLearner` computes, to float32 tolerance, and keeps its
    checkpoint format."""

    def __init__(self, algo: DQN, seed: int) -> None:
        cfg: DQNConfig = algo.config
        with seeded_init(seed):  # the same initial weights as the torch learner for this seed
            self.q = algo.make_networks()["q"]
        self.q_target = copy.deepcopy(self.q).requires_grad_(False)
        self.layout = layout = FlatQ(self.q)
        self.params, self.target, self.grads = (aligned_zeros(layout.size) for _ in range(3))
        layout.adopt(self.params)
        layout.adopt(self.target, list(self.q_target.parameters()))
        self.weights, self.target_weights, self.grad_tensors = (layout.tensors(flat) for flat in (self.params, self.target, self.grads))
        self.optimizer = FlatAdam(layout.size, layout.views, cfg.lr)  # torch Adam's checkpoint layout
        self.cfg, self.updates = cfg, 0
        self._batch = -1

    @property
    def policy_network(self) -> nn.Module:
        return self.q

    def _passes(self, batch: int) -> None:
        """The passes' buffers for a batch size, made once (a run's batch size does not change)."""
        if batch != self._batch:
            self._batch = batch
            self.online, self.scratch = QPass(self.layout, batch), QPass(self.layout, batch)
            # the online network's Q-values of the next states (double Q-learning), kept while the scratch pass
            # computes the target network's
            self.next_q_online = np.empty((int(self.layout.shapes[-1][0]), batch) if self.cfg.double else (0, batch), np.float32)

    def update(self, batch: dict[str, Any]) -> dict[str, torch.Tensor]:
        """One update from host arrays (numpy, or CPU tensors; uint8 observations stay bytes)."""
        cfg = self.cfg
        obs, next_obs = (torch.as_tensor(batch[k]) for k in ("obs", "next_obs"))
        actions = host_array(batch["actions"], np.int64)
        rewards, discounts, weights = (host_array(batch[k]) for k in ("rewards", "discounts", "weights"))
        size = len(actions)
        self._passes(size)
        if cfg.double:  # the online network picks the next action, the target network values it
            np.copyto(self.next_q_online, self.scratch.forward(self.weights, next_obs).numpy())
        next_q_all = self.scratch.forward(self.target_weights, next_obs, same_obs=cfg.double).numpy()
        q_all = self.online.forward(self.weights, obs).numpy()
        td = np.empty(size, np.float32)  # a new array: the executor keeps it
        loss = dqn_td_loss(q_all, actions, rewards, discounts, next_q_all, self.next_q_online, weights, self.online.q_grad_np, td)
        self.online.backward(self.weights, self.grad_tensors, self.online.q_grad_t)
        self.updates += 1
        # Polyak averaging every update, or a hard copy every target_update_every (DQNLearner.periodic_due)
        target_moves = cfg.tau < 1.0 or self.updates % cfg.target_update_every == 0
        self.optimizer.step(self.params, self.grads, cfg.max_grad_norm, self.target, cfg.tau if target_moves else 0.0)
        return {"td_errors": torch.from_numpy(td), "loss": torch.from_numpy(np.array(loss, np.float32))}


@implements(Learn="learn")
class LearnBlas(LearnOnHost):
    """Learn on the host with the update written out as matrix products (MKL via torch): DDPG, TD3 and
    SAC with MLPs; DQN with hetrl's conv or MLP Q-networks (no dueling head)."""

    backend = "blas"

    @classmethod
    def unsupported(cls, algorithm: Algorithm) -> str | None:
        """Why this backend cannot run ``algorithm``'s learner, or None when it can."""
        use_torch = "use the torch learner (plan=rule, or backend torch for learn in a plan.json)"
        if isinstance(algorithm, DQN):
            if algorithm.early_exits:
                return f"the blas learner writes out plain Q-networks, not {algorithm.name}'s branched one; {use_torch}"
            if algorithm.network_kind not in ("mlp", "nature", "minatar"):
                return f"the blas learner writes out hetrl's Q-networks only, not a user's module; {use_torch}"
            if algorithm.config.dueling:
                return f"the blas learner has no dueling head; set dueling=false or {use_torch}"
            if algorithm.distils:
                return f"the blas learner does not distil from a teacher; {use_torch}"
            return None
        if not isinstance(algorithm, (DDPG, SAC)):
            return f"the blas learner implements DQN, DDPG, TD3 and SAC only, not {algorithm.name}; {use_torch}"
        if not algorithm.mlp_networks():
            return f"the blas learner runs DDPG, TD3 and SAC with MLP networks only; {use_torch}"
        if isinstance(algorithm, SAC) and algorithm.config.use_sde:
            return f"the blas learner writes out SAC's plain Gaussian actor, not its gSDE actor (use_sde); {use_torch}"
        return None

    @staticmethod
    def make_learner(algorithm: Algorithm, seed: int) -> Learner:
        if isinstance(algorithm, DQN):
            return DQNBlasLearner(algorithm, seed)
        if isinstance(algorithm, SAC):
            return SACBlasLearner(algorithm, seed)
        return DDPGBlasLearner(algorithm, seed)  # type: ignore[arg-type]
