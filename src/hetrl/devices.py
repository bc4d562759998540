"""Torch device names: resolve ``auto`` and refuse devices that are not there."""

from __future__ import annotations

import torch

from hetrl.errors import HetrlError


def cuda_available() -> bool:
    return torch.cuda.is_available()


def mps_available() -> bool:
    return bool(getattr(torch.backends, "mps", None) and torch.backends.mps.is_available())


def resolve_device(name: str) -> torch.device:
    """``auto`` picks cuda, then mps, then cpu. A named device that is absent is a HetrlError."""
    if name == "auto":
        return torch.device("cuda" if cuda_available() else "mps" if mps_available() else "cpu")
    try:
        device = torch.device(name)
    except RuntimeError:
        raise HetrlError(f"{name!r} is not a torch device name; use auto, cpu, cuda, cuda:N or mps") from None
    if device.type == "cuda":
        if not cuda_available():
            raise HetrlError(
                f"device {name!r} is not available: torch sees no CUDA GPU here "
                f"(torch {torch.__version__}); use --device cpu, or install a CUDA build of torch on a GPU machine"
            )
        if device.index is not None and device.index >= torch.cuda.device_count():
            raise HetrlError(
                f"device {name!r} is not available: this machine has {torch.cuda.device_count()} CUDA device(s); "
                f"use cuda:0..cuda:{torch.cuda.device_count() - 1}"
            )
    elif device.type == "mps" and not mps_available():
        raise HetrlError(f"device {name!r} is not available (no Apple MPS backend here); use --device cpu")
    elif device.type not in ("cpu", "cuda", "mps"):
        if not hasattr(torch, device.type) or not getattr(torch, device.type).is_available():
            raise HetrlError(f"device {name!r} is not available on this machine; use --device cpu")
    return device


def available_devices() -> list[str]:
    """Every torch device type usable here: cpu, then cuda and mps where present."""
    return ["cpu"] + (["cuda"] if cuda_available() else []) + (["mps"] if mps_available() else [])
