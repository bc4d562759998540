"""bench/early_exit.py's report: the per-game summary against the aims, and each run's row."""

import argparse
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[1] / "bench"
sys.path.insert(0, str(BENCH))

import early_exit  # noqa: E402  (bench/ is not a package)


def row(seed: int, ops: float, score: float, width: int) -> dict:
    return {
        "env": "MinAtar/Breakout-v1", "seed": seed, "threshold": 0.2, "branch_width": width,
        "base_return": 5.0, "exit_return": 5.0 * score, "score_ratio": score, "macs_exit": ops * 168_320,
        "macs_base": 168_320, "ops_ratio": ops, "exit_fractions": [1.0, 0.0], "exit_names": ["after block 0", "final head"],
        "fit_agreement": [[0.6], [0.9]], "latency_backend": "numba", "latency_b1_us_exit": 9.0, "latency_b1_us_base": 20.0,
        "latency_b1_spread_exit": [8.0, 10.0], "latency_b1_spread_base": [18.0, 22.0], "latency_ratio_b1": 0.45,
        "latency_b1_us_whole": 21.0, "latency_ratio_b1_own": 0.43, "latency_b1_us_exit_torch": 200.0,
        "latency_b1_us_base_torch": 190.0, "latency_ratio_b1_torch": 1.05,
        "choice": {"validation_episodes": 100, "min_score_ratio": 0.9, "margin": 1.0, "widths": [16, 12, 9]},
    }


def args(**kw) -> argparse.Namespace:
    base = dict(threads=1, steps=50_000, seeds=2, validation_episodes=100, min_score_ratio=0.9, margin=1.0,
                test_episodes=100, settings=[])
    return argparse.Namespace(**{**base, **kw})


def test_the_report_gives_each_game_against_the_aims_and_each_runs_branch_width():
    text = early_exit.report([row(0, 0.274, 0.96, 9), row(1, 0.317, 0.93, 16)], args())
    summary = next(line for line in text.splitlines() if line.startswith("| MinAtar/Breakout-v1 | 2 |"))
    assert "0.295 [0.274-0.317]" in summary and "| met / met / met | met / met / met |" in summary
    assert "0.2 (9), 0.2 (16)" in summary  # each seed's threshold and branch width
    assert "(of 16, 12, 9 units) and threshold chosen on 100 validation episodes at score ratio >= 0.9 with 1 standard error to spare" in text
    runs = [line for line in text.splitlines() if line.startswith("| MinAtar/Breakout-v1 | 0 |")]
    assert runs and "| 9 |" in runs[0]
    # one seed short of each aim: met on the mean (0.327 operations, 0.91 score), not on every seed
    failing = early_exit.report([row(0, 0.274, 0.87, 9), row(1, 0.38, 0.95, 16)], args())
    assert "| met / met / met | not met / not met / met |" in failing


def test_the_report_says_whether_the_baseline_is_the_exit_runs_own_network():
    same, other = {**row(0, 0.274, 0.96, 9), "same_network": True}, {**row(1, 0.317, 0.93, 16), "same_network": False}
    assert "On all 2 runs the exit run's backbone and final head are the baseline DQN's" in early_exit.report([same, same], args())
    mixed = early_exit.report([same, other], args())
    assert "On 1 of 2 runs the exit run's backbone and final head differ" in mixed and "On all" not in mixed
    # rows measured before the check say nothing either way
    assert "baseline DQN's" not in early_exit.report([row(0, 0.274, 0.96, 9)], args())


def test_the_report_names_a_branch_on_a_share_of_its_block():
    half = {**row(0, 0.236, 0.95, 32), "branch_share": 0.5,
            "choice": {"validation_episodes": 100, "min_score_ratio": 0.9, "margin": 1.0, "widths": [16, 32],
                       "shares": [1.0, 0.5]}}
    text = early_exit.report([half], args(seeds=1))
    assert "0.2 (32 on 0.5)" in text and "(of 16, 32 on 0.5 units on a share of the block)" in text
    assert any(line.startswith("| MinAtar/Breakout-v1 | 0 | 0.2 | 32 on 0.5 |") for line in text.splitlines())


def test_the_report_names_the_runs_measured_against_their_own_whole_network():
    own = {**row(0, 0.274, 0.96, 9), "baseline": "own whole network"}
    trained = {**row(1, 0.317, 0.93, 16), "baseline": "dqn", "same_network": True}
    text = early_exit.report([own, trained], args())
    assert "On 1 of 2 runs (MinAtar/Breakout-v1 s0) no DQN was trained: the baseline is the exit run's own whole network" in text
    assert "On all 1 runs the exit run's backbone and final head are the baseline DQN's" in text
    assert "no DQN was trained" not in early_exit.report([trained], args())


def _swept_run(root: Path, stored: bool = True) -> Path:
    """A run directory as far as --swept reads it: config, two checkpoints, the sweep's record of the
    final one under the path the run had when it was swept."""
    from dataclasses import asdict

    from hetrl.exits import SweepResult
    from hetrl.files import write_json

    run = root / "exit_s0"
    (run / "checkpoints").mkdir(parents=True)
    (run / "config.json").write_text("{}")
    for step in (1000, 2000):
        (run / "checkpoints" / f"step_{step:010d}.pt").write_bytes(b"")
    result = SweepResult(run_dir="/elsewhere/exit_s0", checkpoint="/elsewhere/exit_s0/checkpoints/step_0000002000.pt",
                         env="MinAtar/Breakout-v1", episodes=10, seed_offset=0, batch=1, backend="numba", baseline_macs=1,
                         exit_names=["after block 0", "final head"], min_score_ratio=0.9, chosen=0.2, stored=stored)
    (run / "exits").mkdir()
    write_json(run / "exits" / "sweep.json", asdict(result))
    return run


def test_swept_takes_the_sweep_of_a_run_directory_moved_since(tmp_path):
    result = early_exit.stored_sweep(_swept_run(tmp_path))
    assert result.chosen == 0.2 and result.stored


def test_swept_refuses_a_sweep_that_stored_nothing_in_the_final_checkpoint(tmp_path):
    import pytest

    with pytest.raises(RuntimeError, match="stored nothing in the final checkpoint step_0000002000.pt; run without --swept"):
        early_exit.stored_sweep(_swept_run(tmp_path, stored=False))
    run = _swept_run(tmp_path / "later")
    (run / "checkpoints" / "step_0000003000.pt").write_bytes(b"")  # trained on after the sweep
    with pytest.raises(RuntimeError, match="final checkpoint step_0000003000.pt"):
        early_exit.stored_sweep(run)
