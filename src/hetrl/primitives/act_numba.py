"""Act and WeightSync / numba: the policy's MLP as one compiled forward over a flat copy of its
weights (a Q-network without a dueling head, or a DDPG/TD3 actor); the action rule as
:class:`ActNumpy`'s, whose per-name arrays, WeightSync and state dicts it keeps, so any Act backend
resumes or evaluates a run written with another."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch import nn

from hetrl.algos.dqn import DQNConfig
from hetrl.errors import HetrlError
from hetrl.nets.fused_mlp import FlatMLP, epsilon_greedy, forward
from hetrl.nets.mlp import Actor, QNetwork
from hetrl.primitives.act_numpy import ActionRule, ActNumpy
from hetrl.protocol import implements


@implements(Act="act", WeightSync="sync")
class ActNumba(ActNumpy):
    """The MLP's weights and biases are views of one flat vector inside the numpy policy's
    per-name arrays (docs/benchmarks.md has the 1-env forward against numpy's)."""

    backend = "numba"

    def __init__(self, network: nn.Module, rule: ActionRule, device: str | torch.device = "cpu", *,
                 epsilon_greedy: bool = False) -> None:
        if isinstance(network, QNetwork) and not network.dueling:
            body, self._squash = network.trunk, False
        elif isinstance(network, Actor):
            body, self._squash = network.net, True
        else:
            raise HetrlError(f"the numba policy runs MLP Q-networks (no dueling head) and actors, not {type(network).__name__}; use the numpy policy")
        self.layout = FlatMLP(body)
        self.flat = np.zeros(self.layout.size, np.float32)
        self._scratch_for = -1
        # An epsilon-greedy rule (DQN's) runs inside the kernel: the numpy glue of a separate
        # argmax and np.where cost more than the 1-env forward itself.
        self._fused_rule = not self._squash and epsilon_greedy
        super().__init__(network, rule, device)
        # The process's first numba call pays numba's own start-up, cached kernels or not, and it is
        # large (docs/benchmarks.md, 'Measurements behind the code'): pay it now, not inside the
        # first timed Act, where it would inflate Act's µs per call.
        one = np.zeros((1, self.layout.dims[0]), np.float32)
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
        if not algorithm.mlp_networks():
            return (f"the numba policy runs MLPs only, not {algorithm.name}'s {getattr(algorithm, 'network_kind', 'own')} "
                    "network; use the numpy or torch policy")
        if isinstance(algorithm.config, DQNConfig) and algorithm.config.dueling:
            return "the numba policy has no dueling head; use the numpy policy"
        return None

    def _host_params(self, network: nn.Module) -> dict[str, np.ndarray]:
        params = super()._host_params(network)
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
        n = len(obs)
        self._scratch(n)
        layout, actions = self.layout, np.empty(n, np.int64)
        epsilon_greedy(self.flat, layout.dims, layout.w_off, layout.b_off, np.ascontiguousarray(obs, dtype=np.float32).reshape(-1),
                       self.acts, self.a_off, n, explore, random_actions, np.float32(level), actions)  # compared as numpy does
        return actions

    def forward(self, obs: np.ndarray) -> np.ndarray:
        n = len(obs)
        self._scratch(n)
        layout = self.layout
        out = forward(self.flat, layout.dims, layout.w_off, layout.b_off,
                      np.ascontiguousarray(obs, dtype=np.float32).reshape(-1), self.acts, self.a_off, n)
        y = self.acts[out:out + n * int(layout.dims[-1])].reshape(n, -1).copy()
        return np.tanh(y) * self.params["scale"] + self.params["center"] if self._squash else y
