"""Learn / cudagraph-compiled: Learn/cudagraph over ``torch.compile``'s version of the update.

A captured graph removes the host's launch cost, but each of its kernels still costs a few
microseconds on the GPU, and an eager DQN update is some 70 of them, most of them small
elementwise ones (docs/results.md, the H100 lease of 2026-11-27). Inductor fuses those into a few
generated Triton kernels, Adam's included (the optimizers run Adam's traced foreach form: see
:mod:`hetrl.primitives.learn_cudagraph`); the graph then replays the compiled update. The first
update pays the compilation (seconds), so the profiler and planner weigh it like any other backend.
"""

from __future__ import annotations

import importlib.util
from typing import Any

from hetrl.primitives.learn_cudagraph import LearnCudagraph
from hetrl.protocol import implements


@implements(Learn="learn")
class LearnCudagraphCompiled(LearnCudagraph):
    """Learn on a CUDA device by replaying the compiled update as CUDA graphs."""

    backend = "cudagraph-compiled"
    compiled = True

    @classmethod
    def unsupported(cls, algorithm: Any) -> str | None:
        reason = super().unsupported(algorithm)
        if reason:
            return reason.replace("cudagraph learner", "cudagraph-compiled learner")
        if importlib.util.find_spec("triton") is None:
            return ("the cudagraph-compiled learner needs Triton (torch.compile's GPU code generator), which is not "
                    "installed; use the cudagraph learner")
        return None
