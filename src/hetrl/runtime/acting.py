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

from hetrl.nets import numpy_params
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
