"""Learn/blas: DDPG's and TD3's update written out as matrix products into buffers made once.

At DDPG's usual sizes (256x256 layers, batch 256) an update is ten 256^3 matrix products, which
MKL runs on one core at about 90% of this CPU's fp32 peak (3.9 ms), and some 150 small operations,
which in Learn/torch (autograd's graph, a new tensor for every result, two optimisers walking their
per-tensor state) make its update 6.2 ms in all (bench/fused.py; 4.8 ms here). Here:

- the backward pass is written out, so no graph is built, and no gradient nobody reads is
  computed (the actor's step takes the critic's gradient for its action inputs only);
- every intermediate lives in a buffer allocated at the first update of a batch size, written
  with ``out=`` or in place (only the returned loss and TD errors are new tensors: the executor
  keeps them);
- each network's parameters, target, gradient and Adam moments are flat vectors in FlatMLP's layout
  (the torch modules' parameters are views of them, so acting, evaluation and state dicts work
  unchanged), and Adam is one compiled loop per network (:class:`hetrl.nets.fused_mlp.FlatAdam`).

It computes what :class:`hetrl.algos.ddpg.DDPGLearner` computes, to float32 tolerance
(tests/test_blas.py checks DDPG and TD3 update by update), and keeps its checkpoint format, so a
run resumes on either backend. The products are torch's (MKL), so torch's thread count applies.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import nn

from hetrl.algos.base import Algorithm, HostLearn, Learner, seeded_init
from hetrl.algos.ddpg import DDPG, DDPGCheckpoint, DDPGConfig
from hetrl.nets import Actor, Critic, narrow
from hetrl.nets.fused_mlp import FlatAdam, FlatMLP
from hetrl.nets.narrow import NARROW
from hetrl.protocol import implements
from hetrl.runtime.learner_role import LEARN_INPUTS


@dataclass(frozen=True)
class Dense:
    """One layer's weight (out x in) and bias in a flat vector: torch views, and numpy views for the kernels."""

    w: torch.Tensor
    b: torch.Tensor
    w_np: np.ndarray
    b_np: np.ndarray

    @property
    def few_outputs(self) -> bool:
        """Computed as dot products by a compiled kernel (hetrl.nets.narrow), not by BLAS."""
        return self.w.shape[0] <= NARROW

    @property
    def few_inputs(self) -> bool:
        return self.w.shape[1] <= NARROW


Layers = list[Dense]


class FlatNets:
    """Some MLPs (a critic's heads, an actor's trunk) in one flat vector, with a target copy, a
    gradient and Adam's moments laid out alike: what one optimiser steps and one Polyak average moves.
    The modules' parameters become views of the vectors."""

    def __init__(self, nets: list[nn.Sequential], targets: list[nn.Sequential], lr: float) -> None:
        self.layouts = [FlatMLP(net) for net in nets]
        ends = np.cumsum([layout.size for layout in self.layouts])
        self.spans = list(zip([0, *ends[:-1]], ends))
        size = int(ends[-1])
        self.params, self.target, self.grads = (np.zeros(size, np.float32) for _ in range(3))
        for layout, target, (start, end) in zip(self.layouts, targets, self.spans):
            layout.adopt(self.params[start:end])
            FlatMLP(target).adopt(self.target[start:end])
        self.adam = FlatAdam(size, self.views, lr)
        self._params_t, self._target_t = torch.from_numpy(self.params), torch.from_numpy(self.target)
        self.layers, self.target_layers, self.grad_layers = (
            [self._layers(layout, flat[start:end]) for layout, (start, end) in zip(self.layouts, self.spans)]
            for flat in (self.params, self.target, self.grads)
        )

    @staticmethod
    def _layers(layout: FlatMLP, flat: np.ndarray) -> Layers:
        views = layout.views(flat)
        return [Dense(torch.from_numpy(w), torch.from_numpy(b), w, b) for w, b in zip(views[0::2], views[1::2])]

    def views(self, flat: np.ndarray) -> list[np.ndarray]:
        """Per-tensor views of ``flat`` in the modules' parameter order (the torch optimiser's)."""
        return [view for layout, (start, end) in zip(self.layouts, self.spans) for view in layout.views(flat[start:end])]

    def step(self, max_norm: float | None) -> None:
        """Adam on the gradient the backward passes wrote (clipped over all of it first, if asked)."""
        self.adam.step(self.params, self.grads, max_norm)

    def polyak(self, tau: float) -> None:
        """target <- (1 - tau) * target + tau * params, as hetrl.algos.base.polyak_ (one lerp)."""
        if tau == 1.0:
            self._target_t.copy_(self._params_t)
        else:
            self._target_t.lerp_(self._params_t, tau)


def _buffer(*shape: int) -> tuple[np.ndarray, torch.Tensor]:
    """A float32 buffer seen by numpy (the kernels) and torch (BLAS) alike."""
    array = np.zeros(shape, np.float32)
    return array, torch.from_numpy(array)


class MLPPass:
    """Forward and hand-written backward passes of a ReLU MLP at one batch size, into buffers.

    ``h[0]`` is the input buffer (callers fill it), ``h[l]`` layer l's output (after its ReLU for
    hidden layers, whose positive entries are where the ReLU passed); ``g[l]`` holds the gradient
    with respect to ``h[l]`` on the way back. Products go to torch's BLAS, except a layer with few
    outputs; what surrounds them to hetrl.nets.narrow's kernels. Each buffer is a numpy array
    (``_np``, for the kernels) and a torch view of it.
    """

    def __init__(self, dims: np.ndarray, batch: int, input_grad_columns: int = 0) -> None:
        self.h_np, self.h = zip(*(_buffer(batch, int(d)) for d in dims))
        self.g_np, self.g = (list(pair) for pair in zip(*(_buffer(batch, int(d)) for d in dims[:-1])))
        self.g_np[0], self.g[0] = _buffer(batch, input_grad_columns)  # only the input columns asked for
        self.transposed = {i: torch.empty(int(dims[i]), int(dims[i + 1])) for i in range(len(dims) - 1) if dims[i] <= NARROW}

    def forward(self, layers: Layers) -> torch.Tensor:
        last = len(layers) - 1
        for i, layer in enumerate(layers):
            if layer.few_outputs:
                narrow.forward_few_outputs(self.h_np[i], layer.w_np, layer.b_np, self.h_np[i + 1], i < last)
            else:  # the product alone (addmm would first copy the bias into every row), then bias and ReLU in one pass
                torch.mm(self.h[i], layer.w.t(), out=self.h[i + 1])
                narrow.add_bias(self.h_np[i + 1], layer.b_np, i < last)
        return self.h[-1]

    def backward(self, layers: Layers, g_out: torch.Tensor, grads: Layers | None, input_from: int | None = None) -> torch.Tensor | None:
        """Back from dLoss/d(output) ``g_out``: weight and bias gradients into ``grads`` (None: skip
        them), and, if ``input_from`` is given, the gradient for the input columns from it on
        (into ``g[0]``, sized by ``input_grad_columns``)."""
        g = g_out
        for i in range(len(layers) - 1, -1, -1):
            layer = layers[i]
            if grads is not None:
                if layer.few_inputs:  # MKL: 100 us for (out x B)(B x few), 20 for (few x B)(B x out) and a copy
                    torch.mm(self.h[i].t(), g, out=self.transposed[i])
                    grads[i].w.copy_(self.transposed[i].t())
                else:
                    torch.mm(g.t(), self.h[i], out=grads[i].w)
                narrow.column_sum(g.numpy(), grads[i].b_np)
            if i > 0:
                torch.mm(g, layer.w, out=self.g[i])
                narrow.relu_mask(self.g_np[i], self.h_np[i])
                g = self.g[i]
        if input_from is None:
            return None
        return torch.mm(g, layers[0].w[:, input_from:], out=self.g[0])


class BlasDDPGLearner(DDPGCheckpoint, Learner):
    """DDPG's (or TD3's) learner with a hand-written update; its checkpoints are DDPGLearner's."""

    def __init__(self, algo: DDPG, seed: int) -> None:
        cfg: DDPGConfig = algo.config
        with seeded_init(seed):  # the same initial weights as the torch learner for this seed
            nets = algo.make_networks()
        self.actor: Actor = nets["actor"]
        self.critic: Critic = nets["critic"]
        self.actor_target = copy.deepcopy(self.actor).requires_grad_(False)
        self.critic_target = copy.deepcopy(self.critic).requires_grad_(False)
        self.actor_flat = FlatNets([self.actor.net], [self.actor_target.net], cfg.lr)
        self.critic_flat = FlatNets(list(self.critic.heads), list(self.critic_target.heads), cfg.lr)
        self.actor_optimizer, self.critic_optimizer = self.actor_flat.adam, self.critic_flat.adam  # as the checkpoint names them
        self.generator = torch.Generator()  # TD3's target smoothing noise, seeded as DDPGLearner's
        self.generator.manual_seed(seed + 1)
        self.obs_dim = self.actor_flat.layouts[0].dims[0]
        self.cfg, self.updates, self._batch = cfg, 0, -1
        narrow.compile_now()

    @property
    def policy_network(self) -> Actor:
        return self.actor

    def _scratch(self, batch: int) -> None:
        """Buffers for a batch size, allocated once (a run's batch size does not change)."""
        if batch == self._batch:
            return
        self._batch = batch
        actor_dims, critic_dims = self.actor_flat.layouts[0].dims, self.critic_flat.layouts[0].dims
        act_dim = int(actor_dims[-1])
        self.actor_pass, self.actor_target_pass = MLPPass(actor_dims, batch), MLPPass(actor_dims, batch)
        heads = len(self.critic_flat.layouts)
        # the first head's pass also serves the actor's step, which asks it for the actions' gradient
        self.critic_passes = [MLPPass(critic_dims, batch, act_dim if i == 0 else 0) for i in range(heads)]
        self.critic_target_passes = [MLPPass(critic_dims, batch) for _ in range(heads)]
        self.tanh, self.action_grad, self.noise = (torch.empty(batch, act_dim) for _ in range(3))
        self.next_q, self.target, self.diff, self.weighted = (torch.empty(batch) for _ in range(4))
        self.q_grad = torch.empty(batch, 1)
        self.actor_q_grad = torch.full((batch, 1), -1.0 / batch)  # d(-mean Q)/dQ

    def _act(self, net: MLPPass, layers: Layers, obs: torch.Tensor, into: torch.Tensor) -> None:
        """The actor's actions for ``obs`` into ``into`` (tanh(output) * scale + center); keeps tanh in self.tanh."""
        net.h[0].copy_(obs)
        torch.tanh(net.forward(layers), out=self.tanh)
        torch.mul(self.tanh, self.actor.scale, out=into)
        into.add_(self.actor.center)

    def update(self, batch: dict[str, Any]) -> dict[str, torch.Tensor]:
        """One update from host arrays (numpy, or CPU tensors, read without a copy)."""
        b = {k: torch.as_tensor(batch[k], dtype=torch.float32) for k in LEARN_INPUTS}
        size = len(b["rewards"])
        self._scratch(size)
        obs = b["obs"].reshape(size, -1)
        out = self._critic_step(obs, b["actions"], b["rewards"], b["next_obs"].reshape(size, -1), b["discounts"], b["weights"])
        self.updates += 1
        if self.updates % self.cfg.policy_delay == 0:
            self._actor_step(obs)
        return out

    def _critic_step(self, obs, actions, rewards, next_obs, discounts, weights) -> dict[str, torch.Tensor]:
        cfg, od, size = self.cfg, self.obs_dim, len(rewards)
        critic, actor = self.critic_flat, self.actor_flat
        # the target: r + discount * min over heads of Q'(s', mu'(s')), written into each target head's input
        first = self.critic_target_passes[0].h[0]
        self._act(self.actor_target_pass, actor.target_layers[0], next_obs, first[:, od:])
        if cfg.target_noise > 0:
            scale = self.actor.scale
            torch.randn(self.noise.shape, generator=self.generator, out=self.noise)
            self.noise.mul_(cfg.target_noise).clamp_(-cfg.target_noise_clip, cfg.target_noise_clip).mul_(scale)
            first[:, od:].add_(self.noise).clamp_(self.actor.center - scale, self.actor.center + scale)
        first[:, :od] = next_obs
        for i, (net, layers) in enumerate(zip(self.critic_target_passes, critic.target_layers)):
            if i:
                net.h[0].copy_(first)
            q = net.forward(layers)[:, 0]
            if i:
                torch.minimum(self.next_q, q, out=self.next_q)
            else:
                self.next_q.copy_(q)
        torch.addcmul(rewards, discounts, self.next_q, out=self.target)
        # the critic's loss, sum over heads of mean(w * (Q(s, a) - target)^2), and its gradient
        loss = torch.zeros(())
        td_errors = None
        for i, (net, layers, grads) in enumerate(zip(self.critic_passes, critic.layers, critic.grad_layers)):
            net.h[0][:, :od] = obs
            net.h[0][:, od:] = actions
            torch.sub(net.forward(layers)[:, 0], self.target, out=self.diff)
            if i == 0:
                td_errors = self.diff.abs()
            torch.mul(self.diff, weights, out=self.weighted)
            loss += torch.dot(self.weighted, self.diff) / size
            torch.mul(self.weighted, 2.0 / size, out=self.q_grad[:, 0])
            net.backward(layers, self.q_grad, grads)
        critic.step(cfg.max_grad_norm)
        return {"td_errors": td_errors, "loss": loss}

    def _actor_step(self, obs: torch.Tensor) -> None:
        """The actor ascends Q(s, mu(s)) of the first head, then both targets move by Polyak averaging."""
        cfg, od = self.cfg, self.obs_dim
        critic, actor = self.critic_flat, self.actor_flat
        net = self.critic_passes[0]  # its buffers are free again after the critic's step
        net.h[0][:, :od] = obs
        self._act(self.actor_pass, actor.layers[0], obs, net.h[0][:, od:])
        net.forward(critic.layers[0])
        action_grad = net.backward(critic.layers[0], self.actor_q_grad, None, input_from=od)  # the critic's weights stay put
        # through a = tanh(pre) * scale + center: d pre = d a * scale * (1 - tanh^2), in autograd's order
        torch.mul(action_grad, self.actor.scale, out=self.action_grad)
        torch.ops.aten.tanh_backward.grad_input(self.action_grad, self.tanh, grad_input=self.action_grad)
        self.actor_pass.backward(actor.layers[0], self.action_grad, actor.grad_layers[0])
        actor.step(cfg.max_grad_norm)
        actor.polyak(cfg.tau)
        critic.polyak(cfg.tau)


@implements("blas", Learn="learn")
class BlasLearn(HostLearn):
    """Learn on the host with DDPG's (or TD3's) update written out as matrix products (MKL via torch)."""

    backend = "blas"

    @staticmethod
    def unsupported(algorithm: Algorithm) -> str | None:
        """Why this backend cannot run ``algorithm``'s learner, or None when it can."""
        if not isinstance(algorithm, DDPG):
            return (f"the blas learner implements DDPG and TD3 only, not {algorithm.name}; use the numba or torch "
                    "learner (plan=rule, or backend torch for learn in a plan.json)")
        return None

    @staticmethod
    def build(algorithm: Algorithm, seed: int) -> BlasDDPGLearner:
        return BlasDDPGLearner(algorithm, seed)  # type: ignore[arg-type]
