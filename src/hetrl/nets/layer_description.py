"""One layer of a network as a hardware cost model sees it (:class:`LayerDescription`): what a
searched architecture lists (:meth:`hetrl.nets.searched.Architecture.describe`) and what the FPGA
model costs (:mod:`hetrl.cosearch.fpga`, which also reads them from a torch module).

Multiply-accumulates are exact: output positions x output channels x the patch a position reads
(input channels / groups x kernel x kernel), padded border positions included, biases and ReLUs
not counted (as :meth:`hetrl.nets.exits.ExitQNetwork.macs`). Parameters count a bias per output
channel only where the layer has biases.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from hetrl.errors import HetrlError, did_you_mean
from hetrl.nets.conv import conv_out

KINDS = ("conv", "dwconv", "linear")


@dataclass(frozen=True)
class LayerDescription:
    """A convolution (``kind`` "conv", or "dwconv" for a depthwise one: one group per input
    channel, ``out_channels == in_channels``) on an ``in_channels`` x ``height`` x ``width`` input
    (``height`` and ``width`` are the input's), or a fully connected layer ("linear":
    ``in_channels`` -> ``out_channels`` features, kernel 1 on a 1x1 map). ``bias``: whether it
    adds one per output channel; ``relu``: whether a ReLU follows (no cost model prices it)."""

    kind: str
    in_channels: int
    out_channels: int
    kernel: int = 1
    stride: int = 1
    padding: int = 0
    height: int = 1
    width: int = 1
    bias: bool = True
    relu: bool = True

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise HetrlError(f"layer kind {self.kind!r} is not modelled{did_you_mean(self.kind, KINDS)}; "
                             f"use one of {', '.join(KINDS)}")
        sizes = {"in_channels": self.in_channels, "out_channels": self.out_channels, "kernel": self.kernel,
                 "stride": self.stride, "height": self.height, "width": self.width}
        for name, value in sizes.items():
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise HetrlError(f"{self.kind} layer: {name} must be a positive whole number, got {value!r}")
        if isinstance(self.padding, bool) or not isinstance(self.padding, int) or self.padding < 0:
            raise HetrlError(f"{self.kind} layer: padding must be a whole number >= 0, got {self.padding!r}")
        if self.kind == "dwconv" and self.in_channels != self.out_channels:
            raise HetrlError(f"a depthwise layer keeps its channels: in_channels {self.in_channels} != "
                             f"out_channels {self.out_channels}")
        if self.kind == "linear" and (self.kernel, self.stride, self.padding, self.height, self.width) != (1, 1, 0, 1, 1):
            raise HetrlError("a linear layer has no kernel, stride, padding or spatial size (leave them at 1, 1, 0, 1, 1)")
        if self.out_height < 1 or self.out_width < 1:
            raise HetrlError(f"a {self.kernel}x{self.kernel} {self.kind} does not fit a {self.height}x{self.width} input")

    @classmethod
    def linear(cls, in_features: int, out_features: int, bias: bool = True, relu: bool = True) -> LayerDescription:
        return cls("linear", in_features, out_features, bias=bias, relu=relu)

    @property
    def groups(self) -> int:
        return self.in_channels if self.kind == "dwconv" else 1

    @property
    def reduction(self) -> int:
        """The input channels each output sums over (1 for a depthwise layer)."""
        return self.in_channels // self.groups

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
    def macs(self) -> int:
        """Multiply-accumulates for one sample."""
        return self.positions * self.out_channels * self.reduction * self.kernel * self.kernel

    @property
    def params(self) -> int:
        """Weights, and biases where the layer has them."""
        return self.out_channels * (self.reduction * self.kernel * self.kernel + int(self.bias))

    @property
    def inputs(self) -> int:
        return self.in_channels * self.height * self.width

    @property
    def outputs(self) -> int:
        return self.out_channels * self.positions

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "groups": self.groups, "out_height": self.out_height, "out_width": self.out_width,
                "macs": self.macs, "params": self.params}


__all__ = ["KINDS", "LayerDescription"]
