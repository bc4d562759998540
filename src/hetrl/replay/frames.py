"""Frame replay: stacked image observations stored one frame at a time.

An Atari observation is a stack of the last C frames (C x H x W uint8, newest last), and the
observations of consecutive steps share C - 1 of them, so storing obs and next_obs whole keeps
every frame 2C times. :class:`FrameReplay` keeps each distinct frame once, in a ring of frames,
and each transition as 2C frame slots (obs's channels, then next_obs's); ``sample`` rebuilds both
stacks with one gather, as uint8 (the network converts them to float on the learner's device). Slots, priorities and draws are :class:`RingReplay`'s, so the same calls
give the same indices, weights and batches as a plain replay holding the same transitions.

**Which frames are shared is read from the frames themselves.** Each channel of an added obs or
next_obs is looked up, by a 64-bit fingerprint of its bytes and then compared byte for byte, among
the frames written in the last ``lookback`` frames (and the others of the same ``add``); it is
referenced if found, else stored. A rebuilt stack is therefore always exactly what was added,
whatever the env's padding at an episode start (Gymnasium's ``FrameStackObservation`` repeats the
first frame by default, or pads with zeros: either is just frames), at terminations and truncations
(the final obs arrives as a next_obs and is stored like any other), for n-step transitions (a
next_obs n steps on shares frames with later obs the same way) and for envs interleaved in any
order. ``add`` takes what every replay takes; no env index or episode flag is needed. A frame that
is not found (its twin was written more than ``lookback`` frames ago) is stored again: that costs
memory, never correctness.

**Or from a frame stream, with no lookup.** ``add_frames`` takes transitions as 2C frame ids of a
:class:`FrameStream` (a producer that numbers each frame it sends once: the local executor's actors,
``runtime/frame_stream.py``) and copies each frame the first time a transition refers to it, again
only when that copy is older than the lookback; the eviction below holds for both paths.

**Eviction: whole dependencies, from the old end.** Frame number g (counting every frame ever
written) goes to slot ``g % frame_capacity``. A transition added when g frames had been written
references frames numbered >= g - lookback, which stay intact while at most
``frame_capacity - lookback`` frames have been written since; once more have, it is evicted,
together with every older transition (they were added no later), so the live transitions stay an
arc of the ring that ends at its position (``RingReplay._sampling_base``); evicted slots get
priority 0. The default ``frame_capacity`` is the transition capacity + 1/32 of it + the lookback
(``FrameReplay.default_sizes``):
eviction then never comes before the ring's own overwriting unless more than 33/32 frames are
stored per transition. A stream stores one frame per step plus each episode's first, so that is
episodes shorter than 32 steps on average (or frames not found within the lookback).
"""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np
import torch

from hetrl.replay.ring import RingReplay
from hetrl.replay.sum_tree import Array, ArrayOps, NumpyOps

# Odd 64-bit multipliers of the fingerprint, one per 8-byte word of a frame (fixed: a checkpoint's
# lookup table is rebuilt from its frames with the same ones).
_KEYS = np.random.default_rng(0x5EED_F4A3E5).integers(0, 2**63, size=1 << 16, dtype=np.int64).astype(np.uint64) * np.uint64(2) + np.uint64(1)


def frames_unsupported(spec: Any, name: str) -> str | None:
    """Why a frame replay (registry name ``name``) cannot store ``spec``'s observations, with the fix."""
    shape = tuple(spec.obs_shape)
    dtype = np.dtype(getattr(spec, "obs_dtype", "float32")).name
    if len(shape) != 3 or shape[0] < 2:
        return (f"replay {name} stores stacked image frames, observations of shape (C, H, W) with C >= 2; "
                f"{spec.env_id} has observations of shape {shape}: use replay backend numpy or torch")
    if dtype != "uint8":
        return (f"replay {name} stores uint8 frames; {spec.env_id} has {dtype} observations: "
                "use replay backend numpy or torch (or an env that gives its raw uint8 frames)")
    return None


def fingerprints(flat: np.ndarray) -> np.ndarray:
    """A 64-bit fingerprint of each row of ``flat`` (m, P) uint8: sum of word * key, modulo 2**64."""
    size = flat.shape[1]
    word = next(w for w in (8, 4, 2, 1) if size % w == 0)
    words = np.ascontiguousarray(flat).view(f"<u{word}")
    if words.shape[1] > len(_KEYS):
        raise ValueError(f"frames of {size} bytes are larger than the fingerprint covers ({8 * len(_KEYS)} bytes)")
    keys = _KEYS[: words.shape[1]]
    with np.errstate(over="ignore"):
        return (words.astype(np.uint64, copy=False) * keys).sum(axis=1, dtype=np.uint64)


class FrameStream:
    """One producer's frames as a frame replay knows them: the learner's end of an actor's ring.

    The producer numbers the frames it writes 0, 1, 2, ... and keeps frame x in ``source[x %
    len(source)]`` (F, H, W) while transitions it has not yet handed over refer to it;
    :meth:`FrameReplay.add_frames` copies a frame into the replay the first time a transition refers
    to it and remembers here which replay frame number holds it."""

    def __init__(self, source: np.ndarray) -> None:
        self.source = source
        self.ids = np.full(len(source), -1, dtype=np.int64)  # the producer's id each slot was last copied for
        self.numbers = np.zeros(len(source), dtype=np.int64)  # ...and the replay frame number that copy got


class FrameReplay(RingReplay):
    """Transitions whose obs and next_obs are stacks of uint8 frames, each frame stored once.

    ``obs_shape`` is (C, H, W): C stacked frames, newest last. ``add`` takes obs and next_obs as
    uint8 arrays or as float arrays of byte values (what EnvStep gives today), as numpy arrays or
    tensors; ``sample`` returns them as uint8, as a plain replay of a uint8 env does. ``lookback`` and
    ``frame_capacity`` are explained in the module's docstring (None: the defaults there).
    """

    _evicts = True

    def __init__(
        self,
        ops: ArrayOps,
        capacity: int,
        obs_shape: tuple[int, ...],
        action_shape: tuple[int, ...],
        action_dtype: str,
        prioritized: bool,
        alpha: float,
        eps: float,
        lookback: int | None = None,
        frame_capacity: int | None = None,
    ) -> None:
        obs_shape = tuple(int(d) for d in obs_shape)
        if len(obs_shape) != 3 or obs_shape[0] < 2:
            raise ValueError(f"a frame replay stores (C, H, W) stacks with C >= 2 frames, not obs of shape {obs_shape}")
        if capacity < 1:
            raise ValueError(f"replay capacity must be >= 1, got {capacity}")
        self.stack = obs_shape[0]
        per_row = 2 * self.stack  # the most frames one transition can bring
        self.lookback, self.frame_capacity = self.default_sizes(capacity, self.stack, lookback)
        if frame_capacity is not None:
            self.frame_capacity = int(frame_capacity)
        if self.lookback < 0 or self.frame_capacity - self.lookback < per_row:
            raise ValueError(f"frame_capacity ({self.frame_capacity}) must exceed lookback ({self.lookback}) "
                             f"by at least 2C = {per_row} frames, what one transition may bring")
        super().__init__(ops, capacity, obs_shape, action_shape, action_dtype, prioritized, alpha, eps, "uint8")
        self._frame_bytes = obs_shape[1] * obs_shape[2]
        self.frames = ops.zeros((self.frame_capacity, *obs_shape[1:]), "uint8")
        # Host-side bookkeeping: frames written so far, and each slot's count of frames written when it was added.
        self._written = 0
        self._born = np.zeros(self.capacity, dtype=np.int64)
        self._index: dict[int, int] = {}  # fingerprint -> number of the latest frame written with it
        # Frames are compared on the host: the storage itself, or a copy of the last ``lookback`` on a device.
        if isinstance(ops, NumpyOps):
            self._host, self._mirror = self.frames, None
        elif self.frames.device.type == "cpu":
            self._host, self._mirror = self.frames.numpy(), None
        else:
            self._host, self._mirror = None, np.zeros((max(self.lookback, 1), self._frame_bytes), dtype=np.uint8)

    @staticmethod
    def default_sizes(capacity: int, stack: int, lookback: int | None = None) -> tuple[int, int]:
        """(lookback, frame_capacity) for ``capacity`` transitions of ``stack`` frames: a lookback
        of 256 to 2048 frames unless given (enough for a frame to be found again with some 40 to
        300 envs interleaved at n-step 3), and a frame ring of capacity * 33/32 + the lookback."""
        lookback = int(lookback) if lookback is not None else min(2048, max(256, capacity // 64))
        return lookback, capacity + max(capacity // 32, 2 * stack) + lookback

    def _stored_fields(self) -> dict[str, tuple[tuple[int, ...], str]]:
        return {
            "frame_refs": ((2 * self.stack,), "int32"),  # frame slots of obs's channels, then next_obs's
            "actions": (self.action_shape, self.action_dtype),
            "rewards": ((), "float32"),
            "discounts": ((), "float32"),
        }

    # --- memory ----------------------------------------------------------------------------------
    @property
    def nbytes(self) -> int:
        """Bytes of the storage: frames, per-transition fields, priorities and bookkeeping."""
        arrays: list[Any] = [self.frames, self._born, *self._data.values()]
        if self.tree is not None:
            arrays.append(self.tree.tree)
        if self._mirror is not None:
            arrays.append(self._mirror)
        return int(sum(a.nbytes if isinstance(a, np.ndarray) else a.numel() * a.element_size() for a in arrays))

    @property
    def bytes_per_transition(self) -> float:
        return self.nbytes / self.capacity

    # --- ReplayAdd ---------------------------------------------------------------------------------
    def add(self, obs: Any, actions: Any, rewards: Any, next_obs: Any, discounts: Any) -> None:
        """Append N transitions; their frames are stored once each (see the module's docstring)."""
        obs, next_obs = self._frames_in(obs, "obs"), self._frames_in(next_obs, "next_obs")
        asarray = self._ops.asarray
        fields = {"actions": asarray(actions, self.action_dtype), "rewards": asarray(rewards, "float32"),
                  "discounts": asarray(discounts, "float32")}
        n = len(obs)
        expected = {"obs": (n, *self.obs_shape), "actions": (n, *self.action_shape), "rewards": (n,),
                    "next_obs": (n, *self.obs_shape), "discounts": (n,)}
        given = {"obs": obs, "next_obs": next_obs, **fields}
        for name, shape in expected.items():
            if tuple(given[name].shape) != shape:
                raise ValueError(f"add: {name} has shape {tuple(given[name].shape)}, expected {shape}")
        # A chunk never writes more frames than stay intact behind the lookback (see the docstring).
        chunk = (self.frame_capacity - self.lookback) // (2 * self.stack)
        for start in range(0, n, chunk):
            part = slice(start, start + chunk)
            self._add_chunk(obs[part], next_obs[part], {name: value[part] for name, value in fields.items()})

    def add_frames(self, stream: FrameStream, frame_ids: Any, actions: Any, rewards: Any, discounts: Any) -> None:
        """Append N transitions given as frame ids of ``stream`` (N, 2C): obs's C, then next_obs's.

        Each frame is copied from the stream the first time a transition refers to it, and again
        only if that copy is older than the lookback (as ``add`` stores a frame it does not find),
        so every reference stays within the lookback and eviction works as for ``add``. No stack is
        built; the stream's producer guarantees that each id's frame is in its source while it
        hands over transitions that refer to it (``runtime/frame_stream.py``)."""
        ids = np.asarray(frame_ids)
        n, width = len(ids), 2 * self.stack
        if ids.shape != (n, width) or not np.issubdtype(ids.dtype, np.integer):
            raise ValueError(f"add_frames: frame_ids has shape {ids.shape} and dtype {ids.dtype}, expected integers of "
                             f"shape {(n, width)} (obs's {self.stack} frame ids, then next_obs's)")
        if tuple(stream.source.shape[1:]) != self.obs_shape[1:]:
            raise ValueError(f"add_frames: the stream's frames are {tuple(stream.source.shape[1:])}, this replay's "
                             f"{self.obs_shape[1:]}")
        asarray = self._ops.asarray
        fields = {"actions": asarray(actions, self.action_dtype), "rewards": asarray(rewards, "float32"),
                  "discounts": asarray(discounts, "float32")}
        expected = {"actions": (n, *self.action_shape), "rewards": (n,), "discounts": (n,)}
        for name, shape in expected.items():
            if tuple(fields[name].shape) != shape:
                raise ValueError(f"add_frames: {name} has shape {tuple(fields[name].shape)}, expected {shape}")
        chunk = (self.frame_capacity - self.lookback) // width  # as in add: no chunk outruns the lookback
        for start in range(0, n, chunk):
            part = slice(start, start + chunk)
            self._add_ids(stream, ids[part].astype(np.int64, copy=False), {k: v[part] for k, v in fields.items()})

    def _add_ids(self, stream: FrameStream, ids: np.ndarray, fields: dict[str, Array]) -> None:
        n, size = len(ids), len(stream.source)
        unique, inverse = np.unique(ids, return_inverse=True)
        if len(unique) and (unique[0] < 0 or unique[-1] - unique[0] >= size):
            raise ValueError(f"add_frames: frame ids {int(unique[0])}..{int(unique[-1])} span more than the stream's "
                             f"{size} frames: its producer overwrote frames that transitions still refer to")
        slots = unique % size
        written = self._written
        number = stream.numbers[slots]
        new = np.flatnonzero((stream.ids[slots] != unique) | (number < written - self.lookback))
        number[new] = written + np.arange(len(new))
        self._put_frames(stream.source[slots[new]])
        stream.ids[slots[new]], stream.numbers[slots[new]] = unique[new], number[new]
        refs = (number[inverse.reshape(-1)] % self.frame_capacity).reshape(n, 2 * self.stack).astype(np.int32)
        position = self._position
        self._write({"frame_refs": self._ops.asarray(refs, "int32"), **fields}, n)
        skip = max(0, n - self.capacity)
        self._born[(position + skip + np.arange(n - skip)) % self.capacity] = written
        self._evict()

    def _frames_in(self, x: Any, name: str) -> np.ndarray:
        """``x`` as a host uint8 array; float values must be bytes already (0..255 integers)."""
        if isinstance(x, torch.Tensor):
            x = x.detach().cpu().numpy()
        x = np.asarray(x)
        if x.ndim != 1 + len(self.obs_shape) or tuple(x.shape[1:]) != self.obs_shape:
            raise ValueError(f"add: {name} has shape {tuple(x.shape)}, expected {(len(x), *self.obs_shape)}")
        if x.dtype == np.uint8:
            return x
        with np.errstate(invalid="ignore"):
            frames = x.astype(np.uint8)
        if not np.array_equal(frames, x):
            raise ValueError(f"add: {name} holds values that are not bytes (integers 0..255); a frame replay stores "
                             "the env's uint8 frames: feed them unscaled, or use replay backend numpy or torch")
        return frames

    def _add_chunk(self, obs: np.ndarray, next_obs: np.ndarray, fields: dict[str, Array]) -> None:
        n, width = len(obs), 2 * self.stack
        flat = np.concatenate((obs, next_obs), axis=1).reshape(n * width, self._frame_bytes)
        prints = fingerprints(flat)
        # Group equal frames of this chunk: by fingerprint, then verified (a colliding frame is its own group).
        _, first, inverse = np.unique(prints, return_index=True, return_inverse=True)
        rep = first[inverse.reshape(-1)]
        same = (flat == flat[rep]).all(axis=1)
        reps, group = np.unique(np.where(same, rep, np.arange(len(flat))), return_inverse=True)
        group = group.reshape(-1)
        # Each group's frame among those written in the last ``lookback``, verified byte for byte.
        written, index = self._written, self._index
        number = np.full(len(reps), -1, dtype=np.int64)
        oldest_usable = written - self.lookback
        for j, key in enumerate(prints[reps].tolist()):
            found = index.get(key, -1)
            if found >= oldest_usable:
                number[j] = found
        hits = np.flatnonzero(number >= 0)
        if len(hits):
            equal = (self._frames_on_host(number[hits]) == flat[reps[hits]]).all(axis=1)
            number[hits[~equal]] = -1
        new = np.flatnonzero(number < 0)
        number[new] = written + np.arange(len(new))
        self._store_frames(flat[reps[new]], prints[reps[new]])
        refs = (number[group] % self.frame_capacity).reshape(n, width).astype(np.int32)
        position = self._position
        self._write({"frame_refs": self._ops.asarray(refs, "int32"), **fields}, n)
        skip = max(0, n - self.capacity)
        self._born[(position + skip + np.arange(n - skip)) % self.capacity] = written
        self._evict()

    def _frames_on_host(self, numbers: np.ndarray) -> np.ndarray:
        """Frames ``numbers`` (written within the lookback) as host rows of bytes."""
        if self._mirror is not None:
            return self._mirror[numbers % len(self._mirror)]
        return self._host[numbers % self.frame_capacity].reshape(len(numbers), self._frame_bytes)

    def _store_frames(self, frames: np.ndarray, prints: np.ndarray) -> None:
        """Write ``frames`` (m, H*W) as the next m frame numbers and index their fingerprints."""
        m = len(frames)
        if m == 0:
            return
        numbers = self._written + np.arange(m)
        self._put_frames(frames)
        index = self._index
        for key, number in zip(prints.tolist(), numbers.tolist()):
            index[key] = number
        if len(index) > 4 * self.lookback + 1024:  # drop entries too old to be used again
            oldest_usable = self._written - self.lookback
            self._index = {key: number for key, number in index.items() if number >= oldest_usable}

    def _put_frames(self, frames: np.ndarray) -> None:
        """Write ``frames`` (m, H, W) or (m, H*W) as the next m frame numbers (no fingerprints)."""
        m = len(frames)
        if m == 0:
            return
        numbers = self._written + np.arange(m)
        slots = self._ops.asarray(numbers % self.frame_capacity, "int64")
        self.frames[slots] = self._ops.asarray(frames.reshape(m, *self.obs_shape[1:]), "uint8")
        if self._mirror is not None:
            keep = slice(max(0, m - len(self._mirror)), m)
            self._mirror[numbers[keep] % len(self._mirror)] = frames[keep].reshape(-1, self._frame_bytes)
        self._written += m

    def _evict(self) -> None:
        """Evict, from the old end, every transition whose frames may have been overwritten."""
        limit = self._written - (self.frame_capacity - self.lookback)  # evict those added before this count
        oldest = (self._position - self._size) % self.capacity
        if self._size == 0 or self._born[oldest] >= limit:
            return
        end = oldest + self._size  # born is non-decreasing along the live arc, oldest first
        count = int(np.searchsorted(self._born[oldest : min(end, self.capacity)], limit, "left"))
        if count == min(end, self.capacity) - oldest and end > self.capacity:
            count += int(np.searchsorted(self._born[: end - self.capacity], limit, "left"))
        evicted = self._ops.asarray((oldest + np.arange(count)) % self.capacity, "int64")
        self._size -= count
        if self.tree is not None:
            self.tree.update(evicted, self._ops.zeros(count, "float64"))

    # --- ReplaySample --------------------------------------------------------------------------------
    def sample(self, uniform: Any, beta: float = 0.4) -> dict[str, Array]:
        """As :meth:`RingReplay.sample`; obs and next_obs rebuilt from the frames with one gather."""
        indices, weights = self._draw(uniform, beta)
        data = self._data
        refs = data["frame_refs"][indices]
        if isinstance(refs, np.ndarray):
            stacks = self.frames[refs]  # (B, 2C, H, W)
        else:  # index_select: one gather, several times faster than advanced indexing on a CPU
            stacks = self.frames.index_select(0, refs.reshape(-1).long()).reshape(*refs.shape, *self.obs_shape[1:])
        return {
            "obs": self._contiguous(stacks[:, : self.stack]),
            "actions": data["actions"][indices],
            "rewards": data["rewards"][indices],
            "next_obs": self._contiguous(stacks[:, self.stack :]),
            "discounts": data["discounts"][indices],
            "indices": indices,
            "weights": weights,
        }

    def _contiguous(self, x: Array) -> Array:
        """A stack as the network reads it: uint8, contiguous (it converts to float on its device)."""
        if isinstance(x, np.ndarray):
            return np.ascontiguousarray(x)
        return x.contiguous()

    # --- checkpoints -----------------------------------------------------------------------------------
    def _header(self) -> dict[str, Any]:
        return {**super()._header(), "frame_capacity": self.frame_capacity, "lookback": self.lookback}

    def state_dict(self) -> dict[str, Any]:
        """RingReplay's state, plus the frames and their bookkeeping (numpy copies)."""
        state = super().state_dict()
        state.update(frames=self._ops.numpy(self.frames), born=self._born.copy(), written=self._written)
        return state

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore a :meth:`state_dict` of either backend; ``ValueError`` names any mismatch."""
        for key in ("frames", "frame_refs", "born", "written", "frame_capacity", "lookback"):
            if key not in state:
                raise ValueError(f"replay state lacks {key!r}: it is not a frame replay's; resume with the replay "
                                 "backend that saved it")
        for key in ("capacity", "frame_capacity", "lookback"):
            if int(state[key]) != getattr(self, key):
                raise ValueError(f"replay state mismatch: {key} is {int(state[key])} in the state, {getattr(self, key)} here")
        frames, born = np.asarray(state["frames"]), np.asarray(state["born"])
        if (frames.shape, frames.dtype.name) != ((self.frame_capacity, *self.obs_shape[1:]), "uint8"):
            raise ValueError(f"replay state mismatch: frames is {(frames.shape, frames.dtype.name)}, expected "
                             f"{((self.frame_capacity, *self.obs_shape[1:]), 'uint8')}")
        if (born.shape, born.dtype.name) != ((self.capacity,), "int64"):
            raise ValueError(f"replay state mismatch: born is {(born.shape, born.dtype.name)}, expected {((self.capacity,), 'int64')}")
        super().load_state_dict(state)
        self.frames[...] = self._ops.asarray(frames, "uint8")
        self._born[...] = born
        self._written = int(state["written"])
        # The lookup table and the device's host copy, rebuilt from the frames still within the lookback.
        numbers = np.arange(max(0, self._written - self.lookback), self._written)
        recent = frames[numbers % self.frame_capacity].reshape(len(numbers), self._frame_bytes)
        if self._mirror is not None:
            self._mirror[numbers % len(self._mirror)] = recent
        self._index = dict(zip(fingerprints(recent).tolist(), numbers.tolist()))
