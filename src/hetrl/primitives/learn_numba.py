"""Learn / numba: DQN's whole update as one compiled call on the host, for small MLPs.

Forward passes (online on obs, target and online on next_obs for double Q-learning), the Huber
loss, the backward pass, gradient clipping, Adam and the target update run in one numba function
over flat parameter vectors (:mod:`hetrl.nets.fused_mlp`). It computes what ``DQNLearner.update``
computes, to float32 tolerance (a test checks this update by update), and keeps its checkpoint
format: ``q``, ``q_target``, an ``optimizer`` state dict in torch Adam's layout, ``updates``. So a
run can be resumed on the other backend.

It covers DQN with an MLP Q-network (no dueling head); anything else is refused with the fix.
Where it pays: one update of 4-64-64-2 at batch 64 is a few hundred microseconds of torch dispatch
and a few tens of arithmetic, so this backend is several times faster there; at 256x256 and wider the
arithmetic dominates and torch's BLAS wins. The profiler measures both and the planner chooses.
"""

from __future__ import annotations

import copy
from typing import Any

import numba
import numpy as np
import torch

from hetrl.algos.base import Algorithm, Learner, seeded_init
from hetrl.algos.dqn import DQN, DQNCheckpoint, DQNConfig, flat_mlp_refusal
from hetrl.nets import QNetwork
from hetrl.nets.fused_mlp import BETAS, EPS, FlatAdam, FlatMLP, backward, clip_and_adam, forward
from hetrl.primitives.learn_host import LearnOnHost, host_array
from hetrl.protocol import LEARN_INPUTS, implements


@numba.njit(cache=True, fastmath=True)
def dqn_update(params, target, grads, m, v, step, dims, w_off, b_off, a_off,
               obs, actions, rewards, next_obs, discounts, weights,
               acts, next_acts, g_out, g_a, g_b, td_out,
               double, lr, max_norm, tau):  # pragma: no cover - compiled
    """One DQN update in place; returns the loss. td_out receives |target - Q(s, a)| per sample; the
    target moves towards the new parameters by ``tau`` (1: a hard copy; 0: it stays)."""
    batch = len(actions)
    n_actions = dims[len(dims) - 1]
    # targets first: they read the online network before it changes
    t_out = forward(target, dims, w_off, b_off, next_obs, next_acts, a_off, batch)
    next_q = np.empty(batch, dtype=np.float32)
    if double:
        t_vals = next_acts[t_out:t_out + batch * n_actions].copy()
        o_out = forward(params, dims, w_off, b_off, next_obs, next_acts, a_off, batch)
        for b in range(batch):
            best = 0
            for a in range(1, n_actions):
                if next_acts[o_out + b * n_actions + a] > next_acts[o_out + b * n_actions + best]:
                    best = a
            next_q[b] = t_vals[b * n_actions + best]
    else:
        for b in range(batch):
            best = next_acts[t_out + b * n_actions]
            for a in range(1, n_actions):
                best = max(best, next_acts[t_out + b * n_actions + a])
            next_q[b] = best
    out = forward(params, dims, w_off, b_off, obs, acts, a_off, batch)
    loss = 0.0
    g_out[:] = 0.0
    for b in range(batch):
        q = acts[out + b * n_actions + actions[b]]
        y = rewards[b] + discounts[b] * next_q[b]
        d = q - y
        ad = abs(d)
        td_out[b] = ad
        loss += weights[b] * (0.5 * d * d if ad < 1.0 else ad - 0.5)  # Huber, delta 1 (F.huber_loss)
        g_out[b * n_actions + actions[b]] = weights[b] * max(-1.0, min(1.0, d)) / batch
    grads[:] = 0.0
    backward(params, grads, dims, w_off, b_off, acts, a_off, g_out, g_a, g_b, batch)
    clip_and_adam(params, grads, m, v, step, lr, BETAS[0], BETAS[1], EPS, max_norm, target, tau)
    return loss / batch


_HOST_DTYPES = {"actions": np.int64}  # every other input is float32


class DQNNumbaLearner(DQNCheckpoint, Learner):
    """DQN's learner with the update in :func:`dqn_update`; parameters shared with torch modules;
    checkpoints in the torch learner's format (DQNCheckpoint)."""

    def __init__(self, algo: DQN, seed: int) -> None:
        cfg: DQNConfig = algo.config  # LearnNumba.unsupported has ruled out a dueling head
        with seeded_init(seed):  # the same initial weights as the torch learner for this seed
            self.q: QNetwork = algo.make_networks()["q"]
        self.q_target = copy.deepcopy(self.q).requires_grad_(False)
        self.layout = FlatMLP(self.q.trunk)
        n = self.layout.size
        self.params, self.target = np.zeros(n, np.float32), np.zeros(n, np.float32)
        self.layout.adopt(self.params)
        FlatMLP(self.q_target.trunk).adopt(self.target)
        self.grads = np.zeros(n, np.float32)
        self.optimizer = FlatAdam(n, self.layout.views, cfg.lr)  # its moments are updated inside dqn_update
        self.cfg, self.updates = cfg, 0
        self._batch = -1

    @property
    def policy_network(self) -> QNetwork:
        return self.q

    def _scratch(self, batch: int) -> None:
        """Work vectors for a batch size, allocated once (a run's batch size does not change)."""
        if batch == self._batch:
            return
        self._batch, width = batch, self.layout.max_width
        self.a_off = self.layout.activation_offsets(batch)
        self.acts, self.next_acts = np.zeros(self.a_off[-1], np.float32), np.zeros(self.a_off[-1], np.float32)
        self.g_out = np.zeros(batch * int(self.layout.dims[-1]), np.float32)
        self.g_a, self.g_b = np.zeros(batch * width, np.float32), np.zeros(batch * width, np.float32)

    def update(self, batch: dict[str, Any]) -> dict[str, torch.Tensor]:
        """One update from host arrays (numpy, or CPU tensors, read without a copy)."""
        cfg, layout = self.cfg, self.layout
        host = {k: host_array(batch[k], _HOST_DTYPES.get(k, np.float32)) for k in LEARN_INPUTS}
        size = len(host["actions"])
        self._scratch(size)
        td = np.empty(size, np.float32)
        adam = self.optimizer
        adam.steps += 1
        self.updates += 1
        # Polyak averaging every update, or a hard copy every target_update_every (DQNLearner.periodic_due)
        target_moves = cfg.tau < 1.0 or self.updates % cfg.target_update_every == 0
        loss = dqn_update(
            self.params, self.target, self.grads, adam.m, adam.v, adam.steps,
            layout.dims, layout.w_off, layout.b_off, self.a_off,
            host["obs"].reshape(-1), host["actions"], host["rewards"], host["next_obs"].reshape(-1),
            host["discounts"], host["weights"], self.acts, self.next_acts, self.g_out, self.g_a, self.g_b, td,
            cfg.double, cfg.lr, cfg.max_grad_norm if cfg.max_grad_norm is not None else 0.0,
            cfg.tau if target_moves else 0.0,
        )
        return {"td_errors": torch.from_numpy(td), "loss": torch.from_numpy(np.array(loss, np.float32))}  # cheaper than torch.tensor (docs/benchmarks.md, 'Measurements behind the code')



@implements(Learn="learn")
class LearnNumba(LearnOnHost):
    """Learn on the host with a fused, compiled update (DQN with an MLP Q-network)."""

    backend = "numba"
    host_threads = (1,)  # one compiled loop nest on one core: the profiler measures it once

    @classmethod
    def unsupported(cls, algorithm: Algorithm) -> str | None:
        """Why this backend cannot run ``algorithm``'s learner, or None when it can."""
        return flat_mlp_refusal(algorithm, "numba", "use the torch learner (plan=rule, or backend torch for learn in a plan.json)")

    @staticmethod
    def make_learner(algorithm: Algorithm, seed: int) -> DQNNumbaLearner:
        return DQNNumbaLearner(algorithm, seed)  # type: ignore[arg-type]
