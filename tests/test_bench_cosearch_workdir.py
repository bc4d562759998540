"""bench/cosearch.py's workdir reuse: a finished search whose CPU cost table was timed on another
backend than this invocation's (the default now numba; numpy before) is refused, one it matches is reused."""

import argparse
import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))

import cosearch as bench  # noqa: E402  (bench/ is not a package)


@pytest.mark.parametrize("saved, asked, refused", [("numpy", None, "timed on numpy, not numba"),
                                                     ("numpy", "numpy", None), ("numba", None, None),
                                                     (None, None, "timed on torch, not numba")])
def test_a_search_timed_on_another_backend_is_refused(tmp_path, saved, asked, refused):
    out = tmp_path / "search"
    out.mkdir()
    (out / "architecture.json").write_text(json.dumps({"search": {"steps": 10}, **({"cost_backend": saved} if saved else {})}))
    args = argparse.Namespace(cost_backend=asked, search_steps=10, workdir=tmp_path, jobs=1)
    arm = bench.Arm("cosearch", "cpu", 0.1)
    if refused is None:
        assert bench.searched("MinAtar/Breakout-v1", tmp_path, arm, 0, out, args) == out / "architecture.json"
    else:
        with pytest.raises(SystemExit, match=refused):
            bench.searched("MinAtar/Breakout-v1", tmp_path, arm, 0, out, args)
