"""What the host-only Learn backends share (Learn/numba, Learn/blas): a learner of the backend's
own, fed the replay's numpy batch as it is (no Transfer to torch and back)."""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np
import torch

from hetrl.algos.base import Algorithm, Learner
from hetrl.errors import HetrlError
from hetrl.protocol import Learn, Slot


def host_array(x: Any, dtype: type = np.float32) -> np.ndarray:
    """A contiguous host array of ``dtype`` from a numpy array or CPU tensor (no copy when it already is one)."""
    x = x.numpy() if isinstance(x, torch.Tensor) else x
    return np.ascontiguousarray(x, dtype=dtype)


class LearnOnHost(Learn):
    """A subclass names its backend, says which algorithms it serves (``unsupported``) and makes its
    learner (``make_learner``)."""

    input_kind: ClassVar = "host"

    @classmethod
    def build(cls, slot: Slot, algorithm: Any, seed: int, **_: Any) -> "LearnOnHost":
        return cls(algorithm, slot.device, seed)

    def __init__(self, algorithm: Algorithm, device: str | torch.device, seed: int) -> None:
        self.device = torch.device(device)
        if self.device.type != "cpu":
            raise HetrlError(f"the {self.backend} learner runs on the host, not on {device}; use device cpu or the torch learner")
        reason = self.unsupported(algorithm)
        if reason:
            raise HetrlError(reason)
        self.learner = self.make_learner(algorithm, seed)

    @staticmethod
    def make_learner(algorithm: Algorithm, seed: int) -> Learner:
        raise NotImplementedError

    def learn(self, **batch: Any) -> dict[str, torch.Tensor]:
        return self.learner.update(batch)
