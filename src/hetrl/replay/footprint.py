"""The bytes a replay allocates, known before it is made: what the start-up check
(config.check_replay_memory) and the planner (planner/search.py) set against a device's memory.

A plain replay (:class:`RingReplay`) keeps obs and next_obs whole for every transition; a frame
replay (:class:`FrameReplay`) keeps about one frame per transition (its frame ring:
``FrameReplay.default_sizes``) and 2C int32 frame slots. Both keep the action, reward and discount,
and a prioritized one its sum tree. The figure is the replay's ``nbytes`` for a host replay; a
frame replay on a device also keeps a host copy of its last ``lookback`` frames, not counted here.
"""

from __future__ import annotations

import math

import numpy as np

from hetrl.replay.frames import FrameReplay


def replay_bytes(capacity: int, obs_shape: tuple[int, ...], obs_dtype: str, action_shape: tuple[int, ...],
                 action_dtype: str, prioritized: bool, frames: bool) -> int:
    """Bytes of the storage of a replay of ``capacity`` transitions (``frames``: a frame replay)."""
    action = int(math.prod(action_shape)) * np.dtype(action_dtype).itemsize
    per_transition = action + 8  # reward and discount, float32
    if frames:
        stack, height, width = (int(d) for d in obs_shape)
        _, frame_capacity = FrameReplay.default_sizes(capacity, stack)
        stored = frame_capacity * height * width
        per_transition += 2 * stack * 4 + 8  # frame slots (int32), and the frame count when added (int64)
    else:
        stored = 2 * capacity * int(math.prod(obs_shape)) * np.dtype(obs_dtype).itemsize
    tree = 2 * (1 << (capacity - 1).bit_length()) * 8 if prioritized else 0  # float64 sum tree of 2P nodes
    return stored + capacity * per_transition + tree


def is_frame_replay(backend: str) -> bool:
    """Whether a replay backend's name is a frame replay's (frames-numpy, frames-torch)."""
    return backend.startswith("frames-")
