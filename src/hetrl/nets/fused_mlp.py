"""A ReLU MLP held in one flat float32 vector, with numba kernels for its forward and backward pass.

Small networks (CartPole's 4-64-64-2) are bound by per-operation overhead in torch: a DQN update is
some forty dispatched kernels of a few microseconds of arithmetic each. Here a whole pass is one
compiled loop nest over the batch, and the parameters, their gradients and the optimiser's moments
are flat vectors with one layout, so clipping and Adam are single loops too.

Layer ``l`` maps ``dims[l]`` inputs to ``dims[l + 1]`` outputs; its weight is stored row-major as
torch's ``nn.Linear.weight`` (out x in) at ``w_off[l]``, its bias at ``b_off[l]``. ReLU follows every
layer but the last. :class:`FlatMLP` builds the layout from an ``mlp(...)`` Sequential and makes
the module's parameters views of the flat vector, so torch code (acting, evaluation, state dicts)
sees the same numbers the kernels write.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numba
import numpy as np
import torch
from torch import nn

BETAS, EPS = (0.9, 0.999), 1e-8  # torch.optim.Adam's defaults, as hetrl.algos.base.adam uses them
CACHE_LINE = 64  # bytes; MKL's products are slower on operands that start 16 bytes off one (docs/benchmarks.md, 'Measurements behind the code')


def aligned_zeros(shape: int | tuple[int, ...], dtype: type = np.float32) -> np.ndarray:
    """Zeros whose first element starts on a cache line (np.zeros only promises 16 bytes)."""
    size, item = int(np.prod(shape)), np.dtype(dtype).itemsize
    raw = np.zeros(size + CACHE_LINE // item, dtype)
    start = (-raw.ctypes.data % CACHE_LINE) // item
    return raw[start:start + size].reshape(shape)


class FlatMLP:
    """The layout of a Sequential of Linear (+ ReLU) layers in a flat vector, and its views."""

    def __init__(self, net: nn.Sequential) -> None:
        linears = [m for m in net if isinstance(m, nn.Linear)]
        others = [m for m in net if not isinstance(m, (nn.Linear, nn.ReLU))]
        if others or not linears or len(net) != 2 * len(linears) - 1:
            raise ValueError(f"FlatMLP needs Linear layers with a ReLU between each, got {net}")
        self.dims = np.array([linears[0].in_features] + [m.out_features for m in linears], dtype=np.int64)
        sizes = [(m.out_features * m.in_features, m.out_features) for m in linears]
        offsets = np.cumsum([0] + [w + b for w, b in sizes])
        self.w_off = offsets[:-1].astype(np.int64)
        self.b_off = np.array([o + w for o, (w, _) in zip(offsets[:-1], sizes)], dtype=np.int64)
        self.size = int(offsets[-1])
        self.linears = linears

    def views(self, flat: np.ndarray) -> list[np.ndarray]:
        """Per-tensor views of ``flat`` in parameter order (weight, bias, weight, bias, ...)."""
        out = []
        for layer, (w, b) in enumerate(zip(self.w_off, self.b_off)):
            n_in, n_out = self.dims[layer], self.dims[layer + 1]
            out += [flat[w:w + n_out * n_in].reshape(n_out, n_in), flat[b:b + n_out]]
        return out

    def adopt(self, flat: np.ndarray | torch.Tensor) -> None:
        """Copy the module's parameters into ``flat`` (a numpy vector, or a torch one on any device),
        then make them views of it (shared memory)."""
        self.adopt_views(self.views(flat))

    def adopt_views(self, views: list[np.ndarray] | list[torch.Tensor]) -> None:
        """As :meth:`adopt`, into per-tensor views laid out elsewhere (weight, bias, weight, ...)."""
        params = [p for m in self.linears for p in (m.weight, m.bias)]
        for param, view in zip(params, views, strict=True):
            if isinstance(view, torch.Tensor):
                view.copy_(param.detach())
                param.data = view
            else:
                view[...] = param.detach().cpu().numpy()
                param.data = torch.from_numpy(view)

    @property
    def max_width(self) -> int:
        return int(self.dims.max())

    def activation_offsets(self, batch: int) -> np.ndarray:
        """Where each layer's (batch x dims[l]) activations start in one flat scratch vector."""
        return np.concatenate([[0], np.cumsum(batch * self.dims)]).astype(np.int64)


@numba.njit(cache=True, fastmath=True)
def _layer(flat, w_off, b_off, n_in, n_out):  # pragma: no cover - compiled
    """The (out x in) weight and (out,) bias of a layer, as views of a flat vector."""
    return flat[w_off:w_off + n_out * n_in].reshape(n_out, n_in), flat[b_off:b_off + n_out]


@numba.njit(cache=True, fastmath=True)
def _rows(flat, start, batch, width):  # pragma: no cover - compiled
    """A (batch x width) view of a flat scratch vector from ``start``."""
    return flat[start:start + batch * width].reshape(batch, width)


@numba.njit(cache=True, fastmath=True)
def forward(params, dims, w_off, b_off, x, acts, a_off, batch):  # pragma: no cover - compiled
    """Every layer's activations into ``acts`` (layer l at a_off[l]); ``x`` (flat) is copied in as layer 0.

    Returns the offset of the output layer's (batch x dims[-1]) values in ``acts``. 2-D views keep
    the inner loop a contiguous dot product that LLVM vectorises (flat index arithmetic does not).
    """
    n_layers = len(dims) - 1
    acts[a_off[0]:a_off[0] + batch * dims[0]] = x
    for layer in range(n_layers):
        n_in, n_out = dims[layer], dims[layer + 1]
        w, bias = _layer(params, w_off[layer], b_off[layer], n_in, n_out)
        src, dst = _rows(acts, a_off[layer], batch, n_in), _rows(acts, a_off[layer + 1], batch, n_out)
        relu = layer < n_layers - 1
        for b in range(batch):
            for j in range(n_out):
                acc = bias[j]
                for k in range(n_in):
                    acc += src[b, k] * w[j, k]
                dst[b, j] = max(acc, np.float32(0.0)) if relu else acc
    return a_off[n_layers]


@numba.njit(cache=True, fastmath=True)
def epsilon_greedy(params, dims, w_off, b_off, x, acts, a_off, batch, explore, random_actions, level, actions):  # pragma: no cover - compiled
    """Q-values of ``batch`` observations, then per row the random action where ``explore < level``
    and else the first arg-max (as ``np.where(explore < level, random_actions, q.argmax(1))``),
    into ``actions``: one call for a whole Act."""
    out = forward(params, dims, w_off, b_off, x, acts, a_off, batch)
    k = dims[len(dims) - 1]
    for b in range(batch):
        if explore[b] < level:
            actions[b] = random_actions[b]
        else:
            row = out + b * k
            best = 0
            for a in range(1, k):
                if acts[row + a] > acts[row + best]:
                    best = a
            actions[b] = best


@numba.njit(cache=True, fastmath=True)
def backward(params, grads, dims, w_off, b_off, acts, a_off, g_out, g_a, g_b, batch):  # pragma: no cover - compiled
    """Accumulate parameter gradients into ``grads`` given dLoss/dOutput ``g_out`` (flat, batch x dims[-1]).

    ``acts`` are the forward pass's activations; ``g_a`` and ``g_b`` are scratch vectors of at least
    batch x max(dims) each (the gradient flowing back ping-pongs between them). Zero entries of the
    gradient are skipped, so DQN's one-hot output gradient costs one row per sample.
    """
    n_layers = len(dims) - 1
    g = _rows(g_out, 0, batch, dims[n_layers])
    for layer in range(n_layers - 1, -1, -1):
        n_in, n_out = dims[layer], dims[layer + 1]
        x = _rows(acts, a_off[layer], batch, n_in)
        w, _ = _layer(params, w_off[layer], b_off[layer], n_in, n_out)
        gw, gb = _layer(grads, w_off[layer], b_off[layer], n_in, n_out)
        for b in range(batch):
            for j in range(n_out):
                gj = g[b, j]
                if gj != 0.0:
                    gb[j] += gj
                    for k in range(n_in):
                        gw[j, k] += gj * x[b, k]
        if layer == 0:
            break
        nxt = _rows(g_a if layer % 2 == 1 else g_b, 0, batch, n_in)
        for b in range(batch):
            for k in range(n_in):
                nxt[b, k] = 0.0
            for j in range(n_out):
                gj = g[b, j]
                if gj != 0.0:
                    for k in range(n_in):
                        nxt[b, k] += gj * w[j, k]
            for k in range(n_in):  # through the ReLU: x is its output, so x > 0 where it passed
                if x[b, k] <= 0.0:
                    nxt[b, k] = 0.0
        g = nxt


@numba.njit(cache=True, fastmath=True, error_model="numpy")  # numpy's: no zero-division branch, so the loop vectorises (5x)
def clip_and_adam(params, grads, m, v, step, lr, beta1, beta2, eps, max_norm, target, tau):  # pragma: no cover - compiled
    """Clip the gradient to ``max_norm`` (<= 0: no clipping) as torch's clip_grad_norm_, then one Adam
    step (torch.optim.Adam, no weight decay) at step number ``step`` (1 for the first); and, if
    ``tau`` > 0, move ``target`` towards the new parameters by Polyak averaging (torch's lerp_) in the
    same pass, which saves a pass over three vectors."""
    scale = 1.0
    if max_norm > 0:
        sq = 0.0
        for i in range(len(grads)):
            sq += np.float64(grads[i]) * grads[i]
        scale = min(1.0, max_norm / (np.sqrt(sq) + 1e-6))
    bc1 = 1.0 - beta1 ** step
    bc2_sqrt = np.sqrt(1.0 - beta2 ** step)
    step_size = np.float32(lr / bc1)
    inv_bc2 = np.float32(1.0 / bc2_sqrt)
    b1, b2 = np.float32(beta1), np.float32(beta2)
    one_b1, one_b2 = np.float32(1.0 - beta1), np.float32(1.0 - beta2)
    eps32, scale32, tau32, keep32 = np.float32(eps), np.float32(scale), np.float32(tau), np.float32(1.0 - tau)
    # one loop per case: a branch inside the loop would stop it vectorising, and the scalar loop is much
    # slower (docs/benchmarks.md, 'Measurements behind the code')
    if tau <= 0.0:
        for i in range(len(params)):
            _adam_element(params, grads, m, v, i, scale32, b1, b2, one_b1, one_b2, step_size, inv_bc2, eps32)
    elif tau < 0.5:  # lerp's two formulas, as torch's lerp_ picks them (exactly the parameters at tau = 1)
        for i in range(len(params)):
            p = _adam_element(params, grads, m, v, i, scale32, b1, b2, one_b1, one_b2, step_size, inv_bc2, eps32)
            target[i] += tau32 * (p - target[i])
    else:
        for i in range(len(params)):
            p = _adam_element(params, grads, m, v, i, scale32, b1, b2, one_b1, one_b2, step_size, inv_bc2, eps32)
            target[i] = p - (p - target[i]) * keep32


@numba.njit(cache=True, fastmath=True, error_model="numpy", inline="always")
def _adam_element(params, grads, m, v, i, scale, b1, b2, one_b1, one_b2, step_size, inv_bc2, eps):  # pragma: no cover - compiled
    """Adam's update of element ``i``; returns the new parameter."""
    g = grads[i] * scale
    m[i] = b1 * m[i] + one_b1 * g
    v[i] = b2 * v[i] + one_b2 * g * g
    params[i] -= step_size * m[i] / (np.sqrt(v[i]) * inv_bc2 + eps)
    return params[i]


class FlatAdam:
    """Adam's moments for a flat parameter vector, checkpointed in ``torch.optim.Adam``'s layout.

    ``views`` splits a flat vector into the per-tensor views of the torch parameters, in the order
    the torch optimiser lists them, so a checkpoint moves between a flat learner and a torch one.
    """

    def __init__(self, size: int, views: Callable[[np.ndarray], list[np.ndarray]], lr: float) -> None:
        self.m, self.v = np.zeros(size, np.float32), np.zeros(size, np.float32)
        self.views, self.lr, self.steps = views, lr, 0  # steps: Adam's step count

    def step(self, params: np.ndarray, grads: np.ndarray, max_norm: float | None,
             target: np.ndarray | None = None, tau: float = 0.0) -> None:
        """One step over ``params`` with ``grads`` (clipped first where ``max_norm`` is set); then
        ``target`` moves towards ``params`` by ``tau`` (Polyak averaging), if given."""
        self.steps += 1
        clip_and_adam(params, grads, self.m, self.v, self.steps, self.lr, BETAS[0], BETAS[1], EPS,
                      max_norm if max_norm is not None else 0.0, params if target is None else target,
                      0.0 if target is None else tau)

    def state_dict(self) -> dict[str, Any]:
        pairs = list(zip(self.views(self.m), self.views(self.v)))
        state = {} if self.steps == 0 else {
            i: {"step": torch.tensor(float(self.steps)), "exp_avg": _saved(m), "exp_avg_sq": _saved(v)}
            for i, (m, v) in enumerate(pairs)
        }
        group = {"lr": self.lr, "betas": BETAS, "eps": EPS, "weight_decay": 0, "amsgrad": False,
                 "maximize": False, "foreach": None, "capturable": False, "differentiable": False,
                 "fused": True, "decoupled_weight_decay": False, "params": list(range(len(pairs)))}
        return {"state": state, "param_groups": [group]}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        moments = state["state"]
        self.m[:], self.v[:], self.steps = 0.0, 0.0, 0
        for i, (m, v) in enumerate(zip(self.views(self.m), self.views(self.v))):
            if i in moments:
                _load_into(m, moments[i]["exp_avg"])
                _load_into(v, moments[i]["exp_avg_sq"])
                self.steps = int(moments[i]["step"])


def _saved(x: np.ndarray | torch.Tensor) -> torch.Tensor:
    """A CPU tensor copy of a moment's view (numpy, or a torch tensor on any device)."""
    return x.detach().cpu().clone() if isinstance(x, torch.Tensor) else torch.tensor(x)


def _load_into(view: np.ndarray | torch.Tensor, saved: torch.Tensor) -> None:
    if isinstance(view, torch.Tensor):
        view.copy_(saved)
    else:
        view[...] = saved.numpy()
