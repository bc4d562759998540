"""Merging the units' Q-tables by averaging.

Tables arrive stacked, ``[units, ...]``, as a numpy array or a torch tensor (the torch backend
merges on its device; only tensor methods are used, so this module does not import torch).

* float32: the mean computed in float64, rounded once to float32.
* int32: the exact integer mean rounded half up, ``floor((2 * sum + N) / (2 * N))`` (the rule of
  :mod:`hetrl.tabular.fixed_point`); a mean of int32 values is always in range.
"""

from __future__ import annotations

from typing import Any

import numpy as np


def merge_tables(tables: Any) -> Any:
    """The average of ``tables`` over the first axis, in their own dtype (float32 or int32)."""
    units = tables.shape[0]
    if isinstance(tables, np.ndarray):
        if tables.dtype == np.int32:
            total = tables.astype(np.int64).sum(axis=0)
            return ((2 * total + units) // (2 * units)).astype(np.int32)
        return tables.astype(np.float64).mean(axis=0).astype(np.float32)
    if str(tables.dtype) == "torch.int32":
        total = tables.long().sum(dim=0)
        return (2 * total + units).div(2 * units, rounding_mode="floor").int()
    return tables.double().mean(dim=0).float()
