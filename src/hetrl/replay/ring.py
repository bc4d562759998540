"""Replay storage: a ring buffer of transitions in preallocated arrays, uniform or prioritized.

:class:`RingReplay` is the logic; ``ReplayNumpy`` (hetrl.primitives.replay_numpy) runs it on host
numpy arrays, ``ReplayTorch`` on torch tensors on any device, so a GPU learner samples without a
host round trip. Observations are stored as the env gives them (``obs_dtype``: uint8 for pixel
envs, 1/4 of float32's bytes; converted to float by the network on the learner's device), so a
sampled batch's obs are uint8 until then. Both run the same arithmetic
(float64 priorities, the same sum tree), so the same calls give the same indices, batches and
weights in either; only ``x ** alpha`` may differ in the last bit of a float64 priority (torch's
vectorised or CUDA pow against numpy's). Their state dicts (numpy arrays) load into each other.
"""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from hetrl.replay.sum_tree import Array, ArrayOps, SumTree

_FIELDS = ("obs", "actions", "rewards", "next_obs", "discounts")
_BELOW_ONE = 1.0 - 2.0**-52  # x * _BELOW_ONE < x for any float64 x > 0


def _float_bytes(got: np.ndarray, want: tuple[tuple[int, ...], str]) -> bool:
    """A uint8 field saved as float32 byte values (pixel envs' checkpoints before observations stayed
    uint8): it loads, since the values convert exactly."""
    return (want[1] == "uint8" and got.dtype == np.float32 and got.shape == want[0]
            and np.array_equal(got, got.astype(np.uint8)))


class RingReplay:
    """The storage logic, on whichever arrays ``ops`` makes (see ReplayNumpy and ReplayTorch)."""

    _evicts = False  # whether a subclass may evict its oldest items early (FrameReplay)

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
        obs_dtype: str = "float32",
    ) -> None:
        if capacity < 1:
            raise ValueError(f"replay capacity must be >= 1, got {capacity}")
        self.capacity = int(capacity)
        self.obs_dtype = np.dtype(obs_dtype).name  # the env's (EnvSpec.obs_dtype): uint8 images stay bytes
        self.obs_shape = tuple(int(d) for d in obs_shape)
        self.action_shape = tuple(int(d) for d in action_shape)
        self.action_dtype = np.dtype(action_dtype).name
        self.prioritized = prioritized
        self.alpha = alpha
        self.eps = eps
        self._ops = ops
        self._specs = self._stored_fields()  # field -> (per-item shape, dtype)
        self._data = {name: ops.zeros((self.capacity, *shape), dtype) for name, (shape, dtype) in self._specs.items()}
        self._position = 0  # the slot the next item goes to
        self._size = 0
        self.tree = SumTree(self.capacity, ops) if prioritized else None
        self._max_priority = ops.asarray(1.0, "float64")  # 0-d, on the device: reading it would sync

    def __len__(self) -> int:
        return self._size

    @property
    def nbytes(self) -> int:
        """Bytes of the storage: every stored field for the whole capacity, and the priorities."""
        arrays: list[Any] = [*self._data.values(), *([self.tree.tree] if self.tree is not None else [])]
        return int(sum(a.nbytes if isinstance(a, np.ndarray) else a.numel() * a.element_size() for a in arrays))

    def _stored_fields(self) -> dict[str, tuple[tuple[int, ...], str]]:
        """What each slot stores: field -> (per-item shape, dtype). A subclass may store other fields
        (FrameReplay stores frame indices in place of obs and next_obs)."""
        return {
            "obs": (self.obs_shape, self.obs_dtype),
            "actions": (self.action_shape, self.action_dtype),
            "rewards": ((), "float32"),
            "next_obs": (self.obs_shape, self.obs_dtype),
            "discounts": ((), "float32"),
        }

    def add(self, obs: Any, actions: Any, rewards: Any, next_obs: Any, discounts: Any) -> None:
        """Append N transitions (arrays with a leading N, cast to the storage dtypes).

        The ring wraps around past the end; of a batch larger than the capacity only the last
        ``capacity`` items are kept, in the slots they would have had if added one by one.
        New items get the maximum priority set so far (1.0 before any update).
        """
        asarray = self._ops.asarray  # the specs are in _FIELDS order, which is add's argument order
        batch = [asarray(value, dtype) for value, (_, dtype) in zip((obs, actions, rewards, next_obs, discounts), self._specs.values())]
        n = len(batch[0])
        for value, (name, (shape, _)) in zip(batch, self._specs.items()):
            if tuple(value.shape) != (n, *shape):
                raise ValueError(f"add: {name} has shape {tuple(value.shape)}, expected {(n, *shape)}")
        self._write(dict(zip(_FIELDS, batch)), n)

    def _write(self, batch: dict[str, Any], n: int) -> Any:
        """Store ``n`` items (``batch``: every stored field, converted and checked) at the ring's
        position; returns the slots written (a slice, or an int64 array when wrapping or skipping)."""
        skip = max(0, n - self.capacity)
        if skip == 0 and self._position + n <= self.capacity:  # no wrap: a slice, cheaper than indexing
            slots = slice(self._position, self._position + n)
        else:
            slots = (self._position + skip + self._ops.arange(n - skip)) % self.capacity
        data = self._data
        for name, value in batch.items():
            data[name][slots] = value[skip:] if skip else value
        if self.tree is not None:
            leaves = slots if not isinstance(slots, slice) else self._position + self._ops.arange(n)
            self.tree.update(leaves, self._max_priority.repeat(n - skip))
        self._position = (self._position + n) % self.capacity
        self._size = min(self._size + n, self.capacity)
        return slots

    def sample(self, uniform: Any, beta: float = 0.4) -> dict[str, Array]:
        """A batch of B items for B float64 draws ``uniform`` in [0, 1); deterministic.

        Uniform replay: index ``floor(u * len)``, weights 1. Prioritized: stratified, sample i
        takes the item whose prefix-priority interval holds ``(i + u_i) / B * total``; weights
        ``(len * P(i)) ** -beta`` divided by their maximum *in this batch* (so they are <= 1 and
        only scale updates down, as in Schaul et al. 2016, without a min-tree over the buffer).
        """
        indices, weights = self._draw(uniform, beta)
        out = {name: self._data[name][indices] for name in _FIELDS}
        out["indices"] = indices
        out["weights"] = weights
        return out

    def _sampling_base(self) -> int:
        """The slot that sample index 0 maps to: 0, unless a subclass evicted the oldest items of a
        ring that had wrapped (FrameReplay); then the live items are the arc of ``len`` slots that
        ends at the position. The plain ring never evicts, so its base is always 0."""
        if self._size == self.capacity:
            return 0
        return (self._position - self._size) % self.capacity

    def _draw(self, uniform: Any, beta: float) -> tuple[Array, Array]:
        """The sampled slots and their importance weights (see :meth:`sample`)."""
        if self._size == 0:
            raise ValueError("cannot sample from an empty replay buffer: add transitions first")
        u = self._ops.asarray(uniform, "float64")
        batch_size = len(u)
        base = self._sampling_base()
        if self.tree is None:
            indices = self._ops.asarray(u * self._size, "int64")  # truncation is floor for u >= 0
            if base:
                indices = (indices + base) % self.capacity
        else:
            total = self.tree.total
            targets = (self._ops.arange(batch_size) + u) / batch_size * total
            indices = self.tree.find(targets.clip(max=total * _BELOW_ONE))
        if self.tree is not None and not base:
            # Never past the last item: rounding in the descent can end on an empty leaf beyond it.
            indices = indices.clip(max=self._size - 1)
        elif self.tree is not None:  # the same, for a live arc: an index outside it becomes the newest item
            newest = (self._position - 1) % self.capacity
            outside = (indices - base) % self.capacity >= self._size
            indices = indices + (newest - indices) * outside
        if self.tree is None:
            weights = self._ops.ones(batch_size, "float32")
        else:
            weights = (self._size * self.tree.leaves[indices] / self.tree.total) ** -beta
            weights = self._ops.asarray(weights / weights.max(), "float32")
        return indices, weights

    def update_priorities(self, indices: Any, td_errors: Any) -> None:
        """Set the priorities of items ``indices`` to ``(|td| + eps) ** alpha`` (computed in float64).

        A repeated index takes its last value. No-op for uniform replay. ``indices`` must come
        from :meth:`sample` (they are not checked: that would synchronise a GPU).
        """
        if self.tree is None:
            return
        indices = self._ops.asarray(indices, "int64")
        priorities = (abs(self._ops.asarray(td_errors, "float64")) + self.eps) ** self.alpha
        if self._evicts and self._size < self.capacity:
            # An item evicted since it was sampled keeps priority 0, so it is never drawn again.
            base = self._sampling_base()
            priorities = priorities * ((indices - base) % self.capacity < self._size)
        self.tree.update(indices, priorities)
        # Read back from the tree: the max over the values that won, not those of overridden duplicates.
        self._max_priority = self._ops.maximum(self._max_priority, self.tree.leaves[indices].max())

    def state_dict(self) -> dict[str, Any]:
        """Everything needed to restore this replay exactly, with numpy copies of the arrays.

        ``priorities`` (the leaf values, float64) and ``max_priority`` only for prioritized replay.
        """
        state: dict[str, Any] = self._header()
        state.update(position=self._position, size=self._size)
        state.update({name: self._ops.numpy(array) for name, array in self._data.items()})
        if self.tree is not None:
            state["priorities"] = self._ops.numpy(self.tree.leaves)
            state["max_priority"] = float(self._max_priority)
        return state

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore a :meth:`state_dict` of either backend; ``ValueError`` names any mismatch."""
        mine = self._header()
        try:
            theirs = {
                "capacity": int(state["capacity"]),
                "obs_shape": tuple(int(d) for d in state["obs_shape"]),
                "action_shape": tuple(int(d) for d in state["action_shape"]),
                "action_dtype": np.dtype(state["action_dtype"]).name,
                "prioritized": bool(state["prioritized"]),
            }
        except KeyError as missing:
            raise ValueError(f"replay state lacks {missing}") from None
        for key, value in theirs.items():  # a subclass checks what its own header adds
            if mine[key] != value:
                raise ValueError(f"replay state mismatch: {key} is {value!r} in the state, {mine[key]!r} here")
        for name, array in self._data.items():
            got = np.asarray(state[name])
            want = (tuple(array.shape), self._specs[name][1])
            if (got.shape, got.dtype.name) != want and not _float_bytes(got, want):
                raise ValueError(f"replay state mismatch: {name} is {(got.shape, got.dtype.name)}, expected {want}")
        for name, array in self._data.items():
            array[...] = self._ops.asarray(state[name], self._specs[name][1])
        self._position, self._size = int(state["position"]), int(state["size"])
        if self.tree is not None:
            self.tree.set_leaves(self._ops.asarray(state["priorities"], "float64"))
            self._max_priority = self._ops.asarray(state["max_priority"], "float64")

    def _header(self) -> dict[str, Any]:
        return {
            "capacity": self.capacity,
            "obs_shape": self.obs_shape,
            "action_shape": self.action_shape,
            "action_dtype": self.action_dtype,
            "prioritized": self.prioritized,
        }
