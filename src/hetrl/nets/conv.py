"""Convolutional Q-networks for image observations (uint8, channels first).

- :class:`NatureCNN`: Mnih et al. 2015 ("Human-level control through deep reinforcement
  learning"): 32 8x8 filters stride 4, 64 4x4 stride 2, 64 3x3 stride 1, a 512-unit layer, ReLU
  after each; for 84x84 Atari frames (1,686,180 parameters with 4 frames in and 4 actions out).
  Its input is divided by 255 (pixels to [0, 1]).
- :class:`MinAtarNet`: Young and Tian 2019 ("MinAtar: An Atari-inspired testbed"): 16 3x3 filters
  stride 1, a 128-unit layer, ReLU. MinAtar's channels are 0/1 already, so its input is taken as is.
- ``forward_numpy`` computes the same on host arrays (convolutions as an im2col gather with indices
  made once and one product each): what Act/numpy runs, where torch's per-call cost dominates a
  batch of a few observations.
- The divisor is the env's, not the network's: DQN passes ``EnvSpec.pixel_scale`` (1 for MinAtar,
  255 for other uint8 images), so either network reads either env's pixels in [0, 1].
- ``dueling=True``: the layer after the convolutions is split into a value and an advantage stream,
  each with its own hidden layer of the same width, Q = V + A - mean(A) (Wang et al. 2016).

Inputs are converted to float on the network's device inside ``forward`` (``x.float() / scale``),
so uint8 observations travel to the device as bytes; float inputs holding the same values give the
same outputs.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from hetrl.nets.mlp import numpy_sequential



def conv_out(size: int, kernel: int, stride: int = 1, padding: int = 0) -> int:
    """A convolution's output size along one axis of ``size`` inputs (torch's Conv2d, no dilation)."""
    return (size + 2 * padding - kernel) // stride + 1

@dataclass(frozen=True)
class ConvShape:
    """One Conv2d (no dilation, one group) on a (channels, height, width) input, with ``padding``
    zeros on every side (torch's ``padding``)."""

    channels: int
    height: int
    width: int
    filters: int
    kernel: int
    stride: int
    padding: int = 0

    @property
    def out_height(self) -> int:
        return conv_out(self.height, self.kernel, self.stride, self.padding)

    @property
    def out_width(self) -> int:
        return conv_out(self.width, self.kernel, self.stride, self.padding)

    @property
    def positions(self) -> int:
        return self.out_height * self.out_width

    @property
    def patch(self) -> int:
        return self.channels * self.kernel * self.kernel

    @property
    def size(self) -> int:
        """Elements of one (channels, height, width) input."""
        return self.channels * self.height * self.width

    def patch_index(self) -> np.ndarray:
        """For each output position and each patch element (channel, row, column), the index of the
        input element in a flattened (channels, height, width) image: im2col as one gather. With
        ``padding``, an element on the padded border reads index :attr:`size`, one past the image:
        the caller appends a zero to each flattened input there."""
        c, i, j = np.meshgrid(np.arange(self.channels), np.arange(self.kernel), np.arange(self.kernel), indexing="ij")
        rows, cols = np.meshgrid(np.arange(self.out_height) * self.stride - self.padding,
                                 np.arange(self.out_width) * self.stride - self.padding, indexing="ij")
        r, q = rows.reshape(-1, 1) + i.reshape(1, -1), cols.reshape(-1, 1) + j.reshape(1, -1)
        index = c.reshape(1, -1) * self.height * self.width + r * self.width + q
        if self.padding:
            index = np.where((r < 0) | (r >= self.height) | (q < 0) | (q >= self.width), self.size, index)
        return index.reshape(-1).astype(np.int64)  # (positions * patch,)


class ConvQNetwork(nn.Module):
    """Convolutions (``convs``: (filters, kernel, stride) each, ReLU after), then a ``hidden``-unit
    layer and the Q-values (or value and advantage streams)."""

    def __init__(self, obs_shape: Sequence[int], n_actions: int, convs: Sequence[tuple[int, int, int]],
                 hidden: int, scale: float, dueling: bool = False) -> None:
        super().__init__()
        if len(obs_shape) != 3:
            raise ValueError(f"a conv network needs image observations (C, H, W), not shape {tuple(obs_shape)}")
        channels, height, width = (int(d) for d in obs_shape)
        layers: list[nn.Module] = []
        self.geometry: list[ConvShape] = []
        for filters, kernel, stride in convs:
            if height < kernel or width < kernel:
                raise ValueError(f"{type(self).__name__}: a {kernel}x{kernel} convolution does not fit a "
                                 f"{height}x{width} input (observation shape {tuple(obs_shape)})")
            layers += [nn.Conv2d(channels, filters, kernel, stride), nn.ReLU()]
            self.geometry.append(ConvShape(channels, height, width, filters, kernel, stride))
            channels, height, width = filters, conv_out(height, kernel, stride), conv_out(width, kernel, stride)
        self._patch_index = [shape.patch_index() for shape in self.geometry]
        layers.append(nn.Flatten())
        self.features = nn.Sequential(*layers)
        self.scale, self.dueling, self.obs_shape = float(scale), dueling, tuple(int(d) for d in obs_shape)
        self.memory_format = torch.contiguous_format  # Learn/torch-channels-last sets channels_last
        self.compute_dtype: torch.dtype | None = None  # Learn/torch-bf16 sets bfloat16: see forward
        flat = channels * height * width
        if dueling:
            self.value = nn.Sequential(nn.Linear(flat, hidden), nn.ReLU(), nn.Linear(hidden, 1))
            self.advantage = nn.Sequential(nn.Linear(flat, hidden), nn.ReLU(), nn.Linear(hidden, n_actions))
        else:
            self.head = nn.Sequential(nn.Linear(flat, hidden), nn.ReLU(), nn.Linear(hidden, n_actions))

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        x = obs
        if self.memory_format is not torch.contiguous_format:
            # reorder before the float copy: a uint8 batch moves a quarter of the bytes, and the float
            # copy and the scaling then keep the order (docs/benchmarks.md, 'Measurements behind the code')
            x = x.contiguous(memory_format=self.memory_format)
        if self.compute_dtype is not None:
            return self._forward_mixed(x, self.compute_dtype)
        if self.scale == 1.0:
            x = x.float()
        else:  # the same values as x.float() / scale, with one float tensor made instead of two
            x = x / self.scale if x.dtype == torch.float32 else x.float().div_(self.scale)
        h = self.features(x)
        if not self.dueling:
            return self.head(h)
        a = self.advantage(h)
        return self.value(h) + a - a.mean(dim=1, keepdim=True)

    def _forward_mixed(self, x: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        """Mixed precision (Learn/torch-bf16): the convolutions and the hidden layers in ``dtype``
        under autocast (the fp32 weights cast per pass, their gradients returned in fp32), the output
        layer and everything after it in fp32, so the Q-values, the TD targets and the loss keep fp32's
        resolution: a bfloat16 Q-value has 8 significant bits, coarser than many states' action gaps.
        The input goes to ``dtype`` straight from the env's integers (exact up to 256)."""
        with torch.autocast(x.device.type, dtype=dtype):
            h = x.to(dtype)
            if self.scale != 1.0:
                h = h / self.scale
            h = self.features(h)
            if not self.dueling:
                hidden = self.head[:-1](h)
            else:
                value_hidden, advantage_hidden = self.value[:-1](h), self.advantage[:-1](h)
        if not self.dueling:
            return self.head[-1](hidden.float())
        a = self.advantage[-1](advantage_hidden.float())
        return self.value[-1](value_hidden.float()) + a - a.mean(dim=1, keepdim=True)

    def forward_numpy(self, params: Mapping[str, np.ndarray], obs: np.ndarray) -> np.ndarray:
        """``forward`` on host arrays (``params`` keyed like the state dict)."""
        n = len(obs)
        x = obs.reshape(n, -1)
        for k, (shape, index) in enumerate(zip(self.geometry, self._patch_index)):
            patches = x.take(index, axis=1).reshape(n * shape.positions, shape.patch).astype(np.float32, copy=False)  # take: fancy indexing is several times slower
            if k == 0 and self.scale != 1.0:
                patches = patches / np.float32(self.scale)
            w, b = params[f"features.{2 * k}.weight"], params[f"features.{2 * k}.bias"]
            out = patches @ w.reshape(shape.filters, -1).T
            out += b
            np.maximum(out, 0, out=out)
            x = out.reshape(n, shape.positions, shape.filters).transpose(0, 2, 1).reshape(n, -1)  # torch's order
        if not self.dueling:
            return numpy_sequential(params, "head", len(self.head), x)
        a = numpy_sequential(params, "advantage", len(self.advantage), x)
        return numpy_sequential(params, "value", len(self.value), x) + a - a.mean(axis=1, keepdims=True)


class NatureCNN(ConvQNetwork):
    """The DQN network of Mnih et al. 2015 (inputs / 255 by default)."""

    def __init__(self, obs_shape: Sequence[int], n_actions: int, dueling: bool = False, scale: float = 255.0) -> None:
        super().__init__(obs_shape, n_actions, convs=((32, 8, 4), (64, 4, 2), (64, 3, 1)), hidden=512,
                         scale=scale, dueling=dueling)


class MinAtarNet(ConvQNetwork):
    """The MinAtar DQN network of Young and Tian 2019 (0/1 inputs as they are by default)."""

    def __init__(self, obs_shape: Sequence[int], n_actions: int, dueling: bool = False, scale: float = 1.0) -> None:
        super().__init__(obs_shape, n_actions, convs=((16, 3, 1),), hidden=128, scale=scale, dueling=dueling)


def parameter_count(module: nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())
