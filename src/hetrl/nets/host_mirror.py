"""A host-side view of a network's current state, refreshed cheaply: what WeightSync reads.

Acting copies and actor processes read the learner's network as host arrays, often once per
update. The plain way, ``state_dict()`` then ``.cpu().numpy()`` per tensor, is dear in
``state_dict()`` alone (a fresh ordered dict of fresh tensors per call), and on a GPU costs one
synchronising copy per tensor. Instead:

- a host network is read through numpy views of its tensors, taken once (learners update their
  tensors in place: optimiser steps, ``load_state_dict``, CUDA graph replays);
- a device network is gathered into one device buffer (one kernel) and copied once into pinned
  host memory, of which the arrays are views (one copy in place of one per tensor; the profiled
  figure is in docs/benchmarks.md, 'Measurements behind the code').
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn


class HostMirror:
    """``arrays`` (name -> host array, keyed like ``network.state_dict()``) hold the network's state
    as of the last :meth:`refresh`; for a host network they are its live tensors' memory."""

    def __init__(self, network: nn.Module) -> None:
        state = {k: v.detach() for k, v in network.state_dict().items()}
        self._names, self._tensors = list(state), list(state.values())
        self.on_host = all(t.device.type == "cpu" for t in self._tensors)
        self._flat: torch.Tensor | None = None
        self.arrays: dict[str, np.ndarray] = {}
        if self.on_host:
            self.arrays = {k: v.numpy() for k, v in state.items()}
            return
        if len({t.dtype for t in self._tensors}) != 1 or not all(t.is_contiguous() for t in self._tensors):
            self.refresh()  # cannot be packed into one buffer: copied tensor by tensor
            return
        total = sum(t.numel() for t in self._tensors)
        self._flat = torch.empty(total, dtype=self._tensors[0].dtype, device=self._tensors[0].device)
        self._pinned = torch.empty(total, dtype=self._flat.dtype, pin_memory=True)
        self._pieces = [t.view(-1) for t in self._tensors]
        host, offset = self._pinned.numpy(), 0
        for name, tensor in state.items():
            self.arrays[name] = host[offset:offset + tensor.numel()].reshape(tuple(tensor.shape))
            offset += tensor.numel()

    def refresh(self) -> dict[str, np.ndarray]:
        """Bring ``arrays`` up to date (nothing to do for a host network) and return them."""
        if self._flat is not None:
            torch.cat(self._pieces, out=self._flat)
            self._pinned.copy_(self._flat)  # waits for the device's queued work: these are the newest weights
        elif not self.on_host:
            self.arrays = {name: t.cpu().numpy() for name, t in zip(self._names, self._tensors)}
        return self.arrays
