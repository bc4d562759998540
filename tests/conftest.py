import pytest
import torch


@pytest.fixture
def require_cuda():
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device on this machine")
