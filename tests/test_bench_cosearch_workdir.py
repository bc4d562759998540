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


def _row(arm, score: float, numba: float, seed: int = 0) -> dict:
    return {"game": "Breakout-v1", "seed": seed, "arm": arm.key, "label": arm.label, **bench.asdict(arm),
            "architecture": "minatar" if arm.kind == "hand" else "skip_skip_dense-64", "run": "x", "score": score,
            "macs": 1000, "params": 100, "cpu": {"numba": numba, "torch": numba / 10}, "fpga": {}}


def test_distilled_arms_share_their_search_and_are_judged_against_both_hand_arms(tmp_path):
    args = argparse.Namespace(hardware=["cpu"], lambdas=[0.1, 0.3], td_lambda=0.1, distill_weight=2.0,
                              distill_lambdas=[0.3], teacher_steps=4000, steps=2000, seeds=1, search_steps=10,
                              states=100, settings=[], test_episodes=3)
    arms = bench.arms_of(args)
    distilled = [a for a in arms if a.distilled]
    assert [a.key for a in distilled] == ["hand_distilled", "cosearch_cpu_l0.3_distilled"]
    assert distilled[1].searched_as == bench.Arm("cosearch", "cpu", 0.3)  # one search serves both retrainings
    assert bench.retraining(bench.Arm("hand"), None, tmp_path, args) == ("minatar", "minatar", ["network=minatar"])
    assert bench.retraining(distilled[0], None, tmp_path, args) == (
        "minatar", "minatar_distill2", ["network=minatar", f"teacher={tmp_path}", "distill_weight=2.0"])
    assert bench.arms_of(argparse.Namespace(**{**vars(args), "distill_weight": None})) == [a for a in arms if not a.distilled]

    plain, cosearch = bench.Arm("cosearch", "cpu", 0.3), distilled[1]
    rows = [_row(bench.Arm("hand"), 7.0, 100.0), _row(distilled[0], 8.0, 100.0), _row(plain, 6.0, 250.0),
            _row(cosearch, 7.5, 250.0), _row(bench.Arm("decoupled"), 5.0, 120.0),
            _row(bench.Arm("td-only", "cpu", 0.1), 5.0, 200.0), _row(bench.Arm("cosearch", "cpu", 0.1), 5.5, 150.0)]
    text = bench.report(rows, args, {}, tmp_path / "cosearch", {"retraining": 60.0})
    assert "distill_weight=2" in text and (tmp_path / "cosearch_Breakout-v1.png").exists()
    assert ("co-searched agents retrained with distillation against the hand-designed agent trained as usual: met by "
            "co-search (cpu), retrained with distillation λ 0.3: score 7.50 vs 7.00, 2.50x") in text
    assert ("against the hand-designed agent retrained with the same distillation: not met: no co-searched agent "
            "reaches its score") in text
    assert "CPU decisions/s): met on 0 of 1 game(s)." in text  # the plain arms alone: 6.0 < 7.0
    assert "against the hand-designed agent trained as usual: met on 1 of 1 game(s)." in text
    assert "retrained with the same distillation: met on 0 of 1 game(s)." in text
    assert "cpu on the measured CPU axis: dominated by λ 0.3" in text  # the plain co-search against decoupled
