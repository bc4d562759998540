"""The performance model of the inline executor, and the cost lookups every model shares.

The inline executor runs its primitives one after another, so the cost of one env step is the sum,
over primitives, of (calls per env step) x (measured cost per call):

- EnvStep, Act, ReplayAdd: one call per iteration of N envs, so cost(N) / N;
- ReplaySample, Transfer, Learn, PriorityUpdate: ``replay_ratio`` calls per env step, at batch B;
- WeightSync: at most once per iteration, when the learner moved since the last one;
- Transfer (the batch from the replay's arrays to tensors on the learner's device), once per update;
  none where the learner reads the replay's numpy batch as it is (Learn/numba, Learn/blas);
- Loop: the executor's own work per iteration (random draws, n-step assembly, bookkeeping).

A row a what-if device modelled (``Timing.modelled``, planner/whatif.py) costs its primitive like a
measured one; the prediction keeps its label (``Prediction.modelled``) for every report.

Each host primitive's cost is then scaled by how much dearer it measured inside a short inline run
than alone (:func:`in_run_factor`, from the profile's ``InRun`` rows).

Sizes that were not profiled are interpolated linearly between the nearest profiled sizes
(extrapolated from the last two beyond them). Warm-up steps (before ``learning_starts``) are not
modelled: the prediction is for the learning phase. Energy per env step, where the profile
measured it, is the same sum over joules per call.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from hetrl.algos import AgentConfig
from hetrl.errors import HetrlError
from hetrl.primitives import get
from hetrl.profile import Profile
from hetrl.protocol import Placement
from hetrl.runtime.learner_role import needs_transfer
from hetrl.runtime.schedule import ReplaySchedule


@dataclass(frozen=True)
class Prediction:
    per_call_s: dict[str, float]  # predicted seconds per call, by primitive ("Transfer" included)
    per_env_step_s: dict[str, float]  # predicted seconds of work per env step, by primitive
    stage_rates: dict[str, float] | None = None  # parallel executors: env steps/s each stage can sustain
    joules_per_env_step: float | None = None  # from the profile's measured energy per call; None if unmeasured
    startup_s: float = 0.0  # measured cost of starting and stopping actor processes (ActorStart); 0 inline
    modelled: dict[str, str] = field(default_factory=dict)  # primitive -> the what-if label of the row costing it

    def run_env_steps_per_s(self, steps: int | None) -> float:
        """The rate over a whole run of ``steps`` env steps, start-up included (the learning-phase
        rate where the run length is unknown)."""
        if not steps:
            return self.env_steps_per_s
        return steps / (self.startup_s + steps / self.env_steps_per_s)

    @property
    def env_steps_per_joule(self) -> float | None:
        return None if not self.joules_per_env_step else 1.0 / self.joules_per_env_step

    @property
    def env_steps_per_s(self) -> float:
        if self.stage_rates:  # concurrent stages: the slowest one sets the pace
            return min(self.stage_rates.values())
        return 1.0 / sum(self.per_env_step_s.values())

    @property
    def bottleneck(self) -> str:
        if self.stage_rates:
            return min(self.stage_rates, key=self.stage_rates.get)
        return max(self.per_env_step_s, key=self.per_env_step_s.get)


def cost(profile: Profile, primitive: str, backend: str, device: str, size: int, threads: int | None = None,
          attr: str = "median_s") -> Any:
    """The profile's ``attr`` (seconds, or joules, per call) at ``size``, interpolated between
    profiled sizes; None when that quantity was not measured (energy without a meter)."""
    rows = [(t.size, getattr(t, attr)) for t in profile.timings
            if (t.primitive, t.backend, t.device, t.threads) == (primitive, backend, device, threads)]
    if not rows:
        where = f"{primitive}/{backend} on {device}" + (f" with {threads} threads" if threads else "")
        raise HetrlError(f"the profile has no measurement of {where}; profile again (hetrl profile)")
    if any(value is None for _, value in rows):
        return None
    points = sorted(rows)
    for s, cost in points:
        if s == size:
            return cost
    if len(points) == 1:
        return points[0][1] * size / points[0][0]
    below = [p for p in points if p[0] < size]
    above = [p for p in points if p[0] > size]
    (s0, c0), (s1, c1) = (below[-1], above[0]) if below and above else (points[-2], points[-1]) if below else (points[0], points[1])
    return max(0.0, c0 + (c1 - c0) * (size - s0) / (s1 - s0))


def modelled_by(profile: Profile, primitive: str, backend: str, device: str, size: int, threads: int | None = None) -> str | None:
    """The what-if label of the profile's rows of that primitive, backend, device and threads (None: measured)."""
    return next((t.modelled for t in profile.timings if t.modelled
                 and (t.primitive, t.backend, t.device, t.threads) == (primitive, backend, device, threads)), None)


def measured_as(name: str, placement: Placement, agent: AgentConfig, num_envs: int) -> tuple[str, str, str, int, int | None]:
    """The profile row (primitive, backend, device, size, threads) that a stage of the model is costed by."""
    act, replay, learn = placement.act, placement.replay, placement.learn
    if name == "Transfer":
        source = "numpy" if get("ReplayAdd", replay.backend).cls.host_arrays else replay.device
        return "Transfer", f"{source}->{learn.device}", learn.device, agent.batch_size, None
    if name == "Learn":
        return "Learn", learn.backend, learn.device, agent.batch_size, learn.threads
    if name == "WeightSync" and learn.device not in ("cpu", act.device):  # from the learner's device
        return "WeightSync", f"{act.backend}<-{learn.device}", act.device, 1, None
    if name in ("WeightSync", "WeightFetch"):  # a copy of the policy's parameters on the host (actors: from shared memory)
        return "WeightSync", act.backend, act.device, 1, None
    slot = {"EnvStep": placement.env, "Act": act}.get(name, replay)  # the rest are replay primitives
    size = agent.batch_size if name in ("ReplaySample", "PriorityUpdate") else num_envs
    return name, slot.backend, slot.device, size, None


def energy_per_env_step(profile: Profile, placement: Placement, agent: AgentConfig, num_envs: int,
                         per_call_s: dict[str, float], per_env_step_s: dict[str, float],
                         sizes: dict[str, int] | None = None) -> float | None:
    """Sum over primitives of calls per env step x measured joules per call (the whole machine's
    energy while that primitive ran); None unless every primitive's energy was measured. The
    executor's own work (its loop, answering central inference), which is not run alone under the
    meters, is costed at the host primitives' median power. ``sizes``: a primitive called at
    another size than ``num_envs`` (central inference's batched Act)."""
    total = 0.0
    for name, seconds in per_env_step_s.items():
        if name in ("Loop", "InferenceServe"):
            watts_host = [t.joules_per_call / t.median_s for t in profile.timings
                          if t.joules_per_call and t.device == "cpu" and t.median_s > 0]
            if not watts_host:
                return None
            total += seconds * float(np.median(watts_host))
            continue
        joules = cost(profile, *measured_as(name, placement, agent, (sizes or {}).get(name, num_envs)), attr="joules_per_call")
        if joules is None:
            return None
        total += (seconds / per_call_s[name] if per_call_s.get(name) else 0.0) * joules
    return total


# Eviction only makes a primitive dearer: an in-run/alone ratio below 1 is noise (a busy VM while
# one of the two was timed) and is taken as 1; above 4, as 4.
IN_RUN_BOUNDS = (1.0, 4.0)


def in_run_factor(profile: Profile, name: str, placement: Placement) -> float:
    """How much dearer ``name`` is inside the inline loop than alone, on the host (1 elsewhere, or
    where the profile has no ``InRun`` row for it).

    Primitives profiled alone run with hot caches and predictors; in the loop, the env, the policy,
    the replay and the learner evict each other, and a small primitive can cost several times
    its alone cost there (docs/benchmarks.md, 'Measurements behind the code'). The profile's loop
    job times every primitive of one host placement in a short run; that ratio is applied to every
    host backend of the primitive that has no row of its own (the eviction comes mostly from the
    rest of the loop), in plans whose learner is on the host as it was there; a backend the loop
    also ran (the fastest host Act alone, where the rule's is another) takes its own ratio. A GPU
    learner evicts nothing on the host: on a GPU machine, ratios measured beside a 16-thread host
    learner made the host primitives of a CUDA plan far too dear, so such plans are costed as
    measured alone.

    A host learner takes the ratio measured at its own thread count where the profile has one
    (the loop job runs the learner at each count: its other threads wait while the env and the
    policy run, which a one-thread learner's ratio does not show), the same backend's first; else
    the first row's. Other primitives take their own backend's row first, else the first row's."""
    slot = placement.slot_of(name)
    if slot is None or slot.device != "cpu" or placement.learn.device != "cpu":
        return 1.0
    rows = [t for t in profile.timings if t.primitive == "InRun" and t.backend.split(":", 1)[0] == name]
    if not rows:
        return 1.0
    rows.sort(key=lambda t: (name == "Learn" and t.threads != slot.threads, t.backend != f"{name}:{slot.backend}"))
    t = rows[0]
    try:
        alone = cost(profile, name, t.backend.split(":", 1)[1], t.device, t.size, t.threads)
    except HetrlError:
        return 1.0
    return float(np.clip(t.median_s / alone, *IN_RUN_BOUNDS)) if alone else 1.0


def predict(placement: Placement, profile: Profile, agent: AgentConfig, num_envs: int) -> Prediction:
    schedule = ReplaySchedule.of(agent)
    n, ratio = num_envs, schedule.ratio
    names = ["EnvStep", "Act", "ReplayAdd", "ReplaySample", "Learn", "WeightSync"]
    names += ["PriorityUpdate"] if agent.prioritized else []
    names += ["Transfer"] if needs_transfer(placement) else []
    call = {name: cost(profile, *measured_as(name, placement, agent, n)) * in_run_factor(profile, name, placement)
            for name in names}
    modelled = {name: label for name in names if (label := modelled_by(profile, *measured_as(name, placement, agent, n)))}
    syncs_per_iteration = schedule.syncs_per_iteration(n)
    per_step = {
        "EnvStep": call["EnvStep"] / n,
        "Act": call["Act"] / n,
        "ReplayAdd": call["ReplayAdd"] / n,
        "WeightSync": call["WeightSync"] * syncs_per_iteration / n,
    }
    for name in ("ReplaySample", "Transfer", "Learn", "PriorityUpdate"):
        if name in call:
            per_step[name] = ratio * call[name]
    loop = [t.median_s for t in profile.timings if t.primitive == "Loop"]
    if loop:  # the executor's own work, measured per env step with one env
        call["Loop"] = loop[0]
        per_step["Loop"] = loop[0] / n
    return Prediction(call, per_step, None, energy_per_env_step(profile, placement, agent, n, call, per_step),
                      modelled=modelled)
