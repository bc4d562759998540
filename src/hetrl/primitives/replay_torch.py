"""ReplayAdd, ReplaySample, PriorityUpdate / torch: the ring storage in torch tensors on any device."""

from __future__ import annotations

from typing import Any

import torch

from hetrl.primitives.replay_numpy import replay_settings, torch_device
from hetrl.protocol import Replay, Slot, implements
from hetrl.replay.ring import RingReplay
from hetrl.replay.sum_tree import TorchOps


@implements(ReplayAdd="add", ReplaySample="sample", PriorityUpdate="update_priorities")
class ReplayTorch(RingReplay, Replay):
    """Replay storage in torch tensors on ``device``.

    ``add``, ``sample`` and ``update_priorities`` take numpy arrays or tensors; ``sample`` returns
    tensors on the device. With inputs already on the device nothing synchronises with the host.
    """

    backend = "torch"
    device_types = None  # any torch device

    @classmethod
    def build(cls, slot: Slot, algorithm: Any, seed: int, **_: Any) -> "ReplayTorch":
        args, kwargs = replay_settings(algorithm)
        return cls(*args, **kwargs, device=slot.device)

    def __init__(
        self,
        capacity: int,
        obs_shape: tuple[int, ...],
        action_shape: tuple[int, ...],
        action_dtype: str,
        *,
        prioritized: bool = False,
        alpha: float = 0.6,
        eps: float = 1e-6,
        device: str | torch.device = "cpu",
        obs_dtype: str = "float32",
    ) -> None:
        self.device = torch_device(device)
        super().__init__(TorchOps(self.device), capacity, obs_shape, action_shape, action_dtype, prioritized, alpha, eps,
                         obs_dtype)
