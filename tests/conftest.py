import pytest
import torch


@pytest.fixture
def require_cuda():
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device on this machine")


@pytest.fixture(scope="session", autouse=True)
def private_profile_cache(tmp_path_factory):
    """Profiles measured by tests (auto plans) go to a cache of this session, not the user's."""
    import os

    previous = os.environ.get("XDG_CACHE_HOME")
    os.environ["XDG_CACHE_HOME"] = str(tmp_path_factory.mktemp("cache"))
    yield
    if previous is None:
        os.environ.pop("XDG_CACHE_HOME", None)
    else:
        os.environ["XDG_CACHE_HOME"] = previous


@pytest.fixture(scope="session", autouse=True)
def private_checkpoint_key(tmp_path_factory):
    """The checkpoint key that signs env states (hetrl.run.safe_state) is this session's, not the user's."""
    import os

    previous = os.environ.get("XDG_CONFIG_HOME")
    os.environ["XDG_CONFIG_HOME"] = str(tmp_path_factory.mktemp("config"))
    yield
    if previous is None:
        os.environ.pop("XDG_CONFIG_HOME", None)
    else:
        os.environ["XDG_CONFIG_HOME"] = previous
