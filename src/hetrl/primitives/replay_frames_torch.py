"""ReplayAdd, ReplaySample, PriorityUpdate / frames-torch: stacked uint8 frames, each stored once,
in torch tensors on any device (``replay/frames.py``); a sample's stacks are one gather there."""

from __future__ import annotations

from typing import Any

import torch

from hetrl.primitives.replay_numpy import ReplayOnArrays, torch_device
from hetrl.protocol import implements
from hetrl.replay.frames import FrameReplay, frames_unsupported
from hetrl.replay.sum_tree import TorchOps


@implements(ReplayAdd="add", ReplaySample="sample", PriorityUpdate="update_priorities")
class ReplayFramesTorch(FrameReplay, ReplayOnArrays):
    """Frame replay in torch tensors on ``device``; ``sample`` returns tensors there.

    ``add`` finds shared frames on the host (from the added arrays and, off the CPU, a host copy of
    the last ``lookback`` frames), so it reads tensor inputs back to the host; ``sample`` and
    ``update_priorities`` stay on the device.
    """

    backend = "frames-torch"
    device_types = None  # any torch device

    @classmethod
    def unsupported(cls, algorithm: Any) -> str | None:
        return frames_unsupported(algorithm.spec, cls.backend)

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
        lookback: int | None = None,
        frame_capacity: int | None = None,
        obs_dtype: str = "uint8",
    ) -> None:
        if obs_dtype != "uint8":
            raise ValueError(f"a frame replay stores uint8 frames, not {obs_dtype} observations: use replay backend numpy or torch")
        self.device = torch_device(device)
        super().__init__(TorchOps(self.device), capacity, obs_shape, action_shape, action_dtype, prioritized, alpha,
                         eps, lookback, frame_capacity)
