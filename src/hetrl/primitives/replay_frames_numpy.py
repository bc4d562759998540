"""ReplayAdd, ReplaySample, PriorityUpdate / frames-numpy: stacked uint8 frames, each stored once,
in host numpy arrays (``replay/frames.py``)."""

from __future__ import annotations

from typing import Any

import torch

from hetrl.primitives.replay_numpy import ReplayOnArrays, torch_device
from hetrl.protocol import implements
from hetrl.replay.frames import FrameReplay, frames_unsupported
from hetrl.replay.sum_tree import NumpyOps


@implements(ReplayAdd="add", ReplaySample="sample", PriorityUpdate="update_priorities")
class ReplayFramesNumpy(FrameReplay, ReplayOnArrays):
    """Frame replay in host numpy arrays; ``sample`` returns numpy arrays (obs and next_obs uint8)."""

    backend = "frames-numpy"
    host_arrays = True

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
        if self.device.type != "cpu":
            raise ValueError(f"ReplayFramesNumpy stores in host memory: device must be 'cpu', not {device!r} "
                             "(use ReplayFramesTorch)")
        super().__init__(NumpyOps(), capacity, obs_shape, action_shape, action_dtype, prioritized, alpha, eps,
                         lookback, frame_capacity)
