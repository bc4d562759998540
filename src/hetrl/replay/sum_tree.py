"""A sum tree of priorities with batched update and search, in numpy or in torch (float64).

The tree is a flat float64 array of size 2P, P the next power of two >= capacity: node 1 is the
root, node k has children 2k and 2k+1, and leaf i is node P + i. Both operations walk a whole batch
level by level with the same arithmetic in either backend, so numpy and torch find the same leaves
for the same targets; neither reads a value back to the host, so a GPU tree never synchronises.
"""

from __future__ import annotations

from typing import Any, Union

import numpy as np
import torch

Array = Union[np.ndarray, torch.Tensor]


class NumpyOps:
    """The few array operations whose spelling differs between numpy and torch: numpy, on the host."""

    def asarray(self, x: Any, dtype: str) -> np.ndarray:
        return np.asarray(x, dtype=dtype)

    def zeros(self, shape: int | tuple[int, ...], dtype: str) -> np.ndarray:
        return np.zeros(shape, dtype=dtype)

    def ones(self, shape: int | tuple[int, ...], dtype: str) -> np.ndarray:
        return np.ones(shape, dtype=dtype)

    def arange(self, n: int) -> np.ndarray:
        return np.arange(n, dtype=np.int64)

    def maximum(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        return np.maximum(a, b)

    def numpy(self, x: np.ndarray) -> np.ndarray:
        """A host copy."""
        return np.array(x)

    def stable_argsort(self, x: np.ndarray) -> np.ndarray:
        return np.argsort(x, kind="stable")

    def reverse_cummin(self, x: np.ndarray) -> np.ndarray:
        """``out[k] = min(x[k:])``."""
        return np.minimum.accumulate(x[::-1])[::-1]


class TorchOps:
    """The same operations on torch tensors on ``device``."""

    def __init__(self, device: str | torch.device) -> None:
        self.device = torch.device(device)

    def asarray(self, x: Any, dtype: str) -> torch.Tensor:
        return torch.as_tensor(x, dtype=getattr(torch, dtype), device=self.device)

    def zeros(self, shape: int | tuple[int, ...], dtype: str) -> torch.Tensor:
        return torch.zeros(shape, dtype=getattr(torch, dtype), device=self.device)

    def ones(self, shape: int | tuple[int, ...], dtype: str) -> torch.Tensor:
        return torch.ones(shape, dtype=getattr(torch, dtype), device=self.device)

    def arange(self, n: int) -> torch.Tensor:
        return torch.arange(n, dtype=torch.int64, device=self.device)

    def maximum(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return torch.maximum(a, b)

    def numpy(self, x: torch.Tensor) -> np.ndarray:
        """A host copy."""
        return x.detach().to("cpu", copy=True).numpy()

    def stable_argsort(self, x: torch.Tensor) -> torch.Tensor:
        return torch.sort(x, stable=True).indices

    def reverse_cummin(self, x: torch.Tensor) -> torch.Tensor:
        """``out[k] = min(x[k:])``."""
        return x.flip(0).cummin(0).values.flip(0)


ArrayOps = Union[NumpyOps, TorchOps]


class SumTree:
    """Non-negative leaf values and their sums, to draw leaves in proportion to their values."""

    def __init__(self, capacity: int, ops: ArrayOps | None = None) -> None:
        if capacity < 1:
            raise ValueError(f"SumTree capacity must be >= 1, got {capacity}")
        self.capacity = capacity
        self.ops: ArrayOps = ops if ops is not None else NumpyOps()
        self._first_leaf = 1 << (capacity - 1).bit_length()  # P
        self._depth = self._first_leaf.bit_length() - 1  # levels below the root
        self.tree = self.ops.zeros(2 * self._first_leaf, "float64")

    @property
    def total(self) -> Array:
        """The sum of all leaves, 0-d (on the tree's device)."""
        return self.tree[1]

    @property
    def leaves(self) -> Array:
        """The ``capacity`` leaf values (a view: do not write through it, use :meth:`update`)."""
        return self.tree[self._first_leaf : self._first_leaf + self.capacity]

    def update(self, indices: Array, values: Array) -> None:
        """Set leaves ``indices`` (int64) to ``values`` (float64); a repeated index takes its last value.

        Ancestors are recomputed from their children rather than adjusted by deltas, so the sums
        never drift: every node always equals the sum of its two children, whatever the history.
        """
        indices, values = self._last_wins(indices, values)
        node = indices + self._first_leaf
        self.tree[node] = values
        for _ in range(self._depth):
            node = node // 2
            # A parent repeated in ``node`` is written several times with the same sum: harmless,
            # and cheaper than a unique(), which would synchronise a GPU.
            self.tree[node] = self.tree[2 * node] + self.tree[2 * node + 1]

    def set_leaves(self, values: Array) -> None:
        """Replace all ``capacity`` leaves and rebuild every sum (same result as :meth:`update`)."""
        self.tree[self._first_leaf : self._first_leaf + self.capacity] = values
        level = self._first_leaf // 2
        while level >= 1:  # nodes [level, 2 * level) have children [2 * level, 4 * level)
            self.tree[level : 2 * level] = self.tree[2 * level : 4 * level : 2] + self.tree[2 * level + 1 : 4 * level : 2]
            level //= 2

    def find(self, targets: Array) -> Array:
        """For each float64 target in [0, total), the leaf whose prefix-sum interval holds it.

        Leaf i's interval is [sum of leaves before i, that + leaf i); a target on a boundary goes
        to the right. Float rounding can carry a target just below the total past the last
        non-empty leaf, onto an empty one: callers clamp the result.
        """
        node = self.ops.ones(len(targets), "int64")  # the root
        for _ in range(self._depth):
            left = self.tree[2 * node]
            go_right = targets >= left
            targets = targets - left * go_right
            node = 2 * node + go_right
        return node - self._first_leaf

    def _last_wins(self, indices: Array, values: Array) -> tuple[Array, Array]:
        """Sort by index and give every occurrence of an index the value of its last occurrence.

        Writing duplicates in one scatter leaves an undefined winner in torch (on a GPU in
        practice); once they all carry the same value, the write order no longer matters.
        """
        order = self.ops.stable_argsort(indices)
        indices, values = indices[order], values[order]
        n = len(indices)
        run_end = self.ops.ones(n, "bool")  # the last of a run of equal (sorted) indices
        run_end[:-1] = indices[1:] != indices[:-1]
        # Non-ends get n added, so the min over k.. is the first run end at or after k.
        last = self.ops.reverse_cummin(self.ops.arange(n) + n * ~run_end)
        return indices, values[last]
