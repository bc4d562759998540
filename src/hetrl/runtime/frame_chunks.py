"""Frames, not stacks, through Ray's object store: the ray executor's pixel chunks.

When the learner's replay is a frame replay, a Ray actor's chunk carries each new frame once, the
transitions as 2C frame ids (the acting role's ``StackFrames``, ``runtime/frame_stream.py``, as the
local executor's actors use it), the id of its first new frame and the oldest frame id the actor
may still refer to (:func:`frame_chunk`). The learner keeps, per actor, a :class:`FrameStream` whose
source holds the frames later chunks may still refer to, writes each chunk's frames into it and
hands the rows to ``FrameReplay.add_frames`` (:class:`ChunkStreams`). So a transition travels as
about one frame plus 2C x 8 + 16 bytes, where a stack chunk carried 2C frames.

**Each actor incarnation is a stream of its own, numbered from 0.** The local executor's successor
continues its predecessor's ids, read from the ring both share; under Ray nothing is shared, the
predecessor's last chunks may be lost with its node, and its late chunks may arrive after the
successor's first. So the stream is keyed by (actor, incarnation): ids never mean two frames, and
the learner drops an actor's older stream when the newer one's first chunk arrives (a chunk of an
older incarnation arriving after that is dropped whole and counted; the coordinator queues an
actor's chunks in the order it made them, so it does not happen).

**A chunk that never arrived leaves no reference to its frames.** A chunk refers to frames of
earlier chunks (the stacks it continues, its n-step queues), so a lost chunk (``ObjectLostError``)
would leave later chunks of the same stream pointing at frames the learner never had. Under Ray a
chunk is lost only with its node, and the actor that made it died with it: its successor starts a
fresh stream, so no later chunk refers to the lost one's frames. Should a chunk of a live stream
still go missing, the learner sees the gap (the chunk's first frame id is past the last one it
holds), forgets the frames it holds for that stream, and drops every transition that refers to a
frame it does not hold (``dropped``); the stream is whole again once the actor's stacks and n-step
queues have moved past the gap (n_step + C steps). Resending frames the learner has not
acknowledged would need a reply path from the learner to each actor for a case that does not occur.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from hetrl.replay.frames import FrameStream
from hetrl.runtime.acting_role import ActingRole

FRAME_ROW_FIELDS = ("frame_ids", "actions", "rewards", "discounts")  # frame_stream.frame_rows' keys


def frame_chunk(role: ActingRole, rows: list[dict[str, np.ndarray]], stream: tuple[int, int]) -> dict[str, Any]:
    """An actor's chunk: the frames it numbered since its last chunk, the rows (frame ids; None where
    no transition was ready) of ``rows``, and which ``stream`` (actor, incarnation) they belong to."""
    frames = role.new_frames()
    if frames is None:
        frames = np.zeros((0, *role.algo.spec.obs_shape[1:]), np.uint8)
    return {
        "stream": stream,
        "frames": frames,
        "first_frame": role.stacks.next_id - len(frames),
        "oldest_frame": role.oldest_frame(),  # no later chunk of this stream refers to an older frame
        "rows": {key: np.concatenate([r[key] for r in rows]) for key in FRAME_ROW_FIELDS} if rows else None,
    }


@dataclass
class _Held:
    """One stream's frames at the learner: ids ``low`` .. ``high - 1`` are in ``stream.source``."""

    incarnation: int
    stream: FrameStream
    low: int
    high: int


class ChunkStreams:
    """The learner's end of every actor's frame chunks: one :class:`FrameStream` per actor, grown
    to hold what the chunks may refer to."""

    def __init__(self, frame_shape: tuple[int, ...]) -> None:
        self.frame_shape = tuple(frame_shape)
        self._held: dict[int, _Held] = {}
        self.dropped = 0  # transitions dropped because a frame they refer to never arrived

    def receive(self, chunk: dict[str, Any]) -> tuple[FrameStream, dict[str, np.ndarray]] | None:
        """Take a chunk's frames; return its stream and the rows whose frames the stream holds, to
        add with ``add_frames`` now (before the next chunk's frames overwrite any), or None."""
        index, incarnation = chunk["stream"]
        rows, frames, first = chunk["rows"], chunk["frames"], int(chunk["first_frame"])
        held = self._held.get(index)
        if held is None or incarnation > held.incarnation:  # a new actor, or a restarted one: a fresh stream
            held = self._held[index] = _Held(incarnation, FrameStream(np.zeros((0, *self.frame_shape), np.uint8)), first, first)
        if incarnation < held.incarnation or first < held.high:  # a dead incarnation's, or one already seen
            self.dropped += 0 if rows is None else len(rows["frame_ids"])
            return None
        if first > held.high:  # the frames between never arrived: what is held is no longer followed on
            held.low = held.high = first
        end = first + len(frames)
        if end - held.low > len(held.stream.source):
            held.stream = _grown(held.stream, held.low, held.high, 2 * (end - held.low))
        if len(frames):
            source = held.stream.source
            source[np.arange(first, end) % len(source)] = frames
        held.high = end
        if rows is not None:
            ids = rows["frame_ids"]
            whole = ((ids >= held.low) & (ids < end)).all(axis=1)
            if not whole.all():
                self.dropped += int((~whole).sum())
                rows = {key: value[whole] for key, value in rows.items()}
            if not len(rows["frame_ids"]):
                rows = None
        held.low = max(held.low, int(chunk["oldest_frame"]))
        return None if rows is None else (held.stream, rows)


def _grown(stream: FrameStream, low: int, high: int, size: int) -> FrameStream:
    """``stream`` with a source of ``size`` frames, holding its frames ``low`` .. ``high - 1`` and
    what it knows of their copies in the replay."""
    bigger = FrameStream(np.zeros((size, *stream.source.shape[1:]), np.uint8))
    if high > low:
        ids = np.arange(low, high)
        old, new = ids % len(stream.source), ids % size
        bigger.source[new] = stream.source[old]
        bigger.ids[new], bigger.numbers[new] = stream.ids[old], stream.numbers[old]
    return bigger
