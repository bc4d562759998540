"""A cached profile is checked at the start of a run (planner/calibration.py): kept when the plan's
main stages measure as cached, refreshed when they drift; injected timings stand in for the machine."""

from dataclasses import replace

import pytest

from hetrl.algos import make_algorithm
from hetrl.config import make_config
from hetrl.envs import env_spec
from hetrl.planner import calibration
from hetrl.planner.calibration import Calibration, StageCheck, calibrate, main_stages
from hetrl.planner.choice import plan_for_run

SETTINGS = ["plan=auto", "hidden=16,16", "batch_size=16", "train_every=1", "replay_ratio=1"]


def _algorithm(cfg):
    return make_algorithm(cfg.algo, env_spec(cfg.env), cfg.agent)


def _fake_profile(real, scale: float):
    """``real`` with every median multiplied by ``scale`` (what a uniformly slower machine measures)."""
    return replace(real, timings=[replace(t, median_s=t.median_s * scale, p10_s=t.p10_s * scale, p90_s=t.p90_s * scale) for t in real.timings])


@pytest.fixture(scope="module")
def cached(tmp_path_factory):
    """A real profile of a small CartPole DQN, measured once (for the module) into a temporary cache."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("XDG_CACHE_HOME", str(tmp_path_factory.mktemp("cache")))
        cfg = make_config("dqn", "CartPole-v1", None, SETTINGS)
        plan = plan_for_run(cfg, _algorithm(cfg))
        assert plan.profile_check.startswith("measured now")
        yield cfg, plan


def test_the_weighted_change_decides(cached):
    learn = ("Learn", "torch", "cpu", 16, 1)
    same = Calibration((StageCheck(learn, 1e-3, 1.1e-3, 0.8),))
    assert not same.drifted and same.change == pytest.approx(1.1)
    noisy_small_stage = Calibration((StageCheck(learn, 1e-3, 1e-3, 0.8), StageCheck(("Act", "numpy", "cpu", 1, None), 1e-5, 3e-5, 0.05)))
    assert not noisy_small_stage.drifted and noisy_small_stage.change == pytest.approx((0.8 + 0.15) / 0.85)
    slow = Calibration((StageCheck(learn, 1e-3, 1.6e-3, 0.8),))
    assert slow.drifted and "1.60x" in slow.describe()
    fast = Calibration((StageCheck(("Learn", "torch", "cpu", 16, 1), 1e-3, 0.5e-3, 0.9),))
    assert fast.drifted  # 0.55x: faster counts too
    assert not Calibration(()).drifted


def test_main_stages_are_the_plans_slots_with_their_shares(cached):
    """The checked primitives that carry at least MAIN_SHARE of the predicted time per env step, keyed
    by the plan's slots. The shares are set here: the measured profile's own (a 16x16 learner beside
    CartPole) depend on the machine's load, and Learn falls under the share on a busy one."""
    cfg, real = cached
    per_step = {**{k: 1e-7 for k in real.prediction.per_env_step_s}, "Learn": 6e-5, "EnvStep": 3e-5, "Act": 5e-6}
    plan = replace(real, prediction=replace(real.prediction, per_env_step_s=per_step))
    total = sum(per_step.values())
    stages = main_stages(plan, cfg.agent.batch_size)
    learn, env = plan.placement.learn, plan.placement.env
    assert stages == pytest.approx({("Learn", learn.backend, learn.device, cfg.agent.batch_size, learn.threads): 6e-5 / total,
                                    ("EnvStep", env.backend, env.device, plan.num_envs, None): 3e-5 / total})  # Act: 5% < 10%
    assert main_stages(real, cfg.agent.batch_size).keys() <= {k for k in (
        ("Learn", learn.backend, learn.device, cfg.agent.batch_size, learn.threads),
        ("EnvStep", env.backend, env.device, real.num_envs, None),
        ("Act", real.placement.act.backend, real.placement.act.device, real.num_envs, None))}


def test_a_cached_profile_that_still_holds_is_kept(cached, monkeypatch):
    cfg, _ = cached
    calls = []

    def no_profiling(*args, **kwargs):
        calls.append(args)
        raise AssertionError("profiled again")

    def as_cached(algorithm, keys):  # the machine measures what the profile says, 10% slower
        from hetrl.profile import Profile, default_path
        from hetrl.hardware import describe_machine
        profile = Profile.load(default_path(describe_machine(), cfg.algo, cfg.env, cfg.agent))
        wanted = {(p, b, d, cfg.agent.batch_size if n is None else n, t) for p, b, d, n, t in keys}
        return [replace(t, median_s=t.median_s * 1.1, p10_s=t.p10_s * 1.1) for t in profile.timings if t.key in wanted]

    plan = plan_for_run(cfg, _algorithm(cfg), profiling=no_profiling, measuring=as_cached)
    assert plan.profile_check.startswith("cached, checked") and "1.10x" in plan.profile_check and not calls


def test_a_drifted_profile_is_measured_again_and_the_run_says_so(cached, monkeypatch):
    cfg, first = cached
    said, profiled = [], []

    def slower(algorithm, keys):  # a busy machine: every main stage takes twice as long
        from hetrl.profile import Profile, default_path
        from hetrl.hardware import describe_machine
        profile = Profile.load(default_path(describe_machine(), cfg.algo, cfg.env, cfg.agent))
        wanted = {(p, b, d, cfg.agent.batch_size if n is None else n, t) for p, b, d, n, t in keys}
        return [replace(t, median_s=t.median_s * 2.0, p10_s=t.p10_s * 2.0) for t in profile.timings if t.key in wanted]

    def profiling(algo, env, agent, machine=None, resume=None, energy=True):
        from hetrl.profile import Profile, default_path
        from hetrl.hardware import describe_machine
        real = Profile.load(default_path(describe_machine(), cfg.algo, cfg.env, cfg.agent))
        profiled.append(algo if energy else f"{algo}, no meters")  # a throughput plan's profile reads none
        return _fake_profile(real, 2.0)

    plan = plan_for_run(cfg, _algorithm(cfg), said.append, profiling=lambda *a, **k: profiling(*a, **k), measuring=slower)
    assert profiled == ["dqn, no meters"] and plan.profile_check.startswith("refreshed")
    assert any("profiling again" in line for line in said)
    # the new prediction reflects the slower machine
    assert plan.prediction.env_steps_per_s == pytest.approx(first.prediction.env_steps_per_s / 2, rel=0.05)


def test_calibration_measures_the_real_primitives(cached):
    """The real measure: the plan's main stages measured again on this machine, keyed like the profile."""
    cfg, plan = cached
    from hetrl.profile import Profile, default_path
    from hetrl.hardware import describe_machine
    profile = Profile.load(default_path(describe_machine(), cfg.algo, cfg.env, cfg.agent))
    result = calibrate(profile, _algorithm(cfg), plan)
    assert result.checks and all(isinstance(c, StageCheck) and c.measured_s > 0 for c in result.checks)
    assert {c.key[0] for c in result.checks} <= set(calibration.CHECKED)


def test_profiling_shows_progress_and_the_summary_says_where_the_profile_came_from(tmp_path, monkeypatch, capfd):
    """Without a terminal: plain progress lines while profiling; the summary's profile row says
    measured now, then cached and checked. `hetrl profile` prints its progress the same way."""
    from hetrl.cli import main

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    common = ["--steps", "300", "--set", "hidden=8,8", "--set", "batch_size=16", "--set", "learning_starts=100",
              "--set", "eval_episodes=1", "--set", "train_every=1"]
    assert main(["train", "dqn", "CartPole-v1", "--run-dir", str(tmp_path / "a"), *common]) == 0
    first = capfd.readouterr()
    assert "profiling dqn CartPole-v1: " in first.err and " measurements (100%)" in first.err
    assert "measured now" in first.out
    assert main(["train", "dqn", "CartPole-v1", "--run-dir", str(tmp_path / "b"), *common]) == 0
    second = capfd.readouterr()
    # cached and checked; on a machine whose load changed in between, refreshed (and said so): the
    # decision itself is tested above with injected timings
    if "refreshed" in second.out:
        assert "the cached profile is off" in second.err
    else:
        assert "measurements" not in second.err and "cached, checked at the start" in second.out
    assert main(["profile", "dqn", "Acrobot-v1", "--out", str(tmp_path / "p.json"), "--set", "hidden=8,8"]) == 0
    assert " measurements (100%)" in capfd.readouterr().err


def test_the_cpu_share_follows_the_load():
    from hetrl.planner.calibration import cpu_share

    assert cpu_share(load=0.0, cores=2) == 1.0
    assert cpu_share(load=2.0, cores=2) == 1.0  # this process and one other on two cores: a core each
    assert cpu_share(load=4.0, cores=2) == pytest.approx(0.5)  # three others: two cores for four threads
    assert cpu_share(load=9.0, cores=4) == pytest.approx(4 / 9)
    assert 0.05 <= cpu_share() <= 1.0


def test_the_runnable_tasks_are_read_now_not_a_minute_later():
    from pathlib import Path

    from hetrl.planner.calibration import runnable_now

    if not Path("/proc/stat").exists():
        assert runnable_now() is None
        return
    assert runnable_now(samples=3, every_s=0.0) >= 1.0  # this test's own thread is running


def test_the_prediction_is_scaled_by_the_share_of_a_core_measured_at_the_start(cached, tmp_path):
    cfg, first = cached
    plan = plan_for_run(cfg, _algorithm(cfg), share_of_core=lambda: 0.5)
    assert plan.cpu_share == 0.5
    from hetrl.planner.plan_file import Plan
    assert Plan.load(plan.save(tmp_path / "plan.json")).cpu_share == 0.5
    from hetrl.run.report import _learning_rate
    from hetrl.run.result import TrainResult
    result = TrainResult(tmp_path, "dqn", "CartPole-v1", 10, 1, 1.0, 10.0, 1.0, None, None, 1, None, False, {}, [],
                         800.0, 1000.0 * plan.cpu_share, None, predicted_cpu_share=plan.cpu_share)
    assert "500 predicted by the plan's model at the 50% of a core" in _learning_rate(result)


def test_a_ray_run_is_predicted_where_the_profile_measured_chunk_transfers(cached):
    """Without ChunkTransfer rows (a profile made off a Ray cluster) a ray plan has no prediction;
    with them, the ray model's (planner/model_ray.py) at the executor's chunk size."""
    from hetrl.hardware import describe_machine
    from hetrl.planner.model_ray import predict_ray
    from hetrl.profile import Profile, Timing, default_path

    cfg, _ = cached
    ray_cfg = replace(cfg, executor="ray", actors=2, ray_chunk_steps=8)
    path = default_path(describe_machine(), cfg.algo, cfg.env, cfg.agent)
    original = Profile.load(path)

    def as_cached(algorithm, keys):
        profile = Profile.load(path)
        wanted = {(p, b, d, cfg.agent.batch_size if n is None else n, t) for p, b, d, n, t in keys}
        return [t for t in profile.timings if t.key in wanted]

    assert plan_for_run(ray_cfg, _algorithm(ray_cfg), measuring=as_cached).prediction is None
    rows = [Timing("ChunkTransfer", "ray:nodes", "cpu", n, None, s, s, s, 35) for n, s in ((16, 2e-3), (128, 4e-3))]
    try:
        replace(original, timings=[*original.timings, *rows]).save(path)
        plan = plan_for_run(ray_cfg, _algorithm(ray_cfg), measuring=as_cached)
    finally:
        original.save(path)
    assert plan.executor == "ray" and plan.actors == 2
    assert plan.prediction.per_call_s["ChunkTransfer"] == pytest.approx(2e-3 - 8 / 112 * 2e-3)  # extrapolated below 16
    expected = predict_ray(plan.placement, replace(original, timings=[*original.timings, *rows]), cfg.agent, plan.num_envs, 2, 8)
    assert plan.prediction.stage_rates == pytest.approx(expected.stage_rates)


def test_a_thread_count_passed_over_on_a_slow_cached_row_refreshes_the_profile(cached):
    """A profile made while another program held a core has a slow multi-thread learner row, and a
    plan that leaves the thread count free passes that count over for good unless the check looks:
    the plan's Learn backend is measured at its other thread counts too, and one that now runs
    faster than cached by more than the margin refreshes the profile. Slower does not (that is the
    moment's load), and a run that fixes the thread count does not measure them at all."""
    from hetrl.hardware import describe_machine
    from hetrl.profile import Profile, default_path
    from hetrl.protocol import Slot

    cfg, real = cached
    profile = Profile.load(default_path(describe_machine(), cfg.algo, cfg.env, cfg.agent))
    B = cfg.agent.batch_size
    one, two = ("Learn", "torch", "cpu", B, 1), ("Learn", "torch", "cpu", B, 2)
    rows = {t.key: t for t in profile.timings}
    assert one in rows and two in rows  # the profiler measures each host learner at 1 and 2 threads
    loaded = replace(profile, timings=[replace(t, median_s=3 * t.median_s, p10_s=3 * t.p10_s) if t.key == two else t
                                       for t in profile.timings])
    per_step = {**{k: 1e-7 for k in real.prediction.per_env_step_s}, "Learn": 6e-5, "EnvStep": 1e-6, "Act": 1e-6}
    plan = replace(real, placement=replace(real.placement, learn=Slot("torch", "cpu", 1)),
                   prediction=replace(real.prediction, per_env_step_s=per_step))
    asked = []

    def as_profiled(algorithm, keys):  # the machine measures what the quiet profile says
        asked.append(sorted(keys, key=str))
        return [rows[k] for k in keys]

    result = calibrate(loaded, _algorithm(cfg), plan, measuring=as_profiled)
    assert asked[-1] == sorted([one, two], key=str)
    assert result.drifted and [c.key for c in result.undersold] == [two]
    assert "not taken but faster than cached: Learn torch on cpu x16 (2 threads) 0.33x" in result.describe()
    # measured slower than cached now: the load of the moment, not a stale row
    assert not calibrate(profile, _algorithm(cfg), plan, measuring=lambda a, keys: [
        replace(rows[k], p10_s=rows[k].p10_s * (2 if k == two else 1)) for k in keys]).drifted
    # the run fixes the learner's threads: the plan never weighs the others, so they are not measured
    assert not calibrate(loaded, _algorithm(cfg), plan, measuring=as_profiled, threads_free=False).drifted
    assert asked[-1] == [one]
