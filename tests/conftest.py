import pytest
import torch


def torch_devices() -> list[str]:
    """Every torch device on this machine (cpu, plus cuda/mps where present)."""
    devices = ["cpu"]
    if torch.cuda.is_available():
        devices.append("cuda")
    if getattr(torch.backends, "mps", None) and torch.backends.mps.is_available():
        devices.append("mps")
    return devices


@pytest.fixture
def require_cuda():
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device on this machine")
