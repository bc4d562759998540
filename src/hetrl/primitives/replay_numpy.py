"""ReplayAdd, ReplaySample, PriorityUpdate / numpy: the ring storage in host numpy arrays."""

from __future__ import annotations

from typing import Any

import torch

from hetrl.protocol import Replay, Slot, implements
from hetrl.replay.ring import RingReplay
from hetrl.replay.sum_tree import NumpyOps


class ReplayOnArrays(Replay):
    """What the replay backends share: they take the same arguments, made from the algorithm's
    config and env spec the same way."""

    @classmethod
    def build(cls, slot: Slot, algorithm: Any, seed: int, **_: Any) -> "ReplayOnArrays":
        cfg, spec = algorithm.config, algorithm.spec
        return cls(cfg.buffer_size, spec.obs_shape, spec.action_shape, spec.action_dtype, prioritized=cfg.prioritized,
                   alpha=cfg.alpha, eps=cfg.priority_eps, obs_dtype=spec.obs_dtype, device=slot.device)


def torch_device(device: str | torch.device) -> torch.device:
    try:
        return torch.device(device)
    except RuntimeError as error:
        raise ValueError(f"invalid replay device {device!r}: {error}") from None


@implements(ReplayAdd="add", ReplaySample="sample", PriorityUpdate="update_priorities")
class ReplayNumpy(RingReplay, ReplayOnArrays):
    """Replay storage in host numpy arrays; ``sample`` returns numpy arrays."""

    backend = "numpy"
    host_arrays = True

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
        if self.device.type != "cpu":
            raise ValueError(f"ReplayNumpy stores in host memory: device must be 'cpu', not {device!r} (use ReplayTorch)")
        super().__init__(NumpyOps(), capacity, obs_shape, action_shape, action_dtype, prioritized, alpha, eps,
                         obs_dtype)
