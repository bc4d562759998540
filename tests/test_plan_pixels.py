"""The planner on pixel workloads (issue 23), with synthetic profiles of a GPU machine: where
inference runs, how many actors, and what fits the host's and the device's memory."""

from dataclasses import replace

import numpy as np
import pytest
from test_plan import synthetic

from hetrl.algos import DQNConfig, make_algorithm
from hetrl.config import check_replay_memory, make_config
from hetrl.envs import env_spec
from hetrl.errors import HetrlError
from hetrl.planner.choice import plan_from_profile
from hetrl.planner.model_local import predict_parallel
from hetrl.planner.search import ReplayMemory, machine_cores, machine_memory, make_plan
from hetrl.primitives.replay_frames_numpy import ReplayFramesNumpy
from hetrl.primitives.replay_numpy import ReplayNumpy
from hetrl.protocol import Slot
from hetrl.replay.footprint import replay_bytes

AGENT = DQNConfig(batch_size=32, replay_ratio=0.25, train_every=4)
ATARI = ((4, 84, 84), "uint8", (), "int64")  # obs shape and dtype, action shape and dtype
GIB = 2**30
SYNC = 8  # weight_sync_every: the learner publishes every 8 updates (a copy of the conv net costs a millisecond)


def machine(cores: int = 16, host: int = 64 * GIB, gpu: int | None = 80 * GIB) -> dict:
    """A GPU machine as hardware.Machine.to_dict() describes it (the parts the planner reads)."""
    accelerators = [] if gpu is None else [{"kind": "cuda", "index": 0, "name": "fake", "memory_bytes": gpu}]
    return {"fingerprint": "gpu-test", "cpu": {"model": "fake", "physical_cores": cores, "logical_cores": cores},
            "memory_bytes": host, "accelerators": accelerators}


def pixels(env_us: float = 200, act_cpu: tuple[float, float] = (4000, 2500), act_cuda: tuple[float, float] = (300, 5),
           transfer_us: float = 150, learn_cuda_us: float = 200, extra=(), **kw):
    """A profile of DQN on Atari-sized frames: EnvStep ``env_us`` per env; Act a + b x (n - 1) µs
    for n observations on the host (a conv net, dear per call) and on the GPU; a learner on the GPU."""
    rows = []
    for n in (1, 4, 16):
        rows += [("EnvStep", "gymnasium", "cpu", n, None, env_us * n),
                 ("Act", "torch", "cpu", n, None, act_cpu[0] + act_cpu[1] * (n - 1)),
                 ("Act", "torch", "cuda", n, None, act_cuda[0] + act_cuda[1] * (n - 1)),
                 ("ReplayAdd", "frames-numpy", "cpu", n, None, 15 + 5 * n)]
    rows += [("ReplaySample", "frames-numpy", "cpu", 32, None, 100), ("Learn", "torch", "cuda", 32, None, learn_cuda_us),
             ("Learn", "torch", "cpu", 32, 1, 60_000), ("Transfer", "numpy->cuda", "cuda", 32, None, transfer_us),
             ("Transfer", "numpy->cpu", "cpu", 32, None, 20),
             ("WeightSync", "torch", "cpu", 1, None, 1000), ("WeightSync", "torch<-cuda", "cpu", 1, None, 1000),
             ("WeightSync", "torch", "cuda", 1, None, 500),
             ("InferenceTrip", "pipe", "cpu", 1, None, 50), ("InferenceServe", "pipe", "cpu", 1, None, 10),
             ("Loop", "inline", "cpu", 1, None, 10), *extra]
    profile = synthetic(rows, **kw)
    profile.machine = machine()
    return profile


def local_plan(profile, num_envs=4, **kw):
    return make_plan(profile, AGENT, num_envs, executors=("inline", "local"), weight_sync_every=SYNC, **kw)


# --- 1. inference placement ------------------------------------------------------------------------
def test_inference_moves_to_a_fast_accelerator_when_acting_in_each_actor_is_the_bottleneck():
    profile = pixels()
    plan = local_plan(profile)
    assert (plan.executor, plan.inference, plan.placement.act) == ("local", "central", Slot("torch", "cuda"))
    # the conv net in each actor, on the host, at its best actor count: acting is most of the actors' work,
    # and they (or the cores they share) are the bottleneck
    in_actors = replace(plan.placement, act=Slot("torch", "cpu"))
    best = max((predict_parallel(in_actors, profile, AGENT, 4, k, 16, SYNC) for k in range(1, 17)), key=lambda p: p.env_steps_per_s)
    assert best.bottleneck in ("actors", "cores")
    assert best.per_env_step_s["Act"] > 4 * best.per_env_step_s["EnvStep"]
    assert plan.prediction.env_steps_per_s > 1.2 * best.env_steps_per_s
    assert all(c.inference == "central" for c, _ in plan.runner_ups)


@pytest.mark.parametrize("why, change", [
    ("slow: it does not batch, and each call costs about what the host's does", dict(act_cuda=(3000, 3000))),
    ("far: every call pays a long way there and back", dict(act_cuda=(60_000, 5), transfer_us=20_000)),
])
def test_inference_stays_in_the_actors_when_the_accelerator_is_slow_or_far(why, change):
    plan = local_plan(pixels(**change))
    assert plan.executor == "local" and plan.inference == "actor" and plan.placement.act == Slot("torch", "cpu"), why


# --- 2. actor count --------------------------------------------------------------------------------
def rates(profile, placement, inference, num_envs=1):
    return {k: predict_parallel(placement, profile, AGENT, num_envs, k, 16, SYNC, inference) for k in range(1, 17)}


def test_actor_count_grows_until_env_stepping_stops_being_the_bottleneck():
    """Dear env stepping (1 ms an env) and a small policy beside a fast GPU learner: each actor adds
    env steps until the learner is slower; the plan takes the fewest actors there (acting in the
    actors, the learner's rate does not grow with them)."""
    profile = pixels(env_us=1000, act_cpu=(300, 20))
    plan = local_plan(profile, 1, inference=("actor",))
    rate = rates(profile, plan.placement, "actor")
    enough = min(k for k, r in rate.items() if r.bottleneck != "actors")
    assert plan.executor == "local" and plan.actors == enough > 2
    assert all(rate[k + 1].env_steps_per_s > rate[k].env_steps_per_s for k in range(1, enough))
    assert plan.prediction.bottleneck == "learner"
    assert plan.prediction.env_steps_per_s == pytest.approx(max(r.env_steps_per_s for r in rate.values()))
    # central inference: the learner's answers batch more observations with more actors, so it takes at least as many
    central = local_plan(profile, 1, inference=("central",))
    rate = rates(profile, central.placement, "central")
    assert central.actors >= min(k for k, r in rate.items() if r.bottleneck != "actors") > 2
    assert central.prediction.bottleneck != "actors"


def test_actor_counts_tried_follow_the_machines_cores():
    """The profile's machine says how many cores there are (not this machine's): 16 cores let the plan
    take more than 2 actors, 2 cores never more than 2; an explicit count wins."""
    profile = pixels(env_us=1000, learn_cuda_us=400)
    assert machine_cores(profile.machine) == 16
    assert local_plan(profile, 1).actors > 2
    small = replace(profile, machine=machine(cores=2))
    assert machine_cores(small.machine) == 2
    plan = local_plan(small, 1)
    assert plan.actors <= 2 and all(c.actors <= 2 for c, _ in plan.runner_ups)
    assert local_plan(small, 1, cores=16).actors > 2
    assert machine_cores({"fingerprint": "old"}) >= 1  # not recorded: this process's usable cores


# --- 3. memory ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("prioritized", [False, True])
def test_replay_bytes_are_what_the_replays_allocate(prioritized):
    obs, action = (4, 21, 21), ()
    for capacity in (1, 300, 1024, 5000):
        plain = ReplayNumpy(capacity, obs, action, "int64", prioritized=prioritized, obs_dtype="uint8")
        frames = ReplayFramesNumpy(capacity, obs, action, "int64", prioritized=prioritized)
        assert replay_bytes(capacity, obs, "uint8", action, "int64", prioritized, frames=False) == plain.nbytes
        assert replay_bytes(capacity, obs, "uint8", action, "int64", prioritized, frames=True) == frames.nbytes
    # a million Atari transitions: the plain replay keeps 2 stacks of 4 frames, the frame replay about one frame
    plain, frames = (replay_bytes(10**6, *ATARI[:2], *ATARI[2:], False, frames=f) for f in (False, True))
    assert plain == pytest.approx(10**6 * (2 * 4 * 84 * 84 + 16))
    assert frames == pytest.approx(10**6 * (84 * 84 * 33 / 32 + 2 * 4 * 4 + 24), rel=3e-3)  # and the lookback's frames


def with_replays(profile, *extra):
    """``profile`` with a plain host replay (cheaper per call than the frame replay) and a frame replay on the GPU."""
    rows = [("ReplayAdd", "numpy", "cpu", n, None, 10) for n in (1, 4, 16)] + [
        ("ReplaySample", "numpy", "cpu", 32, None, 100),
        ("ReplayAdd", "frames-torch", "cuda", 1, None, 15), ("ReplayAdd", "frames-torch", "cuda", 4, None, 20),
        ("ReplayAdd", "frames-torch", "cuda", 16, None, 40), ("ReplaySample", "frames-torch", "cuda", 32, None, 100),
        ("Transfer", "cuda->cuda", "cuda", 32, None, 5), *extra]
    return replace(profile, timings=profile.timings + synthetic(rows).timings)


def atari_need(buffer_size: int) -> dict[str, int]:
    return {b: replay_bytes(buffer_size, *ATARI[:2], *ATARI[2:], False, frames=b.startswith("frames"))
            for b in ("numpy", "frames-numpy", "frames-torch")}


def test_a_plan_whose_replay_does_not_fit_is_not_chosen():
    profile = with_replays(pixels())
    need = atari_need(10**6)  # about 56 GiB plain, 7 GiB of frames
    roomy = ReplayMemory(need, {"cpu": 256 * GIB, "cuda": 80 * GIB}, 10**6)
    assert local_plan(profile, replay_memory=roomy).placement.replay == Slot("frames-torch", "cuda")  # no transfer
    # the GPU holds 6 GiB: the frame replay goes to the host, where the plain one (56 GiB) would not fit 32 GiB
    small_gpu = ReplayMemory(need, {"cpu": 32 * GIB, "cuda": 6 * GIB}, 10**6)
    plan = local_plan(profile, replay_memory=small_gpu)
    assert plan.placement.replay == Slot("frames-numpy", "cpu")
    assert all(c.placement.replay == Slot("frames-numpy", "cpu") for c, _ in plan.runner_ups)
    # without the limits, the cheaper plain replay would win on the host
    assert local_plan(profile, learn_device="cpu").placement.replay == Slot("numpy", "cpu")
    assert local_plan(profile, learn_device="cpu", replay_memory=small_gpu).placement.replay == Slot("frames-numpy", "cpu")
    # the memory of the profile's machine where none is given (hardware.Machine: MemTotal, torch's device memory)
    assert machine_memory(machine(host=32 * GIB, gpu=6 * GIB)) == {"cpu": 32 * GIB, "cuda:0": 6 * GIB, "cuda": 6 * GIB}
    tight = replace(profile, machine=machine(host=32 * GIB, gpu=6 * GIB))
    assert local_plan(tight, replay_memory=ReplayMemory(need, None, 10**6)).placement.replay == Slot("frames-numpy", "cpu")


def test_no_replay_that_fits_is_an_error_with_the_numbers_and_the_fix():
    profile = with_replays(pixels())
    need = atari_need(10**7)
    with pytest.raises(HetrlError, match=r"no replay the profile measured fits this machine's memory \(replay frames-numpy "
                                         r"on cpu needs 68.3 GiB, 32.0 GiB there; replay frames-torch on cuda needs 68.3 GiB, "
                                         r"6.0 GiB there; replay numpy on cpu needs 525.9 GiB, 32.0 GiB there\); "
                                         r"set buffer_size=2,342,514 or less") as info:
        local_plan(profile, replay_memory=ReplayMemory(need, {"cpu": 32 * GIB, "cuda": 6 * GIB}, 10**7))
    assert "\n" not in str(info.value)


def test_the_run_plans_against_its_replay_at_its_buffer_size():
    """plan_from_profile (hetrl plan --profile, --plan auto) counts the run's replay: an env of
    stacked uint8 frames (hetrl/Bytes-v0, 2 x 36 x 36) at buffer_size 10**7 needs 24 GiB as plain
    stacks and 13 GiB as frames; force=true skips the check, as at the start."""
    config = make_config("dqn", "hetrl/Bytes-v0", None, ["buffer_size=10000000", "batch_size=32", "executor=auto"])
    algorithm = make_algorithm("dqn", env_spec("hetrl/Bytes-v0"), config.agent)
    profile = with_replays(pixels(), ("ReplayAdd", "frames-numpy", "cpu", 32, None, 40))
    profile = replace(profile, timings=[t for t in profile.timings if not t.backend.startswith("frames-torch")])
    assert plan_from_profile(profile, config, algorithm, memory={"cpu": 64 * GIB}).placement.replay == Slot("numpy", "cpu")
    assert plan_from_profile(profile, config, algorithm, memory={"cpu": 16 * GIB}).placement.replay == Slot("frames-numpy", "cpu")
    with pytest.raises(HetrlError, match="set buffer_size=.* or less"):
        plan_from_profile(profile, config, algorithm, memory={"cpu": 8 * GIB})
    config.force = True
    assert plan_from_profile(profile, config, algorithm, memory={"cpu": 8 * GIB}).placement.replay == Slot("numpy", "cpu")


def test_a_user_plan_that_does_not_fit_fails_at_the_start_naming_the_frame_replay():
    config = make_config("dqn", "hetrl/Bytes-v0", None, ["buffer_size=10000000"])
    spec = env_spec("hetrl/Bytes-v0")
    frames = replay_bytes(10**7, spec.obs_shape, "uint8", (), "int64", False, True)
    with pytest.raises(HetrlError, match=r"buffer_size=10,000,000 needs at least 48.4 GiB of replay on cpu \(5,200 bytes per "
                                         r"transition, allocated at the start\), more than the 16.0 GiB free there; set "
                                         r"buffer_size=1,651,910 or less, or the frame replay \(placement.replay backend "
                                         r"frames-numpy: 12.8 GiB for these transitions\), or --force") as info:
        check_replay_memory(config, spec, Slot("numpy", "cpu"), free=16 * GIB)
    assert "\n" not in str(info.value)
    check_replay_memory(config, spec, Slot("frames-numpy", "cpu"), free=frames)  # the frame replay fits
    with pytest.raises(HetrlError, match="on cuda .* set buffer_size=.* or less, or --force"):  # already frames: not named again
        check_replay_memory(config, spec, Slot("frames-torch", "cuda"), free=frames - 1)
    flat = make_config("dqn", "CartPole-v1", None, ["buffer_size=10000000000"])
    with pytest.raises(HetrlError) as info:  # vectors: no frame replay to name
        check_replay_memory(flat, env_spec("CartPole-v1"), Slot("numpy", "cpu"), free=GIB)
    assert "frame replay" not in str(info.value)
    assert np.dtype(spec.obs_dtype) == np.uint8


@pytest.mark.parametrize("replay, free_on", [(Slot("numpy", "cpu"), "cpu"), (Slot("torch", "cuda"), "cuda")])
def test_a_plan_file_whose_replay_does_not_fit_stops_the_run_at_the_start(tmp_path, monkeypatch, replay, free_on):
    """hetrl train --plan FILE: the file's plain replay of stacked frames, against the memory free on
    its device (the host's MemAvailable, a GPU's from torch: faked here), fails before anything is
    written, with the numbers and the frame replay named."""
    import hetrl
    import hetrl.config
    from hetrl.planner.plan_file import Plan
    from hetrl.protocol import Placement

    if free_on == "cuda":  # a GPU plan cannot load without one: its check alone, against the device's free memory
        monkeypatch.setattr(hetrl.config, "free_memory_bytes", lambda device: {"cuda": 4 * GIB}.get(device))
        config = make_config("dqn", "hetrl/Bytes-v0", None, ["buffer_size=1000000"])
        with pytest.raises(HetrlError, match=r"4.8 GiB of replay on cuda .* more than the 4.0 GiB free there; set "
                                             r"buffer_size=412,977 or less, or the frame replay \(placement.replay backend "
                                             r"frames-torch: 1.3 GiB for these transitions\)"):
            check_replay_memory(config, env_spec("hetrl/Bytes-v0"), replay)
        return
    placement = Placement(Slot("gymnasium"), Slot("torch", "cpu"), Slot("numpy", "cpu"), Slot("torch", "cpu", 1))
    path = Plan("dqn", "hetrl/Bytes-v0", 1, "throughput", "-", placement, None, []).save(tmp_path / "plan.json")
    monkeypatch.setattr(hetrl.config, "free_memory_bytes", lambda device: {"cpu": 4 * GIB}.get(device))
    with pytest.raises(HetrlError, match=r"buffer_size=1,000,000 needs at least 4.8 GiB of replay on cpu \(5,200 bytes per "
                                         r"transition, allocated at the start\), more than the 4.0 GiB free there; set "
                                         r"buffer_size=412,977 or less, or the frame replay \(placement.replay backend frames-numpy: 1.3 GiB"):
        hetrl.train("dqn", "hetrl/Bytes-v0", 300, run_dir=tmp_path / "run", progress=False, plan=str(path),
                    buffer_size=1_000_000, learning_starts=50, batch_size=16, eval_episodes=1)
    assert not (tmp_path / "run").exists()
