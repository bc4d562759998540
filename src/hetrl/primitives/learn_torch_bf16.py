"""Learn / torch-bf16: Learn/torch-channels-last in mixed precision on a CPU that computes bfloat16
natively (AVX512-BF16 or AMX): the convolutions and hidden layers in bfloat16 under autocast, the
fp32 weights, Adam, the output layer, the TD targets and the loss as Learn/torch has them
(:meth:`hetrl.nets.conv.ConvQNetwork._forward_mixed`).

Why: a Nature CNN update on a 2-core CPU is bound by its arithmetic (docs/benchmarks.md, the Atari
rows), and such a CPU does a bfloat16 product at twice the fp32 rate. It is not Learn/torch's update
to float tolerance, as the channels-last one is: bfloat16 keeps 8 significant bits, so the updates
differ from the first, and two runs part ways as two seeds do; its learning beside fp32's is measured
in docs/results.md. The run's ``precision`` setting decides whether the plan may choose it (auto,
the default), must (bf16) or must not (fp32); acting stays in fp32 on the same weights, and
checkpoints are fp32 state dicts that resume on any learner.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import torch

from hetrl.primitives.learn_torch_channels_last import LearnTorchChannelsLast
from hetrl.protocol import implements

NATIVE_FLAGS = ("avx512_bf16", "amx_bf16")  # /proc/cpuinfo flags of a CPU with bfloat16 products
CPUINFO = Path("/proc/cpuinfo")


@functools.cache  # per file: the planner asks many times, the file does not change
def _native_flags(cpuinfo: Path) -> tuple[str, ...]:
    try:
        text = cpuinfo.read_text(errors="replace")
    except OSError:
        return ()
    flags = next((line.split(":", 1)[1].split() for line in text.splitlines() if line.startswith("flags")), [])
    return tuple(f for f in NATIVE_FLAGS if f in flags)


def cpu_bf16_flags(cpuinfo: Path | None = None) -> list[str]:
    """The native-bfloat16 flags this CPU reports (``cpuinfo``, default Linux's /proc/cpuinfo; none
    elsewhere). Without them oneDNN emulates bfloat16 in fp32 arithmetic, slower than fp32 itself."""
    return list(_native_flags(CPUINFO if cpuinfo is None else cpuinfo))


@implements(Learn="learn")
class LearnTorchBf16(LearnTorchChannelsLast):
    backend = "torch-bf16"
    device_types = ("cpu",)
    precision = "bf16"
    described = "the bf16 learner"

    @classmethod
    def unsupported(cls, algorithm: Any) -> str | None:
        reason = super().unsupported(algorithm)
        if reason:
            return reason
        if not cpu_bf16_flags():
            return (f"this CPU has no native bfloat16 products ({' or '.join(NATIVE_FLAGS)}), where bf16 runs slower than "
                    "fp32; use the torch or torch-channels-last learner (precision=fp32 or auto)")
        return None

    def __init__(self, algorithm: Any, device: str | torch.device, seed: int) -> None:
        super().__init__(algorithm, device, seed)
        for module in self.conv_networks():
            module.compute_dtype = torch.bfloat16
