"""Frames, not stacks, in the ray executor's chunks (runtime/frame_chunks.py), without Ray: an
actor's chunks carry each new frame once, and the learner's end rebuilds exactly the stacks the env
gave, through chunks of any size, a lost chunk and a restarted actor."""

from __future__ import annotations

import numpy as np

from hetrl.primitives.replay_frames_numpy import ReplayFramesNumpy
from hetrl.runtime.frame_chunks import ChunkStreams, frame_chunk
from test_frames_rings import C, H, W, acting, batch, to_numpy

ENV = "HetrlNoiseStack-reset-v0"  # test_frames_rings' noise frames, stacked by Gymnasium (a new episode repeats its first)


def chunks_of(role, stacked_role, sizes, stream=(0, 0)):
    """The chunks an actor returns with ``sizes`` steps each, and the stack path's transitions of each."""
    out = []
    for steps in sizes:
        rows, stacks = [], []
        for _ in range(steps):
            ready, _ = role.step(0)
            same, _ = stacked_role.step(0)
            if ready is not None:
                rows.append(ready)
                stacks.append({key: np.array(value) for key, value in same.items()})
        out.append((frame_chunk(role, rows, stream), batch(stacks) if stacks else None))
    return out


def replay():
    return ReplayFramesNumpy(4096, (C, H, W), (), "int64", frame_capacity=1 << 15, lookback=4096)


def add(replay, received):
    stream, rows = received
    replay.add_frames(stream, **rows)


def keys(transitions):
    """Each transition's bytes (obs, action, reward, next_obs, discount): a noise env's never repeat."""
    fields = ("obs", "actions", "rewards", "next_obs", "discounts")
    columns = [to_numpy(transitions[k]).astype(np.uint8 if "obs" in k else np.float64) for k in fields]
    return {b"".join(c[i].tobytes() for c in columns) for i in range(len(columns[0]))}


def test_chunks_carry_new_frames_once_and_rebuild_the_env_s_stacks():
    num_envs, n_step = 3, 3
    role, stacked_role = acting(ENV, num_envs, n_step, True), acting(ENV, num_envs, n_step, False)
    sizes = np.random.default_rng(0).integers(1, 12, 40)  # chunks of 1 to 11 steps
    streams, framed, plain = ChunkStreams((H, W)), replay(), replay()
    episodes_frames = 0
    for chunk, stacks in chunks_of(role, stacked_role, sizes):
        assert set(chunk) == {"stream", "frames", "first_frame", "oldest_frame", "rows"}  # no obs travel
        assert chunk["frames"].shape[1:] == (H, W) and chunk["frames"].dtype == np.uint8
        episodes_frames += len(chunk["frames"])
        received = streams.receive(chunk)
        assert (received is None) == (stacks is None)
        if received is not None:
            add(framed, received)
            plain.add(**stacks)
    steps = int(sizes.sum())
    # one frame per env step plus each episode's first: far from the stack path's 2C per transition
    assert steps * num_envs < episodes_frames < 1.5 * steps * num_envs and streams.dropped == 0
    assert len(framed) == len(plain) > 200
    uniform = np.random.default_rng(1).random(512)
    a, b = plain.sample(uniform), framed.sample(uniform)
    for key in a:
        assert np.array_equal(to_numpy(a[key]), to_numpy(b[key])), key


def test_a_lost_chunk_drops_only_the_transitions_that_refer_to_its_frames():
    num_envs, n_step = 2, 3
    role, stacked_role = acting(ENV, num_envs, n_step, True), acting(ENV, num_envs, n_step, False)
    streams, framed = ChunkStreams((H, W)), replay()
    made, dropped_after = set(), []
    for k, (chunk, stacks) in enumerate(chunks_of(role, stacked_role, [5] * 30)):
        made |= keys(stacks) if stacks is not None else set()
        if k == 10:
            lost = len(chunk["rows"]["frame_ids"])
            continue  # lost with its node
        before = streams.dropped
        received = streams.receive(chunk)
        if received is not None:
            add(framed, received)
        if k > 10:
            dropped_after.append(streams.dropped - before)
    # the chunk after the gap refers to the lost frames (its stacks continue them); later ones are whole
    assert dropped_after[0] > 0 and sum(dropped_after[2:]) == 0, dropped_after
    assert len(framed) == len(made) - lost - streams.dropped  # the lost chunk's rows, and the dropped
    assert keys(framed.sample(np.random.default_rng(2).random(1024))) <= made  # every stack the env gave


def test_a_restarted_actor_starts_a_fresh_stream_and_its_predecessor_s_late_chunk_is_dropped():
    num_envs, n_step = 2, 1
    first, first_stacks = acting(ENV, num_envs, n_step, True), acting(ENV, num_envs, n_step, False)
    second, second_stacks = acting(ENV, num_envs, n_step, True, seed=100), acting(ENV, num_envs, n_step, False, seed=100)
    streams, framed = ChunkStreams((H, W)), replay()
    old = chunks_of(first, first_stacks, [4] * 4, stream=(0, 0))
    new = chunks_of(second, second_stacks, [4] * 4, stream=(0, 1))
    made = set()
    for chunk, stacks in [*old[:3], *new[:2], old[3], *new[2:]]:  # the predecessor's last chunk arrives late
        received = streams.receive(chunk)
        if received is not None:
            add(framed, received)
            made |= keys(stacks)
    assert new[0][0]["first_frame"] == 0  # numbered from 0 again: its own stream
    assert streams.dropped == len(old[3][0]["rows"]["frame_ids"]) and len(framed) == len(made)
    assert keys(framed.sample(np.random.default_rng(3).random(256))) <= made


def test_the_profiler_s_frame_chunk_is_laid_out_as_an_actor_s():
    """ChunkTransfer of a frame replay is measured on a chunk of the executor's fields and dtypes."""
    from hetrl.profile import _frame_chunk

    role, stacked_role = acting(ENV, 1, 1, True), acting(ENV, 1, 1, False)
    (real, _), = chunks_of(role, stacked_role, [16])
    made = _frame_chunk(role.algo, 16, np.random.default_rng(0))
    assert made.keys() == real.keys() and made["rows"].keys() == real["rows"].keys()
    for key in ("frames", *real["rows"]):
        a, b = (made[key], real[key]) if key == "frames" else (made["rows"][key], real["rows"][key])
        assert (a.dtype, a.shape[1:]) == (b.dtype, b.shape[1:]), key
    ids = made["rows"]["frame_ids"]
    assert len(made["frames"]) == 16 + C and len(ids) == 16 and (ids[:, C:-1] == ids[:, 1:C]).all() and ids.max() < 16 + C
