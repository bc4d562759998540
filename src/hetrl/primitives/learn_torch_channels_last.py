"""Learn / torch-channels-last: the algorithm's torch learner with its conv networks' weights, and
the images they read, in channels-last memory (NHWC), on any torch device.

oneDNN (and cuDNN's tensor cores) run convolutions on channels-last tensors without the layout
conversions NCHW needs around each one. Where that pays depends on the network and the device: for
the Nature CNN on 84x84 frames on this project's CPUs it does, for MinAtar's single 3x3
convolution on 10x10 images it does not (docs/benchmarks.md, 'Measurements behind the code'), so it
is a backend of its own that the profiler measures beside Learn/torch and the planner picks. The
update is Learn/torch's to float tolerance (the same operations, another memory order), and so is
the checkpoint (state dicts copy into either layout).
"""

from __future__ import annotations

from typing import Any

import torch

from hetrl.nets.conv import ConvQNetwork
from hetrl.primitives.learn_torch import LearnTorch
from hetrl.protocol import implements


@implements(Learn="learn")
class LearnTorchChannelsLast(LearnTorch):
    backend = "torch-channels-last"
    described = "the channels-last learner"  # how its refusals name it (a subclass names itself)

    @classmethod
    def unsupported(cls, algorithm: Any) -> str | None:
        if not getattr(algorithm.spec, "is_image", False) or getattr(algorithm, "network_kind", "mlp") not in ("nature", "minatar"):
            return (f"{cls.described} lays out hetrl's conv Q-networks (images, network nature or minatar); "
                    "use the torch learner")
        if getattr(algorithm, "early_exits", False):  # a branched network is no ConvQNetwork: nothing would be laid out
            return f"{cls.described} lays out DQN's conv Q-networks, not {algorithm.name}'s branched one; use the torch learner"
        return None

    def __init__(self, algorithm: Any, device: str | torch.device, seed: int) -> None:
        super().__init__(algorithm, device, seed)
        for module in self.conv_networks():
            module.to(memory_format=torch.channels_last)  # the parameters keep their identity: the optimiser's hold
            module.memory_format = torch.channels_last

    def conv_networks(self) -> list[ConvQNetwork]:
        """The learner's conv Q-networks (the online and target ones) that this backend lays out."""
        return [module for module in vars(self.learner).values() if isinstance(module, ConvQNetwork)]
