"""The performance model on hand-computed pipelines, the planner's choices, plan files."""

import json
from dataclasses import replace

import pytest

from hetrl.algos import DQNConfig
from hetrl.cli import main
from hetrl.errors import HetrlError
from hetrl.planner.model import predict
from hetrl.planner.model_local import predict_central, predict_parallel
from hetrl.planner import rule
from hetrl.planner.plan_file import Plan
from hetrl.planner.search import candidates, make_plan
from hetrl.planner.tables import plan_tables
from hetrl.profile import Profile, Timing
from hetrl.protocol import Placement, Slot

US = 1e-6


def synthetic(entries, fingerprint="test", watts=None) -> Profile:
    """A profile from (primitive, backend, device, size, threads, microseconds) rows; with ``watts``
    (device -> W), each row also has measured energy per call (Loop rows never do)."""
    def joules(p, d, us):
        return None if watts is None or p == "Loop" else watts[d] * us * US

    meter = ", ".join("rapl:fake" if d == "cpu" else f"nvml:fake-{d}" for d in watts) if watts else None
    timings = [Timing(p, b, d, n, t, us * US, us * US, us * US, 7, joules(p, d, us), meter)
               for p, b, d, n, t, us in entries]
    return Profile("dqn", "CartPole-v1", {}, {"fingerprint": fingerprint}, "now", timings)


HOST = [
    ("EnvStep", "gymnasium", "cpu", 1, None, 20), ("EnvStep", "gymnasium", "cpu", 4, None, 80),
    ("Act", "numpy", "cpu", 1, None, 30), ("Act", "numpy", "cpu", 4, None, 40),
    ("WeightSync", "numpy", "cpu", 1, None, 100),
    ("ReplayAdd", "numpy", "cpu", 1, None, 10), ("ReplayAdd", "numpy", "cpu", 4, None, 10),
    ("ReplaySample", "numpy", "cpu", 64, None, 50), ("PriorityUpdate", "numpy", "cpu", 64, None, 40),
    ("Learn", "torch", "cpu", 64, 1, 1000), ("Learn", "torch", "cpu", 64, 2, 1500),
    ("Transfer", "numpy->cpu", "cpu", 64, None, 6), ("Loop", "inline", "cpu", 1, None, 8),
]
CPU_PLAN = Placement(Slot("gymnasium"), Slot("numpy"), Slot("numpy"), Slot("torch", "cpu", 1))


def test_prediction_is_the_hand_computed_pipeline():
    agent = DQNConfig(batch_size=64, replay_ratio=0.5, train_every=1, prioritized=True)
    p = predict(CPU_PLAN, synthetic(HOST), agent, num_envs=1)
    # per env step: env 20 + act 30 + add 10 + 0.5 * (sample 50 + transfer 6 + learn 1000 + priority 40)
    # + sync 100 * min(1, 0.5) + loop 8
    assert sum(p.per_env_step_s.values()) == pytest.approx((20 + 30 + 10 + 0.5 * 1096 + 50 + 8) * US)
    assert p.env_steps_per_s == pytest.approx(1 / (666 * US))
    assert p.bottleneck == "Learn" and p.per_call_s["Transfer"] == pytest.approx(6 * US)


def test_a_host_learner_takes_the_in_run_cost_measured_at_its_thread_count():
    """Alone, two threads made the update 1.5x faster; in the loop they cost 1.8x their cost alone
    (idle threads woken by every product), so the plan's cost of a two-thread learner is the loop's,
    and one thread (1.1x in the loop) is the better choice. The ratio measured at a count serves the
    other backends at that count; an old profile with a one-thread row only applies it to all."""
    rows = HOST[:-3] + [("Learn", "torch", "cpu", 64, 1, 1000), ("Learn", "torch", "cpu", 64, 2, 1500),
                        ("Learn", "blas", "cpu", 64, 1, 600), ("Learn", "blas", "cpu", 64, 2, 400),
                        ("Transfer", "numpy->cpu", "cpu", 64, None, 6), ("Loop", "inline", "cpu", 1, None, 8)]
    in_run = [("InRun", "Learn:torch", "cpu", 64, 1, 1100), ("InRun", "Learn:blas", "cpu", 64, 2, 720)]
    agent = DQNConfig(batch_size=64, replay_ratio=1.0, train_every=1)
    profile = synthetic(rows + in_run)
    def learn(slot):
        return predict(replace(CPU_PLAN, learn=slot), profile, agent, num_envs=1).per_call_s["Learn"]
    assert learn(Slot("blas", "cpu", 2)) == pytest.approx(720 * US)
    assert learn(Slot("blas", "cpu", 1)) == pytest.approx(660 * US)  # the one-thread ratio, 1.1x
    assert learn(Slot("torch", "cpu", 2)) == pytest.approx(1.8 * 1500 * US)
    assert make_plan(profile, agent, 1).placement.learn == Slot("blas", "cpu", 1)
    old = synthetic(rows + in_run[:1])
    assert predict(replace(CPU_PLAN, learn=Slot("blas", "cpu", 2)), old, agent, 1).per_call_s["Learn"] == pytest.approx(440 * US)


def test_in_run_costs_scale_every_host_backend_of_their_primitive():
    """InRun rows (the profile's loop job) make a host primitive dearer by in-run / alone cost:
    EnvStep 20 alone and 30 in the loop costs 30 at 1 env and 120 at 4; the ratio measured for
    Act/numpy applies to Act/numba too; a plan with a GPU learner gets none (the ratios were measured
    beside a host learner); a ratio outside 1-4 is clipped."""
    in_run = [("InRun", "EnvStep:gymnasium", "cpu", 1, None, 30), ("InRun", "Act:numpy", "cpu", 1, None, 60),
              ("InRun", "Learn:torch", "cpu", 64, 1, 100_000), ("InRun", "ReplayAdd:numpy", "cpu", 1, None, 5)]
    numba = [("Act", "numba", "cpu", 1, None, 10), ("WeightSync", "numba<-cuda", "cpu", 1, None, 40),
             ("WeightSync", "numba", "cpu", 1, None, 100)]
    profile = synthetic(GPU + numba + [("Transfer", "numpy->cuda", "cuda", 64, None, 20)] + in_run)
    agent = DQNConfig(batch_size=64, replay_ratio=1.0, train_every=1)
    p = predict(CPU_PLAN, profile, agent, num_envs=1)
    assert p.per_call_s["EnvStep"] == pytest.approx(30 * US) and p.per_call_s["Act"] == pytest.approx(60 * US)
    assert p.per_call_s["Learn"] == pytest.approx(4 * 1000 * US)  # 100x measured: clipped to the bound, 4x
    assert p.per_call_s["ReplayAdd"] == pytest.approx(10 * US)  # cheaper in the run than alone: noise, taken as 1x
    assert p.per_call_s["ReplaySample"] == pytest.approx(50 * US)  # no InRun row: as measured alone
    assert predict(CPU_PLAN, profile, agent, num_envs=4).per_call_s["EnvStep"] == pytest.approx(120 * US)
    numba_on_gpu = Placement(Slot("gymnasium"), Slot("numba"), Slot("numpy"), Slot("torch", "cuda"))
    q = predict(numba_on_gpu, profile, agent, num_envs=1)
    assert q.per_call_s["Act"] == pytest.approx(10 * US)  # as alone: the ratio was measured beside a host learner
    assert q.per_call_s["Learn"] == pytest.approx(200 * US) and q.per_call_s["WeightSync"] == pytest.approx(40 * US)
    numba_on_host = replace(numba_on_gpu, learn=Slot("torch", "cpu", 1))
    assert predict(numba_on_host, profile, agent, num_envs=1).per_call_s["Act"] == pytest.approx(20 * US)  # 10 x (60 / 30)
    # where the loop also ran Act/numba (the fastest alone), numba takes its own ratio, numpy still its
    own = synthetic(GPU + numba + [("Transfer", "numpy->cuda", "cuda", 64, None, 20)] + in_run
                    + [("InRun", "Act:numba", "cpu", 1, None, 12)])
    assert predict(numba_on_host, own, agent, num_envs=1).per_call_s["Act"] == pytest.approx(12 * US)
    assert predict(CPU_PLAN, own, agent, num_envs=1).per_call_s["Act"] == pytest.approx(60 * US)


def test_vector_envs_and_bursty_updates():
    agent = DQNConfig(batch_size=64, replay_ratio=0.25, train_every=8)
    p = predict(CPU_PLAN, synthetic(HOST), agent, num_envs=4)
    # per env step: env 80/4 + act 40/4 + add 10/4 + 0.25 * (50 + 6 + 1000) + sync 100 / 8 per iteration / 4 + loop 8/4
    assert sum(p.per_env_step_s.values()) * 1e6 == pytest.approx(20 + 10 + 2.5 + 264 + 100 / 8 / 4 + 2)


def test_unprofiled_sizes_are_interpolated():
    agent = DQNConfig(batch_size=64, replay_ratio=1.0, train_every=1)
    p = predict(CPU_PLAN, synthetic(HOST), agent, num_envs=2)
    assert p.per_call_s["EnvStep"] == pytest.approx(40 * US)  # between 20 (1 env) and 80 (4 envs)
    p8 = predict(CPU_PLAN, synthetic(HOST), agent, num_envs=8)
    assert p8.per_call_s["EnvStep"] == pytest.approx(160 * US)  # extrapolated from the last two


def test_the_fixed_rule_counts_the_cores_this_process_may_use_not_the_machines(monkeypatch):
    """In a container or under taskset (an affinity of one core on a bigger machine) the rule gives
    one learner thread and one actor, as on a one-core machine."""
    import os

    import torch

    monkeypatch.setattr(os, "cpu_count", lambda: 16)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {3}, raising=False)
    big = (10_000_000, 256)  # work far above SMALL_LEARNER_WORK: every usable core
    assert rule.default_placement(torch.device("cpu"), big).learn.threads == 1
    assert rule.default_actors() == 1
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1, 2, 3}, raising=False)
    assert rule.default_placement(torch.device("cpu"), big).learn.threads == 4
    assert rule.default_actors() == 3


def test_the_fixed_rule_gives_a_run_the_compiled_host_backends_that_serve_it():
    """``--plan rule`` on the host: Learn/blas and, for a small conv policy, Act/numba; torch where
    those do not serve (numba: the Nature CNN's large images; blas: a dueling head, a branched
    network) or gain nothing (blas on the Nature CNN), and off the host; without an algorithm,
    torch's baseline."""
    import torch

    from hetrl.algos import make_algorithm
    from hetrl.algos.exit_dqn import ExitDQNConfig
    from hetrl.envs import AtariOptions
    from hetrl.envs.spec import EnvSpec

    vector = EnvSpec("Vector-v0", (4,), True, 2, (), (), (), None, False)
    minatar = EnvSpec("MinAtar/Fake-v0", (4, 10, 10), True, 3, (), (), (), None, False, obs_dtype="uint8")
    atari = EnvSpec("ALE/Fake-v5", (4, 84, 84), True, 4, (), (), (), None, False, obs_dtype="uint8",
                    atari=AtariOptions())
    cpu, work = torch.device("cpu"), (1, 1)

    def placed(algo, spec, device=cpu, **agent):
        algorithm = make_algorithm(algo, spec, (ExitDQNConfig if algo == "exit-dqn" else DQNConfig)(**agent))
        p = rule.default_placement(device, work, 1, mlp_policy=algorithm.mlp_networks(), algorithm=algorithm)
        return p.learn.backend, p.act.backend

    assert placed("dqn", vector) == ("blas", "numpy")
    assert placed("dqn", minatar) == ("blas", "numba")
    assert placed("dqn", atari) == ("torch", "torch")  # blas gains nothing on the Nature CNN; numba: small images only
    assert placed("dqn", vector, dueling=True) == ("torch", "numpy")
    assert placed("exit-dqn", minatar) == ("torch", "numba")
    assert placed("dqn", minatar, device=torch.device("meta")) == ("torch", "torch")  # not the host
    baseline = rule.default_placement(cpu, work, 1, mlp_policy=False)
    assert (baseline.learn.backend, baseline.act.backend) == ("torch", "torch")


def test_the_fixed_rule_graphs_a_cuda_learner_and_feeds_it_from_the_host_replay():
    """``--plan rule`` with the learner on CUDA (a placement: no GPU needed to make it): Learn/cudagraph
    where it captures the update, the replay on the host (numpy, or the frame replay for Atari), a
    small conv policy acting with numba on the host, the Nature CNN with torch on the GPU; torch's
    learner and a device replay where the graph does not serve (a branched network), and without an
    algorithm (the baseline)."""
    import torch

    from hetrl.algos import make_algorithm
    from hetrl.algos.exit_dqn import ExitDQNConfig
    from hetrl.envs import AtariOptions
    from hetrl.envs.spec import EnvSpec

    vector = EnvSpec("Vector-v0", (4,), True, 2, (), (), (), None, False)
    minatar = EnvSpec("MinAtar/Fake-v0", (4, 10, 10), True, 3, (), (), (), None, False, obs_dtype="uint8")
    atari = EnvSpec("ALE/Fake-v5", (4, 84, 84), True, 4, (), (), (), None, False, obs_dtype="uint8",
                    atari=AtariOptions())
    cuda = torch.device("cuda")

    def placed(algo, spec):
        algorithm = make_algorithm(algo, spec, (ExitDQNConfig if algo == "exit-dqn" else DQNConfig)())
        p = rule.default_placement(cuda, (1, 1), mlp_policy=algorithm.mlp_networks(), frames=spec.atari is not None,
                                   algorithm=algorithm)
        return p.learn.backend, f"{p.replay.backend} on {p.replay.device}", f"{p.act.backend} on {p.act.device}"

    assert placed("dqn", vector) == ("cudagraph", "numpy on cpu", "numpy on cpu")
    assert placed("dqn", minatar) == ("cudagraph", "numpy on cpu", "numba on cpu")
    assert placed("dqn", atari) == ("cudagraph", "frames-numpy on cpu", "torch on cuda")
    assert placed("exit-dqn", minatar) == ("torch", "torch on cuda", "torch on cuda")
    baseline = rule.default_placement(cuda, (1, 1), mlp_policy=False)
    assert (baseline.learn.backend, baseline.replay.device) == ("torch", "cuda")


def test_planner_takes_several_learner_threads_only_where_they_pay_clearly():
    """Slower on 2 threads (1,500 µs against 1,000), or faster by less than MULTI_THREAD_GAIN (900):
    not a candidate at all (threads waiting on a busy core are a trap); 600 µs: chosen."""
    agent = DQNConfig(batch_size=64, replay_ratio=1.0, train_every=1)
    for two_threads in (1500, 900):
        rows = [r if r[:5] != ("Learn", "torch", "cpu", 64, 2) else (*r[:5], two_threads) for r in HOST]
        plan = make_plan(synthetic(rows), agent, 1)
        assert plan.placement == CPU_PLAN
        assert all(c.placement.learn.threads == 1 for c, _ in plan.runner_ups if c.placement.learn.device == "cpu")
    rows = [r if r[:5] != ("Learn", "torch", "cpu", 64, 2) else (*r[:5], 600) for r in HOST]
    assert make_plan(synthetic(rows), agent, 1).placement.learn == Slot("torch", "cpu", 2)
    assert make_plan(synthetic(HOST), agent, 1, learn_threads=2).placement.learn == Slot("torch", "cpu", 2)  # asked for


def test_the_thread_gate_reads_the_fastest_tenth_not_the_median():
    """A 2-thread row whose median a slow spell pushed up (900 µs against 1,000 on one thread: under
    the gain) while its fastest blocks ran at 600 is a candidate, and chosen; one whose fastest
    blocks too are under the gain is not."""
    from dataclasses import replace as swapped

    agent = DQNConfig(batch_size=64, replay_ratio=1.0, train_every=1)
    base = synthetic(HOST)

    def two_threads(median_us, p10_us):
        return [swapped(t, median_s=median_us * US, p10_s=p10_us * US, p90_s=3 * median_us * US)
                if t.key == ("Learn", "torch", "cpu", 64, 2) else t for t in base.timings]

    spell = synthetic([])
    spell.timings = two_threads(900, 600)
    assert make_plan(spell, agent, 1).placement.learn == Slot("torch", "cpu", 2)
    marginal = synthetic([])
    marginal.timings = two_threads(900, 850)
    assert make_plan(marginal, agent, 1).placement.learn.threads == 1


GPU = HOST + [
    ("Act", "torch", "cuda", 1, None, 60), ("Act", "torch", "cuda", 4, None, 60), ("WeightSync", "torch", "cuda", 1, None, 30),
    ("Learn", "torch", "cuda", 64, None, 200), ("WeightSync", "numpy<-cuda", "cpu", 1, None, 40),
]


def test_fast_gpu_learner_wins_when_transfers_are_cheap():
    profile = synthetic(GPU + [("Transfer", "numpy->cuda", "cuda", 64, None, 20)])
    plan = make_plan(profile, DQNConfig(batch_size=64, replay_ratio=1.0, train_every=1), 1)
    assert plan.placement.learn == Slot("torch", "cuda")
    assert plan.placement.replay == Slot("numpy", "cpu") and plan.prediction.per_call_s["Transfer"] == pytest.approx(20 * US)


def test_weight_syncs_are_costed_from_the_learners_device():
    agent = DQNConfig(batch_size=64, replay_ratio=1.0, train_every=1)
    gpu_learner = Placement(Slot("gymnasium"), Slot("numpy"), Slot("numpy"), Slot("torch", "cuda"))
    profile = synthetic(GPU + [("Transfer", "numpy->cuda", "cuda", 64, None, 20)])
    assert predict(gpu_learner, profile, agent, 1).per_call_s["WeightSync"] == pytest.approx(40 * US)  # not the host copy (100)
    parallel = predict_parallel(gpu_learner, profile, agent, 1, actors=1, cores=2)
    assert parallel.per_call_s["WeightFetch"] == pytest.approx(100 * US)  # actors copy from shared memory, host to host
    slow = [r for r in GPU if r[1] != "numpy<-cuda"] + [("WeightSync", "numpy<-cuda", "cpu", 1, None, 2_000),
                                                      ("Transfer", "numpy->cuda", "cuda", 64, None, 20)]
    plan = make_plan(synthetic(slow), agent, 1, learn_device="cuda")
    assert plan.placement.act == Slot("torch", "cuda")  # acting beside the learner avoids the slow copy


def test_slow_transfers_keep_the_learner_on_the_host():
    profile = synthetic(GPU + [("Transfer", "numpy->cuda", "cuda", 64, None, 5_000)])
    plan = make_plan(profile, DQNConfig(batch_size=64, replay_ratio=1.0, train_every=1), 1)
    assert plan.placement.learn.device == "cpu"


def test_replay_on_the_gpu_avoids_the_transfer():
    profile = synthetic(GPU + [("Transfer", "numpy->cuda", "cuda", 64, None, 5_000), ("Transfer", "cuda->cuda", "cuda", 64, None, 4),
                               ("ReplayAdd", "torch", "cuda", 1, None, 30), ("ReplaySample", "torch", "cuda", 64, None, 40)])
    plan = make_plan(profile, DQNConfig(batch_size=64, replay_ratio=1.0, train_every=1), 1)
    assert plan.placement.replay == Slot("torch", "cuda") and plan.placement.learn.device == "cuda"
    assert plan.prediction.per_call_s["Transfer"] == pytest.approx(4 * US)  # already on the device


def test_pinning_the_learner():
    profile = synthetic(GPU + [("Transfer", "numpy->cuda", "cuda", 64, None, 20)])
    agent = DQNConfig(batch_size=64, replay_ratio=1.0, train_every=1)
    assert make_plan(profile, agent, 1, learn_device="cpu").placement.learn.device == "cpu"
    assert make_plan(profile, agent, 1, learn_threads=2).placement.learn.device == "cuda"
    assert {c.learn for c in candidates(profile, learn_device="cpu", learn_threads=2)} == {Slot("torch", "cpu", 2)}


def test_missing_measurements_and_objectives():
    with pytest.raises(HetrlError, match="no measurement of Act/numpy on cpu.*profile again"):
        predict(CPU_PLAN, synthetic([r for r in HOST if r[0] != "Act"]), DQNConfig(), 1)
    with pytest.raises(HetrlError, match="objective efficiency needs measured energy.*hetrl devices"):
        make_plan(synthetic(HOST), DQNConfig(), 1, objective="efficiency")
    with pytest.raises(HetrlError, match="objective 'speed' is unknown"):
        make_plan(synthetic(HOST), DQNConfig(), 1, objective="speed")


def test_plan_file_round_trip(tmp_path):
    two_threads_pay = [r if r[:5] != ("Learn", "torch", "cpu", 64, 2) else (*r[:5], 600) for r in HOST]
    plan = make_plan(synthetic(two_threads_pay), DQNConfig(batch_size=64), 1)
    data = json.loads(plan.save(tmp_path / "plan.json").read_text())
    assert data["predicted"]["bottleneck"] == "Learn" and len(data["runner_ups"]) >= 1
    loaded = Plan.load(tmp_path / "plan.json")
    assert loaded.placement == plan.placement
    # the prediction comes back with the plan, so a run of a saved plan shows predicted beside measured
    assert loaded.prediction.env_steps_per_s == pytest.approx(plan.prediction.env_steps_per_s, rel=1e-4)
    assert loaded.prediction.per_call_s.keys() == plan.prediction.per_call_s.keys()
    # ... but not once the choice it was made for is edited by hand
    data["placement"]["learn"]["threads"] = 3 - plan.placement.learn.threads
    (tmp_path / "plan.json").write_text(json.dumps(data))
    assert Plan.load(tmp_path / "plan.json").prediction is None


@pytest.mark.parametrize("edit, message", [
    (lambda d: d["placement"]["act"].update(backend="nupmy"), "no 'nupmy' implementation of Act"),
    (lambda d: d["placement"]["learn"].update(device="cuda:7"), "device 'cuda:7' is not available"),
    (lambda d: d["placement"]["act"].update(device="cuda"), "is not available|host only"),
    (lambda d: d["placement"].pop("replay"), "needs exactly the groups"),
    (lambda d: d["placement"]["learn"].update(threads=0), "threads must be a positive integer"),
    (lambda d: d.update(format="v0"), "is not a hetrl plan"),
    (lambda d: d.pop("algo"), "lacks algo"),
])
def test_plan_validation_errors(tmp_path, edit, message):
    path = make_plan(synthetic(HOST), DQNConfig(batch_size=64), 1).save(tmp_path / "plan.json")
    data = json.loads(path.read_text())
    edit(data)
    path.write_text(json.dumps(data))
    with pytest.raises(HetrlError, match=message):
        Plan.load(path)


def test_training_uses_a_given_plan(tmp_path, capfd):
    plan = make_plan(synthetic(HOST), DQNConfig(batch_size=16), 1)
    plan.placement = Placement(Slot("gymnasium"), Slot("torch", "cpu"), Slot("torch", "cpu"), Slot("torch", "cpu", 1))
    path = plan.save(tmp_path / "plan.json")
    run = tmp_path / "run"
    args = ["train", "dqn", "CartPole-v1", "--steps", "300", "--plan", str(path), "--run-dir", str(run), "--no-progress",
            "--set", "hidden=8,8", "--set", "batch_size=16", "--set", "learning_starts=100", "--set", "eval_episodes=2"]
    assert main(args) == 0
    summary = json.loads((run / "summary.json").read_text())
    assert summary["placement"]["Act"] == "torch on cpu" and summary["placement"]["ReplayAdd"] == "torch on cpu"
    assert Plan.load(run / "plan.json").placement == plan.placement
    assert main(["train", "ddpg", "Pendulum-v1", "--plan", str(path), "--run-dir", str(tmp_path / "x")]) == 2
    assert "is for dqn on CartPole-v1" in capfd.readouterr().err


def test_auto_plan_profiles_once_and_predicts(tmp_path, monkeypatch, capfd):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    common = ["--steps", "300", "--no-progress", "--set", "hidden=8,8", "--set", "batch_size=16",
              "--set", "learning_starts=100", "--set", "eval_episodes=2", "--set", "train_every=1"]
    assert main(["train", "dqn", "CartPole-v1", "--run-dir", str(tmp_path / "a"), *common]) == 0
    assert "profiling dqn on CartPole-v1" in capfd.readouterr().err
    assert main(["train", "dqn", "CartPole-v1", "--run-dir", str(tmp_path / "b"), *common]) == 0
    captured = capfd.readouterr()
    assert "profiling dqn" not in captured.err  # the second run reuses the cached profile
    assert "predicted" in captured.out  # the summary (stdout) shows the prediction
    summary = json.loads((tmp_path / "b" / "summary.json").read_text())
    predicted = json.loads((tmp_path / "b" / "plan.json").read_text())["predicted"]
    # the rate is the inverse of the per-env-step costs the plan lists, and the summary reports the plan's
    assert predicted["env_steps_per_s"] == pytest.approx(1e6 / sum(predicted["us_per_env_step"].values()), rel=1e-3)
    assert summary["predicted_env_steps_per_s"] == pytest.approx(  # at the share of a core measured at the start
        predicted["env_steps_per_s"] * summary["predicted_cpu_share"], rel=1e-4)
    assert summary["learning_env_steps_per_s"] > 0


# --- parallel executors: a pipeline of concurrent stages -----------------------------------------
def test_parallel_prediction_is_the_hand_computed_pipeline():

    agent = DQNConfig(batch_size=64, replay_ratio=0.25, train_every=1)
    p = predict_parallel(CPU_PLAN, synthetic(HOST), agent, num_envs=1, actors=2, cores=2)
    # actor work per env step: env 20 + act 30 + loop 8 + fetch 100 * min(1, 0.25) = 83 µs
    # learner work: add 10 + 0.25 * (sample 50 + transfer 6 + learn 1000) + publish 100 * 0.25 = 299 µs
    assert p.stage_rates["actors"] == pytest.approx(2 / (83 * US))
    assert p.stage_rates["learner"] == pytest.approx(1 / (299 * US))
    assert p.stage_rates["cores"] == pytest.approx(2 / (382 * US))
    assert p.bottleneck == "learner" and p.env_steps_per_s == pytest.approx(1 / (299 * US))


def test_planner_runs_actors_in_parallel_when_both_sides_are_busy():
    # a slow env (400 µs) beside a learner of 1,000 µs at ratio 0.25: inline pays 400 + 250 + ... per
    # step, the local executor overlaps them
    slow_env = [r if r[0] != "EnvStep" else (*r[:5], r[5] * 20) for r in HOST]
    agent = DQNConfig(batch_size=64, replay_ratio=0.25, train_every=1)
    plan = make_plan(synthetic(slow_env), agent, 1, executors=("inline", "local"), cores=4)
    # the learner is the bottleneck from 2 actors on: add 10 + 0.25 * (sample 50 + transfer 6 + learn 1000)
    # + publish 100 * 0.25 = 299 µs an env step; the fewest actors that reach it win
    assert plan.executor == "local" and plan.actors == 2
    assert plan.prediction.env_steps_per_s == pytest.approx(1 / (299 * US))
    # inline pays for everything in turn: env 400 + act 30 + add 10 + 0.25 * 1056 + sync 25 + loop 8 = 737 µs
    assert predict(CPU_PLAN, synthetic(slow_env), agent, num_envs=1).env_steps_per_s == pytest.approx(1 / (737 * US))
    assert all(p.env_steps_per_s <= plan.prediction.env_steps_per_s for _, p in plan.runner_ups)


def test_actor_start_up_is_weighed_over_the_runs_length(tmp_path):
    slow_env = [r if r[0] != "EnvStep" else (*r[:5], r[5] * 20) for r in HOST]
    profile = synthetic(slow_env + [("ActorStart", "local", "cpu", 2, None, 3_000_000)])  # 3 s to start the actors
    agent = DQNConfig(batch_size=64, replay_ratio=0.25, train_every=1)
    long_run = make_plan(profile, agent, 1, executors=("inline", "local"), cores=4, steps=1_000_000)
    short_run = make_plan(profile, agent, 1, executors=("inline", "local"), cores=4, steps=5_000)
    assert long_run.executor == "local" and short_run.executor == "inline"
    local = long_run.prediction
    assert local.startup_s == pytest.approx(3.0)
    assert local.run_env_steps_per_s(5_000) == pytest.approx(5_000 / (3.0 + 5_000 / local.env_steps_per_s))
    assert short_run.prediction.startup_s == 0 and short_run.prediction.env_steps_per_s < local.env_steps_per_s
    assert make_plan(profile, agent, 1, executors=("inline", "local"), cores=4).executor == "local"  # no length: the rate
    loaded = Plan.load(long_run.save(tmp_path / "plan.json"))
    assert loaded.steps == 1_000_000 and loaded.prediction.startup_s == pytest.approx(3.0)
    assert "starting and stopping the actors: 3.0 s" in plan_tables(long_run)[0].caption


def test_planner_keeps_inline_where_a_learner_dominates_on_few_cores():
    agent = DQNConfig(batch_size=64, replay_ratio=1.0, train_every=1)
    plan = make_plan(synthetic(HOST), agent, 1, executors=("inline", "local"), cores=1)
    # one core: the local executor's processes share it and pay the extra weight fetches
    assert plan.executor == "inline"


def test_plan_files_carry_executor_and_actors(tmp_path):
    agent = DQNConfig(batch_size=64, replay_ratio=0.25, train_every=1)
    plan = make_plan(synthetic(HOST), agent, 1, executors=("local",), actors=2, cores=2)
    path = plan.save(tmp_path / "plan.json")
    loaded = Plan.load(path)
    assert (loaded.executor, loaded.actors) == ("local", 2)
    data = json.loads(path.read_text())
    assert data["predicted"]["stage_env_steps_per_s"]["learner"] == pytest.approx(1 / (299 * US), rel=1e-4)  # as above
    data["actors"] = 0
    path.write_text(json.dumps(data))
    with pytest.raises(HetrlError, match="actors must be a whole number, at least 1"):
        Plan.load(path)
    data["executor"], data["actors"] = "threads", 1
    path.write_text(json.dumps(data))
    with pytest.raises(HetrlError, match="executor must be one of"):
        Plan.load(path)


def test_oversubscribed_learner_threads_are_costed_as_one():

    two_threads = Placement(Slot("gymnasium"), Slot("numpy"), Slot("numpy"), Slot("torch", "cpu", 2))
    fast_two = [r if r[:5] != ("Learn", "torch", "cpu", 64, 2) else (*r[:5], 600) for r in HOST]  # 2 threads: 600 µs
    agent = DQNConfig(batch_size=64, replay_ratio=1.0, train_every=1)
    roomy = predict_parallel(two_threads, synthetic(fast_two), agent, 1, actors=1, cores=4)
    crowded = predict_parallel(two_threads, synthetic(fast_two), agent, 1, actors=1, cores=2)
    assert roomy.per_call_s["Learn"] == pytest.approx(600 * US)
    assert crowded.per_call_s["Learn"] == pytest.approx(1000 * US)  # the 1-thread cost
    plan = make_plan(synthetic(fast_two), agent, 1, executors=("inline", "local"), cores=2)
    assert not (plan.executor == "local" and plan.placement.learn.threads == 2)



# --- central inference: a cycle of answers, steps and lumps of updates -----------------------------
TRANSPORT = [("InferenceTrip", "pipe", "cpu", 1, None, 30), ("InferenceServe", "pipe", "cpu", 1, None, 5)]


def test_central_inference_prediction_is_the_hand_computed_cycle():
    agent = DQNConfig(batch_size=64, replay_ratio=0.25, train_every=1)
    p = predict_parallel(CPU_PLAN, synthetic(HOST + TRANSPORT), agent, num_envs=1, actors=2, cores=4, inference="central")
    # a cycle answers 2 actors: Act at 2 envs (30 + 10/3, between 1 and 4) + 2 x serve 5 + sync 100 x 0.5 updates
    answer = 30 + 10 / 3 + 10 + 50
    a = 20 + 8 + 30  # an actor: env, loop, round trip
    d, u = 2 * 10, 50 + 6 + 1000  # the learner: two ring drains; an update (sample, transfer, learn)
    lumps = 0.5 * max(a, d) + 0.5 * max(a, d + u)  # 0.5 updates a cycle: every other one stalls on an update
    assert p.stage_rates["actors"] == pytest.approx(2 / ((answer + a) * US))
    assert p.stage_rates["learner"] == pytest.approx(2 / ((answer + d + 0.5 * u) * US))
    assert p.stage_rates["lockstep"] == pytest.approx(2 / ((answer + lumps) * US))
    assert p.stage_rates["cores"] == pytest.approx(4 * 2 / ((2 * 28 + answer + d + 0.5 * u) * US))
    assert p.bottleneck == "lockstep" and p.env_steps_per_s == pytest.approx(2 / ((answer + lumps) * US))
    assert p.per_call_s["Act"] == pytest.approx((30 + 10 / 3) * US) and p.per_env_step_s["Act"] == pytest.approx((30 + 10 / 3) / 2 * US)
    # a whole update every cycle: no lumps, the learner's work sets the pace
    steady = predict_central(CPU_PLAN, synthetic(HOST + TRANSPORT), replace(agent, replay_ratio=0.5), 1, 2, 4)
    assert "lockstep" not in steady.stage_rates and steady.bottleneck == "learner"
    # energy: the batched Act is costed at its batch size, answering at the host's power
    metered = predict_central(CPU_PLAN, synthetic(HOST + TRANSPORT, watts={"cpu": 10.0}), agent, 1, 2, 4)
    assert metered.joules_per_env_step == pytest.approx(10.0 * sum(metered.per_env_step_s.values()))


def test_planner_batches_inference_centrally_where_acting_is_dear_in_each_actor():
    # a policy of 300 µs a call on 1 env but 320 on 4 (batching is nearly free), a cheap learner
    dear_act = [r if r[0] != "Act" else (*r[:5], r[5] + 290 - (20 if r[3] == 4 else 0)) for r in HOST]
    cheap_learner = [r if r[0] != "Learn" else (*r[:5], 40) for r in dear_act]
    agent = DQNConfig(batch_size=64, replay_ratio=0.25, train_every=1)
    plan = make_plan(synthetic(cheap_learner + TRANSPORT), agent, 4, executors=("inline", "local"), cores=4)
    assert (plan.executor, plan.inference) == ("local", "central") and plan.actors >= 2
    assert "central inference" in plan_tables(plan)[0].title
    # acting as cheap as the default: every actor keeps its own policy
    plan = make_plan(synthetic(HOST + TRANSPORT), agent, 1, executors=("local",), cores=4)
    assert plan.inference == "actor"
    # asked for by name
    plan = make_plan(synthetic(HOST + TRANSPORT), agent, 1, executors=("local",), cores=4, inference=("central",))
    assert plan.inference == "central"
    # a profile without the round trip cannot cost central inference: not offered, not an error
    assert make_plan(synthetic(HOST), agent, 1, executors=("local",), cores=4).inference == "actor"


def test_plan_files_carry_inference(tmp_path):
    agent = DQNConfig(batch_size=64, replay_ratio=0.25, train_every=1)
    plan = make_plan(synthetic(HOST + TRANSPORT), agent, 1, executors=("local",), actors=2, cores=2, inference=("central",))
    path = plan.save(tmp_path / "plan.json")
    loaded = Plan.load(path)
    assert loaded.inference == "central" and loaded.prediction is not None
    assert loaded.prediction.env_steps_per_s == pytest.approx(plan.prediction.env_steps_per_s, rel=1e-4)
    data = json.loads(path.read_text())
    data["inference"] = "actor"  # a hand edit of the choice drops the prediction made for the other one
    path.write_text(json.dumps(data))
    assert Plan.load(path).prediction is None
    for inference, executor, message in (("centre", "local", "inference must be one of actor, central"),
                                         ("central", "inline", "central inference runs with the local executor")):
        data["inference"], data["executor"] = inference, executor
        path.write_text(json.dumps(data))
        with pytest.raises(HetrlError, match=message):
            Plan.load(path)
    old = json.loads(make_plan(synthetic(HOST), agent, 1).save(tmp_path / "old.json").read_text())
    old.pop("inference")  # a plan written before central inference: acts in the actors, prediction kept
    (tmp_path / "old.json").write_text(json.dumps(old))
    old_plan = Plan.load(tmp_path / "old.json")
    assert old_plan.inference == "actor"
    assert old_plan.prediction.env_steps_per_s == pytest.approx(old["predicted"]["env_steps_per_s"], rel=1e-4)


def test_planner_chooses_envs_per_actor_where_the_run_leaves_it_open(tmp_path):
    # stepping 4 envs costs 25 µs, not 4 x 20: more envs per iteration amortise the env and the policy
    cheap_vector = [r if r[:2] != ("EnvStep", "gymnasium") or r[3] != 4 else (*r[:5], 25) for r in HOST]
    agent = DQNConfig(batch_size=64, replay_ratio=0.25, train_every=1)
    profile = synthetic(cheap_vector + TRANSPORT)
    assert make_plan(profile, agent, 1, executors=("inline", "local"), cores=2).num_envs == 1  # the run's own count
    plan = make_plan(profile, agent, 0, executors=("inline", "local"), cores=2)
    assert plan.num_envs > 1
    assert plan.prediction.env_steps_per_s == pytest.approx(max(
        (predict(plan.placement, profile, agent, n).env_steps_per_s if plan.executor == "inline" else
         predict_parallel(plan.placement, profile, agent, n, plan.actors, 2, inference=plan.inference).env_steps_per_s)
        for n in (1, 2, 4, 8, 16)))
    assert f"{plan.num_envs} envs" in plan_tables(plan)[0].title
    loaded = Plan.load(plan.save(tmp_path / "plan.json"))
    assert loaded.num_envs == plan.num_envs
    assert loaded.prediction.env_steps_per_s == pytest.approx(plan.prediction.env_steps_per_s, rel=1e-4)
    data = json.loads((tmp_path / "plan.json").read_text())
    data["num_envs"] = 0
    (tmp_path / "plan.json").write_text(json.dumps(data))
    with pytest.raises(HetrlError, match="num_envs must be a whole number, at least 1"):
        Plan.load(tmp_path / "plan.json")


def test_a_run_takes_the_plans_env_count_when_its_own_is_open(tmp_path):
    plan = make_plan(synthetic(HOST), DQNConfig(batch_size=16), 1)
    plan.num_envs = 3
    path = plan.save(tmp_path / "plan.json")
    common = ["--steps", "301", "--plan", str(path), "--no-progress", "--set", "hidden=8,8", "--set", "batch_size=16",
              "--set", "learning_starts=100", "--set", "eval_episodes=2"]
    assert main(["train", "dqn", "CartPole-v1", "--run-dir", str(tmp_path / "open"), "--set", "num_envs=0", *common]) == 0
    assert main(["train", "dqn", "CartPole-v1", "--run-dir", str(tmp_path / "own"), *common]) == 0
    steps = {run: json.loads((tmp_path / run / "summary.json").read_text())["env_steps"] for run in ("open", "own")}
    assert steps["open"] == 303  # three envs a step
    assert steps["own"] == 301  # the config's one env


def test_energy_per_env_step_is_the_hand_computed_sum():
    agent = DQNConfig(batch_size=64, replay_ratio=0.5, train_every=1, prioritized=True)
    p = predict(CPU_PLAN, synthetic(HOST, watts={"cpu": 10.0}), agent, num_envs=1)
    # 10 W on every host primitive, the loop included (at the host primitives' median power): 10 W x 666 µs per step
    assert p.joules_per_env_step == pytest.approx(10.0 * 666 * US)
    assert predict(CPU_PLAN, synthetic(HOST), agent, 1).joules_per_env_step is None


def test_efficiency_needs_the_hosts_energy():
    rows = GPU + [("Transfer", "numpy->cuda", "cuda", 64, None, 20)]
    gpu_only = synthetic(rows, watts={"cpu": 70.0, "cuda": 70.0})  # a GPU meter's idle watts, during host work too
    gpu_only.timings = [replace(t, energy_meters="nvml:gpu0" if t.energy_meters else None) for t in gpu_only.timings]
    with pytest.raises(HetrlError, match="needs the host CPU's energy, but only nvml:gpu0 measured"):
        make_plan(gpu_only, DQNConfig(batch_size=64), 1, objective="efficiency")
    plan = make_plan(gpu_only, DQNConfig(batch_size=64), 1)  # throughput plans still show the energy, with its meter
    assert "measured by nvml:gpu0" in plan_tables(plan)[0].caption


def test_efficiency_objective_prefers_the_frugal_device():
    # a GPU learner 5x faster than the host but drawing 300 W against 20 W: throughput takes the GPU,
    # efficiency the host
    rows = GPU + [("Transfer", "numpy->cuda", "cuda", 64, None, 20)]
    profile = synthetic(rows, watts={"cpu": 20.0, "cuda": 300.0})
    agent = DQNConfig(batch_size=64, replay_ratio=1.0, train_every=1)
    fast = make_plan(profile, agent, 1, objective="throughput")
    frugal = make_plan(profile, agent, 1, objective="efficiency")
    assert fast.placement.learn.device == "cuda" and frugal.placement.learn.device == "cpu"
    assert frugal.prediction.joules_per_env_step < fast.prediction.joules_per_env_step
    assert frugal.to_dict()["predicted"]["joules_per_env_step"] == pytest.approx(frugal.prediction.joules_per_env_step)


def test_a_plan_file_and_a_device_that_disagree_are_an_error(tmp_path, monkeypatch):
    """A plan file puts Learn somewhere; --device asking for another place is refused, not ignored."""
    import shutil
    from pathlib import Path

    from hetrl.config import make_config
    from hetrl.planner.choice import resolve

    plan = tmp_path / "plan.json"
    shutil.copy(Path(__file__).parent / "data/checkpoints_0.1.0/dqn_inline/plan.json", plan)  # learn: torch on cpu
    agreeing = make_config("dqn", "CartPole-v1", overrides=[f"plan={plan}", "device=cpu"])
    from hetrl.algos import make_algorithm
    from hetrl.envs import env_spec

    algo = make_algorithm("dqn", env_spec("CartPole-v1"), agreeing.agent)
    run = resolve(agreeing, algo)
    assert (run.executor, run.actors, run.placement.learn.device) == ("inline", 0, "cpu")
    import torch

    import hetrl.planner.choice as choice

    monkeypatch.setattr(choice, "resolve_device", lambda name: torch.device(name))  # as on a machine with a GPU
    with pytest.raises(HetrlError, match="puts Learn on cpu, but device cuda was asked for; drop --device"):
        resolve(make_config("dqn", "CartPole-v1", overrides=[f"plan={plan}", "device=cuda"]), algo)


def test_the_run_plan_takes_what_the_config_leaves_open():
    from pathlib import Path

    from hetrl.algos import make_algorithm
    from hetrl.config import make_config
    from hetrl.envs import env_spec
    from hetrl.planner.choice import resolve

    plan = Plan.load(Path(__file__).parent / "data/checkpoints_0.1.0/dqn_local/plan.json")  # local, 1 actor
    algo = make_algorithm("dqn", env_spec("CartPole-v1"), DQNConfig())
    open_cfg = make_config("dqn", "CartPole-v1", overrides=["executor=auto", "num_envs=0"])
    run = resolve(open_cfg, algo, plan=plan)
    assert (run.executor, run.actors, run.inference, run.num_envs) == ("local", plan.actors, "actor", plan.num_envs)
    named = make_config("dqn", "CartPole-v1", overrides=["executor=local", "actors=3", "num_envs=2", "inference=central"])
    run = resolve(named, algo, plan=plan)
    assert (run.executor, run.actors, run.inference, run.num_envs) == ("local", 3, "central", 2)
    inline = resolve(make_config("dqn", "CartPole-v1", overrides=["executor=inline"]), algo, plan=plan)
    assert (inline.executor, inline.actors, inline.inference) == ("inline", 0, "actor")


def torch_acting(rows):
    """HOST as a conv network's profile has it: no numpy Act (it refuses conv networks), torch instead."""
    out = [r for r in rows if not (r[0] in ("Act", "WeightSync") and r[1] == "numpy")]
    return out + [("Act", "torch", "cpu", 1, None, 200), ("Act", "torch", "cpu", 4, None, 220),
                  ("WeightSync", "torch", "cpu", 1, None, 150)]


def test_actor_inference_runs_the_profiled_host_act_slot():
    """A conv network's profile has no numpy Act: the local executor's actors act with the torch
    slot the placement names (each actor builds it), costed as measured."""
    profile = synthetic(torch_acting(HOST) + [("ActorStart", "local", "cpu", 2, None, 1)])
    agent = DQNConfig(batch_size=64, replay_ratio=0.05, train_every=1)
    plan = make_plan(profile, agent, num_envs=1, executors=("local",), actors=1, inference=("actor",))
    assert plan.executor == "local" and plan.inference == "actor" and plan.placement.act == Slot("torch", "cpu")
    assert plan.prediction.per_call_s["Act"] == pytest.approx(200 * US)


def test_atari_stacks_get_the_frame_replay_when_it_was_measured():
    """The model counts time only; a plain replay of whole stacks costs 2C times the memory."""
    frames = [("ReplayAdd", "frames-numpy", "cpu", n, None, 500) for n in (1, 4)] + [
        ("ReplaySample", "frames-numpy", "cpu", 64, None, 400), ("PriorityUpdate", "frames-numpy", "cpu", 64, None, 40)]
    profile = synthetic(HOST + frames)
    agent = DQNConfig(batch_size=64, replay_ratio=0.25, train_every=1)
    assert make_plan(profile, agent, num_envs=1).placement.replay.backend == "numpy"  # faster, by time alone
    assert make_plan(profile, agent, num_envs=1, frame_replay=True).placement.replay.backend == "frames-numpy"
    assert {p.replay.backend for p in candidates(profile, frame_replay=True)} == {"frames-numpy"}
    assert {p.replay.backend for p in candidates(synthetic(HOST), frame_replay=True)} == {"numpy"}  # none measured


def test_ray_prediction_adds_each_chunks_transfer_to_the_actors():
    from hetrl.planner.model_ray import predict_ray

    agent = DQNConfig(batch_size=64, replay_ratio=0.25, train_every=1)
    assert predict_ray(CPU_PLAN, synthetic(HOST), agent, 1, actors=2, chunk_steps=16) is None  # no cluster was profiled
    rows = HOST + [("ChunkTransfer", "ray:nodes", "cpu", 16, None, 16_000), ("ChunkTransfer", "ray:nodes", "cpu", 128, None, 32_000),
                   ("ChunkTransfer", "ray:local", "cpu", 16, None, 10)]
    p = predict_ray(CPU_PLAN, synthetic(rows), agent, 1, actors=2, chunk_steps=16)
    # actor work per env step: 83 µs as in the local executor, + the chunk across nodes 16,000 / 16 = 1,000 µs
    assert p.per_call_s["ChunkTransfer"] == pytest.approx(16_000 * US)
    assert p.stage_rates == pytest.approx({"actors": 2 / (1083 * US), "learner": 1 / (299 * US)})
    assert p.bottleneck == "actors"
    # a chunk of 64 steps (interpolated: 16,000 + 48/112 x 16,000 µs) amortises it: 83 + 22,857 / 64 = 440 µs
    big = predict_ray(CPU_PLAN, synthetic(rows), agent, 1, actors=2, chunk_steps=64)
    assert big.stage_rates["actors"] == pytest.approx(2 / ((83 + (16_000 + 16_000 * 48 / 112) / 64) * US))
    assert big.bottleneck == "learner" and big.env_steps_per_s > p.env_steps_per_s


def test_ray_prediction_of_a_frame_replay_costs_the_frame_chunks_that_travel():
    """A frame replay's chunks are frames and frame ids (runtime/frame_chunks.py): costed from the
    rows measured of such chunks, never from whole-stack chunks' rows."""
    from dataclasses import replace

    from hetrl.planner.model_ray import predict_ray

    agent = DQNConfig(batch_size=64, replay_ratio=0.25, train_every=1)
    frames_plan = replace(CPU_PLAN, replay=Slot("frames-numpy", "cpu"))
    replay = [("ReplayAdd", "frames-numpy", "cpu", n, None, 10) for n in (1, 4)] + [
        ("ReplaySample", "frames-numpy", "cpu", 64, None, 50), ("PriorityUpdate", "frames-numpy", "cpu", 64, None, 40)]
    stacks = [("ChunkTransfer", "ray:nodes", "cpu", n, None, 8_000 * n) for n in (16, 128)]
    assert predict_ray(frames_plan, synthetic(HOST + replay + stacks), agent, 1, actors=2, chunk_steps=16) is None
    frames = [("ChunkTransfer", "ray:nodes+frames", "cpu", n, None, 1_000 * n) for n in (16, 128)]
    p = predict_ray(frames_plan, synthetic(HOST + replay + stacks + frames), agent, 1, actors=2, chunk_steps=16)
    assert p.per_call_s["ChunkTransfer"] == pytest.approx(16_000 * US)
    plain = predict_ray(CPU_PLAN, synthetic(HOST + stacks + frames), agent, 1, actors=2, chunk_steps=16)
    assert plain.per_call_s["ChunkTransfer"] == pytest.approx(128_000 * US)  # a plain replay's chunks carry stacks


def test_the_fixed_rule_acts_centrally_where_the_policy_is_on_an_accelerator(monkeypatch):
    """``--plan rule --executor local`` with a learner on CUDA (a plan: no GPU needed to make it): the
    Nature CNN's policy, which the rule puts on the learner's device, acts in the learner's process
    for every actor (no device context and weight copy in each actor); a host policy (MinAtar's,
    with numba) acts in the actors; a name in the config wins."""
    import torch

    from hetrl.algos import make_algorithm
    from hetrl.config import make_config
    from hetrl.envs import env_spec
    from hetrl.planner import choice

    monkeypatch.setattr(choice, "resolve_device", lambda _: torch.device("cuda"))

    def planned(env, *extra):
        cfg = make_config("dqn", env, None, ["plan=rule", "executor=local", "actors=2", *extra])
        run = choice.resolve(cfg, make_algorithm("dqn", env_spec(env), cfg.agent))
        return run.plan.placement.act.device, run.inference

    assert planned("ALE/Breakout-v5") == ("cuda", "central")
    assert planned("MinAtar/Breakout-v1") == ("cpu", "actor")
    assert planned("ALE/Breakout-v5", "inference=actor") == ("cuda", "actor")
