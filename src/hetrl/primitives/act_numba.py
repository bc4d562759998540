"""Act and WeightSync / numba: the policy network as one compiled forward over a flat copy of its
weights: an MLP (a Q-network without a dueling head, or a DDPG/TD3 actor; :mod:`hetrl.nets.fused_mlp`)
or one of hetrl's small-image conv Q-networks, early-exit Q-networks and searched Q-networks
(:mod:`hetrl.nets.fused_q`: direct convolutions, exits decided inside the pass); the action rule as
:class:`ActNumpy`'s, whose per-name arrays, WeightSync and state dicts it keeps, so any Act backend
resumes or evaluates a run written with another."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch import nn

from hetrl.algos.dqn import SMALL_IMAGE, DQNConfig
from hetrl.errors import HetrlError
from hetrl.nets.fused_mlp import FlatMLP, epsilon_greedy, forward
from hetrl.nets.fused_q import FusedQ
from hetrl.nets.fused_q import supports as fused_q_supports
from hetrl.nets.mlp import Actor, QNetwork
from hetrl.primitives.act_numpy import ActionRule, ActNumpy
from hetrl.protocol import implements

CONV_KINDS = ("minatar", "searched")  # the conv networks served: small images (the Nature CNN's want a matrix library)


@implements(Act="act", WeightSync="sync")
class ActNumba(ActNumpy):
    """The network's weights and biases are views of one flat vector inside the numpy policy's
    per-name arrays (docs/benchmarks.md has the 1-env forward against numpy's)."""

    backend = "numba"

    def __init__(self, network: nn.Module, rule: ActionRule, device: str | torch.device = "cpu", *,
                 epsilon_greedy: bool = False) -> None:
        self.fused: FusedQ | None = None
        self._squash = False
        if isinstance(network, QNetwork) and not network.dueling:
            body = network.trunk
        elif isinstance(network, Actor):
            body, self._squash = network.net, True
        else:
            reason = fused_q_supports(network, SMALL_IMAGE)
            if reason:
                raise HetrlError(f"the numba policy {reason}; use the numpy or torch policy")
            body = None
            self.fused = FusedQ(network)
        if self.fused is None:
            self.layout = FlatMLP(body)
            self.flat = np.zeros(self.layout.size, np.float32)
        else:
            self.flat = self.fused.new_flat()
        self._scratch_for = -1
        # An epsilon-greedy rule (DQN's) runs inside the kernel: the numpy glue of a separate
        # argmax and np.where cost more than the 1-env forward itself.
        self._fused_rule = not self._squash and epsilon_greedy
        super().__init__(network, rule, device)
        # The process's first numba call pays numba's own start-up, cached kernels or not, and it is
        # large (docs/benchmarks.md, 'Measurements behind the code'): pay it now, not inside the
        # first timed Act, where it would inflate Act's µs per call.
        if self.fused is None:
            one = np.zeros((1, self.layout.dims[0]), np.float32)
        else:  # images as envs give them (uint8), vectors as float32
            shape = self.fused.obs_shape
            one = np.zeros((1, *shape), np.uint8 if len(shape) == 3 else np.float32)
        self.forward(one)
        if self._fused_rule:
            self.act(one, np.ones(1, np.float32), np.zeros(1, np.int64), 0.0)

    @classmethod
    def unsupported(cls, algorithm: Any) -> str | None:
        if algorithm.stochastic_policy:
            return (f"the numba policy runs deterministic MLP actors and Q-networks, not {algorithm.name}'s "
                    "Gaussian policy; use the numpy or torch policy")
        reason = super().unsupported(algorithm)
        if reason:
            return reason
        kind = getattr(algorithm, "network_kind", "own")
        exits = getattr(algorithm, "early_exits", False)
        if not algorithm.mlp_networks() and not (kind in CONV_KINDS or (exits and kind == "mlp")):
            return (f"the numba policy runs MLPs and small-image (MinAtar) conv and searched Q-networks, not {algorithm.name}'s "
                    f"{kind} network; use the numpy or torch policy")
        if kind in CONV_KINDS and len(algorithm.spec.obs_shape) == 3 and max(algorithm.spec.obs_shape[1:]) > SMALL_IMAGE:
            return (f"the numba policy runs conv networks on images up to {SMALL_IMAGE}x{SMALL_IMAGE}, not "
                    f"{algorithm.spec.obs_shape[1]}x{algorithm.spec.obs_shape[2]}; use the numpy or torch policy")
        if isinstance(algorithm.config, DQNConfig) and algorithm.config.dueling and kind != "searched":  # a searched net has no head to duel
            return "the numba policy has no dueling head; use the numpy policy"
        return None

    def _host_params(self, network: nn.Module) -> dict[str, np.ndarray]:
        params = super()._host_params(network)
        if self.fused is not None:
            views = self.fused.views(self.flat)
            for name, view in views.items():
                view[...] = params[name]
            params.update(views)
            return params
        for (name, _), view in zip(network.named_parameters(), self.layout.views(self.flat)):
            view[...] = params[name]
            params[name] = view
        return params

    def _scratch(self, n: int) -> None:
        if n != self._scratch_for:  # the env count of a run is fixed: allocated once
            self._scratch_for, self.a_off = n, self.layout.activation_offsets(n)
            self.acts = np.zeros(self.a_off[-1], np.float32)

    def act(self, obs: np.ndarray, explore: np.ndarray, random_actions: np.ndarray, level: float = 0.0) -> np.ndarray:
        if not self._fused_rule:
            return self.rule(self.forward(obs), explore, random_actions, level)
        if self.fused is not None:
            return self.fused.epsilon_greedy(self.flat, obs, explore, random_actions, level)
        n = len(obs)
        self._scratch(n)
        layout, actions = self.layout, np.empty(n, np.int64)
        epsilon_greedy(self.flat, layout.dims, layout.w_off, layout.b_off, np.ascontiguousarray(obs, dtype=np.float32).reshape(-1),
                       self.acts, self.a_off, n, explore, random_actions, np.float32(level), actions)  # compared as numpy does
        return actions

    def act_forward(self, obs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Q-values (n, actions) and each row's exit (n,), as :meth:`ExitQNetwork.act_forward`
        gives them (conv and exit networks only)."""
        if self.fused is None:
            raise HetrlError("act_forward is for conv and early-exit Q-networks; this numba policy runs an MLP")
        return self.fused.forward(self.flat, obs)

    def forward(self, obs: np.ndarray) -> np.ndarray:
        if self.fused is not None:
            return self.fused.q_values(self.flat, obs)
        n = len(obs)
        self._scratch(n)
        layout = self.layout
        out = forward(self.flat, layout.dims, layout.w_off, layout.b_off,
                      np.ascontiguousarray(obs, dtype=np.float32).reshape(-1), self.acts, self.a_off, n)
        y = self.acts[out:out + n * int(layout.dims[-1])].reshape(n, -1).copy()
        return np.tanh(y) * self.params["scale"] + self.params["center"] if self._squash else y
