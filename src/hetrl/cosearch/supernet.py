"""The search space of Q-networks and its supernet: every candidate operation of every layer, with
architecture logits (alphas) sampled by Gumbel-softmax.

- **Space** (:class:`SearchSpace`). A chain of layers, each with its candidate operations
  (:class:`hetrl.nets.searched.Op`): for images, convolution layers (3x3 and 5x5 convolutions and
  3x3 depthwise-separable ones, each at several widths, and a skip), then fully connected hidden
  layers (widths); for vectors, hidden layers of several widths and a skip (so depth is searched
  too); then the output layer. Every convolution keeps the map's size ("same" padding, stride 1),
  so any choice in any layer fits any choice around it. A layer's possible input widths follow
  from the layers before it (:attr:`SearchLayer.in_widths`): a candidate's cost depends on the one
  chosen before it.
- **Supernet** (:class:`SuperNet`). Each candidate has its own weights, sized for the widest input
  the layer can get; an input of ``c`` channels (features) uses the first ``c`` input slices, so
  inputs of every width share their leading weights, as FBNetV2's channel search does (Wan et al.
  2020, arXiv 2004.05565). One architecture is sampled per batch: per layer, a hard one-hot draw of
  ``F.gumbel_softmax(alpha, tau, hard=True)`` (Jang et al. 2017; FBNet, Wu et al. 2019, arXiv
  1812.03443, samples its per-layer block choice so). As in GDAS (Dong and Yang 2019, "Searching
  for a Robust Neural Architecture in Four GPU Hours": ``forward_gdas`` in D-X-Y/AutoDL-Projects),
  only the drawn candidate runs, and its output is multiplied by its straight-through weight (1 in
  value; its gradient reaches every logit of the layer through the softmax): a training pass costs
  one path, and the pass of a given one-hot choice is the derived network's, value for value.
- **Derived network**: :meth:`SuperNet.derive` is the argmax choice (or any choice) as a plain
  :class:`hetrl.nets.searched.SearchedQNetwork` holding the supernet's weights (the leading slices);
  its :class:`~hetrl.nets.searched.Architecture` is what ``network=PATH.json`` retrains.
- **Costs**: :meth:`SearchSpace.describe` lists every candidate of every layer at every input width
  it can get as hardware layers (:class:`hetrl.nets.layer_description.LayerDescription`, exact MACs), and
  :meth:`SearchSpace.input_width_probs` gives, differentiably, how likely each input width is under
  per-layer probabilities: together what an expected-cost function needs (``cosearch/cost.py``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property

import torch
import torch.nn.functional as F
from torch import nn

from hetrl.nets.layer_description import LayerDescription
from hetrl.nets.searched import SKIP, Architecture, Op, SearchedQNetwork

CONV_OPS = (("conv", 3), ("conv", 5), ("sepconv", 3))  # (kind, kernel) of the image layers' candidates
CONV_WIDTHS = (8, 16, 32)
DENSE_WIDTHS = (64, 128, 256)
TAU_START = 5.0  # FBNet's initial Gumbel-softmax temperature


@dataclass(frozen=True)
class SearchLayer:
    """One layer of a space: its candidates and every input width (channels, or features) that a
    choice of the layers before it can give it, ascending; the map it reads (1x1 for features)."""

    candidates: tuple[Op, ...]
    in_widths: tuple[int, ...]
    height: int = 1
    width: int = 1
    conv: bool = False

    @property
    def max_in(self) -> int:
        return self.in_widths[-1]

    def out_widths(self) -> set[int]:
        out = {op.width for op in self.candidates if op.kind != "skip"}
        return out | set(self.in_widths) if SKIP in self.candidates else out


@dataclass(frozen=True)
class SearchSpace:
    """Candidates per layer: ``conv_layers`` on the image, then ``dense_layers`` (hidden); the
    output layer is added. Made by :func:`search_space` with the defaults."""

    obs_shape: tuple[int, ...]
    n_actions: int
    conv_layers: tuple[tuple[Op, ...], ...] = ()
    dense_layers: tuple[tuple[Op, ...], ...] = ()
    scale: float = 1.0

    def __post_init__(self) -> None:
        if self.conv_layers and len(self.obs_shape) != 3:
            raise ValueError(f"convolution layers need image observations (C, H, W), not shape {self.obs_shape}")
        if any(not (op.is_conv or op.kind == "skip") for layer in self.conv_layers for op in layer):
            raise ValueError("convolution layers hold convolutions and skips only")
        if any(op.kind not in ("dense", "skip") for layer in self.dense_layers for op in layer):
            raise ValueError("hidden layers hold fully connected layers and skips only")
        for candidates in (*self.conv_layers, *self.dense_layers):
            if not candidates or len(set(candidates)) != len(candidates):
                raise ValueError(f"a layer needs distinct candidates, got {[op.name for op in candidates]}")
            if any(not op.relu for op in candidates):
                raise ValueError("hidden layers end in a ReLU")

    @cached_property
    def layers(self) -> tuple[SearchLayer, ...]:
        """Every layer with the input widths it can get, the output layer last."""
        out: list[SearchLayer] = []
        if len(self.obs_shape) == 3:
            channels, height, width = self.obs_shape
            widths = {channels}
            for candidates in self.conv_layers:
                out.append(SearchLayer(candidates, tuple(sorted(widths)), height, width, conv=True))
                widths = out[-1].out_widths()
            widths = {c * height * width for c in widths}
        else:
            widths = {self.obs_shape[0]}
        for candidates in (*self.dense_layers, (Op("dense", self.n_actions, relu=False),)):
            out.append(SearchLayer(candidates, tuple(sorted(widths))))
            widths = out[-1].out_widths()
        return tuple(out)

    def architecture(self, choice: Sequence[int]) -> Architecture:
        """The architecture of candidate ``choice[k]`` in layer ``k`` (the output layer's may be left out)."""
        n = len(self.conv_layers) + len(self.dense_layers)
        if len(choice) not in (n, n + 1) or any(not 0 <= c < len(layer.candidates) for c, layer in zip(choice, self.layers)):
            raise ValueError(f"a choice is one candidate index per layer ({[len(layer.candidates) for layer in self.layers]}), "
                             f"got {list(choice)}")
        ops = [layer.candidates[c] for c, layer in zip(choice, self.layers)]
        return Architecture(self.obs_shape, self.n_actions, tuple(ops[:len(self.conv_layers)]),
                            tuple(ops[len(self.conv_layers):n]), self.scale)

    def describe(self) -> list[list[dict[int, list[LayerDescription]]]]:
        """Per layer, per candidate, per input width the layer can get: the hardware layers that
        candidate runs (none for a skip)."""
        return [[{w: op.describe(w, layer.height, layer.width) for w in layer.in_widths} for op in layer.candidates]
                for layer in self.layers]

    def input_width_probs(self, probs: Sequence[torch.Tensor]) -> list[torch.Tensor]:
        """Per layer, the probability of each of its ``in_widths`` when each layer ``k`` chooses its
        candidates with probabilities ``probs[k]`` independently (differentiable in ``probs``)."""
        q = torch.ones(1, dtype=probs[0].dtype, device=probs[0].device)  # the first layer reads the observations
        out = [q]
        for k in range(len(self.layers) - 1):
            layer, nxt, p = self.layers[k], self.layers[k + 1], probs[k]
            factor = layer.height * layer.width if layer.conv and not nxt.conv else 1  # channels -> flattened features
            parts: dict[int, list[torch.Tensor]] = {}
            for i, op in enumerate(layer.candidates):
                if op.kind == "skip":
                    for j, w in enumerate(layer.in_widths):
                        parts.setdefault(w * factor, []).append(p[i] * q[j])
                else:
                    parts.setdefault(op.width * factor, []).append(p[i])
            q = torch.stack([torch.stack(parts[w]).sum() for w in nxt.in_widths])
            out.append(q)
        return out


def search_space(obs_shape: Sequence[int], n_actions: int, scale: float = 1.0, *, conv_layers: int = 2,
                 conv_ops: Sequence[tuple[str, int]] = CONV_OPS, conv_widths: Sequence[int] = CONV_WIDTHS,
                 dense_layers: int | None = None, dense_widths: Sequence[int] = DENSE_WIDTHS,
                 skip: bool = True, dense_skip: bool | None = None) -> SearchSpace:
    """The default space for an env's observations. Images: ``conv_layers`` layers of ``conv_ops``
    at each of ``conv_widths``, and a skip (``skip``), then ``dense_layers`` (default 1) hidden
    layers of ``dense_widths``. Vectors: ``dense_layers`` (default 3) hidden layers of
    ``dense_widths`` and a skip. ``dense_skip`` (default: for vectors only) adds a skip to the
    hidden layers."""
    obs_shape = tuple(int(d) for d in obs_shape)
    image = len(obs_shape) == 3
    convs = tuple(Op(kind, w, kernel) for kind, kernel in conv_ops for w in conv_widths) + ((SKIP,) if skip else ())
    dense_skip = (skip and not image) if dense_skip is None else dense_skip
    dense = tuple(Op("dense", w) for w in dense_widths) + ((SKIP,) if dense_skip else ())
    n_dense = (1 if image else 3) if dense_layers is None else dense_layers
    return SearchSpace(obs_shape, n_actions, (convs,) * (conv_layers if image else 0), (dense,) * n_dense, float(scale))


class Candidate(nn.Module):
    """One candidate operation of a layer, with weights for the layer's widest input; an input of
    ``c`` channels (features) uses the first ``c`` input slices of them."""

    def __init__(self, op: Op, max_in: int) -> None:
        super().__init__()
        self.op = op
        self.body = op.module(max_in)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        op, c = self.op, x.shape[1]
        if self.body is None:
            return x
        if op.kind == "conv":
            conv = self.body[0]
            y = F.conv2d(x, conv.weight[:, :c], conv.bias, padding=op.kernel // 2)
        elif op.kind == "sepconv":
            depthwise, pointwise = self.body[0], self.body[1]
            y = F.conv2d(x, depthwise.weight[:c], None, padding=op.kernel // 2, groups=c)
            y = F.conv2d(y, pointwise.weight[:, :c], pointwise.bias)
        else:
            linear = self.body[0]
            y = F.linear(x, linear.weight[:, :c], linear.bias)
        return F.relu(y) if op.relu else y

    def extract(self, in_width: int) -> nn.Module | None:
        """The standalone module (:meth:`Op.module`) for ``in_width`` inputs holding these weights:
        every parameter's leading slice of the standalone shape (input channels or features cut;
        a depthwise filter per input channel kept)."""
        module = self.op.module(in_width)
        if module is None:
            return None
        with torch.no_grad():
            for mine, theirs in zip(module.parameters(), self.body.parameters(), strict=True):
                mine.copy_(theirs[tuple(slice(0, n) for n in mine.shape)])
        return module


class SuperNet(nn.Module):
    """Every candidate of a :class:`SearchSpace` and its architecture logits ``alphas`` (one vector
    per layer, the output layer's a single fixed entry). ``forward(obs)`` samples one architecture
    in training mode and runs the argmax one in eval mode; ``forward(obs, gates)`` runs the one
    the per-layer one-hot ``gates`` choose."""

    def __init__(self, space: SearchSpace, tau: float = TAU_START) -> None:
        super().__init__()
        self.space = space
        self.tau = tau  # the Gumbel-softmax temperature (the search anneals it)
        self.candidates = nn.ModuleList(nn.ModuleList(Candidate(op, layer.max_in) for op in layer.candidates)
                                        for layer in space.layers)
        self.alphas = nn.ParameterList(nn.Parameter(torch.zeros(len(layer.candidates))) for layer in space.layers)
        self._n_convs = len(space.conv_layers)

    def weights(self) -> list[nn.Parameter]:
        """The operations' parameters (what the alphas are not)."""
        return list(self.candidates.parameters())

    def arch_parameters(self) -> list[nn.Parameter]:
        return list(self.alphas)

    def probs(self) -> list[torch.Tensor]:
        """Per layer, the probability of each candidate: softmax(alpha)."""
        return [alpha.softmax(0) for alpha in self.alphas]

    def sample(self) -> list[torch.Tensor]:
        """One architecture: per layer, a hard one-hot Gumbel-softmax draw at temperature ``tau``
        (straight-through: one-hot in value, the soft sample's gradient)."""
        return [F.gumbel_softmax(alpha, tau=self.tau, hard=True) for alpha in self.alphas]

    def choice(self) -> list[int]:
        """The most probable candidate of each layer."""
        return [int(alpha.argmax()) for alpha in self.alphas]

    def gates(self, choice: Sequence[int]) -> list[torch.Tensor]:
        """The one-hot gates of ``choice`` (no gradient)."""
        device = self.alphas[0].device
        return [F.one_hot(torch.tensor(c, device=device), len(alpha)).float() for c, alpha in zip(choice, self.alphas)]

    def forward(self, obs: torch.Tensor, gates: Sequence[torch.Tensor] | None = None) -> torch.Tensor:
        if gates is None:
            gates = self.sample() if self.training else self.gates(self.choice())
        x = obs.float()
        if self.space.scale != 1.0:
            x = x / self.space.scale
        for k, (candidates, gate) in enumerate(zip(self.candidates, gates, strict=True)):
            if k == self._n_convs:
                x = x.flatten(1)
            i = int(gate.argmax())
            x = candidates[i](x)
            if gate.requires_grad:  # a sample: the straight-through weight carries the gradient to the logits
                x = x * gate[i]
        return x

    def derive(self, choice: Sequence[int] | None = None) -> SearchedQNetwork:
        """The plain network of ``choice`` (default: the argmax), holding these weights."""
        choice = self.choice() if choice is None else list(choice)
        architecture = self.space.architecture(choice)
        net = SearchedQNetwork(architecture)
        for k, layer in enumerate(architecture.layers()):
            block = net.block(k)
            if block is not None:
                block.load_state_dict(self.candidates[k][choice[k]].extract(layer.in_width).state_dict())
        return net.to(self.alphas[0].device)

    def describe(self) -> list[list[dict[int, list[LayerDescription]]]]:
        """Every candidate of every layer at every input width, as hardware layers (:meth:`SearchSpace.describe`)."""
        return self.space.describe()
