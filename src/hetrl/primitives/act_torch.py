"""Act and WeightSync / torch: a frozen copy of the policy network on any torch device; its
outputs come back to the host for the algorithm's action rule."""

from __future__ import annotations

import copy
from typing import Any

import numpy as np
import torch
from torch import nn

from hetrl.nets import numpy_params
from hetrl.primitives.act_numpy import ActionRule
from hetrl.protocol import Act, Slot, implements


@implements(Act="act", WeightSync="sync")
class ActTorch(Act):
    backend = "torch"
    device_types = None  # any torch device

    @classmethod
    def build(cls, slot: Slot, algorithm: Any, seed: int, *, source: nn.Module, **_: Any) -> "ActTorch":
        return cls(source, algorithm.action_rule, slot.device)

    def __init__(self, network: nn.Module, rule: ActionRule, device: str | torch.device = "cpu") -> None:
        self.source, self.rule, self.device = network, rule, torch.device(device)
        self.net = copy.deepcopy(network).to(self.device).requires_grad_(False)
        for module in self.net.modules():  # a learner's mixed precision (Learn/torch-bf16) is its own: act in fp32
            if getattr(module, "compute_dtype", None) is not None:
                module.compute_dtype = None
        # the tensors to copy, listed once (state_dict() builds a dict per call): the Parameter objects,
        # whose data a learner may re-point (flat learners adopt them) but never replaces
        self._mine = [*self.net.parameters(), *self.net.buffers()]
        self._theirs = [*network.parameters(), *network.buffers()]

    def sync(self) -> None:
        with torch.no_grad():
            torch._foreach_copy_(self._mine, self._theirs)

    def forward(self, obs: np.ndarray) -> np.ndarray:
        with torch.no_grad():
            return self.net(torch.as_tensor(obs, device=self.device)).cpu().numpy()

    def act(self, obs: np.ndarray, explore: np.ndarray, random_actions: np.ndarray, level: float = 0.0) -> np.ndarray:
        return self.rule(self.forward(obs), explore, random_actions, level)

    def state_dict(self) -> dict[str, np.ndarray]:
        return numpy_params(self.net)

    def load_state_dict(self, state: dict[str, np.ndarray]) -> None:
        self.net.load_state_dict({k: torch.as_tensor(v) for k, v in state.items()})
