"""Frames, not stacks, through an actor's ring: the actor's side.

An env whose observation is a stack of its last C frames (newest last: Gymnasium's
``FrameStackObservation``, ale-vector, EnvPool) repeats C - 1 frames of the previous stack at
every step. :class:`StackFrames` numbers every distinct frame an actor sends (0, 1, 2, ...,
continuing across the actor's restarts) and keeps, per env, the numbers of the frames of its
current stack, so a transition travels as 2C frame ids and each frame once (the learner's end:
``FrameStream`` and ``FrameReplay.add_frames`` in ``replay/frames.py``).

Nothing about the env's padding or episode boundaries is assumed; each new stack is compared with
the previous one byte for byte. If its first C - 1 frames are the previous stack's last C - 1 (every
step of a stacking env) it costs one new frame, none if that frame repeats the one before it;
otherwise (a reset: Gymnasium pads a new episode with repeats of its first frame or with zeros,
ale-vector with zeros, EnvPool with repeats; or an env whose channels are not a stack) each of its
channels is a new frame unless it repeats the channel before it. So the references rebuild exactly
the stacks the env gave, whatever it is.
"""

from __future__ import annotations

import numpy as np


def _equal_rows(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Per leading index, whether ``a[i]`` and ``b[i]`` hold the same bytes."""
    return (a == b).reshape(len(a), -1).all(axis=1)


class StackFrames:
    """Per-env frame ids of the current stacks, and the frames given ids since the last :meth:`take`."""

    def __init__(self, num_envs: int, stack: int, first_id: int = 0) -> None:
        self.stack, self.next_id = stack, int(first_id)
        self.ids = np.zeros((num_envs, stack), dtype=np.int64)  # the current obs's frame ids
        self._new: list[np.ndarray] = []  # (m, H, W) pieces, in id order
        self.pending = 0  # frames in ``_new``

    def max_new_per_step(self) -> int:
        """The most frames one step can bring: every env's final obs and its reset obs wholly new."""
        return len(self.ids) * 2 * self.stack

    def start(self, obs: np.ndarray) -> np.ndarray:
        """The first stacks (after the envs' reset): their ids."""
        for i in range(len(obs)):
            self.ids[i] = self._whole(obs[i])
        return self.ids.copy()

    def step(self, obs: np.ndarray, final_obs: np.ndarray, next_obs: np.ndarray,
             done: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Ids of one env step's ``final_obs`` (the true last obs: what transitions bootstrap from)
        and ``next_obs`` (the reset obs where ``done``); ``obs`` is the stack the ids refer to now."""
        final_ids = self._advance(obs, self.ids, final_obs)
        next_ids = final_ids.copy()
        for i in np.flatnonzero(done):
            next_ids[i] = self._advance(final_obs[i : i + 1], final_ids[i : i + 1], next_obs[i : i + 1])[0]
        self.ids = next_ids
        return final_ids, next_ids

    def take(self) -> np.ndarray | None:
        """The new frames since the last call, ids ``next_id - pending`` onwards (copies), or None."""
        if not self._new:
            return None
        frames = np.concatenate(self._new)
        self._new, self.pending = [], 0
        return frames

    def _advance(self, prev: np.ndarray, prev_ids: np.ndarray, stacks: np.ndarray) -> np.ndarray:
        ids = np.empty_like(prev_ids)
        shifted = _equal_rows(stacks[:, :-1], prev[:, 1:])
        rows = np.flatnonzero(shifted)
        if len(rows):
            ids[rows, :-1] = prev_ids[rows, 1:]
            repeat = _equal_rows(stacks[rows, -1], stacks[rows, -2])
            ids[rows[repeat], -1] = ids[rows[repeat], -2]
            fresh = rows[~repeat]
            ids[fresh, -1] = self._number(stacks[fresh, -1])  # fancy indexing: a copy
        for i in np.flatnonzero(~shifted):
            ids[i] = self._whole(stacks[i])
        return ids

    def _whole(self, stack: np.ndarray) -> np.ndarray:
        """Ids of a stack that shares nothing with the previous one: a channel equal to the one
        before it reuses that id."""
        ids = np.empty(self.stack, dtype=np.int64)
        for j in range(self.stack):
            if j and np.array_equal(stack[j], stack[j - 1]):
                ids[j] = ids[j - 1]
            else:
                ids[j] = self._number(stack[j : j + 1].copy())[0]
        return ids

    def _number(self, frames: np.ndarray) -> np.ndarray:
        m = len(frames)
        ids = self.next_id + np.arange(m, dtype=np.int64)
        if m:
            self._new.append(frames)
            self.next_id += m
            self.pending += m
        return ids


def frame_rows(ready: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """n-step transitions whose obs and next_obs are frame-id rows (N, C) as a ring's rows."""
    return {"frame_ids": np.concatenate((ready["obs"], ready["next_obs"]), axis=1), "actions": ready["actions"],
            "rewards": ready["rewards"], "discounts": ready["discounts"]}
