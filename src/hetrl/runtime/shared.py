"""Shared-memory blocks for the local executor: typed arrays in one segment, a transition ring per
actor, and the acting weights behind a sequence lock.

No locks and no pickling on the data path: a ring has one writer (its actor) and one reader (the
learner), each owning its own counter; the weights have one writer (the learner). Counters are
written after the data they publish. On x86 (x86-64 and 32-bit x86) stores become visible to other
cores in program order and loads are not reordered with older loads (total store order), which is
what these protocols rely on; numpy's plain stores carry no fences. Other architectures (ARM,
POWER, RISC-V) may reorder them, so a reader could see a counter before the data it publishes:
there :func:`check_store_order` refuses the shared-memory blocks, naming the executors that need
none (inline, ray).
"""

from __future__ import annotations

import fcntl
import os
import platform
import re
import sys
import time
import uuid
from collections import deque
from dataclasses import dataclass
from multiprocessing import shared_memory
from typing import Any

import numpy as np

from hetrl.errors import HetrlError

SHM_PREFIX = "hetrl_"  # segment names: hetrl_<owner pid>_<random>, so leftovers are easy to find
SHM_DIR = "/dev/shm"  # where Linux keeps POSIX shared memory (and named semaphores, as sem.NAME)
_SEGMENT = re.compile(rf"(?:sem\.)?{SHM_PREFIX}(\d+)_\w+")
_ALIGN = 64

Layout = dict[str, tuple[tuple[int, ...], str]]  # name -> (shape, dtype)
# platform.machine() of the architectures with total store order (Linux, macOS, Windows spellings)
ORDERED_STORES = frozenset({"x86_64", "amd64", "x64", "i386", "i486", "i586", "i686", "x86"})


def stores_ordered() -> bool:
    """Whether this machine's architecture keeps stores in program order (x86), as the rings need."""
    return platform.machine().lower() in ORDERED_STORES


def check_store_order() -> None:
    """Refuse shared-memory rings where stores may be reordered (see the module docstring)."""
    if not stores_ordered():
        raise HetrlError(f"the local executor shares memory between processes through rings that rely on x86's store ordering, "
                         f"which this {platform.machine() or 'unknown'} machine does not give; use executor=inline "
                         f"(one process) or executor=ray")


@dataclass(frozen=True)
class SharedHandle:
    """What another process needs to attach to a block: picklable, a few bytes."""

    name: str
    layout: tuple[tuple[str, tuple[int, ...], str], ...]


class SharedArrays:
    """Named numpy arrays laid out in one shared-memory segment. The creator owns (unlinks) it."""

    def __init__(self, layout: Layout | None = None, handle: SharedHandle | None = None) -> None:
        if handle is None:
            assert layout is not None
            check_store_order()
            spec = tuple((k, tuple(shape), np.dtype(dtype).str) for k, (shape, dtype) in layout.items())
            size = max(1, sum(_padded(shape, dtype) for _, shape, dtype in spec))
            name = f"{SHM_PREFIX}{os.getpid()}_{uuid.uuid4().hex[:12]}"
            self.shm = shared_memory.SharedMemory(name=name, create=True, size=size)
            self.owner = True
            _hold(self.shm)
            handle = SharedHandle(name, spec)
        else:
            self.shm = _attach(handle.name)
            self.owner = False
        self.handle = handle
        self.arrays: dict[str, np.ndarray] = {}
        offset = 0
        for key, shape, dtype in handle.layout:
            self.arrays[key] = np.ndarray(shape, dtype=dtype, buffer=self.shm.buf, offset=offset)
            offset += _padded(shape, dtype)
        if self.owner:
            for array in self.arrays.values():
                array.fill(0)

    def __getitem__(self, key: str) -> np.ndarray:
        return self.arrays[key]

    def close(self) -> None:
        """Detach (and, for the creator, remove the segment). Safe to call twice."""
        if self.shm is None:
            return
        self.arrays = {}
        try:
            self.shm.close()
        except BufferError:  # a view still exported: the segment is freed when the process exits
            pass
        if self.owner:
            try:
                self.shm.unlink()
            except FileNotFoundError:
                pass
        self.shm = None


def _padded(shape: tuple[int, ...], dtype: str) -> int:
    nbytes = int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize
    return (nbytes + _ALIGN - 1) // _ALIGN * _ALIGN


def _hold(shm: shared_memory.SharedMemory) -> None:
    """Take a shared lock on the segment for the owner's life: the kernel drops it when the process
    ends, however it ends, so :func:`sweep_stale_segments` never removes a live run's segment, even
    one whose PID it cannot see (another PID namespace sharing /dev/shm)."""
    fd = getattr(shm, "_fd", -1)
    if fd >= 0:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except OSError:
            pass


def sweep_stale_segments(directory: str = SHM_DIR) -> list[str]:
    """Remove what hetrl processes that died without cleaning up left in ``directory``: segments
    (and semaphores) named ``hetrl_<pid>_*`` whose owner process is gone and which no process holds.

    A run killed with its whole process group (an OOM kill, a container's or a job's kill) loses
    its resource tracker with it, so nothing unlinks its segments, and they hold their memory
    until reboot. A segment is kept when its PID is this process's or a live one (whoever's it is:
    a reused PID keeps it, which is safe), or when some process holds the lock its owner takes
    (:func:`_hold`). Returns the names removed; nothing where the directory is unreadable (not Linux)."""
    try:
        names = os.listdir(directory)
    except OSError:
        return []
    removed = []
    for name in sorted(names):
        match = _SEGMENT.fullmatch(name)
        if match is None:
            continue
        pid = int(match.group(1))
        if pid == os.getpid() or pid_alive(pid):
            continue
        path = os.path.join(directory, name)
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
        except OSError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # fails while any process holds it
            os.unlink(path)
        except OSError:
            continue
        finally:
            os.close(fd)
        removed.append(name)
    return removed


def pid_alive(pid: int) -> bool:
    """Whether process ``pid`` exists (one this user may not signal counts as alive)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _attach(name: str) -> shared_memory.SharedMemory:
    """Attach to a segment the learner created. Its children share the learner's resource tracker,
    where the name is already registered (a set: registering again changes nothing), and which
    removes the segment if the learner is killed before it could."""
    if sys.version_info >= (3, 13):
        return shared_memory.SharedMemory(name=name, track=False)
    return shared_memory.SharedMemory(name=name)


# --- a transition ring per actor --------------------------------------------------------------
TRANSITION_FIELDS = ("obs", "actions", "rewards", "next_obs", "discounts")
FRAME_ROW_FIELDS = ("frame_ids", "actions", "rewards", "discounts")  # a frame ring's rows (frames apart)
# header slots of a ring
WRITTEN, READ, EPISODES_WRITTEN, EPISODES_READ, ACTING_VERSION, FRAMES_WRITTEN = range(6)
# actor-side timers: seconds and calls
ACTOR_TIMERS = ("EnvStep", "Act", "WeightFetch", "ActorWait", "InferenceWait")


def ring_layout(capacity: int, episode_capacity: int, obs_shape: tuple[int, ...], action_shape: tuple[int, ...],
                action_dtype: str, obs_dtype: str = "float32") -> Layout:
    """An actor's ring; observations as the env gives them (``obs_dtype``: uint8 for pixel envs)."""
    return {
        "header": ((8,), "int64"),
        "timer_seconds": ((len(ACTOR_TIMERS),), "float64"),
        "timer_calls": ((len(ACTOR_TIMERS),), "int64"),
        "obs": ((capacity, *obs_shape), obs_dtype),
        "actions": ((capacity, *action_shape), action_dtype),
        "rewards": ((capacity,), "float32"),
        "next_obs": ((capacity, *obs_shape), obs_dtype),
        "discounts": ((capacity,), "float32"),
        "episode_returns": ((episode_capacity,), "float64"),
        "episode_lengths": ((episode_capacity,), "int64"),
    }


def frame_ring_layout(capacity: int, frame_capacity: int, episode_capacity: int, obs_shape: tuple[int, ...],
                      action_shape: tuple[int, ...], action_dtype: str) -> Layout:
    """An actor's ring for stacks of uint8 frames (``obs_shape`` (C, H, W)): rows of 2C frame ids
    (obs's, then next_obs's) and a ring of ``frame_capacity`` single frames (``runtime/frame_stream.py``)."""
    return {
        "header": ((8,), "int64"),
        "timer_seconds": ((len(ACTOR_TIMERS),), "float64"),
        "timer_calls": ((len(ACTOR_TIMERS),), "int64"),
        "frame_ids": ((capacity, 2 * obs_shape[0]), "int64"),
        "actions": ((capacity, *action_shape), action_dtype),
        "rewards": ((capacity,), "float32"),
        "discounts": ((capacity,), "float32"),
        "frames": ((frame_capacity, *obs_shape[1:]), "uint8"),
        "episode_returns": ((episode_capacity,), "float64"),
        "episode_lengths": ((episode_capacity,), "int64"),
    }


class TransitionRing:
    """One actor's transitions and finished episodes on their way to the learner.

    A frame ring (:func:`frame_ring_layout`) also holds frames: the actor writes frame x to slot x
    % frame_capacity, and overwrites it only once no row the learner has yet to read and nothing
    the actor still holds refers to it; the learner reads a chunk's frames before it releases the
    chunk (``pop(release=False)``, then :meth:`release`)."""

    def __init__(self, block: SharedArrays) -> None:
        self.block = block
        self.header = block["header"]
        self.capacity = block["rewards"].shape[0]
        self.episode_capacity = block["episode_returns"].shape[0]
        self.frames = block.arrays.get("frames")
        self.fields = TRANSITION_FIELDS if self.frames is None else FRAME_ROW_FIELDS
        self.frame_capacity = 0 if self.frames is None else len(self.frames)
        # Writer side of a frame ring: (rows written, oldest frame id they refer to) of each push not yet read. A
        # writer starting on a used ring (a restarted actor) first keeps every frame there until its rows are read.
        self._unread: deque[tuple[int, int]] = deque([(int(self.header[WRITTEN]),
                                                        int(self.header[FRAMES_WRITTEN]) - self.frame_capacity)])
        self._popped = -1

    # writer side (the actor)
    def free(self) -> int:
        return self.capacity - int(self.header[WRITTEN] - self.header[READ])

    def frames_free(self, oldest_held: int) -> int:
        """Frames that can be written now without overwriting one that unread rows or the writer
        (whose oldest is ``oldest_held``) still refer to."""
        read, unread = int(self.header[READ]), self._unread
        while unread and unread[0][0] <= read:
            unread.popleft()
        keep = min(oldest_held, unread[0][1]) if unread else oldest_held
        return self.frame_capacity - max(0, int(self.header[FRAMES_WRITTEN]) - keep)

    def push_frames(self, frames: np.ndarray | None) -> None:
        """Append frames (the caller waits for ``frames_free`` first); ids continue ``FRAMES_WRITTEN``."""
        if frames is None or not len(frames):
            return
        start = int(self.header[FRAMES_WRITTEN])
        self.frames[(start + np.arange(len(frames))) % self.frame_capacity] = frames
        self.header[FRAMES_WRITTEN] = start + len(frames)

    def push(self, transitions: dict[str, np.ndarray]) -> None:
        """Append rows (the caller waits for ``free()`` first); publish by bumping the counter last."""
        n = len(transitions["rewards"])
        start = int(self.header[WRITTEN])
        rows = (start + np.arange(n)) % self.capacity
        for key in self.fields:
            self.block[key][rows] = transitions[key]
        if self.frames is not None and n:
            self._unread.append((start + n, int(transitions["frame_ids"].min())))
        self.header[WRITTEN] = start + n

    def bytes_written(self) -> int:
        """Bytes of rows and frames written into the ring so far (episodes and timers apart)."""
        row = sum(self.block[key][0].nbytes for key in self.fields)
        frame = 0 if self.frames is None else self.frames[0].nbytes
        return int(self.header[WRITTEN]) * row + int(self.header[FRAMES_WRITTEN]) * frame

    def push_episodes(self, episodes: list[tuple[float, int]]) -> None:
        """Finished episodes, for the learner's metrics (the oldest are overwritten if it lags)."""
        written = int(self.header[EPISODES_WRITTEN])
        for i, (ret, length) in enumerate(episodes):
            slot = (written + i) % self.episode_capacity
            self.block["episode_returns"][slot] = ret
            self.block["episode_lengths"][slot] = length
        self.header[EPISODES_WRITTEN] = written + len(episodes)

    # reader side (the learner)
    def pop(self, release: bool = True) -> dict[str, np.ndarray] | None:
        """Every row written since the last call (copies), or None; frees their space (with
        ``release=False``: only at :meth:`release`, so the frames they refer to stay)."""
        read, written = int(self.header[READ]), int(self.header[WRITTEN])
        if written == read:
            return None
        rows = (read + np.arange(written - read)) % self.capacity
        out = {key: self.block[key][rows] for key in self.fields}  # fancy indexing copies
        if release:
            self.header[READ] = written
        else:
            self._popped = written
        return out

    def release(self) -> None:
        """Free the rows of the last ``pop(release=False)``, and the frames only they referred to."""
        if self._popped >= 0:
            self.header[READ] = self._popped
            self._popped = -1

    def pop_episodes(self) -> list[tuple[float, int]]:
        read, written = int(self.header[EPISODES_READ]), int(self.header[EPISODES_WRITTEN])
        read = max(read, written - self.episode_capacity)
        slots = [(i % self.episode_capacity) for i in range(read, written)]
        self.header[EPISODES_READ] = written
        return [(float(self.block["episode_returns"][s]), int(self.block["episode_lengths"][s])) for s in slots]


# --- weights -----------------------------------------------------------------------------------
class SharedWeights:
    """A policy's parameters under a sequence lock: the learner publishes, actors copy a consistent
    version. ``version`` is the learner's update count when the weights were published."""

    def __init__(self, block: SharedArrays) -> None:
        self.block = block
        self.seq = block["seq"]  # [sequence (odd while writing), version]
        self.names = [k for k in block.arrays if k != "seq"]

    @staticmethod
    def layout(params: dict[str, np.ndarray]) -> Layout:
        return {"seq": ((2,), "int64"), **{k: (v.shape, v.dtype.str) for k, v in params.items()}}

    def publish(self, params: dict[str, Any], version: int) -> None:
        seq = int(self.seq[0])
        self.seq[0] = seq + 1
        for name in self.names:
            np.copyto(self.block[name], params[name])
        self.seq[1] = version
        self.seq[0] = seq + 2

    def version(self) -> int:
        return int(self.seq[1])

    def read_into(self, params: dict[str, np.ndarray]) -> int:
        """Copy a consistent snapshot into ``params``; returns its version."""
        while True:
            seq = int(self.seq[0])
            if seq % 2:
                time.sleep(0)
                continue
            for name in self.names:
                np.copyto(params[name], self.block[name])
            version = int(self.seq[1])
            if int(self.seq[0]) == seq:
                return version


# --- control -----------------------------------------------------------------------------------
# slots of the control block's "flags"
STOP, ALLOWED_ENV_STEPS, BASE_ENV_STEPS = range(3)


def control_layout(actors: int) -> Layout:
    """Flags the learner sets for every actor, and each actor's env steps (its own slot)."""
    return {"flags": ((4,), "int64"), "actor_steps": ((actors,), "int64")}


class SharedTimers:
    """Per-primitive seconds and calls kept in shared arrays, so the learner can read an actor's."""

    def __init__(self, seconds: np.ndarray, calls: np.ndarray, names: tuple[str, ...] = ACTOR_TIMERS) -> None:
        self.seconds_array, self.calls_array = seconds, calls
        self.index = {name: i for i, name in enumerate(names)}

    def add(self, name: str, seconds: float, calls: int = 1) -> None:
        i = self.index[name]
        self.seconds_array[i] += seconds
        self.calls_array[i] += calls

    def totals(self) -> dict[str, tuple[float, int]]:
        """The stages this actor did (with central inference an actor never runs Act, for one)."""
        return {name: (float(self.seconds_array[i]), int(self.calls_array[i])) for name, i in self.index.items()
                if self.calls_array[i]}
