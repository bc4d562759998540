"""bench/grid.py's command line: a bad --cells entry is one clear error, under python -O too."""

import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "bench"
sys.path.insert(0, str(BENCH))

import grid  # noqa: E402  (bench/ is not a package)


def test_a_cell_parses_and_a_bad_ratio_or_shape_is_refused():
    cell = grid.Cell.parse("dqn:CartPole-v1:64,64:64:1")
    assert (cell.algo, cell.env_id, cell.hidden, cell.batch, cell.ratio) == ("dqn", "CartPole-v1", "64,64", 64, "1")
    with pytest.raises(ValueError, match="ratio '0.5' is not one of"):
        grid.Cell.parse("dqn:CartPole-v1:64,64:64:0.5")
    with pytest.raises(ValueError):
        grid.Cell.parse("dqn:CartPole-v1:64")


@pytest.mark.parametrize("flags", [[], ["-O"]])
def test_the_command_line_refuses_a_bad_cell_in_one_line(flags):
    proc = subprocess.run([sys.executable, *flags, str(BENCH / "grid.py"), "--cells", "dqn:CartPole-v1:64,64:64:0.5"],
                          capture_output=True, text=True, check=False)
    assert proc.returncode == 2
    assert "--cells takes algo:env:hidden:batch:ratio with ratio in" in proc.stderr and "Traceback" not in proc.stderr


def _run(lib: str, seconds: float, **extra: float) -> dict:
    return {"lib": lib, "cell": "ddpg:Pendulum-v1:64,64:64:1", "threads": grid.DEFAULT, "env_steps": 5000, "updates": 4000,
            "seconds": seconds, "eval_return_mean": -100.0, "eval_returns": [-100.0, -101.0], **extra}


def _row(hetrl: dict, peer_seconds: float) -> dict:
    cell = grid.Cell.parse("ddpg:Pendulum-v1:64,64:64:1")
    return grid.cell_rows(cell, [hetrl, _run("sb3", peer_seconds)], peak1=100.0, peak_all=200.0, libs=("hetrl", "sb3"))


def test_the_arithmetic_ceiling_and_why_a_cell_misses_are_computed_from_the_runs():
    # 4000 updates of 0.1 GFLOP at the 200 GFLOP/s peak: 2 s, so at most 2,500 env steps/s
    slow_learner = _run("hetrl", 4.2, loop_seconds=4.0, learn_seconds=3.5, flops_per_update=1e8)
    row = _row(slow_learner, peer_seconds=20.0)  # the peer: 250 env steps/s
    assert row["regime"] == "compute" and row["ceiling"] == pytest.approx(10.0)
    assert not row["aim"] and "57% of the all-cores peak" in grid.why_missed(row, 200.0)
    row = _row(slow_learner, peer_seconds=3.0)  # a peer at 1,667 env steps/s: the same arithmetic allows 1.5x at most
    assert row["ceiling"] == pytest.approx(1.5)
    assert "the arithmetic ceiling is 1.50×, under 1.8×" in grid.why_missed(row, 200.0)


def test_an_overhead_bound_miss_names_the_fixed_end_of_run_cost_when_the_loop_alone_would_meet_the_aim():
    # loop 0.25 s (50 µs per env step, 10 of them in Learn), 0.2 s after it; the peer 200 µs per env step in all
    quick = _run("hetrl", 0.45, loop_seconds=0.25, learn_seconds=0.05, flops_per_update=1e5)
    row = _row(quick, peer_seconds=1.0)
    assert row["regime"] == "overhead" and not row["aim"]
    assert (row["learn_us"], row["outside_us"], row["fixed_us"]) == pytest.approx((10.0, 40.0, 40.0))
    assert "the loop alone is within the 67 µs per env step that 3× allows" in grid.why_missed(row, 200.0)


def _raw(seed: int, argv: list[str], gflops: float) -> dict:
    runs = [{**_run(lib, seconds, loop_seconds=seconds * 0.9, learn_seconds=seconds * 0.4, flops_per_update=1e6),
             "seed": seed, "version": "v", "learn_backend": "cudagraph"} for lib, seconds in (("hetrl", 1.0), ("sb3", 4.0))]
    return {"results": runs, "failures": [], "matmul": {"0": {"gflops": {"1024": gflops}}}, "argv": argv, "seconds": 60.0,
            "cells": [{"algo": "ddpg", "env_id": "Pendulum-v1", "hidden": "64,64", "batch": 64, "ratio": "1"}],
            "measured": {"date": "d", "machine": "m", "cores": 16, "python": "3.12", "gpu": "G"}}


def test_the_runs_of_several_calls_merge_into_one_gpu_report(tmp_path):
    """A GPU lease runs the grid in several calls: --from-json with several raw files keeps each run
    once, every command, the highest matmul peak, and a table whose delimiter row matches its header."""
    first, second = _raw(0, ["--device", "cuda", "--quick"], 40_000.0), _raw(1, ["--device", "cuda", "--seed", "1"], 48_000.0)
    merged = grid.merged([first, second, first])  # the first again: its runs are not counted twice
    assert len(merged["results"]) == 4 and merged["seconds"] == 180.0 and len(merged["commands"]) == 3
    assert grid.runs_said(merged) == "2 seed(s) per cell and library, 2 greedy evaluation episodes per run"
    args = grid.parse(["--device", "cuda"])
    out = tmp_path / "bench.md"
    text = grid.report_gpu(merged, [grid.Cell(**c) for c in merged["cells"]], args, out, tmp_path / "g.png", 180.0)
    assert "`python bench/grid.py --device cuda --seed 1`" in text and "**48,000 GFLOP/s**" in text
    header, delimiter, row = [line for line in text.splitlines() if line.startswith("|")]
    assert header.count("|") == delimiter.count("|") == row.count("|")
    assert "**4.00×** vs SB3" in row and (tmp_path / "g.png").exists()
