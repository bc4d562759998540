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
                minatar_steps=1_000_000, atari_steps=100_000, eval_episodes=10, quick=False, device="cpu", threads=["1"])
    return argparse.Namespace(**{**base, **kw})


def test_the_jobs_rotate_libraries_by_seed_and_resume_skips_only_the_finished_runs():
    jobs = pixels.job_list(_args())
    assert len(jobs) == 12 and len(set(jobs)) == 12
    assert [lib for lib, w, seed, _ in jobs if seed == 0 and w == "minatar-breakout"] == ["hetrl", "sb3", "cleanrl"]
    assert [lib for lib, w, seed, _ in jobs if seed == 1 and w == "minatar-breakout"] == ["sb3", "cleanrl", "hetrl"]
    # a run saved before thread modes existed ran pinned to one thread
    done = [{"lib": "sb3", "workload": "minatar-breakout", "seed": 1},
            {"lib": "hetrl", "workload": "minatar-breakout", "seed": 0, "threads": "1"},
            {"lib": "hetrl", "workload": "minatar-breakout", "seed": 1, "threads": "default"}]
    left = pixels.pending(jobs, done)
    assert len(left) == 10
    assert ("sb3", "minatar-breakout", 1, "1") not in left and ("sb3", "minatar-breakout", 0, "1") in left
    assert ("hetrl", "minatar-breakout", 1, "1") in left
    both = pixels.job_list(_args(threads=["1", "default"], seeds=[0]))
    assert both[:2] == [("hetrl", "minatar-breakout", 0, "1"), ("hetrl", "minatar-breakout", 0, "default")]


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


def _run(lib, mode, rate, torch_threads=1, learn="blas on cpu (1 thread)"):
    run = {"lib": lib, "workload": "minatar-breakout", "seed": 0, "threads": mode, "torch_threads": torch_threads,
           "env_steps": 1000, "seconds": 1000 / rate, "updates": 900, "replay_bytes": 816, "replay_capacity": 1,
           "eval_mean": 5.0, "call_seconds": 1000 / rate + 0.5}
    if lib == "hetrl":
        run.update(placement={"Learn": learn}, executor="inline")
    return run


def test_the_table_compares_at_each_thread_mode_and_names_each_librarys_best():
    runs = [_run("hetrl", "1", 1500), _run("sb3", "1", 500), _run("hetrl", "default", 2000, 2, "blas on cpu (2 threads)"),
            _run("sb3", "default", 600, 2), _run("cleanrl", "default", 700, 2)]
    text = "\n".join(pixels.table(runs, "minatar-breakout", ["hetrl", "sb3", "cleanrl"], 10))
    assert "| Stable-Baselines3, 1 thread | 500 | 450 | 3.00× |" in text
    assert "| Stable-Baselines3, default threads (torch 2) | 600 | 540 | 3.33× |" in text
    assert "| CleanRL-style script, default threads (torch 2) | 700 |" in text
    assert ("hetrl 2,000 env steps/s (default threads) ÷ the fastest peer, CleanRL-style script, 700 (default threads): "
            "**2.86×**") in text
    assert "hetrl's plan at default threads: executor inline; Learn blas on cpu (2 threads)" in text
    # one mode, pinned: the rows and the plan line read as before thread modes
    one = "\n".join(pixels.table(runs[:2], "minatar-breakout", ["hetrl", "sb3", "cleanrl"], 10))
    assert "| Stable-Baselines3 | 500 |" in one and "best thread mode" not in one and "hetrl's plan: executor" in one


def test_the_benchmarks_runs_write_no_checkpoint_inside_the_timed_loop():
    """The loop stops at the first iteration at or past ``steps``; with 16 envs an iteration is 16 env
    steps, so ``checkpoint_every = steps + 1`` (what the benches had) was reached inside the loop and
    the whole frame replay was written on the clock."""
    from peer_runners import no_checkpoint_in_loop

    def loop_end(steps, per_iteration):
        return -(-steps // per_iteration) * per_iteration

    assert loop_end(5000, 16) >= 5000 + 1  # the old setting: a checkpoint inside the loop
    for steps in (1, 15, 1000, 5000, 100_000):
        for per_iteration in (1, 2, 4, 16, 64):
            if per_iteration <= steps:
                assert loop_end(steps, per_iteration) < no_checkpoint_in_loop(steps)
