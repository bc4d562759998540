"""The profiler: what each primitive costs on this machine, measured.

For an algorithm and env, it times every registered implementation of every primitive the
algorithm uses, on every device that implementation runs on, at the sizes the algorithm uses
(N envs for EnvStep, Act and ReplayAdd; the batch size B for ReplaySample, Learn and
PriorityUpdate; each thread count for a host learner), plus host-device transfers, the inline
loop's own work, the local executor's actor start-up (ActorStart), central inference's round
trip (InferenceTrip, InferenceServe) and, when this process is connected to a Ray cluster, the ray
executor's chunk through the object store to another node (ChunkTransfer). Each figure is
the median of repeated blocks of calls after a warm-up, with the 10th and 90th percentiles as
spread; asynchronous devices are synchronised at the end of every block. Saved as JSON with the
machine's description and fingerprint, so a plan can be made again without profiling.
"""

from __future__ import annotations

import copy
import hashlib
import itertools
import json
import os
import time
from collections import defaultdict
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch
from rich.table import Table

from hetrl.algos import AgentConfig, Algorithm, make_algorithm
from hetrl.devices import available_devices
from hetrl.energy.measurement import MIN_WINDOW_S
from hetrl.envs import EnvSource, env_spec
from hetrl.errors import CannotRunHere, HetrlError
from hetrl.files import file_part, read_json, write_json
from hetrl.hardware import Machine, describe_machine, usable_cores
from hetrl.planner.rule import default_placement, frame_replay_wanted
from hetrl.primitives import LIBRARY, build, implementations
from hetrl.protocol import Placement, Slot
from hetrl.runtime.frozen_objects import objects_frozen
from hetrl.runtime.host_blas import one_blas_thread
from hetrl.runtime.inference import TRIP_ROUNDS, inference_layout, measure_round_trip
from hetrl.runtime.inline import InlineExecutor
from hetrl.runtime.local import actor_preload
from hetrl.runtime.learner_role import to_device
from hetrl.runtime.ray_probe import CHUNK_CALLS, CHUNK_ROUNDS, cluster_given, measure_chunk_transfer
from hetrl.runtime.schedule import default_lead
from hetrl.runtime.startup import actor_start_seconds

PROFILE_FORMAT = "hetrl-profile-v7"  # v7: InferenceTrip/InferenceServe; v6: InRun costs; v5: WeightSync from each learner device, ActorStart (v4: energy per call; v3: replay, transfers, loop)
ENV_COUNTS = (1, 4, 16)  # EnvStep, Act and ReplayAdd sizes profiled
CHUNK_SIZES = (default_lead(1, 1) // 2, 4 * default_lead(1, 1))  # ChunkTransfer: the ray executor's chunk for 1 actor, and a larger one
ACT_POOL = 256  # observations Act is timed on, cycled through in batches (a multiple of every ENV_COUNTS size)
REPLAY_FILL = 50_000  # transitions in the replay while it is profiled (at most its capacity)...
REPLAY_FILL_BYTES = 256 << 20  # ...and at most this many bytes of stored observations (Atari: a few thousand)
BLOCK_SECONDS = 2e-3  # a timed block calls the primitive until it lasts at least this long
# Where a meter works, each primitive also runs this long while the meters read: RAPL and NVML
# counters advance in steps of milliseconds to tens of milliseconds.
ENERGY_SECONDS = MIN_WINDOW_S  # a meter is read over at least this long (hetrl.energy.measurement)


ENERGY_NOT_PROFILED = ("energy per call: not measured (a profile made for a throughput plan; `--objective efficiency` "
                       "and `hetrl profile` measure it)")


TimingKey = tuple[str, str, str, "int | None", "int | None"]  # primitive, backend, device, size, threads

PARTIAL_SUFFIX = ".partial.json"  # beside the profile's file: the measurements of a profile not yet finished
PARTIAL_MAX_AGE_S = 24 * 3600  # older measurements are not resumed: the machine's load may have changed


@dataclass(frozen=True)
class Timing:
    primitive: str  # a primitive, "Transfer" (replay batch to the learner) or "Loop" (the executor's own work)
    backend: str  # for Transfer: "SOURCE->DEVICE", SOURCE "numpy" (host arrays) or a torch device
    device: str
    size: int  # N (envs) or B (batch), whichever the primitive's contract is sized by
    threads: int | None  # torch threads for host torch work; None where it does not apply
    median_s: float
    p10_s: float
    p90_s: float
    calls: int  # calls timed (after warm-up)
    joules_per_call: float | None = None  # every working meter's energy (the whole machine's), per call; None: unavailable
    energy_meters: str | None = None  # the meters that measured it
    modelled: str | None = None  # None: measured here; else a what-if device's label (planner/whatif.py): modelled, never run

    @property
    def key(self) -> TimingKey:
        """What the row measured (the same key in two profiles means the same measurement)."""
        return self.primitive, self.backend, self.device, self.size, self.threads


@dataclass
class Profile:
    algo: str
    env: str
    agent: dict[str, Any]
    machine: dict[str, Any]
    created: str
    timings: list[Timing] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # what was measured otherwise than a run would do it
    # False: the meters were not read (a profile made for a throughput plan, which needs no energy)
    energy_profiled: bool = True
    # "Learn/cudagraph-compiled": registered and tried, but unable to run here (a note says why); the
    # profile counts as complete without its rows, and no plan places it
    unmeasured: list[str] = field(default_factory=list)

    @property
    def fingerprint(self) -> str:
        return self.machine["fingerprint"]

    def meter_names(self) -> list[str]:
        """The meters whose energy the rows sum (e.g. ["nvml:gpu0", "rapl:package-0"])."""
        return sorted({m.strip() for t in self.timings if t.energy_meters for m in t.energy_meters.split(",")})

    def machine_metered(self) -> bool:
        """Whether a meter worked on the machine the profile was made on (as its machine record lists them)."""
        return any(isinstance(m, Mapping) and m.get("available") for m in self.machine.get("meters") or [])

    def meter_methods(self) -> dict[str, str]:
        """How each of :meth:`meter_names` measured ("energy counter (powercap energy_uj)"), as the
        profile's machine lists its meters; a meter it does not list (a synthetic profile) is left out."""
        listed = {s.get("name"): s.get("method") for s in self.machine.get("meters") or [] if isinstance(s, Mapping)}
        return {n: str(listed[n]) for n in self.meter_names() if listed.get(n)}

    def lookup(self, primitive: str, backend: str, device: str, size: int, threads: int | None = None) -> Timing | None:
        for t in self.timings:
            if (t.primitive, t.backend, t.device, t.size, t.threads) == (primitive, backend, device, size, threads):
                return t
        return None

    def to_dict(self) -> dict[str, Any]:
        return {"format": PROFILE_FORMAT, "algo": self.algo, "env": self.env, "agent": self.agent,
                "machine": self.machine, "created": self.created, "timings": [asdict(t) for t in self.timings], "notes": self.notes,
                "energy_profiled": self.energy_profiled, "unmeasured": self.unmeasured}

    def save(self, path: str | Path) -> Path:
        return write_json(path, self.to_dict(), indent=1)

    @classmethod
    def load(cls, path: str | Path) -> "Profile":
        data = read_json(path, "profile", "make one with `hetrl profile ALGO ENV`", "delete it and profile again")
        try:
            if data.get("format") != PROFILE_FORMAT:
                raise ValueError(f"format is {data.get('format')!r}, expected {PROFILE_FORMAT}")
            timings = [Timing(**t) for t in data["timings"]]
            return cls(data["algo"], data["env"], data["agent"], data["machine"], data["created"], timings,
                       list(data.get("notes", [])), bool(data.get("energy_profiled", True)),
                       [str(key) for key in data.get("unmeasured", [])])
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise HetrlError(f"profile {path} is not a valid hetrl profile ({exc}); delete it and profile again") from None


def _cache_file(machine: Machine, stem: str, what: dict[str, Any]) -> Path:
    """``$XDG_CACHE_HOME/hetrl/profiles/<fingerprint>/<stem>_<key>.json``, the key a hash of
    ``what`` and the library (a release that adds a backend measures afresh)."""
    from hetrl import __version__

    text = json.dumps({**what, "library": [__version__, *LIBRARY]}, sort_keys=True, default=str)
    key = hashlib.sha256(text.encode()).hexdigest()[:10]
    cache = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "hetrl" / "profiles"
    return cache / machine.fingerprint() / f"{stem}_{key}.json"


def actor_start_path(machine: Machine, algo: str, env: str | EnvSource, actors: int) -> Path:
    """Where the ActorStart of a workload is kept, beside its profiles: keyed by the env (its kwargs
    and wrappers too), the actor count and the library, not by the agent's settings. Starting the
    actors is a fresh interpreter's imports, the fork server and the envs made; the network sizes and
    replay settings a profile is keyed by change it by less than its own spread from one start to
    the next, so each profile of the workload under other settings reads it instead of measuring
    it again (seconds of the profile's time, most of it the measuring interpreter's own start)."""
    source = env if isinstance(env, EnvSource) else EnvSource(env)
    return _cache_file(machine, f"actor_start_{algo}_{file_part(source.name)}", {"env": source.settings(), "actors": actors})


def kept_actor_start(path: Path | None, measure: Callable[[], float]) -> tuple[float, str | None]:
    """ActorStart's seconds from ``path`` where a valid one is kept there, else ``measure()``'d and
    kept (a cache that cannot be written is left as it is); with where a kept one came from (None:
    measured now)."""
    if path is not None and path.is_file():
        try:
            kept = read_json(path, "ActorStart")
            seconds, measured = float(kept["seconds"]), str(kept["measured"])
            if seconds > 0:
                return seconds, f"measured {measured}, kept in {path}"
        except (HetrlError, KeyError, TypeError, ValueError):
            pass  # unreadable: measured again and written over
    seconds = measure()
    if path is not None:
        try:
            write_json(path, {"seconds": seconds, "measured": time.strftime("%Y-%m-%dT%H:%M:%S%z")})
        except (HetrlError, OSError):
            pass  # an unwritable cache: measured each time (the profile, kept beside it, says so once)
    return seconds, None


def default_path(machine: Machine, algo: str, env: str | EnvSource, agent: AgentConfig) -> Path:
    """Where a profile of this machine and workload is kept: ``$XDG_CACHE_HOME/hetrl/profiles``,
    keyed by the env (its kwargs and wrappers too), the settings that change what primitives cost
    (not the learning rate or epsilon) and the library of implementations (a release that adds a
    backend measures it instead of planning without it)."""
    source = env if isinstance(env, EnvSource) else EnvSource(env)
    settings = agent.cost_settings()
    if source.kwargs or source.wrappers:
        settings = {**settings, "env_kwargs": source.kwargs, "wrappers": source.wrappers}
    return _cache_file(machine, f"{algo}_{file_part(source.name)}", {"agent": settings})


def time_calls(fn: Callable[[], Any], sync: Callable[[], None], repeats: int = 7, warmup: int = 3) -> tuple[float, float, float, int]:
    """(median, p10, p90) seconds per call of ``fn``, and the calls timed."""
    return time_in_turn([fn], sync, repeats, warmup)[0]


def time_in_turn(fns: Sequence[Callable[[], Any]], sync: Callable[[], None], repeats: int = 7, warmup: int = 3,
                 within: Sequence[Callable[[], AbstractContextManager[Any]]] | None = None) -> list[tuple[float, float, float, int]]:
    """:func:`time_calls` for each of ``fns``, their timed blocks taken in turn (a block of the first,
    one of the second, ..., ``repeats`` rounds), each block inside its ``within`` context (e.g. a
    torch thread count). What the results are compared for, which of several runs faster, then does
    not hang on a slow spell of a shared machine (another program on a core for a second) that
    would fall on the blocks of one of them only if each were timed in one go."""
    within = within or [nullcontext] * len(fns)
    inner = []
    for fn, context in zip(fns, within):
        with context():
            for _ in range(warmup):
                fn()
            sync()
            start = time.perf_counter()
            fn()
            sync()
            inner.append(max(1, int(BLOCK_SECONDS / max(time.perf_counter() - start, 1e-9))))
    per_call: list[list[float]] = [[] for _ in fns]
    for _ in range(repeats):
        for fn, context, n, times in zip(fns, within, inner, per_call):
            with context():
                if len(fns) > 1:  # untimed: the other blocks let this one's threads sleep and its data leave the caches
                    fn()
                    sync()
                start = time.perf_counter()
                for _ in range(n):
                    fn()
                sync()
                times.append((time.perf_counter() - start) / n)
    out = []
    for n, times in zip(inner, per_call):
        p10, median, p90 = np.percentile(times, [10, 50, 90])
        out.append((float(median), float(p10), float(p90), repeats * n))
    return out


def energy_per_call(fn: Callable[[], Any], sync: Callable[[], None], meters: Any, per_call_s: float,
                    clock: Callable[[], float] = time.perf_counter) -> tuple[float | None, str | None]:
    """Joules per call of ``fn`` on every working meter of ``meters`` (a MeterReport), over at least
    ENERGY_SECONDS of calls by ``clock`` (as many as ``per_call_s`` predicts, then more until the
    window is full); (None, None) where no meter works."""
    from hetrl.energy.measurement import EnergyMeasurement

    if meters is None or not meters.meters:
        return None, None
    calls = max(1, int(ENERGY_SECONDS / max(per_call_s, 1e-9)))
    span = EnergyMeasurement(meters, min_window_s=ENERGY_SECONDS, clock=clock)
    span.start()
    start, done = clock(), 0
    while done < calls or clock() - start < ENERGY_SECONDS:
        for _ in range(calls if done == 0 else calls // 4 + 1):
            fn()
        done += calls if done == 0 else calls // 4 + 1
    sync()
    result = span.stop()
    if result.total_joules is None:
        return None, None
    return result.total_joules / done, ", ".join(r.meter for r in result.readings)


def sync_for(device: str) -> Callable[[], None]:
    """What waits for ``device``'s queued work (nothing for the host)."""
    kind = torch.device(device).type
    if kind == "cuda":
        return torch.cuda.synchronize
    if kind == "mps":
        return torch.mps.synchronize
    return lambda: None


def _devices_of(impl, devices: list[str]) -> list[str]:
    return [d for d in devices if impl.runs_on(d)]


def _observations(algo: Algorithm, n: int, rng: np.random.Generator) -> np.ndarray:
    """``n`` observations of the spec's dtype: bytes for pixel envs, standard normals otherwise."""
    shape = (n,) + tuple(algo.spec.obs_shape)
    if getattr(algo.spec, "obs_dtype", "float32") == "uint8":
        return rng.integers(0, 256, shape, dtype=np.uint8)
    return rng.standard_normal(shape).astype(np.float32)


def replay_fill(algo: Algorithm, frames: bool) -> int:
    """Transitions the profiler stores before timing a replay: REPLAY_FILL, at most the capacity and
    at most REPLAY_FILL_BYTES of observations (obs and next_obs, or one frame per transition in a
    frame replay)."""
    spec = algo.spec
    item = np.dtype(getattr(spec, "obs_dtype", "float32")).itemsize
    per_row = item * int(np.prod(spec.obs_shape[1:] if frames else spec.obs_shape)) * (1 if frames else 2)
    return max(1, min(algo.config.buffer_size, REPLAY_FILL, REPLAY_FILL_BYTES // max(1, per_row)))


def profile_notes(algo: Algorithm) -> list[str]:
    """What the profile measured otherwise than a run would (shown with the profile's table)."""
    notes = []
    for frames in (False, True):
        fill = replay_fill(algo, frames)
        if fill < min(algo.config.buffer_size, REPLAY_FILL):
            kind = "frame replays" if frames else "plain replays"
            notes.append(f"{kind} profiled holding {fill:,} transitions, not {min(algo.config.buffer_size, REPLAY_FILL):,}: "
                         f"the fill is capped at {REPLAY_FILL_BYTES >> 20} MB of observations")
    source = getattr(algo.spec, "source", None)  # a spec written by hand may have none
    if source is not None and source.in_process:
        notes.append(f"ActorStart not measured: only this process can make {algo.spec.env_id}, so its runs stay inline")
    return notes


def synthetic_transitions(algo: Algorithm, n: int, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """``n`` random transitions of ``algo``'s env, shaped and typed as its replay stores them: what
    the profiler times the replay and the learner on (and the benches that time them alike)."""
    shape = algo.spec.obs_shape
    if getattr(algo.spec, "obs_dtype", "float32") == "uint8":
        # stacked frames of byte values, as a stream gives them: row i's obs is frames i..i+C-1, its
        # next_obs one frame on (a frame replay stores each frame once)
        frames = rng.integers(0, 256, (n + shape[0],) + tuple(shape[1:]), dtype=np.uint8)
        stacks = np.moveaxis(np.lib.stride_tricks.sliding_window_view(frames, shape[0], axis=0, writeable=True), -1, 1)  # views
        obs, next_obs = stacks[:-1], stacks[1:]
    else:
        obs, next_obs = (_observations(algo, n, rng) for _ in range(2))
    return {
        "obs": obs,
        "actions": algo.random_actions(rng, n),
        "rewards": rng.standard_normal(n).astype(np.float32),
        "next_obs": next_obs,
        "discounts": np.full(n, algo.config.gamma, np.float32),
    }


def _frame_chunk(algo: Algorithm, n: int, rng: np.random.Generator) -> dict[str, Any]:
    """A ray executor's frame chunk of ``n`` transitions of a stacking env (``frame_chunks.frame_chunk``'s
    fields): a new frame per transition (and the first stack's), row i's obs frames i..i+C-1."""
    stack, shape = algo.spec.obs_shape[0], tuple(algo.spec.obs_shape[1:])
    ids = np.arange(n)[:, None] + np.arange(2 * stack)[None, :] - (np.arange(2 * stack) >= stack) * (stack - 1)
    return {"stream": (0, 0), "frames": rng.integers(0, 256, (n + stack, *shape), dtype=np.uint8), "first_frame": 0,
            "oldest_frame": n, "rows": {"frame_ids": ids.astype(np.int64), "actions": algo.random_actions(rng, n),
                                        "rewards": rng.standard_normal(n).astype(np.float32),
                                        "discounts": np.full(n, algo.config.gamma, np.float32)}}


def chunk_backend_name(crossed: bool, frames: bool) -> str:
    """A ChunkTransfer row's backend: across nodes or not, frame chunks or stack (and vector) chunks."""
    return ("ray:nodes" if crossed else "ray:local") + ("+frames" if frames else "")


@contextmanager
def torch_threads(n: int | None) -> Iterator[None]:
    """torch's intra-op thread count set to ``n`` (unchanged for None) inside the block, restored after."""
    previous = torch.get_num_threads()
    if n:
        torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(previous)


def _jobs(algo: Algorithm, devices: list[str], threads: list[int], meters: Any = None,
          machine: Machine | None = None, notes: list[str] | None = None,
          unmeasured: list[str] | None = None) -> Iterator[tuple[str, Callable[[], list[Timing]]]]:
    """(label, measure) pairs, one per thing to time; building happens inside measure. ``machine``:
    where ActorStart is kept (:func:`actor_start_path`; None: measured every time); ``notes``: where
    a job says what it did not measure now; ``unmeasured``: where it names an implementation that
    cannot run here (``primitive/backend``)."""
    cfg, spec = algo.config, algo.spec
    rng = np.random.default_rng(0)
    B = cfg.batch_size

    def timing(primitive, backend, device, size, fn, sync=None, threads=None, timed=None):
        """A row for ``fn``: timed here, or ``timed`` (time_calls' figures, measured by the caller)."""
        sync = sync or sync_for(device)
        median, p10, p90, calls = timed or time_calls(fn, sync)
        joules, meter = energy_per_call(fn, sync, meters, median)
        return Timing(primitive, backend, device, size, threads, median, p10, p90, calls, joules, meter)

    for backend, impl in implementations("EnvStep").items():
        if impl.unsupported(algo):
            continue
        for n in ENV_COUNTS:
            def env_step(n=n, backend=backend):
                env = build("EnvStep", Slot(backend, "cpu"), algo, 0, num_envs=n)
                env.reset()
                actions = algo.random_actions(rng, n)
                t = timing("EnvStep", backend, "cpu", n, lambda: env.step(actions))
                env.close()
                return [t]
            yield f"EnvStep {backend} x{n}", env_step

    pool = _observations(algo, ACT_POOL, rng)  # Act cycles through it: an exit network's cost depends on the inputs
    network = algo.profiled_policy(build("Learn", Slot("torch", "cpu"), algo, 0).learner.policy_network,
                                   torch.from_numpy(pool))
    host_acts: dict[str, float] = {}  # backend -> median s of one env's decision on the host, alone (the loop job reads it)
    for backend, impl in implementations("Act").items():
        if impl.unsupported(algo):
            continue
        for device in _devices_of(impl, devices):
            def act(impl=impl, device=device, backend=backend):
                policy = build("Act", Slot(backend, device), algo, 0, source=network)
                out = []
                for n in ENV_COUNTS:
                    batches = itertools.cycle([pool[i:i + n] for i in range(0, ACT_POOL - n + 1, n)])
                    explore, random_actions = algo.draw_exploration(rng, n)
                    out.append(timing("Act", backend, device, n,
                                      lambda: policy.act(next(batches), explore, random_actions, 0.1)))
                if device == "cpu":
                    host_acts[backend] = out[ENV_COUNTS.index(1)].median_s
                out.append(timing("WeightSync", backend, device, 1, policy.sync))
                for source in devices:  # from a learner elsewhere: backend "numpy<-cuda:0" (a GPU to host copy)
                    if source != "cpu" and source != device:
                        remote = build("Act", Slot(backend, device), algo, 0, source=copy.deepcopy(network).to(source))
                        out.append(timing("WeightSync", f"{backend}<-{source}", device, 1, remote.sync, sync=sync_for(source)))
                return out
            yield f"Act+WeightSync {backend} on {device}", act

    for backend, impl in implementations("ReplayAdd").items():
        if impl.unsupported(algo):  # e.g. a frame replay for vector observations
            continue
        for device in _devices_of(impl, devices):
            def replay(impl=impl, device=device, backend=backend):
                # filled as in a run's learning phase, and sampled with fresh draws: a small or
                # repeatedly sampled buffer stays in cache and would look several times faster;
                # the storage is as large as the fill (a capped fill needs no more)
                fill = replay_fill(algo, backend.startswith("frames-"))
                capped = fill < min(cfg.buffer_size, REPLAY_FILL)  # by bytes: then the storage is only that large
                sized = type(algo)(spec, replace(cfg, buffer_size=fill)) if capped else algo
                storage = build("ReplayAdd", Slot(backend, device), sized, 0)
                storage.add(**synthetic_transitions(algo, fill, rng))
                out = [timing("ReplayAdd", backend, device, n, lambda t=synthetic_transitions(algo, n, rng): storage.add(**t))
                       for n in ENV_COUNTS]
                draws = itertools.cycle([rng.random(B) for _ in range(64)])
                uniform = next(draws)
                out.append(timing("ReplaySample", backend, device, B, lambda: storage.sample(next(draws), 0.5)))
                if cfg.prioritized:
                    indices = storage.sample(uniform, 0.5)["indices"]
                    td = rng.uniform(0, 2, B).astype(np.float32)
                    td = td if impl.cls.host_arrays else torch.as_tensor(td, device=device)
                    out.append(timing("PriorityUpdate", backend, device, B, lambda: storage.update_priorities(indices, td)))
                return out
            yield f"Replay {backend} on {device}", replay

    host_batch = {**synthetic_transitions(algo, B, rng), "weights": np.ones(B, np.float32)}
    host_learners: dict[int, dict[str, float]] = defaultdict(dict)  # threads -> backend -> median s alone (the loop job reads it)

    def learn_rows(impl: Any, device: str, backend: str, counts: list[int | None]) -> list[Timing]:
        """Learn/``backend`` on ``device``: one learner per thread count, timed in turn."""
        calls, within = [], [lambda n=n: torch_threads(n) for n in counts]
        for n, context in zip(counts, within):
            with context():
                learner = build("Learn", Slot(backend, device, n), algo, 0)
                # as a run feeds it from a host replay: its own arrays, or tensors on its device
                batch = host_batch if impl.takes_host_arrays else to_device(host_batch, torch.device(device))
                calls.append(lambda learner=learner, batch=batch: learner.learn(**batch))
        rows = []
        for n, fn, context, timed in zip(counts, calls, within, time_in_turn(calls, sync_for(device), within=within)):
            with context():  # the energy window too
                rows.append(timing("Learn", backend, device, B, fn, threads=n, timed=timed))
            if device == "cpu" and n:
                host_learners[n][backend] = rows[-1].median_s
        return rows

    for backend, impl in implementations("Learn").items():
        if impl.unsupported(algo):  # e.g. the fused numba learner for DDPG: nothing to measure
            continue
        for device in _devices_of(impl, devices):
            counts = impl.host_threads(threads) if device == "cpu" else [None]

            def learn(impl=impl, device=device, backend=backend, counts=counts):
                """One learner per thread count, timed in turn (a plan picks the count by these rows).
                A learner that finds at its first update that it cannot run here (CannotRunHere:
                Learn/cudagraph-compiled without a compiler) is left out with a note, so the plan
                takes another."""
                try:
                    return learn_rows(impl, device, backend, counts)
                except CannotRunHere as exc:
                    if notes is not None:
                        notes.append(f"Learn/{backend} on {device} not measured: {exc}")
                    if unmeasured is not None:
                        unmeasured.append(f"Learn/{backend}")
                    return []

            yield _learn_label(backend, device), learn

    for source in ["numpy", *devices]:
        for device in devices:
            def transfer(source=source, device=device):
                batch = host_batch if source == "numpy" else to_device(host_batch, torch.device(source))
                target = torch.device(device)
                sync = sync_for(device) if device != "cpu" else sync_for(source if source != "numpy" else "cpu")
                return [timing("Transfer", f"{source}->{device}", device, B, lambda: to_device(batch, target), sync=sync)]
            yield f"Transfer {source} -> {device}", transfer

    def actor_start():
        """Starting and stopping the local executor's actor processes, once, cold (runtime/startup.py):
        the fork server dominates, and more actors fork from it in parallel."""
        actors = min(2, usable_cores())
        path = actor_start_path(machine, algo.name, spec.origin, actors) if machine is not None else None
        seconds, kept = kept_actor_start(path, lambda: actor_start_seconds(algo.name, spec.origin, cfg, actors))
        if kept and notes is not None:
            notes.append(f"ActorStart not measured again: {seconds:.2f} s, {kept} (delete the file to measure it again)")
        return [Timing("ActorStart", "local", "cpu", actors, None, seconds, seconds, seconds, 1)]
    if not (spec.source and spec.source.in_process):  # else no actor process can make the envs: runs stay inline
        yield "ActorStart local", actor_start

    def inference_trip():
        """Central inference's transport, one actor's round trip (``InferenceTrip``) and the
        learner's share of an answer (``InferenceServe``), with Act itself left out (profiled
        above at each batch size): runtime/inference.py."""
        explore, random_actions = algo.draw_exploration(rng, 1)
        layout = inference_layout(1, 1, spec.obs_shape, spec.action_shape, spec.action_dtype, explore, random_actions,
                                  spec.obs_dtype)
        rows = []
        for name, samples in zip(("InferenceTrip", "InferenceServe"), measure_round_trip(layout, actor_preload(spec.env_id))):
            p10, median, p90 = np.percentile(samples, [10, 50, 90])
            rows.append(Timing(name, "pipe", "cpu", 1, None, float(median), float(p10), float(p90), TRIP_ROUNDS * len(samples)))
        return rows
    yield "InferenceTrip pipe", inference_trip

    def chunk_transfer():
        """The ray executor's transport per chunk of ``size`` transitions (runtime/ray_probe.py);
        backend ``ray:nodes`` when it crossed to another node, ``ray:local`` when the cluster has one.
        Where the planner gives the run a frame replay (Atari), the chunk is what the executor then
        sends, a new frame per transition and frame ids (``runtime/frame_chunks.py``), and the
        backend says so (``chunk_backend_name``)."""
        frames = frame_replay_wanted(algo)
        rows = []
        for size in CHUNK_SIZES:
            chunk = (_frame_chunk(algo, size, rng) if frames else  # as collect copies them
                     {key: np.ascontiguousarray(value) for key, value in synthetic_transitions(algo, size, rng).items()})
            samples, crossed = measure_chunk_transfer(chunk)
            p10, median, p90 = np.percentile(samples, [10, 50, 90])
            rows.append(Timing("ChunkTransfer", chunk_backend_name(crossed, frames), "cpu", size, None,
                               float(median), float(p10), float(p90), CHUNK_ROUNDS * CHUNK_CALLS))
        return rows
    if cluster_given() and not (spec.source and spec.source.in_process):
        yield "ChunkTransfer ray", chunk_transfer

    def in_loop(placement: Placement) -> tuple[list[float], dict[str, list[float]], dict[str, int]]:
        """A short inline run of ``placement`` past warm-up: per env step, wall time minus the timed
        primitives' time; per timed primitive, its cost per call; and its call counts."""
        fast = type(algo)(spec, replace(cfg, learning_starts=B, train_every=1,
                                        buffer_size=min(cfg.buffer_size, max(B, replay_fill(algo, False)))))
        executor = InlineExecutor(fast, placement, 1, seed=0)
        timers = executor.timers
        per_step, per_call = [], defaultdict(list)
        with torch_threads(placement.learn.threads):  # as a run sets them, and as its InRun row says
            while executor.env_steps < B + 10:
                executor.iteration()
            for _ in range(7):
                before, steps, start = timers.totals(), executor.env_steps, time.perf_counter()
                for _ in range(100):
                    executor.iteration()
                wall, after = time.perf_counter() - start, timers.totals()
                timed = sum(s for s, _ in after.values()) - sum(s for s, _ in before.values())
                per_step.append((wall - timed) / (executor.env_steps - steps))
                for name, (seconds, calls) in after.items():
                    s0, c0 = before.get(name, (0.0, 0))
                    if calls > c0:
                        per_call[name].append((seconds - s0) / (calls - c0))
        executor.close()
        return per_step, per_call, dict(timers.calls)

    def in_run_rows(placement: Placement, per_call: dict[str, list[float]], calls: dict[str, int],
                    only: str | None = None) -> list[Timing]:
        rows = []
        for name, costs in sorted(per_call.items()):
            slot = placement.slot_of(name)
            if slot is None or (only and name != only):
                continue
            size = B if name in ("ReplaySample", "PriorityUpdate", "Learn") else 1
            p10, median, p90 = np.percentile(costs, [10, 50, 90])
            rows.append(Timing("InRun", f"{name}:{slot.backend}", slot.device, size, slot.threads if name == "Learn" else None,
                               float(median), float(p10), float(p90), calls[name]))
        return rows

    def loop():
        """The inline executor's own work per env step (draws, n-step assembly, bookkeeping), that
        is wall time minus the time of its timed primitives, over a short run past warm-up; and
        each timed primitive's cost per call in that run (``InRun`` rows), which the model sets
        against its cost measured alone: in a loop, caches and branch predictors are shared.

        The ratio a one-thread learner measured there need not hold for several threads: between
        updates the env and the policy run on one thread while the learner's other threads wait,
        spinning or asleep, and the first products after that pay for it. So the learner is also
        run in the loop at each thread count above one (the backend the fastest there alone, or the
        rule's) for an ``InRun`` Learn row at that count. Nor need the rule's Act backend's ratio
        hold for the one a plan picks (a compiled pass keeps less in cache than torch's calls), so
        where the fastest host Act alone is another backend, the loop runs it too, for its own row."""
        placement = default_placement(torch.device("cpu"), (1, 1), mlp_policy=algo.mlp_networks())
        per_step, per_call, calls = in_loop(placement)
        p10, median, p90 = np.percentile(per_step, [10, 50, 90])
        rows = [Timing("Loop", "inline", "cpu", 1, None, float(median), float(p10), float(p90), 700)]
        rows += in_run_rows(placement, per_call, calls)
        fastest_act = min(host_acts, key=host_acts.__getitem__) if host_acts else placement.act.backend
        if fastest_act != placement.act.backend:
            acting = replace(placement, act=Slot(fastest_act, "cpu"))
            rows += in_run_rows(acting, *in_loop(acting)[1:], only="Act")
        for n in threads:
            if n > 1:
                alone = host_learners.get(n)
                backend = min(alone, key=alone.__getitem__) if alone else placement.learn.backend
                several = replace(placement, learn=Slot(backend, "cpu", n))
                rows += in_run_rows(several, *in_loop(several)[1:], only="Learn")
        return rows
    yield "Loop inline", loop


def _learn_label(backend: str, device: str) -> str:
    """The job that measures a Learn backend on a device, at every thread count the profile takes."""
    return f"Learn {backend} on {device}"


def _label(key: TimingKey) -> str | None:
    """The job of :func:`_jobs` that measures the row ``key`` (Learn, EnvStep and Act rows only)."""
    primitive, backend, device, size, threads = key
    if primitive == "Learn":
        return _learn_label(backend, device)
    if primitive == "EnvStep":
        return f"EnvStep {backend} x{size}"
    if primitive == "Act":
        return f"Act+WeightSync {backend} on {device}"
    return None


def measure(algorithm: Algorithm, keys: Sequence[TimingKey]) -> list[Timing]:
    """Measure the profile rows ``keys`` again, each as :func:`profile_workload` measures it; rows of
    other primitives than Learn, EnvStep and Act are skipped. What ``hetrl.planner.calibration``
    checks a cached profile with."""
    wanted = set(keys)
    labels = {label for label in map(_label, keys) if label}
    devices = sorted({d for _, _, d, _, _ in keys} | {"cpu"})
    threads = sorted({t for _, _, _, _, t in keys if t} | {1})
    rows: list[Timing] = []
    with one_blas_thread():
        for label, job in _jobs(algorithm, devices, threads):
            if label in labels:
                rows += [t for t in job() if t.key in wanted]
    return rows


def partial_path(path: str | Path) -> Path:
    """Where a profile on its way to ``path`` keeps the measurements made so far (``resume``)."""
    path = Path(path)
    return path.with_name(path.stem + PARTIAL_SUFFIX)


def _resumed(resume: Path, result: Profile, labels: list[str]) -> int:
    """Restore into ``result`` the measurements a profile cut short saved in ``resume``: the count
    of leading jobs done, or 0 where there is none for this very profile (another workload, agent,
    machine or list of jobs, an unreadable file, or one older than :data:`PARTIAL_MAX_AGE_S`)."""
    try:
        if time.time() - resume.stat().st_mtime > PARTIAL_MAX_AGE_S:
            return 0
        data = json.loads(resume.read_text())
        saved = data["profile"]
        same = ((saved["algo"], saved["env"], saved["agent"], saved["machine"].get("fingerprint"), data["labels"],
                 saved.get("energy_profiled", True))
                == (result.algo, result.env, result.agent, result.fingerprint, labels, result.energy_profiled))
        if not same or data.get("format") != PROFILE_FORMAT:
            return 0
        timings, done = [Timing(**t) for t in saved["timings"]], int(data["done"])
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return 0
    result.timings.extend(timings)
    result.notes.extend(saved.get("notes", []))
    result.unmeasured.extend(saved.get("unmeasured", []))
    result.notes.append(f"{done} of {len(labels)} measurements were resumed from a profile cut short "
                        f"(saved {time.strftime('%Y-%m-%dT%H:%M:%S%z', time.localtime(resume.stat().st_mtime))})")
    return done


def profile_workload(algo: str, env: str | EnvSource, agent: AgentConfig, devices: list[str] | None = None,
                     threads: list[int] | None = None, progress: Callable[[str, int, int], None] | None = None,
                     machine: Machine | None = None, meters: Any = None, resume: Path | None = None,
                     energy: bool = True) -> Profile:
    """Measure every primitive of ``algo`` on ``env`` on this machine (see the module docstring).

    ``progress(label, done, total)`` is called before each measurement. ``meters`` (a MeterReport;
    default: every meter found here) also gives each primitive's energy per call where one works.
    ``resume`` (a file, :func:`partial_path` of where the profile will be saved): the measurements
    are saved there one by one, and a profile cut short (killed, Ctrl-C) goes on from them the next
    time instead of starting over; the file is removed once every measurement is made. Where it
    cannot be written (the cache's own fallback covers that), the profile goes on without it.
    ``energy=False`` reads no meter: each row is timed only, which takes a fraction of the time on a
    metered machine (every row's energy needs a window of at least ENERGY_SECONDS); a throughput
    plan needs no more, and the profile says so (``energy_profiled``), so an efficiency plan
    measures again.
    """
    from hetrl.energy.discovery import MeterReport, discover_meters

    if not energy:
        meters = MeterReport([], [])
    elif meters is None:
        with discover_meters() as found:
            return profile_workload(algo, env, agent, devices, threads, progress, machine, found, resume)
    algorithm = make_algorithm(algo, env_spec(env), agent)
    devices = devices or available_devices()
    threads = threads or sorted({1, usable_cores()})
    machine = machine or describe_machine()
    agent_json = json.loads(json.dumps(asdict(agent)))  # as the saved file will hold it (tuples become lists)
    result = Profile(algorithm.name, algorithm.spec.env_id, agent_json, machine.to_dict(), time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                     energy_profiled=energy)
    result.notes.extend(profile_notes(algorithm) + ([] if energy else [ENERGY_NOT_PROFILED]))
    jobs = list(_jobs(algorithm, devices, threads, meters, machine, result.notes, result.unmeasured))
    labels = [label for label, _ in jobs]
    done = _resumed(resume, result, labels) if resume is not None else 0
    with one_blas_thread(), objects_frozen():  # as a run acts and collects (runtime/host_blas.py, runtime/frozen_objects.py)
        for index, (label, measure) in enumerate(jobs[done:], start=done):
            if progress:
                progress(label, index, len(jobs))
            result.timings.extend(measure())
            if resume is not None:
                try:
                    write_json(resume, {"format": PROFILE_FORMAT, "labels": labels, "done": index + 1,
                                        "profile": result.to_dict()})
                except HetrlError:  # an unwritable cache: the profile goes on without a way to resume
                    resume = None
    if resume is not None:
        try:
            resume.unlink(missing_ok=True)
        except OSError:
            pass
    return result


def profile_table(profile: Profile) -> Table:
    table = Table(title=f"{profile.algo} on {profile.env}: measured cost per call (machine {profile.fingerprint})",
                  title_justify="left")
    for col in ("primitive", "backend", "device", "size", "threads", "median µs", "p10-p90 µs", "mJ/call"):
        table.add_column(col, justify="left" if col in ("primitive", "backend", "device") else "right")
    for t in profile.timings:
        energy = f"{1e3 * t.joules_per_call:,.3f}" if t.joules_per_call is not None else "-"
        table.add_row(t.primitive, t.backend, t.device, str(t.size), str(t.threads or "-"), f"{1e6 * t.median_s:,.1f}",
                      f"{1e6 * t.p10_s:,.1f}-{1e6 * t.p90_s:,.1f}", energy)
    captions = list(profile.notes)  # a profile made without the meters says so among its notes
    if profile.energy_profiled:
        if all(t.joules_per_call is None for t in profile.timings):
            captions.append("mJ/call: not measured (no RAPL or NVML meter works here; `hetrl devices` says why)")
        else:
            methods = profile.meter_methods()
            captions.append("mJ/call: measured, the sum over " + "; ".join(f"{n}: {methods.get(n, 'method not recorded')}"
                                                                           for n in profile.meter_names()))
    if captions:
        table.caption = "\n".join(captions)
    return table
