"""Replay storage logic: a ring of transitions, uniform or prioritized (sum tree), over numpy or
torch arrays. The registered implementations are ``hetrl.primitives.replay_numpy`` and
``replay_torch``; both run this arithmetic, so the same calls sample the same batches in either."""

from hetrl.replay.ring import RingReplay
from hetrl.replay.sum_tree import SumTree

__all__ = ["RingReplay", "SumTree"]
