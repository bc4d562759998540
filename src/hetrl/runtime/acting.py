"""Act and WeightSync: the acting copy of the policy network, on the host (numpy) or a torch device.

The acting policy is a *copy* of the learner's network, refreshed by WeightSync, as it would be in
an actor process; the algorithm's action rule (epsilon-greedy, clipped noise) is shared.
"""

from __future__ import annotations

import copy
from collections.abc import Callable

import numpy as np
import torch
from torch import nn

from hetrl.errors import HetrlError
from hetrl.nets import numpy_params
from hetrl.nets.fused_mlp import FlatMLP, epsilon_greedy, forward
from hetrl.nets.host_mirror import HostMirror
from hetrl.nets.mlp import Actor, QNetwork
from hetrl.protocol import implements

ActionRule = Callable[[np.ndarray, np.ndarray, np.ndarray, float], np.ndarray]


@implements("numpy", Act="act", WeightSync="sync")
class NumpyPolicy:
    """The network's numpy forward on host arrays: no torch dispatch on the acting path."""

    kind = "numpy"

    def __init__(self, network: nn.Module, rule: ActionRule, device: str | torch.device = "cpu") -> None:
        if torch.device(device).type != "cpu":
            raise ValueError(f"the {self.kind} policy runs on the host, not on {device}")
        self.source, self.rule = network, rule
        self.params = self._host_params(network)
        self._forward = network.forward_numpy
        self._mirror = HostMirror(network)  # the learner's network as host arrays, cheap to refresh

    def sync(self) -> None:
        for name, value in self._mirror.refresh().items():
            np.copyto(self.params[name], value)

    def _host_params(self, network: nn.Module) -> dict[str, np.ndarray]:
        """The acting copy: a host array per state_dict entry (what sync fills and checkpoints hold)."""
        return numpy_params(network)

    def forward(self, obs: np.ndarray) -> np.ndarray:
        return self._forward(self.params, obs)

    def act(self, obs: np.ndarray, explore: np.ndarray, random_actions: np.ndarray, level: float = 0.0) -> np.ndarray:
        return self.rule(self.forward(obs), explore, random_actions, level)

    def state_dict(self) -> dict[str, np.ndarray]:
        return {k: v.copy() for k, v in self.params.items()}

    def load_state_dict(self, state: dict[str, np.ndarray]) -> None:
        for name, value in state.items():
            np.copyto(self.params[name], np.asarray(value))


@implements("torch", any_torch_device=True, Act="act", WeightSync="sync")
class TorchPolicy:
    """A frozen copy of the network on any torch device; outputs come back to the host."""

    def __init__(self, network: nn.Module, rule: ActionRule, device: str | torch.device = "cpu") -> None:
        self.source, self.rule, self.device = network, rule, torch.device(device)
        self.net = copy.deepcopy(network).to(self.device).requires_grad_(False)

    def sync(self) -> None:
        with torch.no_grad():
            torch._foreach_copy_(list(self.net.state_dict().values()), list(self.source.state_dict().values()))

    def forward(self, obs: np.ndarray) -> np.ndarray:
        with torch.no_grad():
            return self.net(torch.as_tensor(obs, device=self.device)).cpu().numpy()

    def act(self, obs: np.ndarray, explore: np.ndarray, random_actions: np.ndarray, level: float = 0.0) -> np.ndarray:
        return self.rule(self.forward(obs), explore, random_actions, level)

    def state_dict(self) -> dict[str, np.ndarray]:
        return numpy_params(self.net)

    def load_state_dict(self, state: dict[str, np.ndarray]) -> None:
        self.net.load_state_dict({k: torch.as_tensor(v) for k, v in state.items()})


@implements("numba", Act="act", WeightSync="sync")
class NumbaPolicy(NumpyPolicy):
    """The policy network's MLP as one compiled forward over a flat copy of its weights (a
    Q-network without a dueling head, or a DDPG/TD3 actor); the action rule as the numpy policy's.

    The numpy policy's per-name arrays are kept, with the MLP's weights and biases as views of the
    flat vector, so WeightSync, state dicts and the checkpoint format are the numpy policy's: any
    Act backend resumes or evaluates a run written with another.

    A 1-env forward of 4-64-64-2 measured ~15 us in numpy (seven small array calls) and ~3 us here.
    """

    kind = "numba"

    def __init__(self, network: nn.Module, rule: ActionRule, device: str | torch.device = "cpu") -> None:
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
        self._fused_rule = not self._squash and getattr(rule, "epsilon_greedy", False)
        super().__init__(network, rule, device)
        # The process's first numba call pays numba's own start-up (~250 ms here, cached kernels or
        # not): pay it now, not inside the first timed Act, where it would inflate Act's µs per call.
        one = np.zeros((1, self.layout.dims[0]), np.float32)
        self.forward(one)
        if self._fused_rule:
            self.act(one, np.ones(1, np.float32), np.zeros(1, np.int64), 0.0)

    @staticmethod
    def unsupported(algorithm: object) -> str | None:
        if getattr(algorithm, "stochastic_policy", False):
            return (f"the numba policy runs deterministic MLP actors and Q-networks, not {algorithm.name}'s "  # type: ignore[attr-defined]
                    "Gaussian policy; use the numpy or torch policy")
        if getattr(algorithm.config, "dueling", False):  # type: ignore[attr-defined]
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
