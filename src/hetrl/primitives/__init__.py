"""The library of primitive implementations: one module per registry key, named after it
(``act_numba.py`` holds Act/numba, class ``ActNumba``), and the one factory that builds them.

Importing this package imports no implementation (tabular worker processes import one module
without loading torch); :func:`load_library` imports them all, and every lookup calls it first.
"""

from __future__ import annotations

import importlib
from typing import Any

from hetrl.errors import HetrlError, did_you_mean
from hetrl.protocol import Implementation, Placement, Primitive, Slot, registered

LIBRARY = (  # every module that registers an implementation
    "env_step_gymnasium", "env_step_ale_vector", "env_step_envpool",
    "act_numpy", "act_torch", "act_numba",
    "replay_numpy", "replay_torch", "replay_frames_numpy", "replay_frames_torch",
    "learn_torch", "learn_torch_channels_last", "learn_torch_bf16", "learn_numba", "learn_blas", "learn_cudagraph", "learn_cudagraph_compiled", "learn_triton",
    "tabular_learn_numba_threads", "tabular_learn_numba_processes", "tabular_learn_torch", "tabular_learn_ray",
)

_loaded = False


def load_library() -> None:
    global _loaded
    if not _loaded:
        for name in LIBRARY:
            importlib.import_module(f"hetrl.primitives.{name}")
        _loaded = True


def implementations(primitive: str) -> dict[str, Implementation]:
    """Every registered implementation of ``primitive``, by backend."""
    load_library()
    return registered(primitive)


def get(primitive: str, backend: str) -> Implementation:
    impls = implementations(primitive)
    if backend not in impls:
        raise HetrlError(f"no {backend!r} implementation of {primitive}{did_you_mean(backend, impls)}; "
                         f"available: {', '.join(sorted(impls))}")
    return impls[backend]


def check_slot(primitive: str, slot: Slot, algorithm: Any = None) -> Implementation:
    """The implementation ``slot`` names for ``primitive``, after checking that it is registered,
    that its device is here and that it runs there, and that it serves ``algorithm``."""
    from hetrl.devices import resolve_device

    impl = get(primitive, slot.backend)
    resolve_device(slot.device)
    if not impl.runs_on(slot.device):
        if impl.device_types == ("cpu",):
            raise HetrlError(f"{primitive}/{slot.backend} runs on the host only, not on {slot.device}; use device cpu")
        kinds = " or ".join(impl.device_types or ())
        raise HetrlError(f"{primitive}/{slot.backend} runs on {kinds} devices only, not on {slot.device}; "
                         f"use a {kinds} device, or another backend there (e.g. torch)")
    reason = impl.unsupported(algorithm) if algorithm is not None else None
    if reason:
        raise HetrlError(reason)
    return impl


def check_placement(placement: Placement, algorithm: Any = None) -> None:
    """Every slot of ``placement`` checked as :func:`check_slot` does."""
    for primitive in ("EnvStep", "Act", "ReplayAdd", "Learn"):
        check_slot(primitive, placement.slot_of(primitive), algorithm)  # type: ignore[arg-type]


def build(primitive: str, slot: Slot, algorithm: Any, seed: int, **context: Any) -> Any:
    """The one way to make an implementation: the class ``slot`` names for ``primitive``, checked,
    built for ``algorithm`` by its ``build`` classmethod. ``context`` carries what only some
    families need: ``num_envs`` (EnvStep), ``source`` (Act: the network WeightSync copies from)."""
    impl = check_slot(primitive, slot, algorithm)
    instance: Primitive = impl.cls.build(slot, algorithm, seed, **context)
    instance.slot = slot
    return instance


__all__ = ["LIBRARY", "build", "check_placement", "check_slot", "get", "implementations", "load_library"]
