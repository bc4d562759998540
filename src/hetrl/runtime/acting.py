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
from hetrl.nets.fused_mlp import FlatMLP, forward
from hetrl.nets.mlp import Actor, QNetwork
from hetrl.protocol import implements

ActionRule = Callable[[np.ndarray, np.ndarray, np.ndarray, float], np.ndarray]


@implements("numpy", Act="act", WeightSync="sync")
class NumpyPolicy:
    """The network's numpy forward on host arrays: no torch dispatch on the acting path."""

    def __init__(self, network: nn.Module, rule: ActionRule, device: str | torch.device = "cpu") -> None:
        if torch.device(device).type != "cpu":
            raise ValueError(f"the numpy policy runs on the host, not on {device}")
        self.source, self.rule = network, rule
        self.params = numpy_params(network)
        self._forward = network.forward_numpy
        # A host network's tensors are read through numpy views taken once: state_dict() costs
        # ~100 us a call, more than the copy. Learners update their tensors in place (optimiser
        # steps, load_state_dict), so the views stay valid; a device network is read each time.
        state = network.state_dict()
        on_host = all(v.device.type == "cpu" for v in state.values())
        self._views = [(self.params[k], v.detach().numpy()) for k, v in state.items()] if on_host else None

    def sync(self) -> None:
        if self._views is not None:
            for dst, src in self._views:
                np.copyto(dst, src)
            return
        for name, value in self.source.state_dict().items():
            np.copyto(self.params[name], value.detach().cpu().numpy())

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
class NumbaPolicy:
    """The policy network's MLP as one compiled forward over a flat copy of its weights (a
    Q-network without a dueling head, or a DDPG/TD3 actor); the action rule as the numpy policy's.

    A 1-env forward of 4-64-64-2 measured ~15 us in numpy (seven small array calls) and ~3 us here.
    """

    def __init__(self, network: nn.Module, rule: ActionRule, device: str | torch.device = "cpu") -> None:
        if torch.device(device).type != "cpu":
            raise ValueError(f"the numba policy runs on the host, not on {device}")
        if isinstance(network, QNetwork) and not network.dueling:
            body, self._squash = network.trunk, False
        elif isinstance(network, Actor):
            body, self._squash = network.net, True
        else:
            raise HetrlError(f"the numba policy runs MLP Q-networks (no dueling head) and actors, not {type(network).__name__}; use the numpy policy")
        self.rule, self.layout = rule, FlatMLP(body)
        self.flat = np.zeros(self.layout.size, np.float32)
        # checkpoints keep the numpy policy's format (the network's state_dict names), so any Act
        # backend resumes or evaluates a run written with another
        self._names = [name for name, _ in network.named_parameters()]
        sources = [t.detach() for m in self.layout.linears for t in (m.weight, m.bias)]
        # views of the source taken once, as the numpy policy's (learners update in place)
        self._pairs = list(zip(self.layout.views(self.flat), [t.numpy() for t in sources])) if sources[0].device.type == "cpu" else None
        self._sources = sources
        self.scale = network.scale.numpy().copy() if self._squash else None
        self.center = network.center.numpy().copy() if self._squash else None
        self._scratch_for = -1
        self.sync()

    @staticmethod
    def unsupported(algorithm: object) -> str | None:
        if getattr(algorithm.config, "dueling", False):  # type: ignore[attr-defined]
            return "the numba policy has no dueling head; use the numpy policy"
        return None

    def sync(self) -> None:
        pairs = self._pairs or zip(self.layout.views(self.flat), [t.cpu().numpy() for t in self._sources])
        for dst, src in pairs:
            np.copyto(dst, src)

    def forward(self, obs: np.ndarray) -> np.ndarray:
        n = len(obs)
        if n != self._scratch_for:  # the env count of a run is fixed: allocated once
            self._scratch_for, self.a_off = n, self.layout.activation_offsets(n)
            self.acts = np.zeros(self.a_off[-1], np.float32)
        layout = self.layout
        out = forward(self.flat, layout.dims, layout.w_off, layout.b_off,
                      np.ascontiguousarray(obs, dtype=np.float32).reshape(-1), self.acts, self.a_off, n)
        y = self.acts[out:out + n * int(layout.dims[-1])].reshape(n, -1).copy()
        return np.tanh(y) * self.scale + self.center if self._squash else y

    def act(self, obs: np.ndarray, explore: np.ndarray, random_actions: np.ndarray, level: float = 0.0) -> np.ndarray:
        return self.rule(self.forward(obs), explore, random_actions, level)

    def state_dict(self) -> dict[str, np.ndarray]:
        state = {name: view.copy() for name, view in zip(self._names, self.layout.views(self.flat))}
        if self._squash:
            state.update(scale=self.scale.copy(), center=self.center.copy())
        return state

    def load_state_dict(self, state: dict[str, np.ndarray]) -> None:
        for name, view in zip(self._names, self.layout.views(self.flat)):
            np.copyto(view, np.asarray(state[name]))
        if self._squash:
            np.copyto(self.scale, np.asarray(state["scale"]))
            np.copyto(self.center, np.asarray(state["center"]))
