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


def test_a_training_cut_short_after_a_checkpoint_is_resumed_not_restarted(tmp_path):
    import hetrl

    run = tmp_path / "run"
    hetrl.train("dqn", "CartPole-v1", steps=200, run_dir=run, checkpoint_every=100, eval_every=0, keep_checkpoints=0,
                checkpoint_replay="all", seed=1, progress=False, plan="rule", learning_starts=50)
    assert bench.resumable(run, 200)
    with pytest.raises(SystemExit, match="ran 200 env steps, not 300"):
        bench.resumable(run, 300)
    # cut short after step 100: its later checkpoint and summary never written
    for name in ("step_0000000200.pt", "replay_step_0000000200.pt"):
        (run / "checkpoints" / name).unlink()
    (run / "summary.json").unlink()
    first = (run / "checkpoints" / "step_0000000100.pt").stat().st_mtime_ns
    args = argparse.Namespace(workdir=tmp_path, settings=[])
    assert bench.trained("CartPole-v1", 1, 200, run, args, []) == run
    assert json.loads((run / "summary.json").read_text())["env_steps"] == 200
    assert (run / "checkpoints" / "step_0000000100.pt").stat().st_mtime_ns == first  # resumed, not trained afresh
    assert not bench.resumable(tmp_path / "never_started", 200)
    # stopped by a signal after step 100: its summary written and marked interrupted, as `hetrl train` does
    for name in ("step_0000000200.pt", "replay_step_0000000200.pt"):
        (run / "checkpoints" / name).unlink()
    (run / "summary.json").write_text(json.dumps({"env_steps": 100, "interrupted": True}))
    assert bench.trained("CartPole-v1", 1, 200, run, args, []) == run
    summary = json.loads((run / "summary.json").read_text())
    assert summary["env_steps"] == 200 and not summary.get("interrupted")
