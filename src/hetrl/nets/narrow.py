"""Compiled kernels for the parts of a dense layer that a BLAS call does poorly.

In a training loop at DDPG's sizes (batch 256, 256 wide) the matrix products of the hidden layers
run near the CPU's peak, but what surrounds them does not: a layer with one output (a Q-value, an
action) and a first layer with three or four inputs are thin products that MKL runs far below its
peak, adding a bias is a copy of the whole output before the product, and the ReLU, its mask on the
way back and a bias gradient are a torch call each, each paying a call's overhead and a full pass.
Each kernel here is one vectorised pass over the (batch x width) array, cheaper than the call it
replaces, and where two of those steps meet in one row they share the pass
(finish_then_few_outputs, backward_few_outputs, the ``masked`` flags). The timings behind this are
in docs/benchmarks.md, 'Measurements behind the code'.

Weights are torch's layout, ``w[out, in]``; arrays are float32, C-contiguous, 2-D (batch x features).
"""

from __future__ import annotations

import numba
import numpy as np

NARROW = 16  # at most this many outputs: a layer's product is forward_few_outputs's dot products, not BLAS
FOUR = 4  # at most this many inputs (an observation, and an action): the first layer's products are unrolled kernels

# numpy's error model: no zero-division branch in the loops, which keeps them vectorised
jit = numba.njit(cache=True, fastmath=True, error_model="numpy")


@numba.njit(cache=True, fastmath=True, error_model="numpy", inline="always")
def _few_outputs_row(xr, w, b, out_r, relu):  # pragma: no cover - compiled
    """One row of out = x @ w.T + b (then ReLU): one vectorised dot product per output."""
    for j in range(w.shape[0]):
        acc = np.float32(0.0)
        for k in range(w.shape[1]):
            acc += xr[k] * w[j, k]
        acc += b[j]
        out_r[j] = max(acc, np.float32(0.0)) if relu else acc


@jit
def forward_few_outputs(x, w, b, out, relu):  # pragma: no cover - compiled
    """out = x @ w.T + b (then ReLU), for few outputs: one vectorised dot product per output."""
    for r in range(x.shape[0]):
        _few_outputs_row(x[r], w, b, out[r], relu)


@jit
def finish_then_few_outputs(x, x_bias, w, b, out, relu):  # pragma: no cover - compiled
    """x = ReLU(x + x_bias) in place (a hidden layer's product, as BLAS left it), then out = x @ w.T + b
    (then ReLU) for few outputs: add_bias and forward_few_outputs row by row, while the row is in L1."""
    zero = np.float32(0.0)
    for r in range(x.shape[0]):
        xr = x[r]
        for k in range(xr.shape[0]):
            xr[k] = max(xr[k] + x_bias[k], zero)
        _few_outputs_row(xr, w, b, out[r], relu)


@jit
def add_bias(out, b, relu):  # pragma: no cover - compiled
    """out += b on every row (then ReLU), in place: what follows the product x @ w.T."""
    for r in range(out.shape[0]):
        for j in range(out.shape[1]):
            v = out[r, j] + b[j]
            out[r, j] = (v if v > 0.0 else np.float32(0.0)) if relu else v


@jit
def relu_mask(g, h):  # pragma: no cover - compiled
    """g = 0 where h <= 0, in place: a gradient back through a ReLU whose output was ``h``."""
    for r in range(g.shape[0]):
        for j in range(g.shape[1]):
            g[r, j] = g[r, j] if h[r, j] > 0.0 else np.float32(0.0)


@jit
def column_sum(g, out):  # pragma: no cover - compiled
    """out = g summed over its rows: a bias gradient."""
    for j in range(g.shape[1]):
        out[j] = 0.0
    for r in range(g.shape[0]):
        for j in range(g.shape[1]):
            out[j] += g[r, j]


@jit
def forward_four_inputs(x, w, b, out, relu):  # pragma: no cover - compiled
    """out = x @ w.T + b (then ReLU), for at most four inputs: per row one vectorised pass over the
    outputs with the four products unrolled (missing inputs count as zero weights). At 256x256 this
    beats BLAS's product alone, which needs a bias pass after it (docs/benchmarks.md,
    'Measurements behind the code')."""
    n_out, n_in = w.shape
    wt = np.zeros((FOUR, n_out), np.float32)
    for j in range(n_out):
        for k in range(n_in):
            wt[k, j] = w[j, k]
    w0, w1, w2, w3 = wt[0], wt[1], wt[2], wt[3]
    zero = np.float32(0.0)
    for r in range(x.shape[0]):
        x0 = x[r, 0]
        x1 = x[r, 1] if n_in > 1 else zero
        x2 = x[r, 2] if n_in > 2 else zero
        x3 = x[r, 3] if n_in > 3 else zero
        o = out[r]
        if relu:
            for j in range(n_out):
                o[j] = max(b[j] + x0 * w0[j] + x1 * w1[j] + x2 * w2[j] + x3 * w3[j], zero)
        else:
            for j in range(n_out):
                o[j] = b[j] + x0 * w0[j] + x1 * w1[j] + x2 * w2[j] + x3 * w3[j]


@jit
def grads_four_inputs(g, x, gw, gb, h, masked):  # pragma: no cover - compiled
    """gw = g.T @ x and gb = g summed over its rows, for a layer with at most four inputs ``x``:
    one pass over the (batch x outputs) gradient ``g``, two rows at a time, into five accumulator
    rows, in place of BLAS's product, its transpose and a column sum, a pass each
    (docs/benchmarks.md, 'Measurements behind the code'). If
    ``masked``, g is read as zero where the layer's ReLU output ``h`` is not positive (relu_mask
    on the fly; g is left as it was)."""
    rows, n_out = g.shape
    n_in = x.shape[1]
    zero = np.float32(0.0)
    xp = np.zeros((rows, FOUR), np.float32)  # the inputs padded to four columns
    xp[:, :n_in] = x
    acc = np.zeros((FOUR + 1, n_out), np.float32)
    a0, a1, a2, a3, ab = acc[0], acc[1], acc[2], acc[3], acc[4]
    for r in range(0, rows - 1, 2):
        p, q, hp, hq = g[r], g[r + 1], h[r], h[r + 1]
        p0, p1, p2, p3 = xp[r, 0], xp[r, 1], xp[r, 2], xp[r, 3]
        q0, q1, q2, q3 = xp[r + 1, 0], xp[r + 1, 1], xp[r + 1, 2], xp[r + 1, 3]
        for j in range(n_out):
            pj = p[j] if not masked or hp[j] > zero else zero
            qj = q[j] if not masked or hq[j] > zero else zero
            a0[j] += p0 * pj + q0 * qj
            a1[j] += p1 * pj + q1 * qj
            a2[j] += p2 * pj + q2 * qj
            a3[j] += p3 * pj + q3 * qj
            ab[j] += pj + qj
    if rows % 2:
        r = rows - 1
        p, hp = g[r], h[r]
        p0, p1, p2, p3 = xp[r, 0], xp[r, 1], xp[r, 2], xp[r, 3]
        for j in range(n_out):
            pj = p[j] if not masked or hp[j] > zero else zero
            a0[j] += p0 * pj
            a1[j] += p1 * pj
            a2[j] += p2 * pj
            a3[j] += p3 * pj
            ab[j] += pj
    for j in range(n_out):
        for k in range(n_in):
            gw[j, k] = acc[k, j]
        gb[j] = ab[j]


@jit
def input_grads(g, h, wt, out, masked):  # pragma: no cover - compiled
    """out = g @ wt.T, one dot product per row and column of ``out`` (few columns: the gradient for
    some of a network's inputs); if ``masked``, g is read as zero where ``h`` is not positive."""
    zero = np.float32(0.0)
    for r in range(g.shape[0]):
        gr, hr = g[r], h[r]
        for c in range(wt.shape[0]):
            wc = wt[c]
            acc = np.float32(0.0)
            for j in range(g.shape[1]):
                acc += (gr[j] if not masked or hr[j] > zero else zero) * wc[j]
            out[r, c] = acc


@jit
def backward_few_outputs(g, h, w, gw, gb, g_in, weight_grads, g_in_sums):  # pragma: no cover - compiled
    """Back through a layer with few outputs, fed by a ReLU whose output was ``h``: if
    ``weight_grads``, gw = g.T @ h and gb = g summed over its rows; and g_in = g @ w where h > 0,
    zero elsewhere, with g_in summed over its rows into ``g_in_sums`` (the layer below's bias
    gradient). One pass over ``h`` in place of two thin BLAS products (a GEMV and an outer product,
    both far below BLAS's peak at these shapes), a masking pass and two column sums
    (docs/benchmarks.md, 'Measurements behind the code')."""
    rows, n_out = g.shape
    n_in = h.shape[1]
    zero = np.float32(0.0)
    if weight_grads:
        gw[:] = zero
        gb[:] = zero
    g_in_sums[:] = zero
    for r in range(rows):
        hr, gr, gi = h[r], g[r], g_in[r]
        for o in range(n_out):
            go, wo = gr[o], w[o]
            if weight_grads:
                gb[o] += go
                gwo = gw[o]
                for j in range(n_in):
                    gwo[j] += go * hr[j]
            if o < n_out - 1:
                for j in range(n_in):
                    gi[j] = go * wo[j] + (zero if o == 0 else gi[j])
            else:
                for j in range(n_in):
                    v = go * wo[j] + (zero if o == 0 else gi[j])
                    v = v if hr[j] > zero else zero
                    gi[j] = v
                    g_in_sums[j] += v


def compile_now() -> None:
    """Compile (or load from numba's cache) every kernel for float32 arrays, so that the time lands
    where this is called, not in the first timed update."""
    x, w, b = np.zeros((2, 3), np.float32), np.zeros((1, 3), np.float32), np.zeros(1, np.float32)
    out, sums = np.zeros((2, 1), np.float32), np.zeros(3, np.float32)
    for flag in (False, True):
        forward_few_outputs(x, w, b, out, flag)
        finish_then_few_outputs(x, sums, w, b, out, flag)
        forward_four_inputs(x, w, b, out, flag)
        add_bias(out, b, flag)
        grads_four_inputs(out, x, w.T.copy(), b, out, flag)  # here x is a layer's input, out its output's gradient
        input_grads(x, x, w, out, flag)
        backward_few_outputs(out, x, w, w, b, x, flag, sums)
    relu_mask(out, out)
    column_sum(out, b)
