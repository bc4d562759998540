"""The frame replay: stacks rebuilt from single frames equal what was added, sample by sample,
across episode starts (both paddings), terminations, truncations, interleaved envs, n-step
transitions, the ring's wrap-around and eviction; numpy and torch storage alike; checkpoints;
the memory bound; the refusal of non-image observations.

Frames are synthetic: frame number k (counting every frame any env made) encodes k in its first
three bytes, so a wrong frame anywhere in a rebuilt stack is detected."""

from __future__ import annotations

import itertools
from types import SimpleNamespace
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch

from hetrl.algos import DQNConfig, make_algorithm
from hetrl.envs import env_spec
from hetrl.errors import HetrlError
from hetrl.primitives import build, implementations
from hetrl.primitives.env_step_gymnasium import EnvStepGymnasium
from hetrl.primitives.replay_frames_numpy import ReplayFramesNumpy
from hetrl.primitives.replay_frames_torch import ReplayFramesTorch
from hetrl.primitives.replay_numpy import ReplayNumpy
from hetrl.protocol import PRIMITIVES, Slot
from hetrl.runtime.nstep import NStepAssembler

BACKENDS = [pytest.param(ReplayFramesNumpy, id="numpy"), pytest.param(ReplayFramesTorch, id="torch")]
C, H, W = 4, 6, 8  # a stack of 4 frames of 6x8 bytes


def to_numpy(x: Any) -> np.ndarray:
    return x.cpu().numpy() if isinstance(x, torch.Tensor) else np.asarray(x)


class FrameStackEnvs:
    """N fake envs giving stacks of the last C frames, newest last, as Gymnasium's
    FrameStackObservation does: at a reset the first frame repeated (padding "reset") or zeros
    before it ("zero"). Episodes end at random, terminated or truncated; the outputs are EnvStep's
    (same-step auto-reset, the true final obs in ``final_obs``)."""

    def __init__(self, num_envs: int, rng: np.random.Generator, padding: str = "reset", end_p: float = 0.08,
                 max_len: int = 40) -> None:
        self.n, self.rng, self.padding, self.end_p, self.max_len = num_envs, rng, padding, end_p, max_len
        self.count = 0
        self.stacks = np.zeros((num_envs, C, H, W), np.uint8)
        self.lengths = np.zeros(num_envs, np.int64)
        for i in range(num_envs):
            self._reset(i)

    def frame(self) -> np.ndarray:
        k = self.count = self.count + 1
        out = np.full((H, W), (k * 7) % 251, np.uint8)
        out[0, :3] = (k & 255, (k >> 8) & 255, (k >> 16) & 255)
        return out

    def _reset(self, i: int) -> None:
        first = self.frame()
        self.stacks[i] = first if self.padding == "reset" else 0
        self.stacks[i, -1] = first
        self.lengths[i] = 0

    def obs(self) -> np.ndarray:
        return self.stacks.copy()  # uint8, as EnvStep gives it

    def step(self) -> dict[str, np.ndarray]:
        final = np.empty_like(self.stacks)
        terminated, truncated = np.zeros(self.n, bool), np.zeros(self.n, bool)
        for i in range(self.n):
            self.stacks[i, :-1] = self.stacks[i, 1:].copy()
            self.stacks[i, -1] = self.frame()
            self.lengths[i] += 1
            final[i] = self.stacks[i]
            if self.rng.random() < self.end_p:
                terminated[i] = True
            elif self.lengths[i] >= self.max_len or self.rng.random() < self.end_p / 2:
                truncated[i] = True
            if terminated[i] or truncated[i]:
                self._reset(i)
        return {"final_obs": final, "terminated": terminated, "truncated": truncated,
                "rewards": self.rng.standard_normal(self.n).astype(np.float32)}


def transitions(num_envs: int, n_step: int, steps: int, seed: int, **env_kwargs: Any):
    """What the inline loop hands ReplayAdd: the fake envs' steps through the real NStepAssembler."""
    rng = np.random.default_rng(seed)
    envs = FrameStackEnvs(num_envs, rng, **env_kwargs)
    assembler = NStepAssembler(num_envs, n_step, 0.9)
    obs = envs.obs()
    for _ in range(steps):
        actions = rng.integers(0, 6, num_envs)
        out = envs.step()
        ready = assembler(obs, actions, out["rewards"], out["final_obs"], out["terminated"], out["truncated"])
        obs = envs.obs()
        if ready is not None:
            yield ready


class Reference:
    """The naive buffer: every transition kept whole, in add order; a ring slot's item is the
    latest add that went to it."""

    def __init__(self, capacity: int) -> None:
        self.capacity, self.items = capacity, []

    def add(self, batch: dict[str, np.ndarray]) -> None:
        for k in range(len(batch["obs"])):
            self.items.append({key: np.asarray(value[k]) for key, value in batch.items()})

    def check(self, out: dict[str, Any], live: int) -> None:
        """Every sampled item is a live one and is exactly what was added."""
        total = len(self.items)
        indices = to_numpy(out["indices"])
        adds = total - 1 - (total - 1 - indices) % self.capacity
        assert (adds >= total - live).all(), "sampled an evicted or overwritten transition"
        for row, k in enumerate(adds):
            item = self.items[k]
            for key in ("obs", "actions", "rewards", "next_obs", "discounts"):
                got = to_numpy(out[key])[row]
                assert np.array_equal(got, item[key].astype(got.dtype)), (key, int(k))


def drive(replay, *, num_envs: int, n_step: int, steps: int, seed: int, tensors: bool = False, stream=None,
          **env_kwargs: Any) -> tuple[Reference, list[dict[str, np.ndarray]], int]:
    """Adds (``stream``, or the fake envs' transitions), samples (checked against the reference)
    and priority updates; returns the reference, the batches and how many adds found transitions
    evicted early."""
    rng = np.random.default_rng(seed + 1)
    reference = Reference(replay.capacity)
    convert = (lambda x: torch.as_tensor(x, device=replay.device)) if tensors else (lambda x: x)
    batches, evicting = [], 0
    for ready in stream if stream is not None else transitions(num_envs, n_step, steps, seed, **env_kwargs):
        replay.add(**{key: convert(value) for key, value in ready.items()})
        reference.add(ready)
        assert len(replay) <= min(len(reference.items), replay.capacity)
        evicting += len(replay) < min(len(reference.items), replay.capacity)
        out = replay.sample(convert(rng.random(16)), beta=0.5)
        reference.check(out, len(replay))
        PRIMITIVES["ReplaySample"].check("outputs", {k: to_numpy(v) for k, v in out.items()},
                                         {"B": 16, "obs": (C, H, W), "act": (), "action_dtype": "int64",
                                          "obs_dtype": "uint8"})
        replay.update_priorities(out["indices"], convert(rng.standard_normal(16).astype(np.float32)))
        batches.append({key: to_numpy(value) for key, value in out.items()})
    return reference, batches, evicting


def make(cls: type, capacity: int, **kwargs: Any):
    return cls(capacity, (C, H, W), (), "int64", **kwargs)


# ---------------------------------------------------------------------------------------------
# Rebuilt stacks equal the reference's


@pytest.mark.parametrize("cls", BACKENDS)
@pytest.mark.parametrize("prioritized", [False, True], ids=["uniform", "prioritized"])
@pytest.mark.parametrize("n_step", [1, 3])
@pytest.mark.parametrize("padding", ["reset", "zero"])
def test_samples_equal_the_naive_buffer_through_wrap_around(cls, prioritized, n_step, padding):
    """Small capacity, many adds: the ring wraps many times over episodes of every kind."""
    replay = make(cls, 64, prioritized=prioritized, lookback=32)
    reference, _, _ = drive(replay, num_envs=3, n_step=n_step, steps=400, seed=n_step, padding=padding)
    assert len(reference.items) > 10 * replay.capacity
    assert replay._written > 10 * replay.frame_capacity  # the frame ring wrapped too


class CountingFrames(gym.Env):
    """Frames that count (as above), episodes of 1 to 11 steps; wrapped below in Gymnasium's own
    TimeLimit and FrameStackObservation."""

    counter = itertools.count(1)
    observation_space = gym.spaces.Box(0, 255, (H, W), np.uint8)
    action_space = gym.spaces.Discrete(2)

    def _frame(self) -> np.ndarray:
        k = next(self.counter)
        out = np.full((H, W), (k * 7) % 251, np.uint8)
        out[0, :3] = (k & 255, (k >> 8) & 255, (k >> 16) & 255)
        return out

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.left = int(self.np_random.integers(1, 12))
        return self._frame(), {}

    def step(self, action):
        self.left -= 1
        return self._frame(), float(action), self.left <= 0, False, {}


for _padding in ("reset", "zero"):
    gym.register(f"HetrlCountingFrames-{_padding}-v0", entry_point=lambda padding=_padding, **_: gym.wrappers.FrameStackObservation(
        gym.wrappers.TimeLimit(CountingFrames(), 8), C, padding_type=padding))


@pytest.mark.parametrize("cls", BACKENDS)
@pytest.mark.parametrize("padding", ["reset", "zero"])
@pytest.mark.parametrize("n_step", [1, 3])
def test_gymnasium_frame_stacks_through_env_step(cls, padding, n_step):
    """The real thing: Gymnasium's FrameStackObservation and TimeLimit stepped by EnvStep/gymnasium
    (same-step auto-reset, true final obs), NStepAssembler, then the frame replay."""
    env_id = f"HetrlCountingFrames-{padding}-v0"
    spec = env_spec(env_id)
    assert (spec.obs_shape, spec.obs_dtype) == ((C, H, W), "uint8")
    assert ReplayFramesNumpy.unsupported(SimpleNamespace(spec=spec)) is None

    ended = {"terminated": 0, "truncated": 0, "episodes": 0}

    def stream(num_envs=3, steps=300):
        envs, rng = EnvStepGymnasium(env_id, num_envs, 0), np.random.default_rng(0)
        assembler = NStepAssembler(num_envs, n_step, 0.9)
        obs = envs.reset()
        for _ in range(steps):
            actions = rng.integers(0, 2, num_envs)
            out = envs.step(actions)
            ready = assembler(obs, actions, out["rewards"], out["final_obs"], out["terminated"], out["truncated"])
            obs = out["next_obs"]
            for key in ("terminated", "truncated"):
                ended[key] += int(out[key].sum())
            ended["episodes"] += int((out["terminated"] | out["truncated"]).sum())
            if ready is not None:
                yield ready
        envs.close()
        assert min(ended.values()) > 10  # both kinds of episode end were covered

    replay = make(cls, 64, prioritized=True, lookback=32)
    reference, _, _ = drive(replay, num_envs=3, n_step=n_step, steps=0, seed=0, stream=stream())
    assert len(reference.items) > 10 * replay.capacity
    # Each frame once: one per step and each episode's first (the zero frame, when not found within
    # the lookback, again); the steps of the episodes still under way are frames of no transition yet.
    episodes = 3 + ended["episodes"]
    assert len(reference.items) + episodes <= replay._written + 3 * n_step
    assert replay._written <= len(reference.items) + episodes * (2 if padding == "zero" else 1) + 3 * n_step


@pytest.mark.parametrize("cls", BACKENDS)
@pytest.mark.parametrize("prioritized", [False, True], ids=["uniform", "prioritized"])
def test_short_episodes_evict_whole_dependencies(cls, prioritized):
    """Episodes of 1-2 steps store ~1.5 frames per transition: the frame ring runs out before the
    transition ring wraps, so transitions are evicted from the old end, never sampled after."""
    replay = make(cls, 64, prioritized=prioritized, lookback=16, frame_capacity=80)
    _, _, evicting = drive(replay, num_envs=4, n_step=3, steps=300, seed=5, end_p=0.6, max_len=2)
    assert evicting > 50
    assert 0 < len(replay) < replay.capacity


@pytest.mark.parametrize("cls", BACKENDS)
def test_a_priority_update_does_not_revive_an_evicted_transition(cls):
    """An update for a slot evicted since it was sampled leaves it at priority 0, never drawn."""
    replay = make(cls, 16, prioritized=True, lookback=8, frame_capacity=32)
    stream = transitions(2, 1, 200, seed=3, end_p=0.7, max_len=1)  # ~2 frames per transition
    replay.add(**next(stream))
    sampled = replay.sample(np.full(4, 0.1))["indices"]
    slot = int(to_numpy(sampled)[0])
    for ready in stream:
        replay.add(**ready)
        if slot not in {(replay._position - 1 - k) % replay.capacity for k in range(len(replay))}:
            break
    else:
        pytest.fail("the sampled slot was never evicted")
    replay.update_priorities(sampled, np.full(4, 100.0, np.float32))
    assert float(to_numpy(replay.tree.leaves)[slot]) == 0.0


@pytest.mark.parametrize("prioritized", [False, True], ids=["uniform", "prioritized"])
def test_same_batches_as_the_plain_replay_while_nothing_is_evicted(prioritized):
    """With frames enough, the learner sees exactly what ReplayNumpy would give it."""
    frames = make(ReplayFramesNumpy, 100, prioritized=prioritized, frame_capacity=400)
    plain = ReplayNumpy(100, (C, H, W), (), "int64", prioritized=prioritized, obs_dtype="uint8")
    rng = np.random.default_rng(0)
    for ready in transitions(4, 3, 150, seed=11):
        frames.add(**ready)
        plain.add(**ready)
        assert len(frames) == len(plain)
        u, td = rng.random(32), rng.standard_normal(32).astype(np.float32)
        a, b = frames.sample(u, 0.4), plain.sample(u, 0.4)
        assert a.keys() == b.keys()
        for key in a:
            assert a[key].dtype == b[key].dtype and np.array_equal(a[key], b[key]), key
        frames.update_priorities(a["indices"], td)
        plain.update_priorities(b["indices"], td)
    assert frames._position != 0 and len(frames) == frames.capacity  # wrapped


@pytest.mark.parametrize("prioritized", [False, True], ids=["uniform", "prioritized"])
@pytest.mark.parametrize("tensors", [False, True], ids=["numpy-inputs", "tensor-inputs"])
def test_numpy_and_torch_storage_agree(prioritized, tensors):
    kwargs = dict(num_envs=3, n_step=3, steps=250, seed=2, end_p=0.3, max_len=5)
    _, expected, _ = drive(make(ReplayFramesNumpy, 48, prioritized=prioritized, lookback=24), **kwargs)
    torch_replay = make(ReplayFramesTorch, 48, prioritized=prioritized, lookback=24)
    _, got, _ = drive(torch_replay, tensors=tensors, **kwargs)
    for step, (a, b) in enumerate(zip(expected, got, strict=True)):
        for key in a:
            if key == "weights":  # x ** alpha may differ in the last float64 bit (see test_replay.py)
                assert np.allclose(a[key], b[key], rtol=1e-6), (step, key)
            else:
                assert a[key].dtype == b[key].dtype and np.array_equal(a[key], b[key]), (step, key)


@pytest.mark.gpu
@pytest.mark.parametrize("prioritized", [False, True], ids=["uniform", "prioritized"])
def test_numpy_and_cuda_storage_agree(prioritized):
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    kwargs = dict(num_envs=3, n_step=3, steps=250, seed=2, end_p=0.3, max_len=5)
    _, expected, _ = drive(make(ReplayFramesNumpy, 48, prioritized=prioritized, lookback=24), **kwargs)
    cuda = make(ReplayFramesTorch, 48, prioritized=prioritized, lookback=24, device="cuda")
    assert cuda._mirror is not None  # frames compared on the host copy, not read back
    _, got, _ = drive(cuda, tensors=True, **kwargs)
    for a, b in zip(expected, got, strict=True):
        for key in a:
            assert np.allclose(a[key], b[key], rtol=1e-6) if key == "weights" else np.array_equal(a[key], b[key]), key


# ---------------------------------------------------------------------------------------------
# What add accepts


@pytest.mark.parametrize("cls", BACKENDS)
def test_each_frame_is_stored_once(cls):
    """A long episode of one env: one frame per step, plus the first; padding costs nothing."""
    replay = make(cls, 1000)
    steps = 0
    for ready in transitions(1, 3, 200, seed=0, end_p=0.0, max_len=10**6):
        replay.add(**ready)
        steps += len(ready["obs"])
    assert steps == 198  # n - 1 transitions still wait in the assembler
    assert replay._written == 201  # frames 1..201 (the reset frame and one per step): each once


@pytest.mark.parametrize("cls", BACKENDS)
def test_add_refuses_values_that_are_not_bytes(cls):
    replay = make(cls, 16)
    batch = next(transitions(2, 1, 1, seed=0))
    scaled = {**batch, "obs": batch["obs"] / 255.0}
    with pytest.raises(ValueError, match="not bytes"):
        replay.add(**scaled)
    with pytest.raises(ValueError, match=r"next_obs has shape \(2, 4, 6, 7\), expected \(2, 4, 6, 8\)"):
        replay.add(**{**batch, "next_obs": batch["next_obs"][..., :7]})
    with pytest.raises(ValueError, match="rewards has shape"):
        replay.add(**{**batch, "rewards": batch["rewards"][:1]})
    assert len(replay) == 0


def test_a_batch_larger_than_the_frame_ring_is_added_in_chunks():
    replay = make(ReplayFramesNumpy, 32, lookback=8, frame_capacity=48)  # 5 transitions per chunk
    reference = Reference(32)
    for ready in transitions(40, 1, 3, seed=4):  # 40 envs: 40 transitions a call
        replay.add(**ready)
        reference.add(ready)
        reference.check(replay.sample(np.random.default_rng(0).random(64)), len(replay))
    assert 0 < len(replay) < 32


# ---------------------------------------------------------------------------------------------
# Checkpoints


@pytest.mark.parametrize("source", BACKENDS)
@pytest.mark.parametrize("target", BACKENDS)
def test_state_dict_round_trip(source, target):
    original = make(source, 40, prioritized=True, lookback=16)
    stream = transitions(3, 3, 400, seed=9, end_p=0.2)
    for _ in range(60):
        ready = next(stream)
        original.add(**ready)
        out = original.sample(np.random.default_rng(1).random(8))
        original.update_priorities(out["indices"], np.random.default_rng(2).random(8).astype(np.float32))
    state = original.state_dict()
    assert all(isinstance(state[key], np.ndarray) for key in ("frames", "frame_refs", "priorities", "born"))
    restored = make(target, 40, prioritized=True, lookback=16)
    restored.load_state_dict(state)
    rng = np.random.default_rng(3)
    for ready in stream:  # the same adds (frames found again through the rebuilt lookup), samples, updates
        original.add(**ready)
        restored.add(**ready)
        u, td = rng.random(16), rng.random(16).astype(np.float32)
        a, b = original.sample(u), restored.sample(u)
        for key in a:
            assert np.allclose(to_numpy(a[key]), to_numpy(b[key]), rtol=1e-6, atol=0), key
        original.update_priorities(a["indices"], td)
        restored.update_priorities(b["indices"], td)
    assert original._written == restored._written
    for key, value in restored.state_dict().items():
        if key in ("priorities", "max_priority"):
            assert np.allclose(value, original.state_dict()[key], rtol=1e-12), key
        else:
            assert np.array_equal(value, original.state_dict()[key]), key


@pytest.mark.parametrize("cls", BACKENDS)
def test_load_state_dict_mismatch_raises(cls):
    source = make(ReplayFramesNumpy, 16, lookback=8)
    source.add(**next(transitions(2, 1, 1, seed=0)))
    with pytest.raises(ValueError, match="lookback is 8 in the state, 9 here"):
        make(cls, 16, lookback=9, frame_capacity=source.frame_capacity).load_state_dict(source.state_dict())
    with pytest.raises(ValueError, match="frame_capacity"):
        make(cls, 16, lookback=8, frame_capacity=100).load_state_dict(source.state_dict())
    with pytest.raises(ValueError, match="capacity is 16 in the state, 17 here"):
        make(cls, 17, lookback=8, frame_capacity=source.frame_capacity).load_state_dict(source.state_dict())
    plain = ReplayNumpy(16, (C, H, W), (), "int64", obs_dtype="uint8")
    with pytest.raises(ValueError, match="not a frame replay's"):
        make(cls, 16).load_state_dict(plain.state_dict())


# ---------------------------------------------------------------------------------------------
# Memory


def test_memory_is_one_frame_per_transition_and_a_little():
    """An 84x84x4 stack: the storage (frames, fields, priorities, bookkeeping) per transition, at a
    small capacity with the lookback the defaults give a million transitions' share of (1/512)."""
    capacity, frame = 8192, 84 * 84
    replay = ReplayFramesNumpy(capacity, (4, 84, 84), (), "int64", prioritized=True, lookback=capacity // 512)
    per_transition = replay.bytes_per_transition
    assert frame < per_transition <= 7.5e9 / 1e6  # <= 7.5 GB for a million transitions
    assert per_transition <= frame * (1 + 1 / 32 + 1 / 512) + 80  # ring slack, lookback, metadata
    plain = 2 * 4 * frame  # obs and next_obs, uint8 stacks: what ReplayNumpy stores
    assert per_transition < plain / 7
    assert replay.nbytes == replay.frames.nbytes + replay._born.nbytes + replay.tree.tree.nbytes + sum(
        a.nbytes for a in replay._data.values())


def test_a_million_transitions_fit_in_7_5_gb():
    """The default sizes at a million transitions, counted as nbytes counts them (not allocated)."""
    capacity = 1_000_000
    lookback, frames = ReplayFramesNumpy.default_sizes(capacity, 4)
    assert lookback == 2048 and frames == capacity + capacity // 32 + lookback
    small = ReplayFramesNumpy(1024, (4, 84, 84), (), "int64", prioritized=True, lookback=16)
    per_item = sum(a.nbytes for a in small._data.values()) // 1024 + 8  # fields and born, per transition
    tree = 2 * (1 << (capacity - 1).bit_length()) * 8
    assert frames * 84 * 84 + capacity * per_item + tree <= 7.5e9


# ---------------------------------------------------------------------------------------------
# The primitive


def image_algorithm(obs_shape=(4, 84, 84), obs_dtype="uint8"):
    spec = SimpleNamespace(env_id="Frames-v0", obs_shape=obs_shape, obs_dtype=obs_dtype, action_shape=(),
                           action_dtype="int64")
    return SimpleNamespace(spec=spec, config=DQNConfig(buffer_size=256, prioritized=True))


@pytest.mark.parametrize("backend", ["frames-numpy", "frames-torch"])
def test_registered_and_built_from_an_image_algorithm(backend):
    impls = {p: implementations(p)[backend] for p in ("ReplayAdd", "ReplaySample", "PriorityUpdate")}
    assert {p: i.method for p, i in impls.items()} == {"ReplayAdd": "add", "ReplaySample": "sample",
                                                      "PriorityUpdate": "update_priorities"}
    replay = build("ReplayAdd", Slot(backend, "cpu"), image_algorithm(), 0)
    assert (replay.capacity, replay.obs_shape, replay.prioritized) == (256, (4, 84, 84), True)
    assert replay.host_arrays == (backend == "frames-numpy")


@pytest.mark.parametrize("backend", ["frames-numpy", "frames-torch"])
def test_non_image_observations_are_refused_with_the_fix(backend):
    cartpole = make_algorithm("dqn", env_spec("CartPole-v1"), DQNConfig())
    with pytest.raises(HetrlError, match=rf"replay {backend} stores stacked image frames.*CartPole-v1.*\(4,\).*"
                                         "use replay backend numpy or torch"):
        build("ReplayAdd", Slot(backend, "cpu"), cartpole, 0)
    reason = implementations("ReplayAdd")[backend].unsupported(image_algorithm(obs_dtype="float32"))
    assert reason and "uint8" in reason and "float32" in reason
    assert "C >= 2" in implementations("ReplayAdd")[backend].unsupported(image_algorithm(obs_shape=(1, 84, 84)))
    assert implementations("ReplayAdd")[backend].unsupported(image_algorithm()) is None
    with pytest.raises(ValueError, match="C >= 2"):
        ReplayFramesNumpy(16, (84, 84), (), "int64")


def test_the_fixed_rule_places_image_stacks_in_a_frame_replay():
    from hetrl.planner.rule import default_placement

    assert default_placement(torch.device("cpu"), (1, 1), 1, frames=True).replay == Slot("frames-numpy", "cpu")
    assert default_placement(torch.device("cuda:0"), (1, 1), frames=True).replay == Slot("frames-torch", "cuda:0")
    assert default_placement(torch.device("cpu"), (1, 1), 1).replay == Slot("numpy", "cpu")
