"""bench/pixels.py's bookkeeping for long benchmarks: which runs are left on --resume, which saved
settings forbid resuming, and what the report says about where and how the runs were measured."""

import argparse
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[1] / "bench"
sys.path.insert(0, str(BENCH))

import pixels  # noqa: E402  (bench/ is not a package)


def _args(**kw):
    base = dict(libs=["hetrl", "sb3", "cleanrl"], workloads=["minatar-breakout", "minatar-spaceinvaders"], seeds=[0, 1],
                minatar_steps=1_000_000, atari_steps=100_000, eval_episodes=10, quick=False, device="cpu")
    return argparse.Namespace(**{**base, **kw})


def test_the_jobs_rotate_libraries_by_seed_and_resume_skips_only_the_finished_runs():
    jobs = pixels.job_list(_args())
    assert len(jobs) == 12 and len(set(jobs)) == 12
    assert [lib for lib, w, seed in jobs if seed == 0 and w == "minatar-breakout"] == ["hetrl", "sb3", "cleanrl"]
    assert [lib for lib, w, seed in jobs if seed == 1 and w == "minatar-breakout"] == ["sb3", "cleanrl", "hetrl"]
    done = [{"lib": "sb3", "workload": "minatar-breakout", "seed": 1}, {"lib": "hetrl", "workload": "minatar-breakout", "seed": 0}]
    left = pixels.pending(jobs, done)
    assert len(left) == 10
    assert ("sb3", "minatar-breakout", 1) not in left and ("sb3", "minatar-breakout", 0) in left


def test_resuming_is_refused_where_a_setting_that_changes_results_differs():
    assert pixels.resume_mismatch(_args(), _args(jobs=2), "cpu") == ""
    assert pixels.resume_mismatch(_args(minatar_steps=100_000), _args(), "cpu") == "--minatar-steps 100000"
    assert pixels.resume_mismatch(_args(eval_episodes=5), _args(), "cuda") == "--eval-episodes 5, --device cuda"
    # a --quick run's steps are the smoke test's, whatever its flags said
    assert "--minatar-steps 6000" in pixels.resume_mismatch(_args(quick=True), _args(), "cpu")


def test_the_report_says_when_runs_shared_the_machine_and_spanned_days():
    one = {"date": "2026-11-27", "machine": "AMD EPYC", "cores": 2, "jobs": 1}
    assert pixels.measured_note([{"measured": one}]) == "Runs measured 2026-11-27 on AMD EPYC, 2 cores."
    assert pixels.measured_note([{"seconds": 1.0}]) == ""  # runs saved before runs were stamped
    two = {**one, "date": "2026-11-29", "jobs": 2}
    note = pixels.measured_note([{"measured": one}, {"measured": two}, {"measured": two}])
    assert note.startswith("Runs measured 2026-11-27 to 2026-11-29 on AMD EPYC, 2 cores.")
    assert "1 with 1 at a time, 2 with 2 at a time" in note and "side by side" in note
