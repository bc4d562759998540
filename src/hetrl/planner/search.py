"""The search: every placement the profile can cost, under each executor considered, ranked by
the objective (``throughput``: env steps/s, over the whole run where its length is known;
``efficiency``: fewest measured joules per env step). A what-if device's modelled rows
(planner/whatif.py) make candidates like measured ones; the plan lists the devices considered."""

from __future__ import annotations

import itertools
import os

from hetrl.algos import AgentConfig
from hetrl.errors import HetrlError
from hetrl.planner.model import Prediction, predict
from hetrl.planner.model_local import predict_parallel
from hetrl.planner.plan_file import Candidate, Plan
from hetrl.profile import Profile
from hetrl.protocol import Placement, Slot
from hetrl.runtime.inference import INFERENCE


# A host learner on several threads is a candidate only where the profile measured it at least this
# much faster than on one: OpenMP/MKL threads that wait on a core another program holds make an
# update many times slower than one thread does (docs/results.md, 'Learner threads on a busy machine').
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

    one_thread = {(t.backend, t.device): t.median_s for t in profile.timings if t.primitive == "Learn" and t.threads == 1}

    def pays(backend: str, device: str, threads: int | None) -> bool:
        """Several host threads only where they measured MULTI_THREAD_GAIN faster (or were asked for)."""
        if learn_threads is not None or device != "cpu" or not threads or threads == 1 or (backend, device) not in one_thread:
            return True
        mine = min(t.median_s for t in profile.timings
                   if (t.primitive, t.backend, t.device, t.threads) == ("Learn", backend, device, threads))
        return mine * MULTI_THREAD_GAIN <= one_thread[(backend, device)]

    learn_slots = [Slot(backend, device, threads) for (p, backend, device, threads) in sorted(measured, key=str)
                   if p == "Learn" and (learn_device is None or device == learn_device)
                   and (learn_threads is None or device != "cpu" or threads == learn_threads)
                   and pays(backend, device, threads)]
    return [Placement(env, act, replay, learn) for env in slots("EnvStep") for act in slots("Act")
            for replay in replays for learn in learn_slots]


ENV_CHOICES = (1, 2, 4, 8, 16)  # envs per actor (inline: per iteration) a plan chooses among when the run leaves it open


def make_plan(profile: Profile, agent: AgentConfig, num_envs: int, objective: str = "throughput",
              learn_device: str | None = None, learn_threads: int | None = None, executors: tuple[str, ...] = ("inline",),
              actors: int = 0, cores: int | None = None, weight_sync_every: int = 1, steps: int | None = None,
              inference: tuple[str, ...] = INFERENCE, frame_replay: bool = False) -> Plan:
    """The best way to run for ``objective`` among every placement the profile can cost, under each
    of ``executors`` (``local``: with 1 to ``cores`` actor processes, or exactly ``actors``, acting
    in each actor (an Act slot on the host: each actor builds it) or centrally (any Act slot), as
    ``inference`` allows), with ``num_envs``
    envs per actor (0: each of :data:`ENV_CHOICES`; the model counts throughput only, not what
    more envs per actor change in learning). With ``steps`` (the run's length), throughput is the
    rate over the whole run, actor start-up included: a short run may not win back what starting
    actor processes costs. ``frame_replay``: see :func:`candidates`."""
    if objective not in OBJECTIVES:
        raise HetrlError(f"objective {objective!r} is unknown; choose one of {', '.join(OBJECTIVES)}")
    cores = cores or os.cpu_count() or 1
    costed: list[tuple[Candidate, Prediction]] = []
    for placement, n in itertools.product(candidates(profile, learn_device, learn_threads, frame_replay), [num_envs] if num_envs else ENV_CHOICES):
        try:
            if "inline" in executors:
                costed.append((Candidate("inline", 0, placement, num_envs=n), predict(placement, profile, agent, n)))
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
                                   predict_parallel(placement, profile, agent, n, count, cores, weight_sync_every, way)))
                except HetrlError:  # e.g. a profile without central inference's round trip
                    continue
    if not costed:
        raise HetrlError("the profile has no learner measurement for the requested device; profile on this device first")
    if objective == "efficiency":
        costed = [pair for pair in costed if pair[1].joules_per_env_step]
        if not costed:
            raise HetrlError("objective efficiency needs measured energy, and this profile has none: no RAPL or NVML meter "
                             "worked when it was measured (`hetrl devices` says why); use --objective throughput")
        meters = profile_meters(profile)
        if not any(m.startswith("rapl") for m in meters):
            raise HetrlError(f"objective efficiency needs the host CPU's energy, but only {', '.join(meters)} measured this "
                             "profile (no RAPL meter works here; `hetrl devices` says why): every plan does host work, and "
                             "one would look frugal by moving work onto the unmetered CPU; use --objective throughput")
        ranked = sorted(costed, key=lambda pair: pair[1].joules_per_env_step)
    else:
        ranked = sorted(costed, key=lambda pair: -pair[1].run_env_steps_per_s(steps))
    (best, prediction), runner_ups = ranked[0], ranked[1:4]
    return Plan(profile.algo, profile.env, best.num_envs, objective, profile.fingerprint, best.placement, prediction,
                runner_ups, best.executor, best.actors, profile_meters(profile), steps, best.inference,
                what_if=sorted({t.modelled for t in profile.timings if t.modelled}))


def profile_meters(profile: Profile) -> list[str]:
    """The meters whose energy the profile's rows sum (e.g. ["nvml:gpu0", "rapl:package-0"])."""
    return sorted({m.strip() for t in profile.timings if t.energy_meters for m in t.energy_meters.split(",")})
