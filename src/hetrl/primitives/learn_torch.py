"""Learn / torch: the algorithm's own learner (torch ops, autograd, torch optimisers) on any torch
device, fed a batch already on that device. The reference every other Learn backend equals.
A DQN learner with a teacher (``teacher=RUN_DIR``) gets the teacher's Q-network here, loaded from
the run directory in the process that learns."""

from __future__ import annotations

from typing import Any

import torch

from hetrl.protocol import Learn, Slot, implements
from hetrl.run.saved_network import load_teacher


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
        if getattr(algorithm, "distils", False):
            self.learner.use_teacher(load_teacher(algorithm.config.teacher, algorithm.spec))

    def learn(self, **batch: torch.Tensor) -> dict[str, torch.Tensor]:
        return self.learner.update(batch)
