"""ReplayAdd, ReplaySample, PriorityUpdate / torch: the ring storage in torch tensors on any device."""

from __future__ import annotations


import torch

from hetrl.primitives.replay_numpy import ReplayOnArrays, torch_device
from hetrl.protocol import implements
from hetrl.replay.ring import RingReplay
from hetrl.replay.sum_tree import TorchOps


@implements(ReplayAdd="add", ReplaySample="sample", PriorityUpdate="update_priorities")
class ReplayTorch(RingReplay, ReplayOnArrays):
    """Replay storage in torch tensors on ``device``.

    ``add``, ``sample`` and ``update_priorities`` take numpy arrays or tensors; ``sample`` returns
    tensors on the device. With inputs already on the device nothing synchronises with the host.
    """

    backend = "torch"
    device_types = None  # any torch device

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
