"""A Q-network (convolutions, then an MLP) in one flat vector, with its forward and backward passes
written out as matrix products: what Learn/blas runs for DQN.

Why: at the sizes of small pixel agents (MinAtar's 16 3x3 filters on 10x10 images, batch 32) a
torch update is mostly not arithmetic: the oneDNN convolution is tuned for large images, autograd
builds a graph each update and Adam walks per-tensor state. Here a convolution is an im2col gather
with indices computed once and one matrix product, the backward pass is written out (no input
gradient for the first layer, which nobody reads), every intermediate lives in a buffer made once
per batch size, and Adam is one compiled loop over the flat vector.

Layout: every activation is feature-major, (features, batch), images and feature maps included
((channels * positions, batch), torch's flattening order by rows), so no layer's output is ever
transposed for the next (see :class:`QPass`). Parameters are in the module's ``parameters()``
order, each tensor contiguous; the module's parameters become views of the vector, so a checkpoint
moves between this learner and the torch one.

Serves :class:`hetrl.nets.conv.ConvQNetwork` and :class:`hetrl.nets.QNetwork` without a dueling head
(``supports`` says why not otherwise).
"""

from __future__ import annotations

import numba
import numpy as np
import torch
from torch import nn

from hetrl.nets.conv import ConvQNetwork, ConvShape
from hetrl.nets.fused_mlp import aligned_zeros
from hetrl.nets.mlp import QNetwork
from hetrl.nets.narrow import NARROW


def supports(net: nn.Module) -> str | None:
    """Why ``net`` cannot be written out here, or None when it can."""
    if isinstance(net, ConvQNetwork):
        if net.dueling:
            return "no dueling head (set dueling=false)"
        for m in net.features:
            if isinstance(m, nn.Conv2d) and (m.padding != (0, 0) or m.dilation != (1, 1) or m.groups != 1
                                              or m.kernel_size[0] != m.kernel_size[1] or m.stride[0] != m.stride[1]):
                return f"{m} is not a square, unpadded, undilated convolution"
        return None
    if isinstance(net, QNetwork):
        return "no dueling head (set dueling=false)" if net.dueling else None
    return f"{type(net).__name__} is not one of hetrl's Q-networks (a user's module runs on the torch learner)"


class FlatQ:
    """The layout of a Q-network in a flat vector, and the passes over it for one batch size."""

    def __init__(self, net: ConvQNetwork | QNetwork) -> None:
        reason = supports(net)
        if reason:
            raise ValueError(f"FlatQ: {reason}")
        self.params = list(net.parameters())
        self.shapes = [tuple(p.shape) for p in self.params]
        sizes = [int(np.prod(s)) for s in self.shapes]
        self.offsets = np.cumsum([0] + sizes)
        self.size = int(self.offsets[-1])
        if isinstance(net, ConvQNetwork):
            self.scale = net.scale
            self.convs: list[ConvShape] = list(net.geometry)
            linears = [m for m in net.head if isinstance(m, nn.Linear)]
        else:
            self.scale, self.convs = 1.0, []
            linears = [m for m in net.trunk if isinstance(m, nn.Linear)]
        self.n_convs, self.n_linears = len(self.convs), len(linears)
        self.in_features = linears[0].in_features

    def views(self, flat: np.ndarray) -> list[np.ndarray]:
        """Per-tensor views of ``flat`` in the module's parameter order (the torch optimiser's)."""
        return [flat[a:b].reshape(s) for a, b, s in zip(self.offsets[:-1], self.offsets[1:], self.shapes)]

    def adopt(self, flat: np.ndarray, params: list[nn.Parameter] | None = None) -> None:
        """Copy a module's parameters (this layout's module by default) into ``flat``, then make them
        views of it (shared memory: acting, evaluation and state dicts see every update)."""
        for param, view in zip(params if params is not None else self.params, self.views(flat)):
            view[...] = param.detach().cpu().numpy()
            param.data = torch.from_numpy(view)

    def tensors(self, flat: np.ndarray) -> list[torch.Tensor]:
        """Torch views of ``flat``, one per parameter tensor (weights as (out, in) matrices)."""
        out = []
        for view in self.views(flat):
            t = torch.from_numpy(view)
            out.append(t.reshape(t.shape[0], -1) if t.dim() == 4 else t)
        return out


def _zeros(*shape: int) -> torch.Tensor:
    return torch.from_numpy(aligned_zeros(shape))


@numba.njit(cache=True, fastmath=True, error_model="numpy")
def relu_backward(grad, out):  # pragma: no cover - compiled
    """grad <- grad where the ReLU's output ``out`` is positive, else 0 (in place, any matching shape)."""
    g, o = grad.reshape(-1), out.reshape(-1)
    for i in range(len(g)):
        if o[i] <= 0.0:
            g[i] = 0.0


@numba.njit(cache=True, fastmath=True, error_model="numpy")
def images_by_feature(obs, scale, out):  # pragma: no cover - compiled
    """out[j, b] = obs[b, j] / scale: a batch of flattened images (uint8 or float), sample-major, as
    float32 (pixel, batch), one pass (torch's transposing copy takes several times as long)."""
    inv = np.float32(1.0 / scale)
    n, m = obs.shape
    for j in range(m):
        for b in range(n):
            out[j, b] = obs[b, j] * inv


# --- the thin layers of the MLP head, feature-major ---------------------------------------------
# A Q-network's first layer on a vector observation (a few inputs) and its Q layer (a few outputs)
# are thin products that BLAS runs far below its peak, and around every hidden product a bias copy
# and a ReLU pass add two passes of their own. These kernels do each thin layer, and the bias and
# ReLU of the product below it, in one pass over the batch (hetrl.nets.narrow does the same for the
# sample-major layers of DDPG's, TD3's and SAC's learners). The timings: docs/benchmarks.md,
# 'Measurements behind the code'.
@numba.njit(cache=True, fastmath=True, error_model="numpy")
def forward_few_inputs(x, w, b, out):  # pragma: no cover - compiled
    """out = ReLU(w @ x + b) for a layer with few inputs: x (inputs, batch), out (outputs, batch)."""
    zero = np.float32(0.0)
    for j in range(w.shape[0]):
        o = out[j]
        bj = b[j]
        for c in range(o.shape[0]):
            o[c] = bj
        for k in range(w.shape[1]):
            wk, xk = w[j, k], x[k]
            for c in range(o.shape[0]):
                o[c] += wk * xk[c]
        for c in range(o.shape[0]):
            o[c] = max(o[c], zero)


@numba.njit(cache=True, fastmath=True, error_model="numpy")
def bias_relu(h, b):  # pragma: no cover - compiled
    """h = ReLU(h + b) in place, b added to every column: the rest of a hidden layer after its product."""
    zero = np.float32(0.0)
    for k in range(h.shape[0]):
        hk, bk = h[k], b[k]
        for c in range(hk.shape[0]):
            hk[c] = max(hk[c] + bk, zero)


@numba.njit(cache=True, fastmath=True, error_model="numpy")
def finish_then_few_outputs(h, h_bias, finish, w, b, out):  # pragma: no cover - compiled
    """out = w @ h + b for a layer with few outputs (outputs, batch); first, if ``finish``,
    h = ReLU(h + h_bias) in place (the product of the layer below as BLAS left it), row by row while
    the row is in L1."""
    zero = np.float32(0.0)
    for j in range(w.shape[0]):
        oj, bj = out[j], b[j]
        for c in range(oj.shape[0]):
            oj[c] = bj
    for k in range(w.shape[1]):
        hk = h[k]
        if finish:
            hb = h_bias[k]
            for c in range(hk.shape[0]):
                hk[c] = max(hk[c] + hb, zero)
        for j in range(w.shape[0]):
            wjk, oj = w[j, k], out[j]
            for c in range(hk.shape[0]):
                oj[c] += wjk * hk[c]


@numba.njit(cache=True, fastmath=True, error_model="numpy")
def backward_few_outputs(g, h, w, gw, gb, g_in, g_in_sums, sums):  # pragma: no cover - compiled
    """Back through a layer with few outputs whose input ``h`` (inputs, batch) is a ReLU's output, given
    g (outputs, batch): gw = g @ h.T and gb = g summed over the batch; if ``g_in`` has rows,
    g_in = w.T @ g where h > 0, zero elsewhere, and if ``sums``, g_in summed over the batch into
    ``g_in_sums`` (the bias gradient of the layer that made h)."""
    zero = np.float32(0.0)
    n_out, n_in = w.shape
    for j in range(n_out):
        gj, acc = g[j], zero
        for c in range(gj.shape[0]):
            acc += gj[c]
        gb[j] = acc
    for k in range(n_in):
        hk = h[k]
        for j in range(n_out):
            gj, acc = g[j], zero
            for c in range(hk.shape[0]):
                acc += gj[c] * hk[c]
            gw[j, k] = acc
        if g_in.shape[0]:
            gi = g_in[k]
            for c in range(gi.shape[0]):
                gi[c] = zero
            for j in range(n_out):
                wjk, gj = w[j, k], g[j]
                for c in range(gi.shape[0]):
                    gi[c] += wjk * gj[c]
            acc = zero
            for c in range(gi.shape[0]):
                v = gi[c] if hk[c] > zero else zero
                gi[c] = v
                acc += v
            if sums:
                g_in_sums[k] = acc


@numba.njit(cache=True, fastmath=True, error_model="numpy")
def relu_backward_sums(g, out, sums):  # pragma: no cover - compiled
    """g = 0 where the ReLU's output ``out`` is not positive, in place, and each row of g summed over
    the batch into ``sums`` (the bias gradient of the layer that made ``out``)."""
    zero = np.float32(0.0)
    for k in range(g.shape[0]):
        gk, ok, acc = g[k], out[k], zero
        for c in range(gk.shape[0]):
            v = gk[c] if ok[c] > zero else zero
            gk[c] = v
            acc += v
        sums[k] = acc


@numba.njit(cache=True, fastmath=True, error_model="numpy")
def weight_grad_few_inputs(g, x, gw):  # pragma: no cover - compiled
    """gw = g @ x.T for a layer with few inputs: (outputs, batch) by (inputs, batch), as dot products."""
    zero = np.float32(0.0)
    for j in range(g.shape[0]):
        gj = g[j]
        for k in range(x.shape[0]):
            xk, acc = x[k], zero
            for c in range(gj.shape[0]):
                acc += gj[c] * xk[c]
            gw[j, k] = acc


class QPass:
    """The buffers of one forward (and backward) pass at one batch size, made once.

    Every activation is kept feature-major, (features, batch), convolutions included: an image or a
    feature map is (channels * positions, batch), i.e. torch's (c, h, w) flattening order by rows.
    So im2col is one gather of whole rows (``index_select`` along dim 0), a convolution is one
    product ``W @ patches`` with torch's (filters, channels * k * k) weights as they are, its output
    is already the next layer's input (the last one's is the MLP's), and col2im on the way back is
    one ``index_add_`` of rows: no transposing copy anywhere but the observations' own, once. The
    MLP's products are ``W @ H`` for the same reason, where ``H @ W^T`` (torch's own layout) takes
    MKL about twice as long at these shapes (docs/benchmarks.md, 'Measurements behind the code').
    """

    def __init__(self, layout: FlatQ, batch: int) -> None:
        self.layout, self.batch = layout, batch
        convs = layout.convs
        # im2col's rows in (patch element, position) order: patches[k * positions + p] is element k of position p's patch
        self.index = [torch.from_numpy(np.ascontiguousarray(c.patch_index().reshape(c.positions, c.patch).T).reshape(-1))
                      for c in convs]
        self.raw = _zeros(convs[0].size, batch) if convs else None  # the observations, (pixels, batch)
        self.patches = [_zeros(c.patch, c.positions * batch) for c in convs]
        self.maps = [_zeros(c.filters, c.positions * batch) for c in convs]  # each convolution's output, after its ReLU
        first = [self.maps[-1].view(layout.in_features, batch)] if convs else [_zeros(layout.in_features, batch)]
        self.hidden = first + [_zeros(int(layout.shapes[2 * layout.n_convs + 2 * i][0]), batch) for i in range(layout.n_linears)]
        # the loss's gradient w.r.t. hidden[i]; an MLP's input (hidden[0]) needs none
        self.grads = [_zeros(*h.shape) if i or convs else torch.empty(0) for i, h in enumerate(self.hidden[:-1])]
        self.q_grad_t = _zeros(*self.hidden[-1].shape)
        # on the way back through convolution k > 0: its patches' gradient, and its input's (col2im)
        self.patch_grads = [_zeros(c.patch, c.positions * batch) if k else torch.empty(0) for k, c in enumerate(convs)]
        self.map_grads = [_zeros(c.size, batch) if k else torch.empty(0) for k, c in enumerate(convs)]
        # the thin layers the compiled kernels above do instead of BLAS: the Q layer (few outputs), and the
        # first layer of an MLP on a vector observation (few inputs; not when it is also the Q layer)
        n = layout.n_linears
        self.few_outputs = int(layout.shapes[-1][0]) <= NARROW
        self.few_inputs = not convs and n > 1 and layout.in_features <= NARROW
        self._none = np.zeros(0, np.float32)
        self._empty = np.zeros((0, batch), np.float32)
        # numpy views of the buffers the kernels take, made once: ``.numpy()`` on every call costs about as
        # much as a small kernel
        self.hidden_np = [h.numpy() for h in self.hidden]
        self.grads_np = [g.numpy() for g in self.grads]
        self.q_grad_np = self.q_grad_t.numpy()
        self._numpy: dict[int, tuple[list[torch.Tensor], list[np.ndarray]]] = {}

    def _views(self, tensors: list[torch.Tensor]) -> list[np.ndarray]:
        """numpy views of ``tensors`` (a learner's weights or gradients: the same lists every update)."""
        kept = self._numpy.get(id(tensors))
        if kept is None or kept[0] is not tensors:
            kept = self._numpy[id(tensors)] = (tensors, [t.numpy() for t in tensors])
        return kept[1]

    def forward(self, weights: list[torch.Tensor], obs: torch.Tensor, same_obs: bool = False) -> torch.Tensor:
        """Q-values (actions, batch), feature-major, of ``obs`` (uint8 or float, (batch, *obs_shape))
        with ``weights`` (:meth:`FlatQ.tensors`); keeps what the backward pass reads. ``same_obs``:
        ``obs`` is what this pass's last forward took (double Q-learning's two networks on the next
        states), so its input layout (and the first convolution's patches, which no weight enters) is
        still in the buffers and is not made again."""
        layout, batch = self.layout, self.batch
        x = obs.reshape(batch, -1)
        if layout.convs:
            if not same_obs:
                images_by_feature(x.numpy(), np.float32(layout.scale), self.raw.numpy())
            x = self.raw
            for k in range(layout.n_convs):
                if k or not same_obs:
                    torch.index_select(x, 0, self.index[k], out=self.patches[k].view(-1, batch))
                out = self.maps[k]
                torch.addmm(weights[2 * k + 1].unsqueeze(1), weights[2 * k], self.patches[k], out=out)
                out.clamp_(min=0.0)
                x = out.view(-1, batch)
        elif not same_obs:
            self.hidden[0].copy_(x.t())
        base, n = 2 * layout.n_convs, layout.n_linears
        w = self._views(weights)
        pending = -1  # the bias of the layer whose product hidden[i] still is (its bias and ReLU not yet added)
        h = self.hidden_np
        for i in range(n):
            x, out = self.hidden[i], self.hidden[i + 1]
            at = base + 2 * i
            if i == n - 1 and self.few_outputs:
                finish_then_few_outputs(h[i], w[pending] if pending >= 0 else self._none, pending >= 0, w[at],
                                        w[at + 1], h[i + 1])
            elif i == 0 and self.few_inputs:
                forward_few_inputs(h[0], w[at], w[at + 1], h[1])
            else:
                if pending >= 0:
                    bias_relu(h[i], w[pending])
                if i == n - 1:
                    torch.addmm(weights[at + 1].unsqueeze(1), weights[at], x, out=out)
                else:
                    torch.mm(weights[at], x, out=out)
                    pending = at + 1
                    continue
            pending = -1
        return self.hidden[-1]

    def backward(self, weights: list[torch.Tensor], grads: list[torch.Tensor], q_grad: torch.Tensor) -> None:
        """Write the gradient of the loss with respect to every parameter into ``grads`` (views of
        the flat gradient), given its gradient ``q_grad`` (actions, batch) with respect to the
        Q-values of the last :meth:`forward`. The first layer's input gradient is not computed."""
        layout, batch = self.layout, self.batch
        base, n = 2 * layout.n_convs, layout.n_linears
        w, gw = self._views(weights), self._views(grads)
        g = q_grad
        g_np = self.q_grad_np if q_grad is self.q_grad_t else q_grad.numpy()
        h = self.hidden_np
        # a linear layer's bias gradient is its output gradient summed over the batch: the layer above
        # writes it while it masks that gradient (the Q layer's own is summed here)
        for i in reversed(range(n)):
            x, at = self.hidden[i], base + 2 * i
            below = i > 0 or bool(layout.convs)  # the gradient of x is wanted
            if i == n - 1 and self.few_outputs:
                backward_few_outputs(g_np, h[i], w[at], gw[at], gw[at + 1],
                                     self.grads_np[i] if below else self._empty, gw[at - 1] if i > 0 else self._none,
                                     i > 0)
                if not below:
                    return
                g, g_np = self.grads[i], self.grads_np[i]
                continue
            if i == 0 and self.few_inputs:
                weight_grad_few_inputs(g_np, h[0], gw[at])
            else:
                torch.mm(g, x.t(), out=grads[at])
            if i == n - 1:
                torch.sum(g, 1, out=grads[at + 1])
            if not below:
                return
            g_in = self.grads[i]
            torch.mm(weights[at].t(), g, out=g_in)
            if i > 0:
                relu_backward_sums(self.grads_np[i], h[i], gw[at - 1])  # through the ReLU that made x
            else:
                relu_backward(self.grads_np[i], h[i])  # into the convolutions
            g, g_np = g_in, self.grads_np[i]
        for k in reversed(range(layout.n_convs)):
            g = g.view(layout.convs[k].filters, -1)  # the gradient of the convolution's output before its ReLU
            torch.mm(g, self.patches[k].t(), out=grads[2 * k])
            torch.sum(g, 1, out=grads[2 * k + 1])
            if k == 0:
                return
            torch.mm(weights[2 * k].t(), g, out=self.patch_grads[k])
            g = self.map_grads[k].zero_()
            g.index_add_(0, self.index[k], self.patch_grads[k].view(-1, batch))  # col2im
            relu_backward(g.numpy(), self.maps[k - 1].numpy())
