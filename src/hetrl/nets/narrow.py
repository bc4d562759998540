"""Compiled kernels for the parts of a dense layer that a BLAS call does poorly.

In a training loop at DDPG's sizes (batch 256, 256 wide) the matrix products of the hidden layers
run near the CPU's peak, but what surrounds them does not: a layer with one output (a Q-value, an
action) is a 16 us product in MKL, adding a bias is a copy of the whole output before the product,
and the ReLU, its mask on the way back and a bias gradient are a torch call each (8-15 us). Each
kernel here is one vectorised pass over the (batch x width) array, 2 to 6 us.

Weights are torch's layout, ``w[out, in]``; arrays are float32, C-contiguous, 2-D (batch x features).
"""

from __future__ import annotations

import numba
import numpy as np

NARROW = 16  # at most this many outputs: a layer's product is forward_few_outputs's dot products, not BLAS

# numpy's error model: no zero-division branch in the loops, which keeps them vectorised
_jit = numba.njit(cache=True, fastmath=True, error_model="numpy")


@_jit
def forward_few_outputs(x, w, b, out, relu):  # pragma: no cover - compiled
    """out = x @ w.T + b (then ReLU), for few outputs: one vectorised dot product per output."""
    n_out, n_in = w.shape
    for r in range(x.shape[0]):
        for j in range(n_out):
            acc = np.float32(0.0)
            for k in range(n_in):
                acc += x[r, k] * w[j, k]
            acc += b[j]
            out[r, j] = max(acc, np.float32(0.0)) if relu else acc


@_jit
def add_bias(out, b, relu):  # pragma: no cover - compiled
    """out += b on every row (then ReLU), in place: what follows the product x @ w.T."""
    for r in range(out.shape[0]):
        for j in range(out.shape[1]):
            v = out[r, j] + b[j]
            out[r, j] = (v if v > 0.0 else np.float32(0.0)) if relu else v


@_jit
def relu_mask(g, h):  # pragma: no cover - compiled
    """g = 0 where h <= 0, in place: a gradient back through a ReLU whose output was ``h``."""
    for r in range(g.shape[0]):
        for j in range(g.shape[1]):
            g[r, j] = g[r, j] if h[r, j] > 0.0 else np.float32(0.0)


@_jit
def column_sum(g, out):  # pragma: no cover - compiled
    """out = g summed over its rows: a bias gradient."""
    for j in range(g.shape[1]):
        out[j] = 0.0
    for r in range(g.shape[0]):
        for j in range(g.shape[1]):
            out[j] += g[r, j]


def compile_now() -> None:
    """Compile (or load from numba's cache) every kernel for float32 arrays, so that the time lands
    where this is called, not in the first timed update."""
    x, w, b = np.zeros((2, 3), np.float32), np.zeros((1, 3), np.float32), np.zeros(1, np.float32)
    out = np.zeros((2, 1), np.float32)
    for relu in (False, True):
        forward_few_outputs(x, w, b, out, relu)
        add_bias(out, b, relu)
    relu_mask(out, out)
    column_sum(out, b)
