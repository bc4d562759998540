"""bench/pixels_scale.py's report: the J per env step column says how its joules were measured."""

import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[1] / "bench"
sys.path.insert(0, str(BENCH))

import pixels_scale  # noqa: E402  (bench/ is not a package)


def test_the_energy_note_names_each_method_behind_the_joules():
    counter = "rapl:package-0: energy counter (powercap energy_uj)"
    runs = [{"lib": "hetrl", "energy": "3.0 J measured ...", "energy_methods": counter, "joules_per_env_step": 0.1},
            {"lib": "sb3", "energy": "2.0 J measured ...", "energy_methods": counter, "joules_per_env_step": 0.2}]
    note = pixels_scale.energy_note(runs)
    assert f"J per env step by {counter}." in note and "unavailable" not in note
    short = {"lib": "sb3", "energy": "energy unavailable: rapl: the span of 0.50 s is shorter than the 1 s a reading needs",
             "joules_per_env_step": None}
    assert "Runs with `unavailable`: energy unavailable: rapl: the span of 0.50 s" in pixels_scale.energy_note([*runs, short])
    none = pixels_scale.energy_note([{**short, "energy": "energy unavailable: rapl: not present"}])
    assert none.startswith("Energy: `unavailable` for every library: rapl: not present.")
    # a saved run from before energy_methods: its energy line, which names the meters and methods
    assert "J per env step by 3.0 J measured ..." in pixels_scale.energy_note([{**runs[0], "energy_methods": None}])


def _args(*argv: str):
    return pixels_scale.parse(["--workloads", "atari-breakout", "--n-envs", "1", "2", "--actors", "1", *argv])


def test_every_worker_job_parses_with_its_thread_mode():
    """The worker's command line (bench/pixels.py's run_job builds it) parses in this script, with the
    thread mode each job runs at."""
    import pixels

    args = _args("--threads", "1", "default")
    jobs = pixels_scale.schedule(args)
    assert {mode for *_, mode in jobs} == {"1", "default"}
    assert len(jobs) == 2 * (len(args.hetrl_configs) + 2)
    for lib, workload, config, seed, mode in jobs:
        argv = ["--worker", *pixels.worker_argv(pixels_scale.job(lib, workload, config, 100, seed, args), args, mode)]
        worker = pixels_scale.parse(argv)
        assert worker.worker == [lib, workload, config] and worker.thread_mode == mode and worker.steps == 100


def _run(lib: str, config: str, mode: str, seconds: float, **extra):
    return {"lib": lib, "workload": "atari-breakout", "config": config, "threads": mode, "env_steps": 1000,
            "seconds": seconds, "torch_threads": 1 if mode == "1" else 2, **extra}


def test_a_librarys_best_is_over_its_thread_modes_and_the_plan_is_read_at_default_threads():
    runs = [_run("sb3", "2", "1", 10.0), _run("sb3", "2", "default", 8.0), _run("sb3", "1", "default", 9.0),
            _run("hetrl", "auto", "1", 5.0), _run("hetrl", "auto", "default", 6.0)]
    sb3 = pixels_scale.best(runs, "sb3", "atari-breakout")
    assert sb3["rate"] == 125.0 and sb3["label"] == "SB3 n_envs=2, default threads (torch 2)"
    assert pixels_scale.best(runs, "hetrl", "atari-breakout")["rate"] == 200.0  # pinned to one thread was faster
    assert [r["seconds"] for r in pixels_scale.plan_runs(runs, "atari-breakout")] == [6.0]  # as a user's run finds it
    # runs saved before thread modes ran pinned to one thread, and keep their old names
    old = {k: v for k, v in _run("sb3", "4", "1", 10.0).items() if k not in ("threads", "torch_threads")}
    assert pixels_scale.mode_of(old) == "1" and pixels_scale.label(old) == "SB3 n_envs=4"
    assert pixels_scale.plan_runs([old], "atari-breakout") == []


def test_the_learner_line_puts_the_updates_against_the_peak_and_sb3s_best():
    import argparse

    plan = _run("hetrl", "auto", "default", 20.0, updates=1000, learn_seconds=12.0, flops_per_update=2.4e9)
    sb3 = {"rate": 200.0}
    line, = pixels_scale.learner_lines([plan], sb3, argparse.Namespace(peak_all=240.0))
    assert "1,000 x 2.40 GFLOP" in line and "12.0 s of its 20.0 s loop (60%), 200 GFLOP/s (83% of" in line
    assert "it would reach 0.42x SB3's best" in line  # 1,000 env steps in 12 s: 83 per s, against 200
    assert "0.50x (the fp32 arithmetic ceiling)" in line  # 2.4 TFLOP at 240 GFLOP/s: 10 s
    # a bfloat16 learner is not bound by the fp32 peak: the peak named as fp32's, no ceiling from it
    mixed, = pixels_scale.learner_lines([{**plan, "placement": {"Learn": "torch-bf16 on cpu (2 threads)"}}], sb3,
                                        argparse.Namespace(peak_all=240.0))
    assert "in bfloat16 mixed precision (Learn/torch-bf16; 83% of the all-cores *fp32* matmul peak" in mixed
    assert "ceiling" not in mixed and "it would reach 0.42x SB3's best" in mixed
    # no peak measured (a GPU run): the timer's figures only; no timer (an old run) or no SB3 run: no line
    assert "ceiling" not in pixels_scale.learner_lines([plan], sb3, argparse.Namespace(peak_all=None))[0]
    assert pixels_scale.learner_lines([{**plan, "learn_seconds": None}], sb3, argparse.Namespace(peak_all=240.0)) == []
    assert pixels_scale.learner_lines([plan], None, argparse.Namespace(peak_all=240.0)) == []


def test_dqn_update_flops_count_the_nature_cnn_as_four_forward_passes():
    import peer_runners
    from hetrl.nets.conv import NatureCNN

    # per sample: conv 20x20x32 (8x8x4), 9x9x64 (4x4x32), 7x7x64 (3x3x64); linear 3136x512, 512x4
    macs = 400 * 32 * 256 + 81 * 64 * 512 + 49 * 64 * 576 + 3136 * 512 + 512 * 4
    assert peer_runners.forward_macs(NatureCNN((4, 84, 84), 4), __import__("torch").zeros(3, 4, 84, 84)) == 3 * macs
    assert peer_runners.dqn_update_flops(NatureCNN((4, 84, 84), 4), (4, 84, 84), 32) == 4 * 2 * macs * 32
