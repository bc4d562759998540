import hashlib
import importlib.util
import os
import random
import shutil
import sys
import tempfile
import time
import zlib
from pathlib import Path

import numpy as np
import pytest
import torch

# Without a GPU, Triton's kernels (Learn/triton's) can run only in Triton's interpreter, which Triton
# reads from the environment when it decorates them: set before any test imports Triton
if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")


def source_key(root: Path) -> str:
    """A hash of every Python file under ``root``, with its path."""
    digest = hashlib.sha256()
    for path in sorted(root.rglob("*.py")):
        digest.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()[:16]


def hetrl_sources() -> Path:
    """The package directory of the hetrl the tests import, found without importing it."""
    return Path(next(iter(importlib.util.find_spec("hetrl").submodule_search_locations)))


def numba_cache_dir() -> Path:
    """A numba cache directory named by a hash of every source file of the hetrl the tests import.

    Numba rebuilds a cached kernel only when the file that defines it changes, not when a function
    it inlines (another file: ``nets/fused_mlp.py`` into ``primitives/learn_numba.py``) or a global
    it freezes as a constant does: with the default cache beside the sources, a test could pass on
    the compiled code of an older version. Keyed by every source file, any edit gives a fresh,
    empty cache (every kernel compiles once in that session); an unchanged tree reuses its kernels.
    """
    base = Path(tempfile.gettempdir()) / f"hetrl-tests-numba-{os.getuid()}"
    base.mkdir(mode=0o700, exist_ok=True)
    for old in base.iterdir():  # caches of trees not tested for a week
        try:
            if time.time() - old.stat().st_mtime > 7 * 86400:
                shutil.rmtree(old, ignore_errors=True)
        except OSError:
            pass
    here = base / source_key(hetrl_sources())
    here.mkdir(exist_ok=True)
    os.utime(here)
    return here


# Before anything imports numba (hetrl's modules do), and inherited by the subprocesses tests start.
os.environ["NUMBA_CACHE_DIR"] = str(numba_cache_dir())
if "numba" in sys.modules:  # a plugin imported it first: make it read the variable again
    import numba.core.config

    numba.core.config.reload_config()


@pytest.fixture(autouse=True)
def seeded_generators(request):
    """Each test starts with the global generators (torch, numpy, random) seeded from its own id.

    A test that builds a network or draws data without a generator of its own reads these; unseeded,
    their state would depend on which tests ran before it on the same xdist worker, so such a test
    could pass or fail by the order of the run. Seeded by the test's id, each test draws the same
    numbers however the suite is split, ordered or filtered (and tests do not all share one draw).
    """
    seed = zlib.crc32(request.node.nodeid.encode())
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


@pytest.fixture
def fixed_plan(tmp_path):
    """A factory of plan files: the fixed rule's placement on the CPU with Learn/blas, the learner
    the automatic plan picks for small MLPs on this machine's CPU. Learning tests train on it so that
    each seed trains the same way on every run (no profile, whose timings could tip the choice) and
    no run pays the profiling an automatic plan does on CI's empty cache."""
    from dataclasses import replace

    from hetrl.planner.plan_file import Plan
    from hetrl.planner.rule import default_placement
    from hetrl.protocol import Slot

    def make(algo, env, executor="inline", actors=0):
        placement = replace(default_placement(torch.device("cpu"), (1, 1), threads=1), learn=Slot("blas", "cpu", threads=1))
        path = tmp_path / f"plan_{algo}_{executor}.json"
        Plan(algo, env, 1, "rule", "-", placement, None, [], executor, actors).save(path)
        return path

    return make


@pytest.fixture
def require_cuda():
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device on this machine")


@pytest.fixture(scope="session", autouse=True)
def private_profile_cache(tmp_path_factory):
    """Profiles measured by tests (auto plans) go to a cache of this session, not the user's."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("XDG_CACHE_HOME", str(tmp_path_factory.mktemp("cache")))
        yield


@pytest.fixture(scope="session", autouse=True)
def private_checkpoint_key(tmp_path_factory):
    """The checkpoint key that signs env states (hetrl.run.safe_state) is this session's, not the user's."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("XDG_CONFIG_HOME", str(tmp_path_factory.mktemp("config")))
        yield


# `make test` runs the tests in two passes: every module not listed here on two xdist workers, then
# these, one after another, with nothing beside them. Two local Ray clusters started at once on
# one machine trip over each other, and test_signals checks that the next hetrl start sweeps what a
# killed run left in /dev/shm, which any other hetrl start (another worker's test) would sweep first.
SERIAL_MODULES = {"test_calibration.py", "test_fuzz_settings.py", "test_metrics.py", "test_ray.py", "test_ray_cluster.py",
                  "test_signals.py", "test_uint8.py", "test_agreement.py", "test_tabular_backends.py"}


def pytest_collection_modifyitems(config, items):
    for item in items:
        if item.path.name in SERIAL_MODULES:
            item.add_marker(pytest.mark.serial)
