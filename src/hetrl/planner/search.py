"""The search: every placement the profile can cost, under each executor considered, ranked by
the objective (``throughput``: env steps/s, over the whole run where its length is known;
``efficiency``: fewest measured joules per env step). A what-if device's modelled rows
(planner/whatif.py) make candidates like measured ones; the plan lists the devices considered.
A placement whose replay would not fit the memory of its device (:class:`ReplayMemory`) is passed over;
the actor counts tried follow the machine's cores (:func:`machine_cores`)."""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from hetrl.algos import AgentConfig
from hetrl.energy.measurement import GPU_POWER, HOST_POWER, USER_FIGURE, device_key
from hetrl.errors import HetrlError
from hetrl.hardware import gib, usable_cores
from hetrl.planner.model import Prediction, predict
from hetrl.planner.model_local import predict_parallel
from hetrl.planner.plan_file import Candidate, Plan
from hetrl.profile import Profile
from hetrl.protocol import Placement, Slot
from hetrl.runtime.inference import INFERENCE


# A host learner on several threads is a candidate only where the profile measured it at least this
# much faster than on one: OpenMP/MKL threads that wait on a core another program holds make an
# update many times slower than one thread does (docs/results.md, 'Learner threads on a busy machine').
# Compared on the fastest tenth of each row's timed blocks (``p10_s``), those no other program slowed:
# a slow spell while the profile ran costs several threads far more than one, and where it covers
# half the blocks it moves the median, so a median-based gate flips with the moment (docs/results.md,
# 'The learner-thread gate on the fastest tenth').
MULTI_THREAD_GAIN = 1.25

OBJECTIVES = ("throughput", "efficiency")  # env steps/s, or env steps per joule (where energy was measured)


def candidates(profile: Profile, learn_device: str | None = None, learn_threads: int | None = None,
               frame_replay: bool = False) -> list[Placement]:
    """Every placement the profile can cost; the learner pinned to a device or thread count if given.
    ``frame_replay`` (Atari's stacked frames): only the frame replays where the profile measured one,
    since a plain replay of whole stacks needs 2C times their memory (the model counts time only)."""
    measured = {(t.primitive, t.backend, t.device, t.threads) for t in profile.timings}

    def slots(primitive: str) -> list[Slot]:
        return [Slot(backend, device) for (p, backend, device, _) in sorted(measured) if p == primitive]

    replays = slots("ReplayAdd")
    if frame_replay and any(r.backend.startswith("frames-") for r in replays):
        replays = [r for r in replays if r.backend.startswith("frames-")]

    one_thread = {(t.backend, t.device): t.p10_s for t in profile.timings if t.primitive == "Learn" and t.threads == 1}

    def pays(backend: str, device: str, threads: int | None) -> bool:
        """Several host threads only where their fastest tenth measured MULTI_THREAD_GAIN faster (or
        were asked for)."""
        if learn_threads is not None or device != "cpu" or not threads or threads == 1 or (backend, device) not in one_thread:
            return True
        mine = min(t.p10_s for t in profile.timings
                   if (t.primitive, t.backend, t.device, t.threads) == ("Learn", backend, device, threads))
        return mine * MULTI_THREAD_GAIN <= one_thread[(backend, device)]

    learn_slots = [Slot(backend, device, threads) for (p, backend, device, threads) in sorted(measured, key=str)
                   if p == "Learn" and (learn_device is None or device == learn_device)
                   and (learn_threads is None or device != "cpu" or threads == learn_threads)
                   and pays(backend, device, threads)]
    return [Placement(env, act, replay, learn) for env in slots("EnvStep") for act in slots("Act")
            for replay in replays for learn in learn_slots]


def machine_cores(machine: Mapping[str, Any]) -> int:
    """The cores of the machine a profile describes (its logical CPUs, as the profiler recorded them);
    this process's usable cores where the profile does not say (a synthetic or an old profile)."""
    cpu = machine.get("cpu")
    cores = cpu.get("logical_cores") if isinstance(cpu, Mapping) else None
    return cores if isinstance(cores, int) and not isinstance(cores, bool) and cores > 0 else usable_cores()


def machine_memory(machine: Mapping[str, Any]) -> dict[str, int | None]:
    """Memory by device of the machine a profile describes (hardware.Machine.to_dict): the host's
    total as ``cpu``, each accelerator's as ``cuda:0``... (and ``cuda`` for the first); None: unknown."""
    memory: dict[str, int | None] = {"cpu": machine.get("memory_bytes")}
    for a in machine.get("accelerators") or []:
        if isinstance(a, Mapping) and "kind" in a:
            memory[f"{a['kind']}:{a.get('index', 0)}"] = a.get("memory_bytes")
            memory.setdefault(str(a["kind"]), a.get("memory_bytes"))
    return memory


@dataclass(frozen=True)
class ReplayMemory:
    """What the search sets each replay against: its bytes by backend at the run's buffer_size
    (config.replay_need) and the memory of each device (``memory``: None, the profile's machine:
    :func:`machine_memory`). A backend or device not listed is not checked."""

    need: Mapping[str, int]  # replay backend -> bytes of its storage
    memory: Mapping[str, int | None] | None = None  # device -> bytes it can hold
    buffer_size: int = 0  # the transitions behind ``need``, to name a buffer_size that fits

    def available(self, device: str, machine: Mapping[str, Any]) -> int | None:
        memory = self.memory if self.memory is not None else machine_memory(machine)
        return memory.get(device, memory.get(device.split(":")[0]))

    def misfit(self, slot: Slot, machine: Mapping[str, Any]) -> str:
        """Why the replay ``slot`` does not fit, with the numbers ("" where it fits or is not known)."""
        need, have = self.need.get(slot.backend), self.available(slot.device, machine)
        if need is None or have is None or need <= have:
            return ""
        return f"replay {slot.backend} on {slot.device} needs {gib(need)}, {gib(have)} there"

    def fix(self, slots: list[Slot], machine: Mapping[str, Any]) -> str:
        """The largest buffer_size at which one of ``slots`` fits (half the memory, as the start-up check)."""
        sizes = [int(have // (self.need[s.backend] / self.buffer_size) // 2) for s in slots
                 if self.buffer_size and self.need.get(s.backend) and (have := self.available(s.device, machine))]
        return f"set buffer_size={max(1, max(sizes)):,} or less" if sizes else "set a smaller buffer_size"


ENV_CHOICES = (1, 2, 4, 8, 16)  # envs per actor (inline: per iteration) a plan chooses among when the run leaves it open


def make_plan(profile: Profile, agent: AgentConfig, num_envs: int, objective: str = "throughput",
              learn_device: str | None = None, learn_threads: int | None = None, executors: tuple[str, ...] = ("inline",),
              actors: int = 0, cores: int | None = None, weight_sync_every: int = 1, steps: int | None = None,
              inference: tuple[str, ...] = INFERENCE, frame_replay: bool = False,
              replay_memory: ReplayMemory | None = None, cpu_watts: float | None = None,
              gpu_watts: float | None = None) -> Plan:
    """The best way to run for ``objective`` among every placement the profile can cost, under each
    of ``executors`` (``local``: with 1 to ``cores`` actor processes, or exactly ``actors``, acting
    in each actor (an Act slot on the host: each actor builds it) or centrally (any Act slot), as
    ``inference`` allows), with ``num_envs``
    envs per actor (0: each of :data:`ENV_CHOICES`; the model counts throughput only, not what
    more envs per actor change in learning). With ``steps`` (the run's length), throughput is the
    rate over the whole run, actor start-up included: a short run may not win back what starting
    actor processes costs. ``frame_replay``: see :func:`candidates`. ``cores``: the machine's
    (default: :func:`machine_cores` of the profile's). ``replay_memory``: placements whose replay
    would not fit its device are passed over; where none fits, the error names the numbers.
    ``cpu_watts``: the host CPU's power where no RAPL meter measured it; ``gpu_watts``: each GPU's
    that no meter measured, in the plans that use it (:func:`with_user_power`). For ``efficiency``,
    a plan whose energy misses a device it uses is refused with the setting that fixes it."""
    if objective not in OBJECTIVES:
        raise HetrlError(f"objective {objective!r} is unknown; choose one of {', '.join(OBJECTIVES)}")
    meters = profile_meters(profile)
    energy = any(t.joules_per_call is not None for t in profile.timings)
    user_power = cpu_watts is not None and not host_metered(meters) and energy
    if user_power:
        profile = with_user_power(profile, cpu_watts)
        meters.append(host_power_label(cpu_watts))
    unmetered = unmetered_accelerators(profile, meters) if energy else set()
    gpu_profile = with_user_power(profile, gpu_watts) if unmetered and gpu_watts is not None else None

    def blind(placement: Placement) -> set[str]:
        """The devices ``placement`` uses that no meter measured."""
        return unmetered & {device_key(d) for d in placement.devices()}

    def costing(placement: Placement) -> Profile:
        """The profile a placement is costed on: with the user's GPU figure where it uses an unmetered GPU."""
        return gpu_profile if gpu_profile is not None and blind(placement) else profile
    cores = cores or machine_cores(profile.machine)
    placements = candidates(profile, learn_device, learn_threads, frame_replay)
    if replay_memory is not None:
        misfits = {p.replay: replay_memory.misfit(p.replay, profile.machine) for p in placements}
        if placements and all(misfits.values()):
            slots = list(dict.fromkeys(p.replay for p in placements))
            raise HetrlError(f"no replay the profile measured fits this machine's memory ({'; '.join(dict.fromkeys(misfits.values()))}); "
                             f"{replay_memory.fix(slots, profile.machine)}")
        placements = [p for p in placements if not misfits[p.replay]]
    costed: list[tuple[Candidate, Prediction]] = []
    for placement, n in itertools.product(placements, [num_envs] if num_envs else ENV_CHOICES):
        try:
            if "inline" in executors:
                costed.append((Candidate("inline", 0, placement, num_envs=n), predict(placement, costing(placement), agent, n)))
        except HetrlError:  # a combination the profile cannot cost (e.g. an unmeasured transfer) is passed over
            continue
        if "local" not in executors:
            continue
        # an actor builds the Act slot itself: one on the host (a GPU per actor process is not modelled)
        ways = [w for w in INFERENCE if w in inference and (w == "central" or placement.act.device == "cpu")]
        for way in ways:
            for count in [actors] if actors else range(1, cores + 1):
                try:
                    costed.append((Candidate("local", count, placement, way, n),
                                   predict_parallel(placement, costing(placement), agent, n, count, cores, weight_sync_every, way)))
                except HetrlError:  # e.g. a profile without central inference's round trip
                    continue
    if not costed:
        raise HetrlError("the profile has no learner measurement for the requested device; profile on this device first")
    if objective == "efficiency":
        costed = [pair for pair in costed if pair[1].joules_per_env_step]
        if not costed:
            raise HetrlError("objective efficiency needs measured energy, and this profile has none: no RAPL or NVML meter "
                             "worked when it was measured (`hetrl devices` says why); use --objective throughput")
        if not host_metered(meters) and not user_power:
            raise HetrlError(f"objective efficiency needs the host CPU's energy, but only {', '.join(meters)} measured this "
                             "profile (no RAPL meter works here; `hetrl devices` says why): every plan does host work, and "
                             "one would look frugal by moving work onto the unmetered CPU; give the CPU's power with --set "
                             f"{HOST_POWER}=WATTS (its TDP, say; reported as your figure, not measured), or use --objective throughput")
        ranked = sorted(costed, key=lambda pair: pair[1].joules_per_env_step)
        if gpu_profile is None and (missing := blind(ranked[0][0].placement)):
            raise HetrlError(f"objective efficiency needs the energy of every device the plan uses, but no meter measured "
                             f"{', '.join(sorted(missing))} (only {', '.join(meters)} measured this profile; `hetrl devices` "
                             "says why): its work would look free, and the plan frugal for moving work onto it; give its "
                             f"power with --set {GPU_POWER}=WATTS (its TDP, say; reported as your figure, not measured), or "
                             "use --objective throughput")
        # a plan using an unmetered GPU was costed without its energy, and lost even so: not shown as a runner-up
        ranked = [pair for pair in ranked if gpu_profile is not None or not blind(pair[0].placement)]
    else:
        ranked = sorted(costed, key=lambda pair: -pair[1].run_env_steps_per_s(steps))
    (best, prediction), runner_ups = ranked[0], ranked[1:4]
    if gpu_profile is not None and blind(best.placement):
        meters.append(gpu_power_label(gpu_watts))
    methods = profile.meter_methods()  # shown with the prediction: each meter's method, where the profile's machine lists it
    meters = [f"{m}: {methods[m]}" if m in methods else m for m in meters]
    return Plan(profile.algo, profile.env, best.num_envs, objective, profile.fingerprint, best.placement, prediction,
                runner_ups, best.executor, best.actors, meters, steps, best.inference,
                what_if=sorted({t.modelled for t in profile.timings if t.modelled}))


def profile_meters(profile: Profile) -> list[str]:
    """The meters whose energy the profile's rows sum (e.g. ["nvml:gpu0", "rapl:package-0"])."""
    return profile.meter_names()


def host_metered(meters: list[str]) -> bool:
    """Whether a RAPL meter (the host CPU's) is among ``meters``."""
    return any(m.startswith("rapl") for m in meters)


def unmetered_accelerators(profile: Profile, meters: list[str]) -> set[str]:
    """The accelerators the profile's rows ran on (``cuda:0``...) that none of ``meters`` measured:
    by the devices the profile's machine lists for its meters, or, where it lists none (a synthetic
    or an old profile), any NVML meter covering the CUDA GPUs."""
    statuses = [s for s in profile.machine.get("meters") or [] if isinstance(s, Mapping) and s.get("name") in meters]
    if statuses:
        metered = {device_key(str(s.get("device"))) for s in statuses}
    else:
        metered = {device_key(t.device) for t in profile.timings
                   if t.device.startswith("cuda") and any(m.startswith("nvml") for m in meters)}
    return {device_key(t.device) for t in profile.timings if t.device != "cpu"} - metered


def host_power_label(watts: float) -> str:
    """How plans and reports name the user's power figure for the host CPU."""
    return f"{HOST_POWER}={watts:g} W ({USER_FIGURE})"


def gpu_power_label(watts: float) -> str:
    """How plans and reports name the user's power figure for an unmetered GPU."""
    return f"{GPU_POWER}={watts:g} W ({USER_FIGURE})"


def with_user_power(profile: Profile, watts: float) -> Profile:
    """``profile`` with a device's energy at ``watts`` added to every row's measured energy per
    call (``watts`` x its seconds per call: the device draws its power whichever device works), for
    a profile whose meters do not cover it (the host CPU without RAPL: ``cpu_watts``; a GPU without
    NVML: ``gpu_watts``, in the plans that use it). The plan names the figure as the user's
    (:func:`host_power_label`, :func:`gpu_power_label`), never as a measurement."""
    return replace(profile, timings=[t if t.joules_per_call is None else replace(t, joules_per_call=t.joules_per_call + watts * t.median_s)
                                     for t in profile.timings])
