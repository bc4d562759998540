"""The fixed placement rule (``--plan rule``), used where nothing is profiled: the learner on the
requested device, the replay beside the learner (numpy storage on a host learner, torch storage
on an accelerator so batches need no transfer), acting with the numpy policy on the host (small
policy networks are bound by per-call overhead, which numpy has least of; a conv network, which has
no numpy forward, acts with torch on the learner's device), and a host learner's thread count by
the size of its work (:func:`learner_threads`; docs/results.md, 'Learner threads (inline loop,
2 cores)', has the measurements behind the threshold).

Given the run's algorithm (``--plan rule``), a host learner and a host conv policy take the
compiled backends where they serve it (:func:`host_backends`): Learn/blas (hetrl's MLPs and the
MinAtar network; on the Nature CNN it gains nothing), Act/numba (small-image conv policies). A CUDA
learner takes Learn/cudagraph where it captures the update (:func:`graphed_learner`), with the
replay on the host (the graph takes the batch in one pinned copy) and small conv policies acting
with numba on the host. torch stays the fallback, and the backend-neutral baseline the profiler and
the tests build on (no algorithm given).
docs/results.md, 'The fixed rule's backends', has the measurements behind the choice."""

from __future__ import annotations

from typing import Any

import torch

from hetrl.hardware import usable_cores
from hetrl.primitives import get
from hetrl.protocol import Placement, Slot

# Learner work (parameters x batch) below which one intra-op thread is chosen: one thread loses
# nothing there and guards against OpenMP threads waiting on a busy core (docs/results.md, 'Learner
# threads (inline loop, 2 cores)', has the measurements).
SMALL_LEARNER_WORK = 10_000_000


def frame_replay_wanted(algorithm: Any) -> bool:
    """Atari's stacked frames: the frame replay stores each frame once, a plain one each 2C times
    (MinAtar's channels are not frames, and a plain uint8 replay of them is small)."""
    return algorithm.spec.atari is not None and not get("ReplayAdd", "frames-numpy").unsupported(algorithm)


def learner_threads(n_params: int, batch_size: int, cores: int) -> int:
    """Intra-op threads for a host learner: 1 for overhead-bound networks, else every core."""
    return 1 if n_params * batch_size < SMALL_LEARNER_WORK else cores


# Network kinds whose update Learn/blas runs no faster than Learn/torch on the host, where the rule
# keeps the standard implementation: the Nature CNN's update is a few large convolutions.
BLAS_GAINS_NOTHING = ("nature",)


def host_backends(algorithm: Any) -> tuple[str, str]:
    """The (Learn, conv Act) backends the rule gives ``algorithm`` on the host: Learn/blas (but for
    :data:`BLAS_GAINS_NOTHING`) and Act/numba where they serve it, torch otherwise (it serves every
    algorithm); Learn/torch-bf16 where the run asks for ``precision=bf16`` (the rule's choice is
    fp32 otherwise, auto included: only a measured profile can say bf16 is faster)."""
    if getattr(getattr(algorithm, "config", None), "precision", "auto") == "bf16":
        learn = "torch-bf16"
    else:
        gains = getattr(algorithm, "network_kind", None) not in BLAS_GAINS_NOTHING
        learn = "blas" if gains and not get("Learn", "blas").unsupported(algorithm) else "torch"
    act = "torch" if get("Act", "numba").unsupported(algorithm) else "numba"
    return learn, act


def default_placement(device: torch.device, learner_work: tuple[int, int], threads: int = 0,
                      mlp_policy: bool = True, frames: bool = False, algorithm: Any = None) -> Placement:
    """The fixed rule; ``learner_work`` is (parameters, batch size); ``threads`` 0 means by rule.
    ``mlp_policy`` False (a conv Q-network, which has no numpy forward): acting with torch, on the
    learner's device. ``frames``: observations are stacked uint8 frames, kept by the frame replay.
    ``algorithm`` (the run's): a host learner and a host conv policy take :func:`host_backends`'
    compiled backends; without it, torch's (the backend-neutral baseline)."""
    host = device.type == "cpu"
    if host and threads == 0:
        threads = learner_threads(*learner_work, cores=usable_cores())
    compiled = host_backends(algorithm) if algorithm is not None else ("torch", "torch")
    learn, conv_act = compiled if host else ("torch", "torch")
    act_device, replay_on_host = str(device), host
    if not host and algorithm is not None and graphed_learner(algorithm, device):
        # the graphed update takes the host replay's batch in one pinned copy (a device replay's
        # per-call work costs more than the copy), and small conv policies act on the host
        learn, replay_on_host = "cudagraph", True
        if compiled[1] == "numba":
            conv_act, act_device = "numba", "cpu"
    return Placement(
        env=Slot("gymnasium", "cpu"),
        act=Slot("numpy", "cpu") if mlp_policy else Slot(conv_act, act_device),
        replay=Slot(("frames-" if frames else "") + ("numpy" if replay_on_host else "torch"),
                    "cpu" if replay_on_host else str(device)),
        learn=Slot(learn, str(device), threads=threads if host else None),
    )


def graphed_learner(algorithm: Any, device: torch.device) -> bool:
    """Whether the rule gives a learner on ``device`` Learn/cudagraph: a CUDA device and an update
    it captures (:meth:`LearnCudagraph.unsupported`)."""
    learn = get("Learn", "cudagraph")
    return learn.runs_on(str(device)) and not learn.unsupported(algorithm)


def default_actors() -> int:
    """The fixed rule's actor count: one actor per core left beside the learner's (at least one),
    of the cores this process may use."""
    return max(1, usable_cores() - 1)
