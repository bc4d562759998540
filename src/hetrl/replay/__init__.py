"""Replay storage: ring buffers of transitions, uniform or prioritized (sum tree), numpy or torch.
Both backends run the same arithmetic, so the same calls sample the same batches in either."""

from hetrl.replay.storage import NumpyReplay, TorchReplay
from hetrl.replay.sum_tree import SumTree

__all__ = ["NumpyReplay", "SumTree", "TorchReplay"]
