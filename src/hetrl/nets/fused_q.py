"""hetrl's conv Q-networks, early-exit Q-networks and searched Q-networks in one flat vector, with one
compiled pass per decision batch: what Act/numba runs for them.

Why: at MinAtar's sizes (16 3x3 filters on a 10x10 image, 128 hidden units) a batch-1 decision is
some 170k multiply-accumulates, a few microseconds of arithmetic, while torch pays its per-operator
dispatch on every layer and numpy an im2col gather and several temporaries. An early exit skips
three quarters of that arithmetic, which shows in the time of a decision only when the pass
around it costs little. Here the whole pass is one numba call over preallocated buffers:

- the observation is read as it comes (uint8 images or float32 vectors), converted on the fly;
- a convolution is computed directly from its nonzero inputs (no im2col; zeros, most of a MinAtar
  image, cost nothing; a padded border is never read, so it costs nothing either), its output in
  torch's (filters, height, width) order so the flattened features equal the torch network's;
- a :class:`~hetrl.nets.searched.SearchedQNetwork`'s layers map onto the same kernels: a convolution
  and a dense layer are a conv and a linear block, a depthwise-separable convolution is a depthwise
  block (one k x k kernel per channel, no bias, no ReLU) then a 1x1 conv block, a skip is no block;
- an :class:`~hetrl.nets.exits.ExitQNetwork` decides exits as its torch and numpy passes do: after
  a block with a branch (or before block 0, for a branch on the input), each row still in the pass
  computes the branch's confidence logit; a row
  whose logit is strictly above the threshold's logit takes the branch's Q-values and leaves, the
  rows left are compacted and go on; a threshold of 1 or more runs no branch at all. A branch that
  reads a share of its block's outputs (its input features fewer than the block's) has the block
  compute those first, and the rest only for the rows that go on (their block inputs compacted
  with them).

The flat vector holds every state-dict entry (the ``exit_threshold`` buffer included, so WeightSync
moves the threshold too), then the input scale; the layout's :meth:`FusedQ.views` are per-name views
of it, in the state dict's shapes (a convolution's weights are stored filter-last, (C, k, k, F), the
order the kernel reads them in; their view is transposed, so writing a state dict through the views
stores them so). ``program`` is an int64 vector describing the layers (offsets, shapes), read by the kernel.
"""

from __future__ import annotations

import math

import numba
import numpy as np
from torch import nn

from hetrl.nets.conv import ConvQNetwork, ConvShape
from hetrl.nets.exits import INPUT, ExitQNetwork
from hetrl.nets.fused_mlp import CACHE_LINE, aligned_zeros
from hetrl.nets.searched import Layer, SearchedQNetwork

# program layout: a header, then a record per block, then a record per branch
HEADER, BLOCK, BRANCH = 9, 14, 8
CONV, LINEAR, DEPTHWISE = 0, 1, 2  # a block's kind
# header: n_blocks, n_branches, n_actions, in_size, threshold offset (-1: no exits), scale offset,
#         head weight offset, head bias offset, the branch on the input (-1: none)
# block:  kind, weight offset, bias offset (-1: none; depthwise only), channels, height, width,
#         filters, kernel, stride, padding, in_features, out_features, ReLU (1) or not (0),
#         branch index (-1: none)
# branch: hidden units (0: none), in_features, trunk weight offset, trunk bias offset, Q weight
#         offset, Q bias offset, confidence weight offset, confidence bias offset


def supports(net: nn.Module, max_image: int | None = None) -> str | None:
    """Why ``net`` cannot run here, or None when it can. ``max_image``: the largest image side served
    (direct convolutions without a matrix library pay for large images)."""
    if isinstance(net, ConvQNetwork):
        if net.dueling:
            return "no dueling head (set dueling=false)"
        obs_shape = tuple(net.obs_shape)
    elif isinstance(net, (ExitQNetwork, SearchedQNetwork)):
        obs_shape = _obs_shape(net)
    else:
        return f"runs hetrl's conv, early-exit and searched Q-networks, not {type(net).__name__}"
    if max_image is not None and len(obs_shape) == 3 and max(obs_shape[1:]) > max_image:
        return (f"runs small-image conv networks (sides up to {max_image}), not "
                f"{obs_shape[1]}x{obs_shape[2]} images")
    return None


def _obs_shape(net: nn.Module) -> tuple[int, ...]:
    return tuple(int(d) for d in (net.architecture.obs_shape if isinstance(net, SearchedQNetwork) else net.obs_shape))


def _layout(shapes: dict[str, tuple[int, ...]]) -> tuple[dict[str, int], int]:
    """Each entry's offset in the flat vector, in ``shapes``' order, and the offset after them (the
    input scale's). Each entry starts on a cache line (the vector itself does): a weight matrix
    whose rows are a multiple of 16 floats then has every row on one, where a one-float shift (an
    exit network's ``exit_threshold`` buffer comes first) made every vector load of the pass
    straddle two (docs/benchmarks.md, 'Measurements behind the code')."""
    offsets, at, line = {}, 0, CACHE_LINE // np.dtype(np.float32).itemsize
    for name, shape in shapes.items():
        at = -(-at // line) * line
        offsets[name] = at
        at += int(np.prod(shape, dtype=np.int64))
    return offsets, at


def _filter_last(program: np.ndarray, offsets: dict[str, int], shapes: dict[str, tuple[int, ...]]) -> set[str]:
    """The conv weights a program's CONV blocks read: stored filter-last, (C, k, k, F), in the flat
    vector, the order :func:`_conv`'s innermost loop runs over (a per-call re-layout cost as much
    as a sparse MinAtar convolution itself)."""
    by_offset = {at: name for name, at in offsets.items()}
    n_blocks = int(program[0])
    blocks = (program[HEADER + k * BLOCK:HEADER + (k + 1) * BLOCK] for k in range(n_blocks))
    return {by_offset[int(p[1])] for p in blocks if p[0] == CONV and len(shapes[by_offset[int(p[1])]]) == 4}


def _views(flat: np.ndarray, offsets: dict[str, int], shapes: dict[str, tuple[int, ...]],
           filter_last: set[str]) -> dict[str, np.ndarray]:
    """Per-name views of ``flat`` in the state dict's shapes; a filter-last conv weight's is a
    transposed view (writing torch's (F, C, k, k) into it stores (C, k, k, F))."""
    out = {}
    for name, shape in shapes.items():
        at, size = offsets[name], int(np.prod(shape, dtype=np.int64))
        if name in filter_last:
            f, c, k, k2 = shape
            out[name] = flat[at:at + size].reshape(c, k, k2, f).transpose(3, 0, 1, 2)
        else:
            out[name] = flat[at:at + size].reshape(shape)
    return out


def _conv_record(offsets: dict[str, int], weight: str, bias: str | None, s: ConvShape, kind: int = CONV,
                 relu: bool = True) -> list[int]:
    b = offsets[bias] if bias else -1
    return [kind, offsets[weight], b, s.channels, s.height, s.width, s.filters, s.kernel, s.stride, s.padding,
            s.size, s.filters * s.positions, int(relu)]


def _linear_record(offsets: dict[str, int], name: str, n_in: int, n_out: int, relu: bool = True) -> list[int]:
    return [LINEAR, offsets[f"{name}.weight"], offsets[f"{name}.bias"], 0, 0, 0, 0, 0, 0, 0, n_in, n_out, int(relu)]


def layer_blocks(layer: Layer, prefix: str, offsets: dict[str, int]) -> list[list[int]]:
    """The block records (branch index not yet appended) of one searched layer whose module's
    parameters are at ``offsets`` under ``prefix``: a conv or dense layer is one block, a
    depthwise-separable conv a depthwise block (no bias, no ReLU) then a 1x1 conv block, a skip none."""
    op = layer.op
    if op.kind == "skip":
        return []
    if op.kind == "dense":
        return [_linear_record(offsets, f"{prefix}.0", layer.in_width, op.width, op.relu)]
    same = op.kernel // 2
    c, h, w = layer.in_width, layer.height, layer.width
    if op.kind == "conv":
        return [_conv_record(offsets, f"{prefix}.0.weight", f"{prefix}.0.bias", ConvShape(c, h, w, op.width, op.kernel, 1, same),
                             relu=op.relu)]
    return [_conv_record(offsets, f"{prefix}.0.weight", None, ConvShape(c, h, w, c, op.kernel, 1, same), DEPTHWISE, relu=False),
            _conv_record(offsets, f"{prefix}.1.weight", f"{prefix}.1.bias", ConvShape(c, h, w, op.width, 1, 1, 0), relu=op.relu)]


def _widths(blocks: list[list[int]], in_size: int) -> list[int]:
    """The row widths the pass's buffers must hold for ``blocks``: the input, each block's output
    and each conv block's work space (one row of z: its weights filter-last, its sums)."""
    widths = [in_size]
    for block in blocks:
        if block[0] == CONV:
            filters, taps, positions = block[6], block[3] * block[7] * block[7], block[11] // block[6]
            widths.append((taps + positions) * filters)
        widths.append(block[11])
    return widths


class FusedQ:
    """The flat layout of a :class:`ConvQNetwork` (no dueling head), an :class:`ExitQNetwork` or a
    :class:`SearchedQNetwork`, and the buffers of its compiled pass (made once per batch size)."""

    def __init__(self, net: nn.Module) -> None:
        reason = supports(net)
        if reason:
            raise ValueError(f"FusedQ {reason}")
        state = net.state_dict()
        self.shapes = {k: tuple(v.shape) for k, v in state.items()}
        self.offsets, self.scale_offset = _layout(self.shapes)
        self.size = self.scale_offset + 1
        self.exits = isinstance(net, ExitQNetwork)
        self.obs_shape = _obs_shape(net)
        self.in_size = int(np.prod(self.obs_shape))
        if isinstance(net, SearchedQNetwork):
            self.n_actions, self.scale = net.architecture.n_actions, float(net.scale)
            blocks, head, branch_at = self._searched_blocks(net)
        else:
            self.n_actions = int(net.head.out_features if self.exits else net.head[-1].out_features)
            self.scale = float(net.scale) if net.geometry else 1.0
            blocks, head, branch_at = self._hetrl_blocks(net)
        self.program, self.max_width = self._program(net, blocks, head, branch_at)
        self.filter_last = _filter_last(self.program, self.offsets, self.shapes)
        self._batch = -1

    def _conv_block(self, weight: str, bias: str | None, s: ConvShape, kind: int = CONV, relu: bool = True) -> list[int]:
        return _conv_record(self.offsets, weight, bias, s, kind, relu)

    def _linear_block(self, name: str, n_in: int, relu: bool = True) -> list[int]:
        return _linear_record(self.offsets, name, n_in, self.shapes[f"{name}.weight"][0], relu)

    def _hetrl_blocks(self, net: nn.Module) -> tuple[list[list[int]], str, dict[int, int]]:
        """The blocks of a conv or early-exit network (ReLU after each), its head's name and the
        block each exit branch follows."""
        if self.exits:
            layer_names = [f"blocks.{k}.0" for k in range(len(net.blocks))]
            head, branch_at = "head", {e: j for j, e in enumerate(net.exits)}
        else:
            layer_names = [f"features.{2 * k}" for k in range(len(net.geometry))] + ["head.0"]
            head, branch_at = f"head.{len(net.head) - 1}", {}
        blocks, features = [], self.in_size
        for k, name in enumerate(layer_names):
            if k < len(net.geometry):
                blocks.append(self._conv_block(f"{name}.weight", f"{name}.bias", net.geometry[k]))
            else:
                blocks.append(self._linear_block(name, features))
            features = blocks[-1][11]
        return blocks, head, branch_at

    def _searched_blocks(self, net: SearchedQNetwork) -> tuple[list[list[int]], str, dict[int, int]]:
        """The blocks of a searched network's layers (none for a skip), and its output layer's name."""
        layers = net.architecture.layers()
        blocks = [block for k, layer in enumerate(layers[:-1]) for block in layer_blocks(layer, f"blocks.{k}", self.offsets)]
        return blocks, f"blocks.{len(layers) - 1}.0", {}

    def _program(self, net: nn.Module, blocks: list[list[int]], head: str,
                 branch_at: dict[int, int]) -> tuple[np.ndarray, int]:
        off = self.offsets
        branches: list[list[int]] = []
        for k, block in enumerate(blocks):
            block.append(branch_at.get(k, -1))
        widths = _widths(blocks, self.in_size)
        if self.exits:
            for j, branch in enumerate(net.branches):
                p = f"branches.{j}"
                trunk = (off[f"{p}.trunk.0.weight"], off[f"{p}.trunk.0.bias"]) if branch.hidden else (-1, -1)
                branches.append([branch.hidden, branch.in_features, *trunk, off[f"{p}.q.weight"], off[f"{p}.q.bias"],
                                 off[f"{p}.confidence.weight"], off[f"{p}.confidence.bias"]])
                widths.append(branch.hidden)
        header = [len(blocks), len(branches), self.n_actions, self.in_size,
                  off["exit_threshold"] if self.exits else -1, self.scale_offset, off[f"{head}.weight"], off[f"{head}.bias"],
                  branch_at.get(INPUT, -1)]
        program = np.array(header + [v for rec in blocks + branches for v in rec], dtype=np.int64)
        return program, max(widths)

    def views(self, flat: np.ndarray) -> dict[str, np.ndarray]:
        """Per-name views of ``flat``, keyed and shaped like the network's state dict (conv weights
        stored filter-last: :func:`_views`)."""
        return _views(flat, self.offsets, self.shapes, self.filter_last)

    def new_flat(self) -> np.ndarray:
        flat = aligned_zeros(self.size)
        flat[self.scale_offset] = self.scale
        return flat

    def _buffers(self, n: int) -> None:
        """The pass's two buffers for batch ``n`` (a run's env count is fixed: made once), and the
        views of them this class reads: ``work`` (float32: the Q-values, then the activations) and
        ``index`` (int64: the rows still in the pass, each row's exit, the actions). Two arrays, not
        six: numba unboxes every array argument on every call, some 40 ns each."""
        self._batch = n
        self.work = aligned_zeros(work_size(n, self.n_actions, self.max_width))
        self.index = np.zeros(3 * n, np.int64)
        self.q = self.work[:n * self.n_actions].reshape(n, self.n_actions)
        self.exit_index, self.actions = self.index[n:2 * n], self.index[2 * n:]

    def forward(self, flat: np.ndarray, obs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Q-values acted on (n, actions) and each row's exit (n,): the branch's index, or the
        number of branches for the final head (always the final head without exits)."""
        n = len(obs)
        if n != self._batch:
            self._buffers(n)
        q_pass(flat, self.program, np.ascontiguousarray(obs), self.work, self.index, n)
        return self.q.copy(), self.exit_index.copy()

    def q_values(self, flat: np.ndarray, obs: np.ndarray) -> np.ndarray:
        """The Q-values of :meth:`forward` alone (inlined, not calling it: this is Act's batch-1 path)."""
        n = len(obs)
        if n != self._batch:
            self._buffers(n)
        q_pass(flat, self.program, np.ascontiguousarray(obs), self.work, self.index, n)
        return self.q.copy()

    def epsilon_greedy(self, flat: np.ndarray, obs: np.ndarray, explore: np.ndarray, random_actions: np.ndarray,
                       level: float) -> np.ndarray:
        """DQN's rule on the pass's Q-values in the same call: the random action where
        ``explore < level``, else the first arg-max."""
        n = len(obs)
        if n != self._batch:
            self._buffers(n)
        q_epsilon_greedy(flat, self.program, np.ascontiguousarray(obs), self.work, self.index, n, explore, random_actions,
                         np.float32(level))
        return self.actions.copy()


class FusedOp:
    """One searched layer alone as a program of :func:`q_pass` with no head (0 actions): the same
    block records and compiled kernels as the layer inside a :class:`FusedQ`, for timing an
    operation as Act/numba runs it (the co-search's numba cost) and checking its output.
    ``module``: the layer's parameters (default a fresh ``op.module(in_width)``); the input rows are
    float32 in torch's (C, H, W) order, unscaled."""

    def __init__(self, layer: Layer, module: nn.Module | None = None) -> None:
        if layer.op.kind == "skip":
            raise ValueError("FusedOp runs an operation, not a skip (it has no block)")
        module = module if module is not None else layer.op.module(layer.in_width)
        state = {f"op.{k}": v for k, v in module.state_dict().items()}
        shapes = {k: tuple(v.shape) for k, v in state.items()}
        offsets, scale_offset = _layout(shapes)
        blocks = layer_blocks(layer, "op", offsets)
        for block in blocks:
            block.append(-1)  # no exit branch
        self.in_size = layer.in_width * layer.height * layer.width
        self.out_size = blocks[-1][11]
        self.n_blocks = len(blocks)
        header = [len(blocks), 0, 0, self.in_size, -1, scale_offset, -1, -1, -1]
        self.program = np.array(header + [v for rec in blocks for v in rec], dtype=np.int64)
        self.max_width = max(_widths(blocks, self.in_size))
        self.flat = aligned_zeros(scale_offset + 1)
        for name, view in _views(self.flat, offsets, shapes, _filter_last(self.program, offsets, shapes)).items():
            view[...] = state[name].detach().cpu().float().numpy()
        self.flat[scale_offset] = 1.0
        self._batch = -1

    def run(self, x: np.ndarray) -> None:
        """The pass on rows ``x`` (n, in_size float32, contiguous); its output stays in the buffer."""
        n = len(x)
        if n != self._batch:
            self._batch = n
            self.work = aligned_zeros(work_size(n, 0, self.max_width))  # no Q-values: activations alone
            self.index = np.zeros(3 * n, np.int64)
        q_pass(self.flat, self.program, x, self.work, self.index, n)

    def forward(self, x: np.ndarray) -> np.ndarray:
        """The operation's output rows (n, out_size) for rows ``x``: where :func:`q_pass` leaves the
        last block's output, the first third of its activations after an even number of blocks, the second after an odd."""
        x = np.ascontiguousarray(x, dtype=np.float32)
        self.run(x)
        n, width = len(x), self.max_width
        at = (self.n_blocks % 2) * n * width
        return self.work[at:at + n * width].reshape(n, width)[:, :self.out_size].copy()


def limit_of(threshold: float) -> float:
    """:func:`hetrl.nets.exits.threshold_logit`, compiled: the logit a confidence must exceed."""
    if threshold >= 1.0:
        return math.inf
    if threshold <= 0.0:
        return -math.inf
    return math.log(threshold / (1.0 - threshold))


_limit = numba.njit(cache=True)(limit_of)


@numba.njit(cache=True, fastmath=True)
def _all_zero(line):  # pragma: no cover - compiled
    """Whether a row of an image is all zeros, in one vectorised pass: most rows of a MinAtar
    image are (5-24% hold anything, by game), and testing its values one by one cost more than
    the rest of a sparse convolution."""
    total = np.float32(0.0)
    for t in range(len(line)):
        total += abs(line[t])
    return total == 0.0


@numba.njit(cache=True, fastmath=True)
def _conv(flat, p, x, y, n_rows, work, f0, f1):  # pragma: no cover - compiled
    """Conv block record ``p`` (ReLU after where its flag says) on rows ``x`` (n_rows, C*H*W) into
    ``y`` (n_rows, F*OH*OW), its filters ``f0:f1`` alone (the rest of ``y`` untouched).

    Computed from the inputs' side: each nonzero input adds its value times the weights of every
    (kernel offset, filter) that reads it to the outputs it reaches, so zero inputs cost nothing (a
    MinAtar image is mostly zeros, and a padded border is zeros that are never read); a zero's terms
    are exactly zero, so the sums are the same up to their order. The innermost loop runs over the
    filters of contiguous rows: the weights are stored filter-last in ``flat`` (:func:`_filter_last`),
    the outputs gathered position-major in ``work``; the result is written in torch's (filters,
    height, width) order with bias and ReLU. A row of zeros is skipped whole (:func:`_all_zero`)."""
    w_off, b_off, c_in, h, wd, filters, k, s, pad = p[1], p[2], p[3], p[4], p[5], p[6], p[7], p[8], p[9]
    relu = p[12] != 0
    oh, ow = (h + 2 * pad - k) // s + 1, (wd + 2 * pad - k) // s + 1
    positions, taps = oh * ow, c_in * k * k
    w_t = flat[w_off:w_off + taps * filters]  # (c, ky, kx, f)
    acc = work[:positions * filters]  # (oy, ox, f)
    part = f1 - f0
    for i in range(n_rows):
        xi, yi = x[i], y[i]
        acc[:] = 0.0
        for c in range(c_in):
            for yy in range(h):
                line = xi[(c * h + yy) * wd:(c * h + yy + 1) * wd]
                if _all_zero(line):
                    continue
                for xx in range(wd):
                    v = line[xx]
                    if v == 0.0:
                        continue
                    if s == 1:  # the outputs an input reaches are a k x k window clipped to the map: no division
                        for ky in range(max(0, yy + pad - oh + 1), min(k, yy + pad + 1)):
                            row = (yy + pad - ky) * ow + xx + pad
                            for kx in range(max(0, xx + pad - ow + 1), min(k, xx + pad + 1)):
                                tap = ((c * k + ky) * k + kx) * filters + f0
                                at = (row - kx) * filters + f0
                                w_row, out = w_t[tap:tap + part], acc[at:at + part]
                                for f in range(part):
                                    out[f] += v * w_row[f]
                        continue
                    for ky in range(k):
                        ty = yy + pad - ky
                        if ty < 0 or ty % s != 0 or ty // s >= oh:
                            continue
                        for kx in range(k):
                            tx = xx + pad - kx
                            if tx < 0 or tx % s != 0 or tx // s >= ow:
                                continue
                            tap = ((c * k + ky) * k + kx) * filters + f0
                            at = ((ty // s) * ow + tx // s) * filters + f0
                            w_row, out = w_t[tap:tap + part], acc[at:at + part]
                            for f in range(part):
                                out[f] += v * w_row[f]
        for f in range(f0, f1):
            bias = flat[b_off + f]
            for t in range(positions):
                v = acc[t * filters + f] + bias
                yi[f * positions + t] = max(v, np.float32(0.0)) if relu else v


@numba.njit(cache=True, fastmath=True)
def _depthwise(flat, p, x, y, n_rows):  # pragma: no cover - compiled
    """Depthwise conv block record ``p`` (one k x k kernel per channel; bias and ReLU where the
    record has them) on rows ``x`` (n_rows, C*H*W) into ``y`` (n_rows, C*OH*OW), from the nonzero
    inputs' side as :func:`_conv` computes, straight into torch's (channels, height, width) order."""
    w_off, b_off, c_in, h, wd, k, s, pad = p[1], p[2], p[3], p[4], p[5], p[7], p[8], p[9]
    relu = p[12] != 0
    oh, ow = (h + 2 * pad - k) // s + 1, (wd + 2 * pad - k) // s + 1
    positions, kk = oh * ow, k * k
    for i in range(n_rows):
        xi, yi = x[i], y[i]
        for c in range(c_in):
            out, w = yi[c * positions:(c + 1) * positions], flat[w_off + c * kk:w_off + (c + 1) * kk]
            out[:] = 0.0
            for yy in range(h):
                line = xi[(c * h + yy) * wd:(c * h + yy + 1) * wd]
                if _all_zero(line):
                    continue
                for xx in range(wd):
                    v = line[xx]
                    if v == 0.0:
                        continue
                    for ky in range(k):
                        ty = yy + pad - ky
                        if ty < 0 or ty % s != 0 or ty // s >= oh:
                            continue
                        row = (ty // s) * ow
                        for kx in range(k):
                            tx = xx + pad - kx
                            if tx < 0 or tx % s != 0 or tx // s >= ow:
                                continue
                            out[row + tx // s] += v * w[ky * k + kx]
            if b_off >= 0 or relu:
                bias = flat[b_off + c] if b_off >= 0 else np.float32(0.0)
                for t in range(positions):
                    v = out[t] + bias
                    out[t] = max(v, np.float32(0.0)) if relu else v


@numba.njit(cache=True, fastmath=True)
def _linear(flat, w_off, b_off, n_in, lo, hi, x, y, n_rows, relu):  # pragma: no cover - compiled
    """y[:n_rows, lo:hi] = x[:n_rows, :n_in] @ W[lo:hi].T + b[lo:hi] (ReLU where ``relu``); each
    weight row is read once for all rows."""
    for j in range(lo, hi):
        w = flat[w_off + j * n_in:w_off + (j + 1) * n_in]
        bias = flat[b_off + j]
        for i in range(n_rows):
            xi = x[i]
            acc = np.float32(0.0)
            for t in range(n_in):
                acc += w[t] * xi[t]
            acc += bias
            y[i, j] = max(acc, np.float32(0.0)) if relu else acc


@numba.njit(cache=True, fastmath=True)
def _dot(flat, w_off, x, i, n):  # pragma: no cover - compiled
    """The weight row at ``w_off`` (n values) times row ``i`` of ``x``."""
    w, xi = flat[w_off:w_off + n], x[i]
    acc = np.float32(0.0)
    for t in range(n):
        acc += w[t] * xi[t]
    return acc


@numba.njit(cache=True, fastmath=True)
def _leave(flat, program, j, x, n_x, z, n, rows, q, exit_index, limit, x2, n_x2):  # pragma: no cover - compiled
    """Branch ``j`` on the ``n`` rows of ``x`` still in the pass (``n_x`` features each; the branch
    reads the first of them): each row whose confidence logit is above ``limit`` takes the branch's
    Q-values and leaves; the rows left are compacted to the top of ``x`` (and ``rows``, and of
    ``x2``'s first ``n_x2`` features: the block inputs where the block is not done). Returns how
    many are left."""
    n_actions, n_blocks = program[2], program[0]
    r = program[HEADER + n_blocks * BLOCK + j * BRANCH:HEADER + n_blocks * BLOCK + (j + 1) * BRANCH]
    hidden, n_in = r[0], r[1]
    f, n_f = x, n_in
    if hidden > 0:
        _linear(flat, r[2], r[3], n_in, 0, hidden, x, z, n, True)
        f, n_f = z, hidden
    kept = 0
    for i in range(n):
        logit = _dot(flat, r[6], f, i, n_f) + flat[r[7]]
        if np.float64(logit) > limit:
            row = rows[i]
            for a in range(n_actions):
                q[row, a] = _dot(flat, r[4] + a * n_f, f, i, n_f) + flat[r[5] + a]
            exit_index[row] = j
        else:
            if kept != i:
                rows[kept] = rows[i]
                for t in range(n_x):
                    x[kept, t] = x[i, t]
                for t in range(n_x2):
                    x2[kept, t] = x2[i, t]
            kept += 1
    return kept


def work_size(batch: int, n_actions: int, max_width: int) -> int:
    """The floats of :func:`q_pass`'s ``work`` buffer: the Q-values (batch, n_actions), padded to a
    cache line so the activations after them start on one, then three activation rows per sample."""
    return _q_floats(batch, n_actions) + 3 * batch * max_width


def _q_floats(batch: int, n_actions: int) -> int:
    line = CACHE_LINE // 4
    return -(-(batch * n_actions) // line) * line


_q_floats_compiled = numba.njit(cache=True)(_q_floats)


@numba.njit(cache=True, fastmath=True)
def q_pass(flat, program, obs, work, index, batch):  # pragma: no cover - compiled
    """The network's Q-values into the head of ``work`` (batch, actions) and each row's exit into
    ``index[batch:2 * batch]`` (see the module; ``index[:batch]`` holds the rows still in the pass).
    A program with no actions (:class:`FusedOp`) leaves the last block's output in ``work``."""
    n_blocks, n_branches, n_actions, in_size = program[0], program[1], program[2], program[3]
    thr_off, scale_off, head_w, head_b = program[4], program[5], program[6], program[7]
    limit = _limit(np.float64(flat[thr_off])) if thr_off >= 0 else math.inf
    q = work[:batch * n_actions].reshape(batch, n_actions)
    buf = work[_q_floats_compiled(batch, n_actions):]
    rows, exit_index = index[:batch], index[batch:2 * batch]
    width = len(buf) // (3 * batch)
    x = buf[:batch * width].reshape(batch, width)
    y = buf[batch * width:2 * batch * width].reshape(batch, width)
    z = buf[2 * batch * width:3 * batch * width].reshape(batch, width)
    src = obs.reshape(batch, in_size)
    scale = flat[scale_off]
    for i in range(batch):
        rows[i] = i
        if scale != 1.0:
            for t in range(in_size):
                x[i, t] = np.float32(src[i, t]) / scale
        else:
            for t in range(in_size):
                x[i, t] = np.float32(src[i, t])
    n = batch
    if program[8] >= 0 and limit != math.inf:  # the branch on the input, before any block
        n = _leave(flat, program, program[8], x, in_size, z, n, rows, q, exit_index, limit, x, 0)
        if n == 0:
            return
    branch_records = HEADER + n_blocks * BLOCK
    for k in range(n_blocks):
        p = program[HEADER + k * BLOCK:HEADER + (k + 1) * BLOCK]
        if p[0] == DEPTHWISE:
            _depthwise(flat, p, x, y, n)
            x, y = y, x
            continue
        outputs = p[6] if p[0] == CONV else p[11]  # filters or units
        per_output = p[11] // outputs  # features per output: a conv's positions
        j = p[13]
        split = outputs
        if j >= 0 and limit != math.inf:  # the outputs the branch reads, computed before its exit
            split = program[branch_records + j * BRANCH + 1] // per_output
        if p[0] == CONV:
            _conv(flat, p, x, y, n, z[0], 0, split)
        else:
            _linear(flat, p[1], p[2], p[10], 0, split, x, y, n, p[12] != 0)
        if split < outputs:  # the branch on the first outputs; the rest for the rows that go on
            n = _leave(flat, program, j, y, split * per_output, z, n, rows, q, exit_index, limit, x, p[10])
            if n == 0:
                return
            if p[0] == CONV:
                _conv(flat, p, x, y, n, z[0], split, outputs)
            else:
                _linear(flat, p[1], p[2], p[10], split, outputs, x, y, n, p[12] != 0)
            x, y = y, x
            continue
        x, y = y, x
        if j < 0 or limit == math.inf:
            continue
        n = _leave(flat, program, j, x, p[11], z, n, rows, q, exit_index, limit, x, 0)
        if n == 0:
            return
    n_in = program[HEADER + (n_blocks - 1) * BLOCK + 11] if n_blocks > 0 else in_size  # the head reads the input itself
    for i in range(n):
        row = rows[i]
        for a in range(n_actions):
            q[row, a] = _dot(flat, head_w + a * n_in, x, i, n_in) + flat[head_b + a]
        exit_index[row] = n_branches


@numba.njit(cache=True, fastmath=True)
def q_epsilon_greedy(flat, program, obs, work, index, batch, explore, random_actions, level):  # pragma: no cover - compiled
    """:func:`q_pass`, then per row into ``index[2 * batch:]`` the random action where ``explore <
    level`` and else the first arg-max (as ``np.where(explore < level, random_actions, q.argmax(1))``)."""
    q_pass(flat, program, obs, work, index, batch)
    q = work[:batch * program[2]].reshape(batch, program[2])
    actions = index[2 * batch:3 * batch]
    for b in range(batch):
        if explore[b] < level:
            actions[b] = random_actions[b]
        else:
            best = 0
            for a in range(1, q.shape[1]):
                if q[b, a] > q[b, best]:
                    best = a
            actions[b] = best
