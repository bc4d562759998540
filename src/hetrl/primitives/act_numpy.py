"""Act and WeightSync / numpy: the acting copy of the policy network as host arrays, run by the
network's numpy forward (no torch dispatch on the acting path).

The acting policy is a *copy* of a source network (the learner's, or an actor's local replica of
it), refreshed by WeightSync; the algorithm's action rule (epsilon-greedy, clipped noise) turns
the network's output into actions. The other Act backends equal this one (tests/primitives).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from torch import nn

from hetrl.nets import numpy_params
from hetrl.nets.host_mirror import HostMirror
from hetrl.protocol import Act, Slot, implements

ActionRule = Callable[[np.ndarray, np.ndarray, np.ndarray, float], np.ndarray]


@implements(Act="act", WeightSync="sync")
class ActNumpy(Act):
    """The network's numpy forward on host arrays."""

    backend = "numpy"

    @classmethod
    def unsupported(cls, algorithm: Any) -> str | None:
        if not algorithm.numpy_policy():
            return (f"the {cls.backend} policy runs hetrl's own networks only (they have a numpy forward), not "
                    f"{algorithm.name}'s {getattr(algorithm, 'network_kind', 'own')} network; use the torch policy "
                    "(plan=rule, or backend torch for act in a plan.json)")
        return None

    @classmethod
    def build(cls, slot: Slot, algorithm: Any, seed: int, *, source: nn.Module, **_: Any) -> "ActNumpy":
        return cls(source, algorithm.action_rule, slot.device, epsilon_greedy=algorithm.exploration_rule == "epsilon-greedy")

    def __init__(self, network: nn.Module, rule: ActionRule, device: str | torch.device = "cpu", *,
                 epsilon_greedy: bool = False) -> None:
        """``epsilon_greedy``: ``rule`` is epsilon-greedy, which a backend may compute in its own kernel."""
        if torch.device(device).type != "cpu":
            raise ValueError(f"the {self.backend} policy runs on the host, not on {device}")
        self.source, self.rule = network, rule
        self.params = self._host_params(network)
        self._forward = network.forward_numpy
        self._mirror = HostMirror(network)  # the source network as host arrays, cheap to refresh

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
