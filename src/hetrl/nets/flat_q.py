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

    def forward(self, weights: list[torch.Tensor], obs: torch.Tensor) -> torch.Tensor:
        """Q-values (actions, batch), feature-major, of ``obs`` (uint8 or float, (batch, *obs_shape))
        with ``weights`` (:meth:`FlatQ.tensors`); keeps what the backward pass reads."""
        layout, batch = self.layout, self.batch
        x = obs.reshape(batch, -1)
        if layout.convs:
            images_by_feature(x.numpy(), np.float32(layout.scale), self.raw.numpy())
            x = self.raw
            for k in range(layout.n_convs):
                torch.index_select(x, 0, self.index[k], out=self.patches[k].view(-1, batch))
                out = self.maps[k]
                torch.addmm(weights[2 * k + 1].unsqueeze(1), weights[2 * k], self.patches[k], out=out)
                out.clamp_(min=0.0)
                x = out.view(-1, batch)
        else:
            self.hidden[0].copy_(x.t())
        base = 2 * layout.n_convs
        for i in range(layout.n_linears):
            out = self.hidden[i + 1]
            torch.addmm(weights[base + 2 * i + 1].unsqueeze(1), weights[base + 2 * i], self.hidden[i], out=out)
            if i + 1 < layout.n_linears:
                out.clamp_(min=0.0)
        return self.hidden[-1]

    def backward(self, weights: list[torch.Tensor], grads: list[torch.Tensor], q_grad: torch.Tensor) -> None:
        """Write the gradient of the loss with respect to every parameter into ``grads`` (views of
        the flat gradient), given its gradient ``q_grad`` (actions, batch) with respect to the
        Q-values of the last :meth:`forward`. The first layer's input gradient is not computed."""
        layout, batch = self.layout, self.batch
        base = 2 * layout.n_convs
        g = q_grad
        for i in reversed(range(layout.n_linears)):
            x = self.hidden[i]
            torch.mm(g, x.t(), out=grads[base + 2 * i])
            torch.sum(g, 1, out=grads[base + 2 * i + 1])
            if i == 0 and not layout.convs:
                return
            g_in = self.grads[i]
            torch.mm(weights[base + 2 * i].t(), g, out=g_in)
            relu_backward(g_in.numpy(), x.numpy())  # through the ReLU that made x
            g = g_in
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
