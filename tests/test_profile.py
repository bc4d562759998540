"""The profiler measures every registered implementation, and its JSON round-trips."""

import copy
import json

import pytest

from hetrl.algos import DDPGConfig, DQNConfig, SACConfig, make_algorithm
from hetrl.cli import main
from hetrl.devices import available_devices
from hetrl.envs import env_spec
from hetrl.errors import HetrlError
from hetrl.hardware import describe_machine, usable_cores
from hetrl import profile as profile_module
from hetrl.profile import ENV_COUNTS, Profile, _jobs, actor_start_path, default_path, measure, profile_workload, time_calls, time_in_turn
from hetrl.primitives import implementations


@pytest.fixture(scope="module")
def dqn_profile():
    from hetrl.energy.discovery import MeterReport

    agent = DQNConfig(hidden=(8, 8), batch_size=16, buffer_size=2_000, prioritized=True)
    # no meters, so that it is the same on a machine where NVML or RAPL works
    return profile_workload("dqn", "CartPole-v1", agent, threads=[1], meters=MeterReport([], []))


def test_every_implementation_on_every_device_is_measured(dqn_profile):
    devices = available_devices()
    dqn = make_algorithm("dqn", env_spec("CartPole-v1"), DQNConfig(hidden=(8, 8)))
    for primitive in ("Act", "WeightSync", "ReplayAdd", "ReplaySample", "PriorityUpdate", "Learn"):
        for backend, impl in implementations(primitive).items():
            if impl.unsupported(dqn):  # e.g. a frame replay for vectors: measured where it serves
                assert not [t for t in dqn_profile.timings if (t.primitive, t.backend) == (primitive, backend)]
                continue
            for device in [d for d in devices if impl.runs_on(d)]:
                found = [t for t in dqn_profile.timings if (t.primitive, t.backend, t.device) == (primitive, backend, device)]
                assert found, f"{primitive}/{backend} on {device} was not profiled"
    for n in ENV_COUNTS:
        assert dqn_profile.lookup("EnvStep", "gymnasium", "cpu", n) is not None
        assert dqn_profile.lookup("Act", "numpy", "cpu", n) is not None
    assert dqn_profile.lookup("Learn", "torch", "cpu", 16, threads=1) is not None
    for device in devices:
        assert dqn_profile.lookup("Transfer", f"numpy->{device}", device, 16) is not None
    assert dqn_profile.lookup("Loop", "inline", "cpu", 1).median_s > 0
    start = [t for t in dqn_profile.timings if t.primitive == "ActorStart"]
    assert len(start) == 1 and 0.05 < start[0].median_s < 120  # a cold fork server, measured in a fresh process
    trip, serve = (dqn_profile.lookup(name, "pipe", "cpu", 1) for name in ("InferenceTrip", "InferenceServe"))
    assert 0 < serve.median_s < trip.median_s < 0.05  # the learner's share of an answer is part of the round trip
    for t in dqn_profile.timings:
        assert 0 < t.p10_s <= t.median_s <= t.p90_s and (t.calls >= 7 or t.primitive == "ActorStart")


def test_the_loop_job_times_each_primitive_of_its_placement_in_the_run(dqn_profile):
    """InRun rows name the primitive and the backend the loop ran, and match a row measured alone
    (the model divides one by the other)."""
    in_run = {t.backend.split(":")[0]: t for t in dqn_profile.timings if t.primitive == "InRun"}
    assert {"EnvStep", "Act", "ReplayAdd", "ReplaySample", "Learn", "WeightSync", "PriorityUpdate"} <= set(in_run)
    for name, t in in_run.items():
        backend = t.backend.split(":", 1)[1]
        assert dqn_profile.lookup(name, backend, t.device, t.size, threads=t.threads) is not None, t
        assert t.calls >= 100 and t.median_s > 0
    # the rule's Act, and the fastest host Act alone where that is another backend: each its own row
    acts = [t for t in dqn_profile.timings if t.primitive == "InRun" and t.backend.startswith("Act:")]
    alone = {t.backend: t.median_s for t in dqn_profile.timings if (t.primitive, t.device, t.size) == ("Act", "cpu", 1)}
    assert f"Act:{min(alone, key=alone.__getitem__)}" in {t.backend for t in acts}
    assert len(acts) == len({t.backend for t in acts}) <= 2


def test_stepping_more_envs_costs_more(dqn_profile):
    one = dqn_profile.lookup("EnvStep", "gymnasium", "cpu", 1).median_s
    sixteen = dqn_profile.lookup("EnvStep", "gymnasium", "cpu", 16).median_s
    assert sixteen > one  # 16 envs are stepped one after another (about 10-16x alone; at load 6 it measured 2.2x: no margin)


def test_uniform_replay_has_no_priority_update():
    profile = profile_workload("ddpg", "Pendulum-v1", DDPGConfig(hidden=(8,), batch_size=8, buffer_size=1_000), threads=[1])
    assert not [t for t in profile.timings if t.primitive == "PriorityUpdate"]
    assert profile.lookup("Learn", "torch", "cpu", 8, threads=1) is not None
    assert profile.lookup("Learn", "blas", "cpu", 8, threads=1) is not None  # DDPG's hand-written learner
    assert not [t for t in profile.timings if (t.primitive, t.backend) == ("Learn", "numba")]  # DQN only


def test_sacs_learner_is_measured_on_the_blas_backend_too():
    """Learn/blas serves SAC, so the profiler times it beside Learn/torch, and a plan can pick it."""
    sac = make_algorithm("sac", env_spec("Pendulum-v1"), SACConfig(hidden=(8,), batch_size=8, buffer_size=1_000))
    rows = measure(sac, [("Learn", backend, "cpu", 8, 1) for backend in ("torch", "blas")])
    assert sorted(t.backend for t in rows) == ["blas", "torch"] and all(t.median_s > 0 for t in rows)


def test_json_round_trip_and_errors(dqn_profile, tmp_path):
    path = dqn_profile.save(tmp_path / "p.json")
    again = Profile.load(path)
    assert again == dqn_profile
    assert again.fingerprint == describe_machine().fingerprint()
    path.write_text(json.dumps({**json.loads(path.read_text()), "format": "something-else"}))
    with pytest.raises(HetrlError, match="not a valid hetrl profile.*profile again"):
        Profile.load(path)
    path.write_text("{")
    with pytest.raises(HetrlError, match="is not valid JSON.*delete it and profile again"):
        Profile.load(path)
    with pytest.raises(HetrlError, match="does not exist"):
        Profile.load(tmp_path / "missing.json")


def test_default_path_is_per_machine_and_workload(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    machine = describe_machine()
    a = default_path(machine, "dqn", "CartPole-v1", DQNConfig())
    assert a == default_path(machine, "dqn", "CartPole-v1", DQNConfig())
    assert a != default_path(machine, "dqn", "CartPole-v1", DQNConfig(batch_size=128))
    assert a.parent == tmp_path / "hetrl" / "profiles" / machine.fingerprint()


def test_actor_start_is_measured_once_per_workload_not_per_agent_setting(tmp_path, monkeypatch):
    """Two profiles of one env under other agent settings start the actors once: the second reads
    what the first kept and its notes say so; another env, or a kept file that cannot be read, is
    measured again."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    measured = []

    def fake(algo, env, agent, actors):
        measured.append((algo, str(env)))
        return 1.5 + len(measured)

    monkeypatch.setattr(profile_module, "actor_start_seconds", fake)
    machine = describe_machine()

    def actor_start(env, agent):
        notes = []
        algo = make_algorithm("dqn", env_spec(env), agent)
        job = dict(_jobs(algo, ["cpu"], [1], machine=machine, notes=notes))["ActorStart local"]
        return job()[0].median_s, notes

    assert actor_start("CartPole-v1", DQNConfig(hidden=(8, 8))) == (2.5, [])
    seconds, notes = actor_start("CartPole-v1", DQNConfig(hidden=(64, 64), batch_size=128))
    path = actor_start_path(machine, "dqn", "CartPole-v1", min(2, usable_cores()))
    assert seconds == 2.5 and len(measured) == 1 and str(path) in notes[0] and "not measured again" in notes[0]
    assert path.parent == default_path(machine, "dqn", "CartPole-v1", DQNConfig()).parent
    assert actor_start("Acrobot-v1", DQNConfig(hidden=(8, 8)))[0] == 3.5 and len(measured) == 2
    path.write_text("{not json")
    assert actor_start("CartPole-v1", DQNConfig(hidden=(8, 8))) == (4.5, []) and len(measured) == 3
    assert json.loads(path.read_text())["seconds"] == 4.5  # measured again and kept


def test_time_calls_measures_what_it_runs():
    import time

    median, p10, p90, calls = time_calls(lambda: time.sleep(0.002), lambda: None, repeats=3, warmup=1)
    assert 0.0019 < median < 0.02 and calls == 3


def test_several_calls_are_timed_in_turn_each_block_in_its_context():
    """time_in_turn times its calls' blocks alternately (a block of each per round, each after an
    untimed call), every call inside its own context, so that a slow spell of the machine falls on
    each call's blocks alike rather than on one call's only."""
    import time
    from contextlib import contextmanager

    log, inside = [], []

    @contextmanager
    def within(name):
        inside.append(name)
        yield
        inside.pop()

    def call(name):
        def run():
            log.append((name, tuple(inside)))
            time.sleep(0.0025)
        return run

    results = time_in_turn([call("a"), call("b")], lambda: None, repeats=3, warmup=1,
                           within=[lambda: within("one"), lambda: within("two")])
    assert all(ctx == (("one",) if name == "a" else ("two",)) for name, ctx in log)
    rounds = [name for name, _ in log[4:]]  # after each call's warm-up and its block-size probe
    assert rounds == ["a", "a", "b", "b"] * 3  # an untimed call, then a block of one (2.5 ms is over a block's 2 ms), in turn
    assert [calls for *_, calls in results] == [3, 3] and all(0.0024 < median < 0.03 for median, *_ in results)


def test_a_learner_is_timed_at_every_thread_count_in_one_job(monkeypatch):
    """One job per Learn backend times it at each thread count, in turn, with torch's count set as
    a run sets it, and gives a row per count."""
    import itertools

    import torch

    algo = make_algorithm("dqn", env_spec("CartPole-v1"), DQNConfig(hidden=(8, 8), batch_size=16, buffer_size=2_000))
    seen = []
    real = profile_module.time_in_turn

    def watched(fns, sync, repeats=7, warmup=3, within=None):
        def counted(fn):
            return lambda: (seen.append(torch.get_num_threads()), fn())
        return real([counted(fn) for fn in fns], sync, 2, 1, within)

    monkeypatch.setattr(profile_module, "time_in_turn", watched)
    jobs = dict(_jobs(algo, ["cpu"], [1, 2]))
    assert "Learn torch on cpu" in jobs and not any("threads" in label for label in jobs if label.startswith("Learn"))
    rows = jobs["Learn torch on cpu"]()
    assert [(t.primitive, t.backend, t.threads) for t in rows] == [("Learn", "torch", 1), ("Learn", "torch", 2)]
    assert seen[:4] == [1, 1, 2, 2]  # each count's warm-up call and block-size probe
    assert [n for n, _ in itertools.groupby(seen[4:])] == [1, 2, 1, 2]  # two rounds of a block at each count, in turn
    assert all(len(list(block)) >= 2 for _, block in itertools.groupby(seen[4:]))  # each after an untimed call


def test_profile_command(tmp_path, capsys):
    out = tmp_path / "profile.json"
    code = main(["profile", "dqn", "CartPole-v1", "--set", "hidden=8,8", "--set", "batch_size=16",
                 "--set", "buffer_size=2000", "--device", "cpu", "--out", str(out), "--no-progress"])
    assert code == 0
    assert Profile.load(out).algo == "dqn"
    assert main(["profile", "dqn", "CartPole-v1", "--device", "cuda:9", "--out", str(out)]) == 2



class _FakeMeter:
    """A meter whose counter is ``joules()``: what the test says was spent."""

    kind, name, device, source, method = "fake", "fake:host", "cpu", "measured", "counter"

    def __init__(self, joules):
        self.joules = joules

    def read_joules(self):
        return self.joules()

    def close(self):
        pass


def test_energy_per_call_is_the_meters_joules_over_the_calls_it_ran(monkeypatch):
    import hetrl.profile as profile_module
    from hetrl.energy.discovery import MeterReport

    monkeypatch.setattr(profile_module, "ENERGY_SECONDS", 0.05)
    calls = []
    meters = MeterReport([_FakeMeter(lambda: 0.5 * len(calls))], [])  # 0.5 J a call
    clock = lambda: 0.002 * len(calls)  # noqa: E731  (a call takes 2 ms)
    joules, names = profile_module.energy_per_call(lambda: calls.append(1), lambda: None, meters, per_call_s=0.002,
                                                   clock=clock)
    assert len(calls) == 25 and joules == pytest.approx(0.5) and names == "fake:host"  # 0.05 s of 2 ms calls
    # calls half as long as predicted: more calls until the window is full, not a span half as long
    calls.clear()
    joules, _ = profile_module.energy_per_call(lambda: calls.append(1), lambda: None, meters, per_call_s=0.002,
                                               clock=lambda: 0.001 * len(calls))
    assert 50 <= len(calls) < 60 and joules == pytest.approx(0.5)
    assert profile_module.energy_per_call(lambda: None, lambda: None, MeterReport([], []), 0.002) == (None, None)


def test_profiles_carry_energy_per_call_where_a_meter_works(monkeypatch):
    import hetrl.profile as profile_module
    from hetrl.energy.discovery import MeterReport

    monkeypatch.setattr(profile_module, "ENERGY_SECONDS", 0.02)
    reads = []

    def one_joule_more():  # at every read
        reads.append(1)
        return float(len(reads))

    meter = _FakeMeter(one_joule_more)
    agent = DQNConfig(hidden=(8, 8), batch_size=16, buffer_size=2_000)
    profile = profile_workload("dqn", "CartPole-v1", agent, devices=["cpu"], threads=[1], meters=MeterReport([meter], []))
    # none of these runs alone under the meters
    measured = [t for t in profile.timings if t.primitive not in ("Loop", "InRun", "ActorStart", "InferenceTrip", "InferenceServe")]
    assert measured and all(t.joules_per_call is not None and t.energy_meters == "fake:host" for t in measured)
    for t in measured:  # 1 J between the reads before and after the calls, over at least as many calls as 0.02 s holds
        assert 0 < t.joules_per_call <= 1 / max(1, int(0.02 / t.median_s)) + 1e-12, t
    again = Profile.load(profile.save(profile_module.Path(__import__("tempfile").mkdtemp()) / "p.json"))
    assert again == profile


def test_a_profile_for_a_throughput_plan_reads_no_meter(tmp_path):
    """energy=False: every row timed only (no window of ENERGY_SECONDS per row), and the profile says so."""
    from hetrl.energy.discovery import MeterReport
    from hetrl.profile import ENERGY_NOT_PROFILED

    reads = []
    meter = _FakeMeter(lambda: float(len(reads.append(1) or reads)))
    agent = DQNConfig(hidden=(8, 8), batch_size=16, buffer_size=2_000)
    profile = profile_workload("dqn", "CartPole-v1", agent, devices=["cpu"], threads=[1], meters=MeterReport([meter], []),
                               energy=False)
    assert not reads and profile.timings and all(t.joules_per_call is None for t in profile.timings)
    assert not profile.energy_profiled and ENERGY_NOT_PROFILED in profile.notes
    again = Profile.load(profile.save(tmp_path / "p.json"))
    assert again == profile and not again.energy_profiled
    older = profile.to_dict()
    del older["energy_profiled"]  # a profile saved before the flag: its meters were read
    (tmp_path / "old.json").write_text(__import__("json").dumps(older))
    assert Profile.load(tmp_path / "old.json").energy_profiled


def test_only_an_efficiency_plan_reads_the_meters_and_it_measures_a_throughput_profile_again(tmp_path, monkeypatch):
    """plan=auto: a throughput plan profiles without the meters; an efficiency plan on a machine whose
    meters work profiles again where the cached profile was made without them."""
    from test_plan import HOST, synthetic

    import hetrl.planner.choice as choice
    from hetrl.algos import make_algorithm
    from hetrl.config import make_config
    from hetrl.envs import env_spec
    from hetrl.hardware import describe_machine

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.setattr(choice, "_covers_the_registry", lambda profile, algorithm: True)  # the synthetic rows serve
    cfg = make_config("dqn", "CartPole-v1", None, ["plan=auto", "executor=inline", "batch_size=64", "replay_ratio=1",
                                                   "train_every=1", "hidden=64,64"])
    algorithm = make_algorithm("dqn", env_spec("CartPole-v1"), cfg.agent)
    asked, said = [], []

    def profiling(*args, **kwargs):
        asked.append(kwargs)
        made = synthetic(HOST, watts=None if kwargs.get("energy") is False else {"cpu": 40.0})
        made.energy_profiled = kwargs.get("energy", True)
        made.machine = {"fingerprint": "test", "meters": [{"kind": "rapl", "available": True, "name": "rapl:fake"}]}
        return made

    plan = choice.plan_for_run(cfg, algorithm, said.append, profiling=profiling)
    assert asked[-1]["energy"] is False and plan.prediction.joules_per_env_step is None
    cached = Profile.load(default_path(describe_machine(), cfg.algo, cfg.env_source(), cfg.agent))
    assert not cached.energy_profiled and cached.machine_metered()
    plan = choice.plan_for_run(cfg, algorithm, said.append, "efficiency", profiling=profiling)
    assert asked[-1]["energy"] is True and len(asked) == 2
    assert any("made for a throughput plan" in line for line in said)
    assert plan.prediction.joules_per_env_step and plan.objective == "efficiency"
    assert not synthetic(HOST).machine_metered()  # no meter listed: nothing to measure again for


def test_profiles_say_nothing_of_energy_without_a_meter(dqn_profile):
    assert all(t.joules_per_call is None for t in dqn_profile.timings)


def test_the_profile_cache_ignores_settings_that_cost_nothing():
    """A new learning rate or exploration schedule reuses the profile; a new network re-profiles."""
    from dataclasses import replace

    machine = describe_machine()
    base = DQNConfig()
    same = [replace(base, lr=1e-4), replace(base, eps_end=0.1, eps_decay_steps=5), replace(base, gamma=0.9, learning_starts=7)]
    for agent in same:
        assert default_path(machine, "dqn", "CartPole-v1", agent) == default_path(machine, "dqn", "CartPole-v1", base)
    for agent in [replace(base, hidden=(64, 64)), replace(base, batch_size=32), replace(base, prioritized=True), replace(base, dueling=True)]:
        assert default_path(machine, "dqn", "CartPole-v1", agent) != default_path(machine, "dqn", "CartPole-v1", base)
    ddpg = DDPGConfig()
    assert default_path(machine, "ddpg", "Pendulum-v1", replace(ddpg, action_noise=0.3)) == default_path(machine, "ddpg", "Pendulum-v1", ddpg)
    assert default_path(machine, "ddpg", "Pendulum-v1", replace(ddpg, policy_delay=2)) != default_path(machine, "ddpg", "Pendulum-v1", ddpg)


def test_the_replay_fill_is_capped_by_bytes_and_the_profile_says_so():
    """Atari's stacks would take gigabytes at 50k transitions: the fill stops at 256 MB of observations."""
    from types import SimpleNamespace

    from hetrl.profile import REPLAY_FILL, REPLAY_FILL_BYTES, profile_notes, replay_fill

    def algo(shape, dtype, buffer_size=100_000):
        return SimpleNamespace(spec=SimpleNamespace(obs_shape=shape, obs_dtype=dtype), config=SimpleNamespace(buffer_size=buffer_size))

    atari = algo((4, 84, 84), "uint8")
    assert replay_fill(atari, frames=False) == REPLAY_FILL_BYTES // (2 * 4 * 84 * 84)  # obs and next_obs stacks
    assert replay_fill(atari, frames=True) == REPLAY_FILL_BYTES // (84 * 84)  # one frame per transition
    notes = profile_notes(atari)
    assert len(notes) == 2 and all("capped at 256 MB" in n for n in notes)
    vectors = algo((4,), "float32")
    assert replay_fill(vectors, frames=False) == REPLAY_FILL and profile_notes(vectors) == []
    assert replay_fill(algo((4,), "float32", 1000), frames=False) == 1000
    minatar = algo((4, 10, 10), "uint8")  # 800 bytes a transition: not capped
    assert replay_fill(minatar, frames=False) == REPLAY_FILL and profile_notes(minatar) == []


def test_the_round_trip_starts_the_fork_server_with_the_actors_preload(monkeypatch):
    """The profiler's round-trip actor may be the first to start this process's fork server, whose
    list of imports is fixed then: it passes what a run's actors need (the primitives and the env's
    packages: MinAtar's here), so the run's actors that follow do not import them each."""
    import hetrl.profile as profile_module
    from hetrl.algos import DQNConfig, make_algorithm
    from hetrl.envs import env_spec
    from hetrl.runtime.local import actor_preload

    asked = []
    monkeypatch.setattr(profile_module, "measure_round_trip",
                        lambda layout, preload=(): asked.append(tuple(preload)) or ([1e-5] * 3, [1e-6] * 3))
    algo = make_algorithm("dqn", env_spec("MinAtar/Breakout-v1"), DQNConfig(network="minatar"))
    job = dict(profile_module._jobs(algo, ["cpu"], [1]))["InferenceTrip pipe"]
    job()
    assert asked == [actor_preload("MinAtar/Breakout-v1")] and "minatar" in asked[0]


def test_the_loop_job_runs_a_host_learner_at_each_thread_count():
    """Besides the rule's placement at one thread, the loop runs the learner at each thread count
    above one, with the backend that was fastest alone at that count, for an InRun row the model
    sets against that count's cost alone (planner/model.py, in_run_factor)."""
    from hetrl.energy.discovery import MeterReport

    agent = DQNConfig(hidden=(8, 8), batch_size=16, buffer_size=2_000)
    profile = profile_workload("dqn", "CartPole-v1", agent, threads=[1, 2], meters=MeterReport([], []))
    learn_in_run = {t.threads: t for t in profile.timings if t.primitive == "InRun" and t.backend.startswith("Learn:")}
    assert set(learn_in_run) == {1, 2}
    alone = {t.backend: t.median_s for t in profile.timings if (t.primitive, t.device, t.threads) == ("Learn", "cpu", 2)}
    assert learn_in_run[2].backend == f"Learn:{min(alone, key=alone.__getitem__)}"
    assert learn_in_run[2].calls >= 100 and learn_in_run[2].median_s > 0


@pytest.mark.parametrize("cannot_run_here", [True, False])
def test_a_learner_that_cannot_compile_here_is_left_out_with_a_note(monkeypatch, cannot_run_here):
    """Learn/cudagraph-compiled compiles at its first update, which fails where the toolchain does
    (no C compiler, Triton), as a CannotRunHere: the profile leaves that backend out with a note, so
    the plan takes another. Any other error of a learner still stops the profile."""
    from hetrl.errors import CannotRunHere
    from hetrl.primitives.learn_torch import LearnTorch
    from hetrl.protocol.registry import Implementation

    class LearnUncompilable(LearnTorch):
        backend = "uncompilable"

        def learn(self, **batch):
            error = CannotRunHere if cannot_run_here else HetrlError
            raise error("torch.compile could not compile the dqn update (RuntimeError: no C compiler); use ...")

    fake = Implementation("Learn", "uncompilable", LearnUncompilable, "learn")
    real_build = profile_module.build
    monkeypatch.setattr(profile_module, "implementations",
                        lambda primitive: {"uncompilable": fake} if primitive == "Learn" else implementations(primitive))
    monkeypatch.setattr(profile_module, "build", lambda primitive, slot, algo, seed, **kw: (
        LearnUncompilable(algo, slot.device, seed) if slot.backend == "uncompilable" else real_build(primitive, slot, algo, seed, **kw)))
    algo = make_algorithm("dqn", env_spec("CartPole-v1"), DQNConfig(hidden=(8,)))
    notes, unmeasured = [], []
    (learn_job,) = [job for label, job in _jobs(algo, ["cpu"], [1], notes=notes, unmeasured=unmeasured)
                    if label.startswith("Learn")]
    if not cannot_run_here:
        with pytest.raises(HetrlError, match="could not compile"):
            learn_job()
        return
    assert learn_job() == [] and unmeasured == ["Learn/uncompilable"]
    assert notes == ["Learn/uncompilable on cpu not measured: torch.compile could not compile the dqn update "
                     "(RuntimeError: no C compiler); use ..."]


def test_a_profile_keeps_what_could_not_run_here_and_counts_as_complete_without_it(dqn_profile, tmp_path, monkeypatch):
    """A cached profile is measured again when it lacks a registered implementation's rows, except
    one the profile tried and found unable to run on this machine (``unmeasured``): else every run
    there would profile again, and fail the same way."""
    from hetrl.planner import choice
    from hetrl.protocol.registry import Implementation

    profile = copy.deepcopy(dqn_profile)  # the module's fixture stays as it was
    algo = make_algorithm("dqn", env_spec("CartPole-v1"), DQNConfig(hidden=(8, 8), batch_size=16, buffer_size=2_000,
                                                                     prioritized=True))
    assert choice._covers_the_registry(profile, algo)
    learn = implementations("Learn")
    torch_impl = learn["torch"]
    extra = Implementation("Learn", "never-ran", torch_impl.cls, "learn")
    monkeypatch.setattr(choice, "implementations", lambda p: {**learn, "never-ran": extra} if p == "Learn" else implementations(p))
    assert not choice._covers_the_registry(profile, algo)
    profile.unmeasured.append("Learn/never-ran")
    path = profile.save(tmp_path / "p.json")
    again = Profile.load(path)
    assert again.unmeasured == ["Learn/never-ran"] and choice._covers_the_registry(again, algo)
