"""The plan a run uses (``--plan auto|rule|FILE``) and this machine's cached profile behind it."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import torch

from hetrl.algos import Algorithm
from hetrl.config import TrainConfig, replay_need
from hetrl.devices import resolve_device
from hetrl.errors import HetrlError
from hetrl.hardware import describe_machine, free_memory_bytes, usable_cores
from hetrl.planner.model_ray import predict_ray
from hetrl.planner.plan_file import Plan
from hetrl.planner.rule import default_actors, default_placement, frame_replay_wanted
from hetrl.planner.search import ReplayMemory, make_plan
from hetrl.planner.whatif import WhatIfDevice, with_what_if
from hetrl.primitives import get, implementations
from hetrl.protocol import Placement, Slot
from hetrl.planner.calibration import Measure, calibrate, cpu_share
from hetrl.profile import Profile, default_path, measure, partial_path, profile_workload
from hetrl.replay.footprint import is_frame_replay
from hetrl.replay.frames import frames_unsupported
from hetrl.runtime.env_halves import background_env_backends, no_background_env
from hetrl.runtime.inference import INFERENCE
from hetrl.runtime.ray_executor import chunk_schedule
from hetrl.runtime.shared import stores_ordered


def _covers_the_registry(profile: Profile, algorithm: Algorithm) -> bool:
    """True when the profile measured every registered implementation the model uses (of those
    that can serve ``algorithm``), and the actors' start-up where actor processes can make the envs."""
    needed = {"EnvStep", "Act", "ReplayAdd", "ReplaySample", "Learn", "WeightSync"}
    have = {(t.primitive, t.backend) for t in profile.timings}
    have |= {tuple(key.split("/", 1)) for key in profile.unmeasured}  # tried, and unable to run here
    devices = {t.device for t in profile.timings}
    return (("ActorStart", "local") in have or bool(in_process(algorithm))) and all((p, b) in have for p in needed for b, impl in implementations(p).items()
               if not impl.unsupported(algorithm) and any(impl.runs_on(d) for d in devices))


# profiles measured where the cache could not be written (read-only, a file, full): kept for this process
_IN_MEMORY: dict[Path, Profile] = {}


def cached_profile(path: Path, algorithm: Algorithm) -> Profile | None:
    """The profile cached at ``path``, or None where there is none, it cannot be read, or it lacks a
    registered implementation that could serve ``algorithm`` (then it is measured again)."""
    profile = _IN_MEMORY.get(path)
    if profile is None:
        try:
            profile = Profile.load(path)
        except (HetrlError, OSError):  # none, a damaged entry or an unreadable cache: measured again
            return None
    return profile if _covers_the_registry(profile, algorithm) else None


def _keep(profile: Profile, path: Path, announce: Callable[[str], None]) -> None:
    """Save ``profile`` in the cache at ``path``; where that fails, keep it in memory and say so."""
    try:
        profile.save(path)
        _IN_MEMORY.pop(path, None)
    except HetrlError as exc:
        _IN_MEMORY[path] = profile
        announce(f"warning: the profile cache cannot be written ({exc}); the profile is kept in memory, for this "
                 f"process only (set XDG_CACHE_HOME to a writable directory to keep it)")


def search_space(config: TrainConfig) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The executors and inference ways a plan for ``config`` chooses among (the ray executor is
    placed by the inline model; central inference, asked for by name, exists in the local executor only)."""
    local = ("local",) if stores_ordered() else ()  # the local executor's rings need x86 (runtime/shared.py)
    executors = {"auto": ("inline", *local), "ray": ("inline",)}.get(config.executor, (config.executor,))
    if config.inference == "auto":
        return executors, INFERENCE
    return (("local",) if config.inference == "central" else executors), (config.inference,)


def plan_for_run(config: TrainConfig, algorithm: Algorithm, announce: Callable[[str], None] = lambda _: None,
                 objective: str = "throughput", *, profiling: Callable[..., Profile] = profile_workload,
                 measuring: Measure = measure, progress: Callable[[str, int, int], None] | None = None,
                 share_of_core: Callable[[], float] = cpu_share, what_if: Sequence[WhatIfDevice] = ()) -> Plan:
    """The plan a run uses: ``auto`` (planned from this machine's profile, measured once and
    cached, and checked against a short calibration at each start: ``planner/calibration.py``;
    ``profiling`` and ``measuring`` are injectable for tests), ``rule`` (the fixed rule of :func:`default_placement`), or a plan.json path.
    ``what_if`` (auto only; ``hetrl plan --what-if``): devices the plan may also place work on, modelled (planner/whatif.py)."""
    threads = config.threads or (torch.get_num_threads() if "OMP_NUM_THREADS" in os.environ else 0)
    if config.plan == "rule":
        work = (algorithm.learner_parameters(), config.agent.batch_size)
        frames = frame_replay_wanted(algorithm)
        placement = default_placement(resolve_device(config.device), work, threads, mlp_policy=algorithm.mlp_networks(),
                                      frames=frames, algorithm=algorithm)
        if config.async_envs and not get("EnvStep", placement.env.backend).cls.steps_in_background:
            background = background_env_backends(algorithm)
            if not background:
                raise no_background_env(algorithm)
            placement = replace(placement, env=Slot(background[0], placement.env.device))
        executor = "inline" if config.executor == "auto" else config.executor
        actors = 0 if executor == "inline" else (config.actors or default_actors())
        # a policy on an accelerator acts in the learner's process for every actor: an actor's own
        # copy there costs each actor a device context and a weight copy into it at every fetch
        central = executor == "local" and placement.act.device != "cpu"
        return Plan(config.algo, config.env, config.num_envs or 1, "rule", "-", placement, None, [], executor, actors,
                    inference="central" if central else "actor")
    if config.plan == "auto":
        learn_device = None if config.device == "auto" else str(resolve_device(config.device))
        machine = describe_machine()
        env = algorithm.spec.origin
        path = default_path(machine, config.algo, env, config.agent)

        used: list[Profile] = []  # the profile the plan was made from

        def planned(profile: Profile) -> Plan:
            used.append(profile)
            return plan_from_profile(profile, config, algorithm, objective, learn_device, threads or None, what_if,
                                     cores=usable_cores(), memory=free_memory(profile))

        # a throughput plan needs no energy: its profile reads no meter, which on a metered machine
        # saves a window of a second or more per row; an efficiency plan then measures again
        energy = objective != "throughput"

        def profile_now() -> Profile:
            profile = profiling(config.algo, env, config.agent, machine=machine, resume=partial_path(path),
                                energy=energy, **({"progress": progress} if progress else {}))
            _keep(profile, path, announce)
            return profile

        profile = cached_profile(path, algorithm)
        if profile is not None and energy and not profile.energy_profiled and profile.machine_metered():
            announce("the cached profile was made for a throughput plan, without reading the meters: profiling again "
                     "with them")
            profile = None
        if profile is None:
            announce(f"profiling {config.algo} on {config.env} on this machine (once; cached in {path})")
            plan = planned(profile_now())
            plan.profile_check = f"measured now (cached in {path})"
        else:
            plan = planned(profile)
            calibration = calibrate(profile, algorithm, plan, measuring=measuring, threads_free=not threads)
            if calibration.drifted:
                announce(f"the cached profile is off ({calibration.describe()}): profiling again")
                plan = planned(profile_now())
                plan.profile_check = f"refreshed: the cached one was off, {calibration.describe()}"
            else:
                plan.profile_check = f"cached, checked at the start: {calibration.describe()}"
        plan.cpu_share = share_of_core()
        if config.executor == "ray":  # placed by the inline model; predicted where the profile measured ChunkTransfer
            plan.executor, plan.actors = "ray", config.actors or default_actors()
            plan.prediction = predict_ray(plan.placement, used[-1], config.agent, plan.num_envs, plan.actors,
                                          chunk_schedule(config.agent, plan.actors, plan.num_envs, config.ray_chunk_steps)[1],
                                          config.weight_sync_every)
        return plan
    plan = Plan.load(config.plan)
    if (plan.algo, plan.env) != (config.algo, config.env):
        raise HetrlError(f"plan {config.plan} is for {plan.algo} on {plan.env}, not {config.algo} on {config.env}")
    check_device(plan, config.device, config.plan)
    return plan


def plan_from_profile(profile: Profile, config: TrainConfig, algorithm: Algorithm, objective: str = "throughput",
                      learn_device: str | None = None, threads: int | None = None, what_if: Sequence[WhatIfDevice] = (),
                      cores: int | None = None, memory: Mapping[str, int | None] | None = None) -> Plan:
    """The plan for ``config`` from ``profile`` (``hetrl plan --profile`` and ``--plan auto``): the
    search space the config leaves open, the machine's cores (None: the profile's machine's) and
    the replay set against ``memory`` (device -> bytes; None: the profile's machine's totals)."""
    executors, inference = search_space(config)
    if config.async_envs:  # only the EnvSteps that can step in the background (the model costs them as stepped in sync)
        background = background_env_backends(algorithm)
        profile = replace(profile, timings=[t for t in profile.timings if t.primitive != "EnvStep" or t.backend in background])
        if not any(t.primitive == "EnvStep" for t in profile.timings):
            raise no_background_env(algorithm)
    return make_plan(with_what_if(profile, what_if, algorithm), config.agent, config.num_envs, objective, learn_device, threads,
                     executors, config.actors, cores, config.weight_sync_every, config.steps, inference,
                     frame_replay_wanted(algorithm), replay_memory(profile, config, algorithm, memory), config.cpu_watts,
                     config.gpu_watts)


def replay_memory(profile: Profile, config: TrainConfig, algorithm: Algorithm,
                  memory: Mapping[str, int | None] | None = None) -> ReplayMemory | None:
    """Each replay the profile measured, in bytes at the run's buffer_size, against ``memory``
    (None where ``force`` asks to try anyway, as the start-up check does)."""
    if config.force:
        return None
    spec = algorithm.spec
    frames_fit = frames_unsupported(spec, "frames-numpy") is None
    need = {t.backend: replay_need(config, spec, t.backend) for t in profile.timings
            if t.primitive == "ReplayAdd" and (frames_fit or not is_frame_replay(t.backend))}
    return ReplayMemory(need, memory, config.agent.buffer_size)


def free_memory(profile: Profile) -> dict[str, int | None]:
    """Memory free now on each device the profile measured a replay on (hardware.free_memory_bytes)."""
    free: dict[str, int | None] = {}
    for device in {t.device for t in profile.timings if t.primitive == "ReplayAdd"}:
        try:
            free[device] = free_memory_bytes(device)
        except (RuntimeError, ValueError):  # not a torch device name: not checked
            free[device] = None
    return free


def check_device(plan: Plan, device: str, where: str) -> None:
    """A plan made elsewhere (a file, a resumed run) and a device asked for must agree."""
    asked, planned = resolve_device(device), torch.device(plan.placement.learn.device)
    if device != "auto" and (asked.type, asked.index or 0) != (planned.type, planned.index or 0):
        raise HetrlError(f"plan {where} puts Learn on {plan.placement.learn.device}, but device {device} was asked for; "
                         f"drop --device (or device=), or edit the plan's learn device")


@dataclass(frozen=True)
class RunPlan:
    """Every decision about where and how a run runs, made once by :func:`resolve`, devices
    resolved: after it nothing reads the config's device, executor, actors, inference, num_envs
    or threads."""

    plan: Plan
    executor: str  # inline, local or ray
    actors: int  # actor processes (0 inline)
    inference: str  # local: actor or central; "actor" elsewhere
    num_envs: int  # envs per actor (inline: stepped together)

    @property
    def placement(self) -> Placement:
        return self.plan.placement


def in_process(algorithm: Algorithm) -> str:
    """Why only this process can make ``algorithm``'s envs ("" when actor processes can too)."""
    source = algorithm.spec.source
    return source.in_process if source is not None else ""


def keep_in_process(config: TrainConfig, algorithm: Algorithm, announce: Callable[[str], None]) -> TrainConfig:
    """``config``, kept to the inline executor where only this process can make the envs (said once);
    an executor or inference way asked for by name that needs other processes is refused."""
    why = in_process(algorithm)
    if not why:
        return config
    source = algorithm.spec.source
    if config.executor in ("local", "ray"):
        source.check_portable(f"executor={config.executor}")
    if config.inference == "central":
        source.check_portable("inference=central (the local executor)")
    announce(f"env {config.env}: only this process can make it, so the run keeps to the inline executor and no "
             f"other process (actors, `hetrl resume`, `hetrl eval`) can make its envs; {why}")
    return replace(config, executor="inline")


def resolve(config: TrainConfig, algorithm: Algorithm, announce: Callable[[str], None] = lambda _: None,
            plan: Plan | None = None, progress: Callable[[str, int, int], None] | None = None) -> RunPlan:
    """The run's plan (``plan``: one already made, as a resumed run's; else :func:`plan_for_run`),
    then what the config leaves to it: the executor where the config says auto, the actors, where
    the actors' policy runs and the envs per actor. A setting the config names wins over the plan.
    Envs only this process can make keep the run inline (:func:`keep_in_process`)."""
    config = keep_in_process(config, algorithm, announce)
    if plan is None:
        plan = plan_for_run(config, algorithm, announce, progress=progress)
    else:
        check_device(plan, config.device, "of this run")
        if plan.prediction is not None:
            plan.profile_check = "the run's own plan, kept on resume (its profile is not checked again)"
    executor = plan.executor if config.executor == "auto" else config.executor
    if executor == "inline":
        actors = 0
    else:
        actors = config.actors or (plan.actors if plan.executor == executor else 0) or default_actors()
    inference = "actor"
    if executor == "local":
        planned = plan.inference if plan.executor == "local" else "actor"
        inference = planned if config.inference == "auto" else config.inference
    return RunPlan(plan, executor, actors, inference, config.num_envs or plan.num_envs)
