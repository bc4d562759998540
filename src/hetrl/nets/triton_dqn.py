"""DQN's whole update for a ReLU MLP Q-network as 2L + 2 Triton kernels (L linear layers), for Learn/triton.

On a GPU the networks of DQN on vector observations are small, so an update costs what its kernels
cost to run one after the other, a few microseconds each, not what its arithmetic costs: torch's
compiled update is some 50 kernels (docs/results.md, 'On a GPU: Inductor writes Adam'). Here:

- :func:`linear_forward`, one launch per layer: the online network on ``obs`` and ``next_obs`` (the
  latter only for double Q-learning) and the target network on ``next_obs``, as one grid whose third
  axis picks the network; bias and ReLU inside. The first layer reads the batch's observations
  itself (cast to float32, as ``QNetwork`` does), so nothing copies them into a stacked input.
- :func:`td_loss`: per sample, the next state's value (the online arg-max read on the target's
  values, or the target's max), the TD error, the Huber loss term and the one-hot gradient of the
  output; it also counts Adam's step.
- :func:`linear_backward`, one launch per layer: tiles of the weight gradient (the bias gradient in
  the first column of tiles) with each tile's sum of squares, and, in the same grid, the gradient
  flowing to the layer below, masked by its ReLU.
- :func:`clip_adam`: the global norm from those sums (torch's ``clip_grad_norm_``), Adam
  (``torch.optim.Adam``, no weight decay) and, for ``tau < 1``, Polyak averaging of the target; its
  first program also writes the batch's mean loss.

Each gradient element is written by exactly one program and each sum runs in a fixed order (no
atomics), so an update's result does not depend on how the GPU schedules the programs.

Layout: :class:`hetrl.nets.fused_mlp.FlatMLP`'s, with the online and the target parameters in one
vector (online first, the target ``net_stride`` elements on), so one pointer serves both networks.
Activations live in one buffer per layer, rows ``[0, online_rows)`` the online network's (``obs``
then, for double Q-learning, ``next_obs``) and the next ``batch`` rows the target network's.

Products use ``input_precision="ieee"`` (plain float32, as torch's matmul with TF32 off), so the
update equals Learn/torch's to float32 rounding. With ``TRITON_INTERPRET=1`` in the environment
before Triton is imported, Triton's interpreter runs the kernels on CPU tensors (numpy, slowly): how
the tests check them on a machine without a GPU (tests/conftest.py sets it there).
"""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def linear_forward(x_ptr, next_ptr, flat_ptr, y_ptr, w_off, b_off, net_stride, batch, online_rows, d_in, d_out,
                   FIRST: tl.constexpr, RELU: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    """One layer for both networks: grid (row blocks, column blocks, 2); axis 2 is 0 for the online
    network (``online_rows`` rows) and 1 for the target network (``batch`` rows). ``FIRST``: the
    input rows are ``obs`` (``x_ptr``) and ``next_obs`` (``next_ptr``), else the layer below's buffer."""
    pm = tl.program_id(0)
    pn = tl.program_id(1)
    net = tl.program_id(2)
    rows = pm * BM + tl.arange(0, BM)
    row_ok = rows < tl.where(net == 0, online_rows, batch)
    cols = pn * BN + tl.arange(0, BN)
    col_ok = cols < d_out
    out_rows = net * online_rows + rows  # rows of this layer's activation buffer
    w_base = flat_ptr + net * net_stride + w_off
    from_next = rows >= tl.where(net == 1, 0, batch)  # the target's rows, and online rows past the batch (double Q-learning)
    src_rows = tl.where(rows >= batch, rows - batch, rows)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k0 in range(0, d_in, BK):
        k = k0 + tl.arange(0, BK)
        k_ok = k < d_in
        if FIRST:
            in_obs = (row_ok & (rows < tl.where(net == 1, 0, batch)))[:, None] & k_ok[None, :]
            in_next = (row_ok & from_next)[:, None] & k_ok[None, :]
            a = (tl.load(x_ptr + src_rows[:, None] * d_in + k[None, :], mask=in_obs, other=0).to(tl.float32)
                 + tl.load(next_ptr + src_rows[:, None] * d_in + k[None, :], mask=in_next, other=0).to(tl.float32))
        else:
            a = tl.load(x_ptr + out_rows[:, None] * d_in + k[None, :], mask=row_ok[:, None] & k_ok[None, :], other=0.0)
        w = tl.load(w_base + cols[None, :] * d_in + k[:, None], mask=k_ok[:, None] & col_ok[None, :], other=0.0)
        acc += tl.dot(a, w, input_precision="ieee")
    acc += tl.load(flat_ptr + net * net_stride + b_off + cols, mask=col_ok, other=0.0)[None, :]
    if RELU:
        acc = tl.maximum(acc, 0.0)
    tl.store(y_ptr + out_rows[:, None] * d_out + cols[None, :], acc, mask=row_ok[:, None] & col_ok[None, :])


@triton.jit
def td_loss(q_ptr, actions_ptr, rewards_ptr, discounts_ptr, weights_ptr, g_ptr, td_ptr, terms_ptr, step_ptr,
            batch, online_rows, n_actions, DOUBLE: tl.constexpr, BR: tl.constexpr, BA: tl.constexpr):
    """Per sample (grid: row blocks): TD error, Huber term (delta 1, weighted) and dLoss/dQ (one-hot,
    the weighted clamped error over the batch size, as F.huber_loss's backward through a mean)."""
    pid = tl.program_id(0)
    rows = pid * BR + tl.arange(0, BR)
    ok = rows < batch
    acts = tl.arange(0, BA)
    both = ok[:, None] & (acts < n_actions)[None, :]
    target_q = tl.load(q_ptr + (online_rows + rows)[:, None] * n_actions + acts[None, :], mask=both, other=-float("inf"))
    if DOUBLE:
        online_next = tl.load(q_ptr + (batch + rows)[:, None] * n_actions + acts[None, :], mask=both, other=-float("inf"))
        best = tl.argmax(online_next, axis=1, tie_break_left=True)  # torch's argmax: the first of equal values
        next_q = tl.sum(tl.where(acts[None, :] == best[:, None], target_q, 0.0), axis=1)
    else:
        next_q = tl.max(target_q, axis=1)
    next_q = tl.where(ok, next_q, 0.0)  # rows past the batch read -inf everywhere
    action = tl.load(actions_ptr + rows, mask=ok, other=0)
    chosen = acts[None, :] == action[:, None]
    q_all = tl.load(q_ptr + rows[:, None] * n_actions + acts[None, :], mask=both, other=0.0)
    q = tl.sum(tl.where(chosen, q_all, 0.0), axis=1)
    y = tl.load(rewards_ptr + rows, mask=ok, other=0.0) + tl.load(discounts_ptr + rows, mask=ok, other=0.0) * next_q
    d = q - y
    ad = tl.abs(d)
    w = tl.load(weights_ptr + rows, mask=ok, other=0.0)
    tl.store(terms_ptr + rows, w * tl.where(ad < 1.0, 0.5 * d * d, ad - 0.5), mask=ok)
    tl.store(td_ptr + rows, ad, mask=ok)
    grad = w * tl.minimum(tl.maximum(d, -1.0), 1.0) / batch
    tl.store(g_ptr + rows[:, None] * n_actions + acts[None, :], tl.where(chosen, grad[:, None], 0.0), mask=both)
    if pid == 0:
        tl.store(step_ptr, tl.load(step_ptr) + 1)


@triton.jit
def linear_backward(g_ptr, h_ptr, flat_ptr, grads_ptr, below_ptr, parts_ptr, w_off, b_off, batch, d_in, d_out,
                    n_dw, part_off, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    """One layer's backward pass (1-D grid). ``g``: dLoss/d(output), batch x d_out; ``h``: the layer's
    input, batch x d_in (the online rows on ``obs``). Programs below ``n_dw``: a BM x BN tile of the
    weight gradient (g^T h; in the first column of tiles also the bias gradient), its sum of squares
    into ``parts[part_off + pid]``. Programs from ``n_dw`` on (launched for every layer but the first):
    a tile of the gradient below, (g W) where h > 0, into ``below``."""
    pid = tl.program_id(0)
    col_blocks = tl.cdiv(d_in, BN)
    if pid < n_dw:
        j = (pid // col_blocks) * BM + tl.arange(0, BM)  # output units
        i = (pid % col_blocks) * BN + tl.arange(0, BN)  # input units
        j_ok = j < d_out
        i_ok = i < d_in
        acc = tl.zeros((BM, BN), dtype=tl.float32)
        g_sum = tl.zeros((BM,), dtype=tl.float32)
        for b0 in range(0, batch, BK):
            b = b0 + tl.arange(0, BK)
            b_ok = b < batch
            g_t = tl.load(g_ptr + b[None, :] * d_out + j[:, None], mask=j_ok[:, None] & b_ok[None, :], other=0.0)
            x = tl.load(h_ptr + b[:, None] * d_in + i[None, :], mask=b_ok[:, None] & i_ok[None, :], other=0).to(tl.float32)
            acc += tl.dot(g_t, x, input_precision="ieee")
            g_sum += tl.sum(g_t, axis=1)
        tl.store(grads_ptr + w_off + j[:, None] * d_in + i[None, :], acc, mask=j_ok[:, None] & i_ok[None, :])
        squares = tl.sum(tl.sum(acc * acc, axis=1), axis=0)
        if pid % col_blocks == 0:
            tl.store(grads_ptr + b_off + j, g_sum, mask=j_ok)
            squares += tl.sum(g_sum * g_sum, axis=0)
        tl.store(parts_ptr + part_off + pid, squares)
    else:
        tile = pid - n_dw
        r = (tile // col_blocks) * BM + tl.arange(0, BM)  # samples
        i = (tile % col_blocks) * BN + tl.arange(0, BN)
        r_ok = r < batch
        i_ok = i < d_in
        acc = tl.zeros((BM, BN), dtype=tl.float32)
        for j0 in range(0, d_out, BK):
            j = j0 + tl.arange(0, BK)
            j_ok = j < d_out
            g = tl.load(g_ptr + r[:, None] * d_out + j[None, :], mask=r_ok[:, None] & j_ok[None, :], other=0.0)
            w = tl.load(flat_ptr + w_off + j[:, None] * d_in + i[None, :], mask=j_ok[:, None] & i_ok[None, :], other=0.0)
            acc += tl.dot(g, w, input_precision="ieee")
        both = r_ok[:, None] & i_ok[None, :]
        h = tl.load(h_ptr + r[:, None] * d_in + i[None, :], mask=both, other=0.0)
        tl.store(below_ptr + r[:, None] * d_in + i[None, :], tl.where(h > 0.0, acc, 0.0), mask=both)


@triton.jit
def clip_adam(flat_ptr, grads_ptr, m_ptr, v_ptr, step_ptr, parts_ptr, terms_ptr, loss_ptr, size, net_stride, n_parts,
              batch, lr, beta1, beta2, log_beta1, log_beta2, eps, max_norm, tau,
              CLIP: tl.constexpr, POLYAK: tl.constexpr, BLOCK: tl.constexpr, PARTS: tl.constexpr, LB: tl.constexpr):
    """Clip by the global norm (CLIP), one Adam step at the step count ``td_loss`` advanced, and (POLYAK)
    the target ``tau`` of the way to the new parameters, as torch's lerp_ computes it."""
    pid = tl.program_id(0)
    scale = 1.0
    if CLIP:
        p = tl.arange(0, PARTS)
        norm = tl.sqrt(tl.sum(tl.load(parts_ptr + p, mask=p < n_parts, other=0.0), axis=0))
        scale = tl.minimum(max_norm / (norm + 1e-6), 1.0)
    step = tl.load(step_ptr).to(tl.float32)
    step_size = lr / (1.0 - tl.exp(step * log_beta1))
    inv_bc2 = 1.0 / tl.sqrt(1.0 - tl.exp(step * log_beta2))
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    ok = offs < size
    g = tl.load(grads_ptr + offs, mask=ok, other=0.0) * scale
    m = beta1 * tl.load(m_ptr + offs, mask=ok, other=0.0) + (1.0 - beta1) * g
    v = beta2 * tl.load(v_ptr + offs, mask=ok, other=0.0) + (1.0 - beta2) * g * g
    p_new = tl.load(flat_ptr + offs, mask=ok, other=0.0) - step_size * m / (tl.sqrt(v) * inv_bc2 + eps)
    tl.store(m_ptr + offs, m, mask=ok)
    tl.store(v_ptr + offs, v, mask=ok)
    tl.store(flat_ptr + offs, p_new, mask=ok)
    if POLYAK:
        t = tl.load(flat_ptr + net_stride + offs, mask=ok, other=0.0)
        t = tl.where(tau < 0.5, t + tau * (p_new - t), p_new - (p_new - t) * (1.0 - tau))
        tl.store(flat_ptr + net_stride + offs, t, mask=ok)
    if pid == 0:
        r = tl.arange(0, LB)
        tl.store(loss_ptr, tl.sum(tl.load(terms_ptr + r, mask=r < batch, other=0.0), axis=0) / batch)
