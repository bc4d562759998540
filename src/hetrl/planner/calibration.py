"""Is a cached profile still true? A short measurement of the plan's main stages at the start of a run.

A profile is measured once per machine and workload and cached. The machine changes under it: other
programs load the cores, a laptop throttles, the OS moves the process. So before a run trusts a cached
profile, the stages that carry most of the plan's predicted time (Learn, EnvStep, Act: those with at
least ``MAIN_SHARE`` of it) are measured again, each the way the profiler measured it
(``hetrl.profile.measure``, a fraction of a second each), compared by their fastest tenth of
timed blocks (those no other program interrupted). Their ratios, measured over cached, are
weighed by each stage's predicted time per env step, give the factor the plan's prediction is taken
to move by (the stages not measured again, such as the executor's own work, run on the same loaded
or idle cores); when it is more than ``MARGIN`` either way, the profile is measured anew and the run is
planned from it; otherwise the cached one is kept. (Weighing keeps the noise of a small stage, which
timing on a shared machine has plenty of, from re-profiling every run.) Either way the run's summary says which, with the ratios
(``Plan.profile_check``).

A profile can also be wrong where the plan does not look: a host learner's thread count the plan
passed over because its row was measured while another program held a core (one busy core costs a
two-thread learner far more than a one-thread one). So the plan's Learn backend is measured again at
the profile's other thread counts too, when the run leaves the count to the plan; one that now runs
faster than cached by more than the margin refreshes the profile (slower does not: that is the load
of the moment, which the plan's own stages already show).

The machine's load is measured too (:func:`cpu_share`): the profiler times short blocks, which run
at full speed whenever the process holds a core, so a profile predicts an idle machine's rate. A
run on cores other programs also want gets only a share of them; the plan keeps that share
(``Plan.cpu_share``) and the summary's prediction is the model's rate times it.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from hetrl.algos import Algorithm
from hetrl.hardware import usable_cores
from hetrl.planner.plan_file import Plan
from hetrl.profile import Profile, Timing, TimingKey, measure

MARGIN = 0.3  # a main stage measured more than 30% slower or faster than cached refreshes the profile
MAIN_SHARE = 0.1  # a stage is main where it carries at least this share of the predicted time per env step
CHECKED = ("Learn", "EnvStep", "Act")  # the stages a calibration can measure quickly

Measure = Callable[[Algorithm, Sequence[TimingKey]], list[Timing]]


@dataclass(frozen=True)
class StageCheck:
    key: TimingKey
    cached_s: float
    measured_s: float
    weight: float  # the stage's share of the plan's predicted time per env step

    @property
    def ratio(self) -> float:
        return self.measured_s / self.cached_s

    def describe(self) -> str:
        primitive, backend, device, size, threads = self.key
        return f"{primitive} {backend} on {device} x{size}" + (f" ({threads} threads)" if threads else "") + \
            f" {self.ratio:.2f}x"


@dataclass(frozen=True)
class Calibration:
    checks: tuple[StageCheck, ...]
    margin: float = MARGIN
    passed_over: tuple[StageCheck, ...] = ()  # the plan's Learn backend at the thread counts it did not take

    @property
    def change(self) -> float:
        """How much slower (> 1) or faster the checked stages run than cached, each weighed by its
        share of the plan's predicted time: the factor the whole prediction is taken to move by
        (the stages not measured again, such as the loop's own work, share the machine's load)."""
        total = sum(c.weight for c in self.checks)
        return sum(c.weight * c.ratio for c in self.checks) / total if total > 0 else 1.0

    @property
    def undersold(self) -> tuple[StageCheck, ...]:
        """Passed-over thread counts that run faster than cached by more than the margin: the plan
        may have passed over them only because their cached rows were slow."""
        return tuple(c for c in self.passed_over if c.ratio < 1 / (1 + self.margin))

    @property
    def drifted(self) -> bool:
        """The predicted time per env step moved by more than the margin, slower or faster (beyond
        1 + margin or below 1 / (1 + margin)), or a passed-over thread count was undersold."""
        moved = bool(self.checks) and abs(math.log(max(self.change, 1e-9))) > math.log1p(self.margin)
        return moved or bool(self.undersold)

    def describe(self) -> str:
        if not self.checks:
            text = "no main stage could be measured again"
        else:
            text = (f"predicted time per env step {self.change:.2f}x with "
                    + ", ".join(c.describe() for c in self.checks) + f" measured / cached (margin {self.margin:.0%})")
        if self.undersold:
            text += "; not taken but faster than cached: " + ", ".join(c.describe() for c in self.undersold)
        return text


def cpu_share(load: float | None = None, cores: int | None = None) -> float:
    """The share of a core a busy thread of this process can expect while the machine's load holds:
    ``cores / (others + 1)`` where ``others`` runnable tasks (those running or waiting now, less this
    process: :func:`runnable_now`, else the one-minute load average) compete for the cores, at most 1. A short busy loop cannot tell this: the scheduler
    gives a newly busy thread a free core for a while even on a loaded machine (seen here: 99% in a
    0.25 s loop at a load of 3 on 2 cores, where a run then got about half a core). 1 where the
    platform has no load average."""
    cores = cores or usable_cores()
    if load is None:
        load = runnable_now()
    if load is None:
        try:
            load = os.getloadavg()[0]
        except (AttributeError, OSError):
            return 1.0
    others = max(0.0, load - 1.0)
    return max(0.05, min(1.0, cores / (others + 1.0)))


def runnable_now(samples: int = 10, every_s: float = 0.02) -> float | None:
    """The tasks running or waiting for a core right now (this one included), averaged over a few
    samples of Linux's ``procs_running`` (``/proc/stat``): the load the one-minute average reaches
    only a minute later. None where there is no /proc/stat."""
    seen = []
    for i in range(samples):
        try:
            with open("/proc/stat") as stat:
                seen += [int(line.split()[1]) for line in stat if line.startswith("procs_running")]
        except (OSError, ValueError, IndexError):
            return None
        if i + 1 < samples:
            time.sleep(every_s)
    return sum(seen) / len(seen) if seen else None


def main_stages(plan: Plan, batch: int, share: float = MAIN_SHARE) -> dict[TimingKey, float]:
    """The profile rows behind the plan's main stages, with their shares of its predicted time per env
    step: its placement's slots of Learn (at ``batch``), EnvStep and Act (at the plan's envs), where
    the prediction gives them at least ``share`` of that time."""
    if plan.prediction is None:
        return {}
    per_step = plan.prediction.per_env_step_s
    total = sum(per_step.values())
    placement = plan.placement
    keys: dict[TimingKey, float] = {}
    for primitive in CHECKED:
        if total <= 0 or per_step.get(primitive, 0.0) / total < share:
            continue
        slot = placement.slot_of(primitive)
        if slot is None:
            continue
        size = plan.num_envs if primitive in ("EnvStep", "Act") else batch
        keys[(primitive, slot.backend, slot.device, size, slot.threads if primitive == "Learn" else None)] = \
            per_step[primitive] / total
    return keys


def passed_over_threads(profile: Profile, plan: Plan, batch: int) -> list[TimingKey]:
    """The profile's measured rows of the plan's host Learn backend at the thread counts the plan did
    not take."""
    learn = plan.placement.slot_of("Learn")
    if learn is None or learn.device != "cpu" or not learn.threads:
        return []
    return [t.key for t in profile.timings
            if (t.primitive, t.backend, t.device, t.size) == ("Learn", learn.backend, learn.device, batch)
            and t.threads and t.threads != learn.threads and not t.modelled]


def calibrate(profile: Profile, algorithm: Algorithm, plan: Plan, margin: float = MARGIN,
              measuring: Measure = measure, threads_free: bool = True) -> Calibration:
    """Measure the plan's main stages again and set them against the cached profile's rows; with
    ``threads_free`` (the run leaves the learner's thread count to the plan), its Learn backend at
    the other thread counts too."""
    cached = {t.key: t for t in profile.timings}
    batch = algorithm.config.batch_size
    # only what the profile measured can be measured again (not a what-if device's modelled stages)
    stages = {key: share for key, share in main_stages(plan, batch).items()
              if key in cached and not cached[key].modelled}
    others = passed_over_threads(profile, plan, batch) if threads_free and stages else []
    checks, passed_over = [], []
    for timing in measuring(algorithm, [*stages, *others]):
        before = cached.get(timing.key)
        # the fastest tenth of the timed blocks, on both sides: the blocks no other program interrupted,
        # so a change in the primitive's own cost shows and the machine's load (cpu_share) does not
        if before is None or before.p10_s <= 0 or timing.p10_s <= 0:
            continue
        if timing.key in stages:
            checks.append(StageCheck(timing.key, before.p10_s, timing.p10_s, stages[timing.key]))
        elif timing.key in others:
            passed_over.append(StageCheck(timing.key, before.p10_s, timing.p10_s, 0.0))
    return Calibration(tuple(checks), margin, tuple(passed_over))
