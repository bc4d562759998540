"""The frame replay against the plain numpy replay on Atari-shaped transitions (4x84x84 stacks):
bytes per transition, ReplayAdd per call (N envs' n-step transitions from NStepAssembler) and
ReplaySample per call, uniform and prioritized. Prints a markdown section for docs/benchmarks.md.

    python bench/replay_frames.py                          # capacity 4096, 8 envs, n-step 3, batch 32
    python bench/replay_frames.py --capacity 8192 --envs 16 --calls 400

Frames are random bytes, episodes end with probability 1/200 per step (stacks padded by repeating
the first frame); obs and next_obs reach add as float32, as EnvStep gives them today. The plain
replay at this capacity holds ~1 GB; the million-transition figures are computed from the sizes
each replay allocates per transition (nothing of that size is allocated).
"""

from __future__ import annotations

import argparse
import platform
import statistics
import time
from collections import deque

import numpy as np
import torch

from hetrl.primitives.replay_frames_numpy import ReplayFramesNumpy
from hetrl.primitives.replay_frames_torch import ReplayFramesTorch
from hetrl.primitives.replay_numpy import ReplayNumpy
from hetrl.runtime.nstep import NStepAssembler

SHAPE = (4, 84, 84)


def stream(envs: int, n_step: int, rng: np.random.Generator):
    """NStepAssembler's output for ``envs`` frame-stacking envs, forever (uint8 stacks)."""
    stacks = [deque([f] * 4, maxlen=4) for f in rng.integers(0, 256, (envs, 84, 84), dtype=np.uint8)]
    assembler = NStepAssembler(envs, n_step, 0.99)
    while True:
        obs = np.stack([np.stack(s) for s in stacks])
        final = np.empty_like(obs)
        ended = rng.random(envs) < 1 / 200
        for i, s in enumerate(stacks):
            s.append(rng.integers(0, 256, (84, 84), dtype=np.uint8))
            final[i] = np.stack(s)
            if ended[i]:
                first = rng.integers(0, 256, (84, 84), dtype=np.uint8)
                stacks[i] = deque([first] * 4, maxlen=4)
        ready = assembler(obs, rng.integers(0, 6, envs), rng.standard_normal(envs).astype(np.float32), final,
                          ended, np.zeros(envs, bool))
        if ready is not None:
            yield ready


def measure(replays: dict, args, seed: int = 0) -> dict[str, dict[str, float]]:
    """Median add and sample seconds per call of each replay, their calls interleaved (so a busy
    machine slows them alike), each fed the same transitions and draws."""
    rng = np.random.default_rng(seed)
    source = stream(args.envs, args.n_step, rng)

    def as_env_gives(ready):
        return {k: v.astype(np.float32) if k in ("obs", "next_obs") else v for k, v in ready.items()}

    def fed(name, ready, batch):  # "uint8 in": the frames as a uint8 EnvStep would give them
        return ready if name.endswith("uint8 in") else batch

    capacity = min(r.capacity for r in replays.values())
    while min(len(r) for r in replays.values()) < capacity:  # fill; the ring wraps during the timed adds
        ready = next(source)
        batch = as_env_gives(ready)
        for name, replay in replays.items():
            replay.add(**fed(name, ready, batch))
    times = {name: {"add": [], "sample": []} for name in replays}
    draws = [rng.random(args.batch) for _ in range(64)]
    for k in range(args.calls):
        ready = next(source)
        batch = as_env_gives(ready)
        td = rng.random(args.batch).astype(np.float32)
        for name, replay in replays.items():
            given = fed(name, ready, batch)
            start = time.perf_counter()
            replay.add(**given)
            middle = time.perf_counter()
            out = replay.sample(draws[k % 64], 0.4)
            times[name]["add"].append(middle - start)
            times[name]["sample"].append(time.perf_counter() - middle)
            if replay.prioritized:
                replay.update_priorities(out["indices"], td)
            del out
    return {name: {key: statistics.median(values) for key, values in kinds.items()} for name, kinds in times.items()}


def plain_bytes(capacity: int, prioritized: bool) -> int:
    stack = int(np.prod(SHAPE))
    per = 2 * stack * 4 + 8 + 4 + 4  # obs, next_obs float32; action int64; reward, discount
    tree = 2 * (1 << (capacity - 1).bit_length()) * 8 if prioritized else 0
    return capacity * per + tree


def frames_bytes_at(capacity: int, prioritized: bool) -> int:
    """What FrameReplay's nbytes counts at ``capacity`` with the default sizes (computed)."""
    _, frames = ReplayFramesNumpy.default_sizes(capacity, SHAPE[0])
    per = 2 * SHAPE[0] * 4 + 8 + 4 + 4 + 8  # frame refs int32, action, reward, discount, born
    tree = 2 * (1 << (capacity - 1).bit_length()) * 8 if prioritized else 0
    return frames * SHAPE[1] * SHAPE[2] + capacity * per + tree


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--capacity", type=int, default=4096)
    parser.add_argument("--envs", type=int, default=8)
    parser.add_argument("--n-step", type=int, default=3)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--calls", type=int, default=300)
    args = parser.parse_args()
    torch.set_num_threads(1)
    rows = []
    for prioritized in (False, True):
        replays = {name: cls(args.capacity, SHAPE, (), "int64", prioritized=prioritized)
                   for name, cls in (("numpy (plain)", ReplayNumpy), ("frames-numpy", ReplayFramesNumpy),
                                     ("frames-numpy, uint8 in", ReplayFramesNumpy),
                                     ("frames-torch, cpu", ReplayFramesTorch))}
        times = measure(replays, args)
        for name, replay in replays.items():
            frames = hasattr(replay, "nbytes")
            nbytes = replay.nbytes if frames else plain_bytes(args.capacity, prioritized)
            million = (frames_bytes_at if frames else plain_bytes)(1_000_000, prioritized)
            rows.append((name, "prioritized" if prioritized else "uniform", nbytes / args.capacity, million / 1e9,
                         times[name]["add"] * 1e6, times[name]["sample"] * 1e6))
        del replays
    print("## The frame replay against the plain numpy replay (4x84x84 uint8 stacks)\n")
    print(f"`python bench/replay_frames.py --capacity {args.capacity} --envs {args.envs} --n-step {args.n_step} "
          f"--batch {args.batch} --calls {args.calls}` on {time.strftime('%Y-%m-%d')}, {platform.processor() or platform.machine()}, "
          f"1 torch thread, Python {platform.python_version()}. Medians over {args.calls} calls on a full ring, the replays' calls interleaved; "
          f"an add is one call with {args.envs} envs' n-step transitions (obs and next_obs float32 of byte values, "
          f"as EnvStep gives them; \"uint8 in\": the same frames as uint8); a sample is batch {args.batch} (+ its priority update, untimed).\n")
    print("| replay | sampling | bytes/transition at this capacity | GB at 1M transitions (default sizes) | add µs/call | sample µs/call |")
    print("|---|---|---:|---:|---:|---:|")
    for name, kind, per, gb, add, sample in rows:
        print(f"| {name} | {kind} | {per:,.0f} | {gb:.2f} | {add:,.0f} | {sample:,.0f} |")


if __name__ == "__main__":
    main()
