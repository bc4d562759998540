"""Q-networks of a searched architecture (``hetrl cosearch``): the operations a search chooses
among, an :class:`Architecture` (one operation per layer, kept as JSON) and the plain network it
describes, :class:`SearchedQNetwork`, which DQN builds for ``network=PATH.json``.

An architecture is a chain: convolution layers on the image (each a 3x3 or 5x5 convolution, a
depthwise-separable one, or a skip), then fully connected hidden layers (each a width or a skip),
then the output layer (one Q-value per action). Every convolution has stride 1 and "same" padding
(``kernel // 2``), so the map keeps the observation's height and width whatever is chosen; a skip
passes its input on (the layer is left out of the network). Inputs are divided by ``scale`` inside
``forward``, as hetrl's conv networks do (1 for MinAtar's 0/1 channels, 255 for camera frames).

:meth:`SearchedQNetwork.forward_numpy` computes the same on host arrays (what Act/numpy runs), one
:class:`NumpyOp` per layer (the co-search's numpy cost table times the same objects), with
:mod:`hetrl.nets.conv`'s im2col gather (``ConvShape.patch_index``, the padded border reading an
appended zero); a depthwise-separable layer runs as it is written, a per-channel product of the
depthwise kernel and a 1x1 product, not as the equivalent full convolution (which costs more MACs).

:meth:`Architecture.describe` lists the layers as a hardware model costs them
(:class:`hetrl.nets.layer_description.LayerDescription`, with exact multiply-accumulates).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from hetrl.files import read_json, write_json
from hetrl.nets.conv import ConvShape
from hetrl.nets.layer_description import LayerDescription
from hetrl.nets.mlp import numpy_sequential

ARCHITECTURE_FORMAT = "hetrl-architecture-v1"
KINDS = ("conv", "sepconv", "dense", "skip")


@dataclass(frozen=True)
class Op:
    """A candidate operation of one layer: ``kind`` (conv, sepconv, dense, skip), its output
    ``width`` (channels or features; a skip keeps its input's), its ``kernel`` (convolutions) and
    whether a ReLU follows (all but the output layer)."""

    kind: str
    width: int = 0
    kernel: int = 0
    relu: bool = True

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"unknown operation kind {self.kind!r}; one of {', '.join(KINDS)}")
        if self.kind in ("conv", "sepconv") and (self.kernel < 1 or self.kernel % 2 == 0):
            raise ValueError(f"a {self.kind} needs an odd kernel size ('same' padding), not {self.kernel}")
        if self.kind != "skip" and self.width < 1:
            raise ValueError(f"a {self.kind} needs a width >= 1, not {self.width}")

    @property
    def name(self) -> str:
        if self.kind == "skip":
            return "skip"
        if self.kind == "dense":
            return f"{'dense' if self.relu else 'linear'}-{self.width}"
        return f"{'conv' if self.kind == 'conv' else 'sep'}{self.kernel}x{self.kernel}-{self.width}"

    @property
    def is_conv(self) -> bool:
        return self.kind in ("conv", "sepconv")

    def out_width(self, in_width: int) -> int:
        return in_width if self.kind == "skip" else self.width

    def describe(self, in_width: int, height: int = 1, width: int = 1) -> list[LayerDescription]:
        """The layers this operation runs on an ``in_width`` x ``height`` x ``width`` input (none for a skip)."""
        same = {"kernel": self.kernel, "padding": self.kernel // 2, "height": height, "width": width}
        if self.kind == "conv":
            return [LayerDescription("conv", in_width, self.width, **same, relu=self.relu)]
        if self.kind == "sepconv":  # MobileNet's depthwise then pointwise; one ReLU after both
            return [LayerDescription("dwconv", in_width, in_width, **same, bias=False, relu=False),
                    LayerDescription("conv", in_width, self.width, height=height, width=width, relu=self.relu)]
        if self.kind == "dense":
            return [LayerDescription.linear(in_width, self.width, relu=self.relu)]
        return []

    def module(self, in_width: int) -> nn.Sequential | None:
        """A fresh standalone module of this operation for ``in_width`` inputs (None for a skip).
        Its parameters are in the order and shapes :meth:`describe` lists the layers."""
        layers: list[nn.Module]
        if self.kind == "conv":
            layers = [nn.Conv2d(in_width, self.width, self.kernel, padding=self.kernel // 2)]
        elif self.kind == "sepconv":
            layers = [nn.Conv2d(in_width, in_width, self.kernel, padding=self.kernel // 2, groups=in_width, bias=False),
                      nn.Conv2d(in_width, self.width, 1)]
        elif self.kind == "dense":
            layers = [nn.Linear(in_width, self.width)]
        else:
            return None
        return nn.Sequential(*layers, *([nn.ReLU()] if self.relu else []))

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "width": self.width, "kernel": self.kernel, **({} if self.relu else {"relu": False})}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Op:
        return cls(str(data["kind"]), int(data.get("width", 0)), int(data.get("kernel", 0)), bool(data.get("relu", True)))


SKIP = Op("skip")


@dataclass(frozen=True)
class Layer:
    """One layer of a chain in place: its operation and the input it reads."""

    op: Op
    in_width: int  # channels (convolutions) or features (fully connected)
    height: int = 1
    width: int = 1

    def describe(self) -> list[LayerDescription]:
        return self.op.describe(self.in_width, self.height, self.width)


@dataclass(frozen=True)
class Architecture:
    """One operation per layer: ``convs`` on the image (none for vector observations), then the
    hidden fully connected layers ``dense``; skips included, so that layer k of a search space is
    entry k here. The output layer (one Q-value per action) is implied."""

    obs_shape: tuple[int, ...]
    n_actions: int
    convs: tuple[Op, ...] = ()
    dense: tuple[Op, ...] = ()
    scale: float = 1.0

    def __post_init__(self) -> None:
        if len(self.obs_shape) not in (1, 3):
            raise ValueError(f"observations must be vectors or images (C, H, W), not shape {tuple(self.obs_shape)}")
        if self.convs and len(self.obs_shape) != 3:
            raise ValueError(f"convolution layers need image observations (C, H, W), not shape {tuple(self.obs_shape)}")
        if any(not op.is_conv and op.kind != "skip" for op in self.convs):
            raise ValueError("convs holds convolutions and skips only")
        if any(op.kind not in ("dense", "skip") for op in self.dense):
            raise ValueError("dense holds fully connected layers and skips only")

    @property
    def output(self) -> Op:
        return Op("dense", self.n_actions, relu=False)

    def layers(self) -> list[Layer]:
        """Every layer with its input, the output layer last."""
        out = []
        width, (height, map_width) = self.obs_shape[0], (self.obs_shape[1:] if len(self.obs_shape) == 3 else (1, 1))
        for op in self.convs:
            out.append(Layer(op, width, height, map_width))
            width = op.out_width(width)
        features = width * height * map_width
        for op in (*self.dense, self.output):
            out.append(Layer(op, features))
            features = op.out_width(features)
        return out

    def describe(self) -> list[LayerDescription]:
        return [d for layer in self.layers() for d in layer.describe()]

    @property
    def macs(self) -> int:
        """Multiply-accumulates per decision (one observation)."""
        return sum(d.macs for d in self.describe())

    @property
    def names(self) -> list[str]:
        return [op.name for op in (*self.convs, *self.dense)]

    def build(self) -> SearchedQNetwork:
        return SearchedQNetwork(self)

    def to_dict(self) -> dict[str, Any]:
        return {"format": ARCHITECTURE_FORMAT, "obs_shape": list(self.obs_shape), "n_actions": self.n_actions,
                "scale": self.scale, "convs": [op.to_dict() for op in self.convs],
                "dense": [op.to_dict() for op in self.dense], "names": self.names, "macs": self.macs,
                "layers": [d.to_dict() for d in self.describe()]}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Architecture:
        """The architecture of :meth:`to_dict`'s output (its derived entries, layers and MACs, are
        computed again, not read)."""
        if data.get("format") != ARCHITECTURE_FORMAT:
            raise ValueError(f"not a hetrl architecture (format {data.get('format')!r}, expected {ARCHITECTURE_FORMAT})")
        try:
            return cls(tuple(int(d) for d in data["obs_shape"]), int(data["n_actions"]),
                       tuple(Op.from_dict(op) for op in data.get("convs", ())),
                       tuple(Op.from_dict(op) for op in data.get("dense", ())), float(data.get("scale", 1.0)))
        except (KeyError, TypeError) as exc:
            raise ValueError(f"malformed architecture ({type(exc).__name__}: {exc})") from None

    def save(self, path: str | Path, **extra: Any) -> Path:
        """Write the architecture as JSON, with ``extra`` entries beside it (how it was found)."""
        return write_json(path, {**self.to_dict(), **extra})

    @classmethod
    def load(cls, path: str | Path) -> Architecture:
        """Raises HetrlError for a missing or unparsable file, ValueError for one that is not an architecture."""
        return cls.from_dict(read_json(path, "architecture file"))

    def for_env(self, obs_shape: Sequence[int], n_actions: int, scale: float) -> Architecture:
        """This architecture for an env's observations and actions, checked to fit them; ``scale``
        (the env's pixel divisor) replaces the saved one."""
        if tuple(obs_shape) != tuple(self.obs_shape) or n_actions != self.n_actions:
            raise ValueError(f"it was searched for observations {tuple(self.obs_shape)} and {self.n_actions} actions, "
                             f"the env has {tuple(obs_shape)} and {n_actions}")
        return replace(self, scale=float(scale))


class NumpyOp:
    """One operation's forward on host arrays, in place in a network: what
    :meth:`SearchedQNetwork.forward_numpy` runs per layer, and what the co-search's numpy cost table
    times per candidate (:func:`hetrl.cosearch.cost.measure_op_latency`). Its parameters are read
    from ``params[prefix + ".0.weight"]`` and so on (:meth:`Op.module`'s state dict under
    ``prefix``); activations are rows of ``in_width * height * width`` values in torch's (C, H, W)
    order, in and out."""

    def __init__(self, layer: Layer, prefix: str) -> None:
        op = layer.op
        if op.kind == "skip":
            raise ValueError("a skip has no forward (the layer is left out of the network)")
        self.op, self.prefix = op, prefix
        self.shape = (ConvShape(layer.in_width, layer.height, layer.width, op.width, op.kernel, 1, op.kernel // 2)
                      if op.is_conv else None)
        self.index = None if self.shape is None else self.shape.patch_index()

    def __call__(self, params: Mapping[str, np.ndarray], x: np.ndarray) -> np.ndarray:
        op, prefix, shape, n = self.op, self.prefix, self.shape, len(x)
        if shape is None:  # fully connected: Linear (and ReLU), as mlp() lays them out
            return numpy_sequential(params, prefix, 2 if op.relu else 1, x)
        # take, not fancy indexing: several times faster for one row (the acting case)
        patches = (np.concatenate((x, np.zeros((n, 1), np.float32)), axis=1).take(self.index, axis=1)
                   .reshape(n * shape.positions, shape.patch))
        if op.kind == "conv":
            out = patches @ params[f"{prefix}.0.weight"].reshape(shape.filters, -1).T
            out += params[f"{prefix}.0.bias"]
        else:  # depthwise (no bias): per channel, (positions, k*k) @ (k*k, 1); then pointwise 1x1
            c, kk = shape.channels, shape.kernel * shape.kernel
            depthwise = np.matmul(patches.reshape(-1, c, kk).transpose(1, 0, 2),
                                  params[f"{prefix}.0.weight"].reshape(c, kk, 1))[:, :, 0]  # (channels, positions)
            out = depthwise.T @ params[f"{prefix}.1.weight"].reshape(shape.filters, c).T
            out += params[f"{prefix}.1.bias"]
        if op.relu:
            np.maximum(out, 0, out=out)
        return out.reshape(n, shape.positions, shape.filters).transpose(0, 2, 1).reshape(n, -1)  # torch's order


class SearchedQNetwork(nn.Module):
    """The plain Q-network of an :class:`Architecture`: only the chosen operations, skips left out."""

    def __init__(self, architecture: Architecture) -> None:
        super().__init__()
        self.architecture = architecture
        self.scale = architecture.scale
        layers = architecture.layers()
        # keyed by the layer's index in the architecture, the output layer last (a skip has no entry):
        # layer k's weights have the same names whatever the other layers chose
        self.blocks = nn.ModuleDict({str(k): layer.op.module(layer.in_width) for k, layer in enumerate(layers)
                                     if layer.op.kind != "skip"})
        self._flatten_at = sum(1 for op in architecture.convs if op.kind != "skip")  # blocks before the flatten
        # forward_numpy's steps, one per block (layer k's parameters under blocks.k)
        self._numpy_steps = [NumpyOp(layer, f"blocks.{k}") for k, layer in enumerate(layers) if layer.op.kind != "skip"]

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        x = obs.float()
        if self.scale != 1.0:
            x = x / self.scale
        for i, block in enumerate(self.blocks.values()):
            if i == self._flatten_at:
                x = x.flatten(1)
            x = block(x)
        return x

    def forward_numpy(self, params: Mapping[str, np.ndarray], obs: np.ndarray) -> np.ndarray:
        """``forward`` on host arrays (``params`` keyed like the state dict); activations are kept
        as rows in torch's (C, H, W) order, so the flatten is a no-op."""
        n = len(obs)
        x = obs.reshape(n, -1).astype(np.float32, copy=False)
        if self.scale != 1.0:
            x = x / np.float32(self.scale)  # a new array: the caller's observations stay as they are
        for step in self._numpy_steps:
            x = step(params, x)
        return x

    def block(self, k: int) -> nn.Module | None:
        """The module of layer ``k`` (the output layer is the last); None for a skip."""
        return self.blocks[str(k)] if str(k) in self.blocks else None

    def describe(self) -> list[LayerDescription]:
        return self.architecture.describe()

    @property
    def macs(self) -> int:
        return self.architecture.macs
