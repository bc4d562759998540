"""Frames, not stacks, through the local executor's rings (runtime/frame_stream.py, shared.py's frame
ring, FrameReplay.add_frames): the same env stream through the stack path and the frame path gives
the same samples; the ring carries about one frame per env step; the actors of a real run send
frames and the learner's replay holds consistent stacks."""

from __future__ import annotations

import copy
import functools
import os
from types import SimpleNamespace

import gymnasium as gym
import numpy as np
import pytest
import torch

from hetrl.algos import make_algorithm
from hetrl.config import make_config
from hetrl.envs import env_spec
from hetrl.planner.rule import default_placement
from hetrl.primitives.replay_frames_numpy import ReplayFramesNumpy
from hetrl.primitives.replay_frames_torch import ReplayFramesTorch
from hetrl.replay.frames import FrameStream
from hetrl.runtime.acting_role import ActingRole
from hetrl.runtime.frame_stream import StackFrames
from hetrl.runtime import local
from hetrl.runtime.local import LocalExecutor
from hetrl.runtime.shared import FRAMES_WRITTEN, READ, WRITTEN, SharedArrays, TransitionRing, frame_ring_layout

C, H, W = 4, 7, 9


class NoiseFrames(gym.Env):
    """Single (H, W) frames of random bytes (no two alike), episodes of 1 to ``longest`` steps that
    terminate; TimeLimit truncates some of them. Stacked by Gymnasium's FrameStackObservation."""

    observation_space = gym.spaces.Box(0, 255, (H, W), np.uint8)
    action_space = gym.spaces.Discrete(3)

    def __init__(self, longest: int = 12) -> None:
        self.longest = longest

    def _frame(self) -> np.ndarray:
        return self.np_random.integers(0, 256, (H, W), dtype=np.uint8)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.left = int(self.np_random.integers(1, self.longest + 1))
        return self._frame(), {}

    def step(self, action):
        self.left -= 1
        return self._frame(), float(action) - 1.0, self.left <= 0, False, {}


class ChannelsNoStack(gym.Env):
    """(C, H, W) observations whose channels are not a stack: every step wholly new (a restack each step)."""

    observation_space = gym.spaces.Box(0, 255, (C, H, W), np.uint8)
    action_space = gym.spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return self.np_random.integers(0, 256, (C, H, W), dtype=np.uint8), {}

    def step(self, action):
        self.t += 1
        return self.np_random.integers(0, 256, (C, H, W), dtype=np.uint8), 1.0, False, self.t >= 5, {}


for _padding in ("reset", "zero"):
    gym.register(f"HetrlNoiseStack-{_padding}-v0", entry_point=lambda padding=_padding, **_: gym.wrappers.FrameStackObservation(
        gym.wrappers.TimeLimit(NoiseFrames(), 9), C, padding_type=padding))
gym.register("HetrlChannelsNoStack-v0", entry_point=ChannelsNoStack)


class NoTimers:
    def add(self, name, seconds, calls=1):
        pass


def acting(env_id, num_envs, n_step, frames, seed=3):
    cfg = make_config("dqn", env_id, overrides=[f"n_step={n_step}", "learning_starts=1000000000"]).agent
    algo = make_algorithm("dqn", env_spec(env_id), cfg)
    placement = default_placement(torch.device("cpu"), (1, 1), threads=1, mlp_policy=False, frames=True)
    return ActingRole(algo, placement, num_envs, seed, np.random.default_rng(seed), NoTimers(),
                      algo.make_policy_network(), frames=frames)


def batch(items):
    return {key: np.concatenate([item[key] for item in items]) for key in items[0]}


def to_numpy(x):
    return x.cpu().numpy() if isinstance(x, torch.Tensor) else np.asarray(x)


def run_both(env_id, *, num_envs, n_step, steps, cls=ReplayFramesNumpy, capacity=64, ring_rows=64, ring_frames=None,
             frame_capacity=None, lookback=32, prioritized=True, check=None):
    """One env stream (same seed) through the stack path (stacks into ``add``) and the frame path
    (frames and ids through a frame ring into ``add_frames``), the learner draining the ring when the
    actor has no room, as the local executor's actor waits for it; after each drain both replays
    sample with the same uniforms. Returns the replays, the ring and the sample pairs."""
    old, new = acting(env_id, num_envs, n_step, False), acting(env_id, num_envs, n_step, True)
    ring_frames = ring_frames or (n_step + C + 2) * num_envs * 2 * C  # the least the actor never waits on itself with
    ring = TransitionRing(SharedArrays(frame_ring_layout(ring_rows, ring_frames, 4, (C, H, W), (), "int64")))
    stream = FrameStream(ring.frames)
    sizes = dict(prioritized=prioritized, lookback=lookback)
    stacked = cls(capacity, (C, H, W), (), "int64", frame_capacity=frame_capacity, **sizes)
    framed = cls(capacity, (C, H, W), (), "int64", frame_capacity=frame_capacity, **sizes)
    rng = np.random.default_rng(7)
    pending, pairs, drains, episodes, evicting, history = [], [], 0, 0, 0, []

    def drain():
        nonlocal pending, drains, evicting
        rows = ring.pop(release=False)
        if rows is None:
            return
        framed.add_frames(stream, **rows)
        ring.release()
        stacked.add(**batch(pending))
        if check is not None:
            check(pending)
        pending, drains = [], drains + 1
        evicting += len(framed) < min(int(ring.header[READ]), framed.capacity)
        history.append((int(ring.header[READ]), len(framed)))  # (transitions added, live ones)
        uniform = rng.random(16)
        out = [replay.sample(uniform, beta=0.5) for replay in (stacked, framed)]
        pairs.append(out)
        if prioritized:
            td = rng.standard_normal(16).astype(np.float32)
            for replay, sample in zip((stacked, framed), out):
                replay.update_priorities(sample["indices"], td)

    for _ in range(steps):
        while (ring.free() < num_envs * n_step
               or ring.frames_free(new.oldest_frame()) < new.max_frames_per_step()):
            drain()
        stacks, _ = old.step(0)
        rows, ended = new.step(0)
        episodes += len(ended)
        ring.push_frames(new.new_frames())
        assert (stacks is None) == (rows is None)
        if rows is not None:
            ring.push(rows)
            pending.append(stacks)
    drain()
    assert drains > 10
    counts = SimpleNamespace(rows=int(ring.header[WRITTEN]), frames=int(ring.header[FRAMES_WRITTEN]),
                             frame_capacity=ring.frame_capacity, episodes=episodes,
                             evicting=evicting, history=history)
    stream.source = ring.frames = ring.header = None  # no view may outlive the segment
    ring.block.close()
    return stacked, framed, counts, pairs


CUDA = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")


@pytest.mark.parametrize("cls", [ReplayFramesNumpy, ReplayFramesTorch,
                                 pytest.param(functools.partial(ReplayFramesTorch, device="cuda"), marks=CUDA)],
                         ids=["numpy", "torch", "torch-cuda"])
@pytest.mark.parametrize("padding", ["reset", "zero"])
@pytest.mark.parametrize("n_step", [1, 3])
def test_the_frame_path_samples_what_the_stack_path_samples(cls, padding, n_step):
    """Several envs, episodes ending by termination and truncation, the replay and both rings
    wrapping many times; no frame evicted early in either replay (a large frame ring), so every
    sample, indices and weights included, is identical."""
    stacked, framed, ring, pairs = run_both(f"HetrlNoiseStack-{padding}-v0", num_envs=3, n_step=n_step, steps=400,
                                            cls=cls, frame_capacity=4096, lookback=256)
    sent = ring.frames
    assert ring.rows > 10 * stacked.capacity and sent > 5 * ring.frame_capacity
    assert len(framed) == len(stacked) == stacked.capacity
    for a, b in pairs:
        assert a.keys() == b.keys()
        for key in a:
            assert np.array_equal(to_numpy(a[key]), to_numpy(b[key])), key
    # each frame sent is copied into the replay once (within the lookback), but those of no transition yet
    assert sent - 3 * (C + n_step) <= framed._written <= sent
    # one frame an env step, and one (repeats) or two (zeros and the first frame) at each episode's start
    assert ring.episodes > 50 and sent == 3 * 400 + (3 + ring.episodes) * (2 if padding == "zero" else 1)


def test_a_small_frame_ring_evicts_whole_dependencies_and_samples_only_what_was_added():
    """A small lookback and frame ring (capacity + 1/32 + lookback) and short episodes: the frame
    path evicts early and stores frames again that it meets past the lookback; whatever it samples
    is a live transition, exactly the stacks the env gave."""
    added = []

    def check(pending):
        added.extend({key: value[k] for key, value in item.items()} for item in pending for k in range(len(item["obs"])))

    stacked, framed, counts, pairs = run_both("HetrlNoiseStack-zero-v0", num_envs=4, n_step=3, steps=500, capacity=48,
                                              lookback=8, check=check)
    assert framed._written > 5 * framed.frame_capacity and counts.evicting > 10
    for (total, live), (_, out) in zip(counts.history, pairs):  # each drain's sample, against the naive buffer
        for row, slot in enumerate(to_numpy(out["indices"])):
            k = total - 1 - (total - 1 - slot) % framed.capacity  # the latest add that went to this slot
            assert k >= total - live, "sampled an evicted transition"
            for key in ("obs", "actions", "rewards", "next_obs", "discounts"):
                want = np.asarray(added[k][key]).astype(to_numpy(out[key]).dtype)
                assert np.array_equal(to_numpy(out[key])[row], want), (key, k)


def test_channels_that_are_not_a_stack_still_arrive_exactly():
    """Each step a wholly new (C, H, W): C frames a step, still half of the stack path's 2C."""
    stacked, framed, ring, pairs = run_both("HetrlChannelsNoStack-v0", num_envs=2, n_step=1, steps=120,
                                            frame_capacity=4096)
    for a, b in pairs:
        for key in a:
            assert np.array_equal(to_numpy(a[key]), to_numpy(b[key])), key
    assert ring.episodes > 20 and ring.frames == C * (2 * (1 + 120) + ring.episodes)  # each stack wholly new


def test_stack_frames_reuses_the_shifted_frames_and_repeated_padding():
    frames = np.arange(1, 7, dtype=np.uint8)[:, None, None] * np.ones((1, 2, 2), np.uint8)  # six distinct frames
    encoder = StackFrames(1, 3)
    start = np.stack([frames[0], frames[0], frames[0]])[None]  # padding by repeats: one frame
    assert encoder.start(start).tolist() == [[0, 0, 0]] and encoder.pending == 1
    step = np.stack([frames[0], frames[0], frames[1]])[None]
    final, nxt = encoder.step(start, step, step, np.array([False]))
    assert final.tolist() == nxt.tolist() == [[0, 0, 1]]
    reset = np.stack([np.zeros((2, 2), np.uint8), np.zeros((2, 2), np.uint8), frames[2]])[None]  # zero padding
    final2 = np.stack([frames[0], frames[1], frames[3]])[None]
    final, nxt = encoder.step(step, final2, reset, np.array([True]))
    assert final.tolist() == [[0, 1, 2]] and nxt.tolist() == [[3, 3, 4]]
    sent = encoder.take()
    assert len(sent) == 5 and encoder.take() is None
    for ids, stack in ((final[0], final2[0]), (nxt[0], reset[0])):
        assert np.array_equal(sent[ids], stack)


def test_add_frames_refuses_ids_its_stream_no_longer_holds():
    replay = ReplayFramesNumpy(16, (C, H, W), (), "int64")
    stream = FrameStream(np.zeros((8, H, W), np.uint8))
    with pytest.raises(ValueError, match="span more than the stream's 8 frames"):
        replay.add_frames(stream, np.array([[0, 1, 2, 3, 6, 7, 8, 9]]), np.zeros(1, np.int64), np.zeros(1), np.zeros(1))
    with pytest.raises(ValueError, match="frame_ids has shape"):
        replay.add_frames(stream, np.zeros((1, C)), np.zeros(1, np.int64), np.zeros(1), np.zeros(1))


# --- a real run: actor processes, a frame ring each ---------------------------------------------
def pong_executor(actors=1, num_envs=2):
    cfg = make_config("dqn", "ALE/Pong-v5", overrides=["learning_starts=100000", "buffer_size=4000", "batch_size=32",
                                                        "n_step=1"])
    algo = make_algorithm("dqn", env_spec("ALE/Pong-v5"), cfg.agent)
    placement = default_placement(torch.device("cpu"), (1, 1), threads=1, mlp_policy=False, frames=True)
    return LocalExecutor(algo, placement, num_envs, seed=0, actors=actors, log=lambda m: None)


def test_pong_actors_send_one_frame_per_env_step_not_stacks():
    pytest.importorskip("ale_py")
    ex = pong_executor(actors=2, num_envs=2)
    try:
        while len(ex.replay) < 400:
            ex.iteration()
        assert ex.frames and all("frames" in r.block.arrays and "obs" not in r.block.arrays for r in ex.rings)
        steps = int(ex.control["actor_steps"].sum())
        frames = sum(int(r.header[FRAMES_WRITTEN]) for r in ex.rings)
        rows = sum(int(r.header[WRITTEN]) for r in ex.rings)
        frame_bytes = 84 * 84
        # at most one frame per env step (none where the screen did not change), plus each actor's first stacks
        assert steps // 2 <= frames <= steps + 2 * 2 * C
        per_step = ex.ring_bytes() / steps
        row_bytes = 2 * C * 8 + 8 + 4 + 4  # frame ids, int64 action, reward, discount
        assert per_step <= (frames * frame_bytes + rows * row_bytes) / steps + 1
        assert per_step < 1.1 * frame_bytes < 2 * C * frame_bytes / 7  # not 2C frames
        # the replay's stacks are frame stacks: each next_obs is its obs shifted by one new frame (n-step 1 here)
        out = ex.replay.sample(np.random.default_rng(0).random(64))
        assert np.array_equal(out["next_obs"][:, :-1], out["obs"][:, 1:])
        assert (out["obs"][:, -1] != out["next_obs"][:, -1]).any()
    finally:
        ex.close()


def test_the_actor_never_overwrites_a_frame_that_unread_rows_or_it_still_need():
    ring = TransitionRing(SharedArrays(frame_ring_layout(8, 6, 2, (2, 3, 3), (), "int64")))
    writer = TransitionRing(SharedArrays(handle=ring.block.handle))  # the actor's end, as actor_process attaches
    try:
        assert writer.frames_free(oldest_held=0) == 6
        writer.push_frames(np.arange(4, dtype=np.uint8)[:, None, None] * np.ones((1, 3, 3), np.uint8))  # ids 0..3
        row = {"frame_ids": np.array([[1, 2, 2, 3]]), "actions": np.zeros(1, np.int64), "rewards": np.ones(1, np.float32),
               "discounts": np.ones(1, np.float32)}
        writer.push(row)
        assert writer.frames_free(oldest_held=3) == 6 - (4 - 1)  # the unread row still needs frame 1
        assert writer.frames_free(oldest_held=0) == 6 - 4  # and the actor frame 0
        rows = ring.pop(release=False)
        assert rows["frame_ids"].tolist() == [[1, 2, 2, 3]] and writer.frames_free(oldest_held=3) == 3
        ring.release()  # the learner read its frames: only what the actor holds is kept
        assert writer.frames_free(oldest_held=3) == 5 and ring.pop() is None
        writer.push_frames(np.full((5, 3, 3), 9, np.uint8))  # ids 4..8 go to slots 4, 5, 0, 1, 2: frame 3 untouched
        assert np.array_equal(ring.frames[3], np.full((3, 3), 3)) and writer.frames_free(oldest_held=3) == 0
        # a restarted actor attaching to the ring keeps every frame there until the rows written before it are read
        writer.push({**row, "frame_ids": np.array([[3, 4, 5, 6]])})
        restarted = TransitionRing(SharedArrays(handle=ring.block.handle))
        assert restarted.frames_free(oldest_held=9) == 0
        ring.pop(release=False)
        ring.release()
        assert restarted.frames_free(oldest_held=9) == 6 and int(ring.header[FRAMES_WRITTEN]) == 9
        restarted.block.close()
    finally:
        writer.block.close()
        ring.frames = ring.header = None
        ring.block.close()


def counting_executor(actors=1, num_envs=2, inference="actor", learning_starts=100_000):
    """The local executor on envs_custom's counting frames, with a frame replay (n-step 1)."""
    env = "envs_custom:make_counting_stack"
    cfg = make_config("dqn", env, overrides=[f"learning_starts={learning_starts}", "buffer_size=4000", "batch_size=32",
                                             "n_step=1", "hidden=32"])
    algo = make_algorithm("dqn", env_spec(env), cfg.agent)
    placement = default_placement(torch.device("cpu"), (1, 1), threads=1, mlp_policy=False, frames=True)
    return LocalExecutor(algo, placement, num_envs, seed=0, actors=actors, log=lambda m: None, inference=inference)


def exact_stacks(replay, count=256):
    """Every sampled stack is one the env gave: one episode's frames (one tag), steps t-3..t (the
    first frame repeated before t = 3), and next_obs one step on from obs (n-step 1)."""
    from envs_custom import counted

    out = replay.sample(np.random.default_rng(len(replay)).random(count))
    for key in ("obs", "next_obs"):
        tags, steps = counted(out[key])
        assert (tags == tags[:, :1]).all(), key
        assert (steps == np.maximum(0, steps[:, -1:] - np.arange(C - 1, -1, -1))).all(), key
    assert (counted(out["next_obs"])[0][:, 0] == counted(out["obs"])[0][:, 0]).all()
    assert (counted(out["next_obs"])[1][:, -1] == counted(out["obs"])[1][:, -1] + 1).all()
    return True


@pytest.mark.parametrize("ring_capacity", [None, 16], ids=["default", "small-rings"])
def test_a_restarted_actor_and_a_resumed_run_go_on_through_frame_rings(monkeypatch, ring_capacity):
    """Small rings: the actor waits for room in its frame ring all the time, and never overwrites a frame in use."""
    import signal

    from test_resume import _assert_identical

    if ring_capacity:
        monkeypatch.setattr(local, "RING_CAPACITY", ring_capacity)
    ex = counting_executor()
    try:
        assert ex.frames
        while len(ex.replay) < 300:
            ex.iteration()
        os.kill(ex.actor_pids()[0], signal.SIGKILL)  # its successor continues the ring's frame ids
        while ex.restarts < 1 or len(ex.replay) < 1500:
            ex.iteration()
        assert int(ex.rings[0].header[FRAMES_WRITTEN]) > 1000 and exact_stacks(ex.replay)
        state = copy.deepcopy(ex.state_dict())
    finally:
        ex.close()
    fresh = counting_executor()
    try:
        fresh.load_state_dict(state)
        _assert_identical(fresh.state_dict(), state)
        while len(fresh.replay) < 3000:  # fresh rings and streams, the same replay
            fresh.iteration()
        assert exact_stacks(fresh.replay, 1024)
    finally:
        fresh.close()


def test_two_actors_with_central_inference_send_frames_too():
    ex = counting_executor(actors=2, num_envs=3, inference="central", learning_starts=300)
    try:
        while len(ex.replay) < 1500:
            ex.iteration()
        assert ex.updates > 100 and ex.timer_totals()["Act"][1] > 0  # the learner's process acted for the actors
        assert all(int(r.header[FRAMES_WRITTEN]) > 100 for r in ex.rings) and exact_stacks(ex.replay, 1024)
    finally:
        ex.close()
