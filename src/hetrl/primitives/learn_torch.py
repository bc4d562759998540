"""Learn / torch: the algorithm's own learner (torch ops, autograd, torch optimisers) on any torch
device, fed a batch already on that device. The reference every other Learn backend equals."""

from __future__ import annotations

from typing import Any

import torch

from hetrl.protocol import Learn, Slot, implements


@implements(Learn="learn")
class LearnTorch(Learn):
    backend = "torch"
    device_types = None  # any torch device

    @classmethod
    def build(cls, slot: Slot, algorithm: Any, seed: int, **_: Any) -> "LearnTorch":
        return cls(algorithm, slot.device, seed)

    def __init__(self, algorithm: Any, device: str | torch.device, seed: int) -> None:
        self.device = torch.device(device)
        self.learner = algorithm.build_learner(self.device, seed)

    def learn(self, **batch: torch.Tensor) -> dict[str, torch.Tensor]:
        return self.learner.update(batch)
