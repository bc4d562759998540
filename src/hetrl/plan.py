"""The performance model and the planner.

The model predicts the steady-state env steps/s of a placement from a profile. The inline executor
runs its primitives one after another, so the cost of one env step is the sum, over primitives, of
(calls per env step) x (measured cost per call):

- EnvStep, Act, ReplayAdd: one call per iteration of N envs, so cost(N) / N;
- ReplaySample, Transfer, Learn, PriorityUpdate: ``replay_ratio`` calls per env step, at batch B;
- WeightSync: at most once per iteration, when the learner moved since the last one;
- Transfer (the batch from the replay's arrays to tensors on the learner's device), once per update;
  none where the learner reads the replay's numpy batch as it is (Learn/numba);
- Loop: the executor's own work per iteration (random draws, n-step assembly, bookkeeping).

Each host primitive's cost is then scaled by how much dearer it measured inside a short inline run
than alone (:func:`in_run_factor`, from the profile's ``InRun`` rows).

Sizes that were not profiled are interpolated linearly between the nearest profiled sizes
(extrapolated from the last two beyond them). Warm-up steps (before ``learning_starts``) are not
modelled: the prediction is for the learning phase. The planner evaluates every placement the
profile has measurements for and ranks them by the objective; only ``throughput`` (env steps/s)
is offered until profiles carry measured power per device.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from rich.table import Table

from hetrl.algos import AgentConfig, Algorithm
from hetrl.config import TrainConfig
from hetrl.devices import resolve_device
from hetrl.errors import HetrlError
from hetrl.files import read_json, write_json
from hetrl.hardware import describe_machine
from hetrl.profile import Profile, default_path, profile_workload
from hetrl.protocol import implementations
from hetrl.runtime.executors import default_actors
from hetrl.runtime.inference import INFERENCE
from hetrl.runtime.learner_role import needs_transfer
from hetrl.runtime.placement import Placement, Slot, default_placement

PLAN_FORMAT = "hetrl-plan-v1"
PLAN_EXECUTORS = ("inline", "local", "ray")
OBJECTIVES = ("throughput", "efficiency")  # env steps/s, or env steps per joule (where energy was measured)


@dataclass(frozen=True)
class Prediction:
    per_call_s: dict[str, float]  # predicted seconds per call, by primitive ("Transfer" included)
    per_env_step_s: dict[str, float]  # predicted seconds of work per env step, by primitive
    stage_rates: dict[str, float] | None = None  # parallel executors: env steps/s each stage can sustain
    joules_per_env_step: float | None = None  # from the profile's measured energy per call; None if unmeasured
    startup_s: float = 0.0  # measured cost of starting and stopping actor processes (ActorStart); 0 inline

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


ACTOR_WORK = ("EnvStep", "Act", "WeightFetch", "Loop")  # done in the actor processes of a parallel executor


def predict_parallel(placement: Placement, profile: Profile, agent: AgentConfig, num_envs: int, actors: int,
                     cores: int, weight_sync_every: int = 1, inference: str = "actor") -> Prediction:
    """The local executor as a pipeline of concurrent stages, each with its sustainable env steps/s
    (``inference="central"``: see :func:`predict_central`):

    - ``actors``: each actor process does EnvStep, Act (numpy), its loop work and weight fetches
      for its own envs, so ``actors`` of them sustain ``actors / actor_work`` env steps/s;
    - ``learner``: one process drains transitions (ReplayAdd), samples, transfers, learns, updates
      priorities and publishes weights (every ``weight_sync_every`` updates): ``1 / learner_work``;
    - ``cores``: every process shares the host's cores, so the host work of both (a host learner's
      extra threads included, for the time it learns) cannot exceed ``cores`` seconds per second.

    The replay ratio ties the stages together (the limiter holds it), so the run goes at the pace
    of the slowest stage.
    """
    if inference == "central":
        return predict_central(placement, profile, agent, num_envs, actors, cores, weight_sync_every)
    serial = predict(placement, profile, agent, num_envs)
    call, n, ratio = dict(serial.per_call_s), num_envs, agent.replay_ratio
    sync = call["WeightSync"]  # the learner publishes: a copy of the policy's parameters from its device
    fetch = _cost(profile, *_measured_as("WeightFetch", placement, agent, n))  # an actor copies them, host to host
    actor = {name: serial.per_env_step_s[name] for name in ("EnvStep", "Act", "Loop") if name in serial.per_env_step_s}
    actor["WeightFetch"] = fetch * min(1.0 / n, ratio / weight_sync_every)
    learner = {name: serial.per_env_step_s[name] for name in ("ReplayAdd", "ReplaySample", "Transfer", "Learn", "PriorityUpdate")
               if name in serial.per_env_step_s}
    learner["WeightSync"] = sync * ratio / weight_sync_every
    extra_threads = _learner_threads_beside(actors, cores, placement, profile, agent, call)
    learner["Learn"] = ratio * call["Learn"]
    actor_s, learner_s = sum(actor.values()), sum(learner.values())
    host_s = actor_s + learner_s + extra_threads * learner.get("Learn", 0.0)
    call["WeightFetch"] = fetch
    rates = {"actors": actors / actor_s, "learner": 1.0 / learner_s if learner_s else float("inf"), "cores": cores / host_s}
    per_step = {**actor, **learner}
    return Prediction(call, per_step, rates, _energy_per_env_step(profile, placement, agent, n, call, per_step),
                      _actor_start_s(profile, actors))


def _learner_threads_beside(actors: int, cores: int, placement: Placement, profile: Profile, agent: AgentConfig,
                            call: dict[str, float]) -> int:
    """The host learner's extra threads that run beside ``actors`` actor processes (0 where they
    would oversubscribe the cores; ``call["Learn"]`` is then raised to the 1-thread cost).

    Oversubscribed, an actor preempts one of the learner's OpenMP threads and the others wait for
    it at every barrier, so the extra threads buy little (DDPG 400x300, 2 threads beside an actor
    on 2 cores: 98 env steps/s against 122 alone)."""
    threads = placement.learn.threads or 1
    extra = threads - 1 if placement.learn.device == "cpu" else 0
    if extra and actors + threads > cores:
        try:
            single = _cost(profile, "Learn", placement.learn.backend, "cpu", agent.batch_size, 1)
            single *= in_run_factor(profile, "Learn", placement)
        except HetrlError:
            single = call["Learn"]
        call["Learn"] = max(call["Learn"], single)
        return 0
    return extra


def predict_central(placement: Placement, profile: Profile, agent: AgentConfig, num_envs: int, actors: int,
                    cores: int, weight_sync_every: int = 1) -> Prediction:
    """The local executor with central inference (runtime/inference.py), as a cycle: the learner
    answers every actor at once (Act on ``actors x num_envs`` observations on the Act slot, its
    share of each answer ``InferenceServe``, a WeightSync when due); then the actors step their
    envs and ask again (EnvStep, loop work, and the round trip ``InferenceTrip``: a = actor path)
    while the learner drains the rings (d) and runs the updates that cycle owes (K of cost u, with
    K = ratio x actors x num_envs on average). A learner inside an update answers nobody, so a
    cycle lasts ``answer + E[max(a, d + K u)]`` over the whole numbers K takes: updates come in
    lumps, and the actors stall behind every lump. Every process shares the cores, too.

    Stages: ``actors`` (answers without updates), ``learner`` (its work alone), ``lockstep`` (the
    cycle, where the lumps make it slower than both) and ``cores``.
    """
    serial = predict(placement, profile, agent, num_envs)
    call, n, ratio = dict(serial.per_call_s), num_envs, agent.replay_ratio
    batch = actors * n
    act = placement.act
    call["Act"] = _cost(profile, "Act", act.backend, act.device, batch) * in_run_factor(profile, "Act", placement)
    call["InferenceTrip"] = trip = _cost(profile, "InferenceTrip", "pipe", "cpu", 1)
    call["InferenceServe"] = serve = _cost(profile, "InferenceServe", "pipe", "cpu", 1)
    extra_threads = _learner_threads_beside(actors, cores, placement, profile, agent, call)
    update = sum(call.get(name, 0.0) for name in ("ReplaySample", "Transfer", "Learn", "PriorityUpdate"))
    updates = ratio * batch  # per cycle, on average
    syncs = min(1.0, updates / weight_sync_every)  # WeightSync per cycle: when the learner moved enough
    answer = call["Act"] + actors * serve + syncs * call["WeightSync"]
    env_and_loop = call["EnvStep"] + call.get("Loop", 0.0)  # an actor's iteration of n envs
    a = env_and_loop + trip
    d = actors * call["ReplayAdd"]
    whole, frac = divmod(updates, 1.0)
    lumps = (1 - frac) * max(a, d + whole * update) + frac * max(a, d + (whole + 1) * update)
    host = actors * env_and_loop + answer + d + updates * (update + extra_threads * call["Learn"])
    rates = {"actors": batch / (answer + a), "learner": batch / (answer + d + updates * update), "cores": cores * batch / host}
    if lumps > max(a, d + updates * update) * (1 + 1e-9):
        rates["lockstep"] = batch / (answer + lumps)
    per_step = {"EnvStep": call["EnvStep"] / n, "Act": call["Act"] / batch, "InferenceServe": serve / n,
                "WeightSync": syncs * call["WeightSync"] / batch, "ReplayAdd": call["ReplayAdd"] / n,
                **{name: ratio * call[name] for name in ("ReplaySample", "Transfer", "Learn", "PriorityUpdate") if name in call}}
    if "Loop" in call:
        per_step["Loop"] = call["Loop"] / n
    return Prediction(call, per_step, rates, _energy_per_env_step(profile, placement, agent, n, call, per_step, {"Act": batch}),
                      _actor_start_s(profile, actors))


def _actor_start_s(profile: Profile, actors: int) -> float:
    """The profile's ActorStart at the nearest measured actor count (processes fork from one server,
    in parallel, so it hardly grows with the count); 0 where it was not measured."""
    rows = [t for t in profile.timings if t.primitive == "ActorStart"]
    return min(rows, key=lambda t: abs(t.size - actors)).median_s if rows else 0.0


def _cost(profile: Profile, primitive: str, backend: str, device: str, size: int, threads: int | None = None,
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


def _measured_as(name: str, placement: Placement, agent: AgentConfig, num_envs: int) -> tuple[str, str, str, int, int | None]:
    """The profile row (primitive, backend, device, size, threads) that a stage of the model is costed by."""
    act, replay, learn = placement.act, placement.replay, placement.learn
    if name == "Transfer":
        source = "numpy" if replay.backend == "numpy" else replay.device
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


def _energy_per_env_step(profile: Profile, placement: Placement, agent: AgentConfig, num_envs: int,
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
        joules = _cost(profile, *_measured_as(name, placement, agent, (sizes or {}).get(name, num_envs)), attr="joules_per_call")
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
    the replay and the learner evict each other, and a small primitive measured 2-4x its alone
    cost on the 2-core machine (DQN's EnvStep 38 µs against 17). The profile's loop job times every
    primitive of one host placement in a short run; that ratio is applied to every host backend of
    the primitive (the eviction comes from the rest of the loop, not from the backend), in plans
    whose learner is on the host as it was there. A GPU learner evicts nothing on the host: on an
    H100 machine, ratios measured beside a 16-thread host learner (3-4x) made the host primitives
    of a CUDA plan 2.5x too dear, so such plans are costed as measured alone."""
    slot = placement.slot_of(name)
    if slot is None or slot.device != "cpu" or placement.learn.device != "cpu":
        return 1.0
    for t in profile.timings:
        if t.primitive == "InRun" and t.backend.split(":", 1)[0] == name:
            try:
                alone = _cost(profile, name, t.backend.split(":", 1)[1], t.device, t.size, t.threads)
            except HetrlError:
                return 1.0
            return float(np.clip(t.median_s / alone, *IN_RUN_BOUNDS)) if alone else 1.0
    return 1.0


def predict(placement: Placement, profile: Profile, agent: AgentConfig, num_envs: int) -> Prediction:
    n, ratio = num_envs, agent.replay_ratio
    names = ["EnvStep", "Act", "ReplayAdd", "ReplaySample", "Learn", "WeightSync"]
    names += ["PriorityUpdate"] if agent.prioritized else []
    names += ["Transfer"] if needs_transfer(placement) else []
    call = {name: _cost(profile, *_measured_as(name, placement, agent, n)) * in_run_factor(profile, name, placement)
            for name in names}
    syncs_per_iteration = 0.0 if ratio == 0 else (min(1.0, ratio * n) if agent.train_every == 1 else 1.0 / agent.train_every)
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
    return Prediction(call, per_step, None, _energy_per_env_step(profile, placement, agent, n, call, per_step))


def candidates(profile: Profile, learn_device: str | None = None, learn_threads: int | None = None) -> list[Placement]:
    """Every placement the profile can cost; the learner pinned to a device or thread count if given."""
    measured = {(t.primitive, t.backend, t.device, t.threads) for t in profile.timings}

    def slots(primitive: str) -> list[Slot]:
        return [Slot(backend, device) for (p, backend, device, _) in sorted(measured) if p == primitive]

    learn_slots = [Slot(backend, device, threads) for (p, backend, device, threads) in sorted(measured, key=str)
                   if p == "Learn" and (learn_device is None or device == learn_device)
                   and (learn_threads is None or device != "cpu" or threads == learn_threads)]
    return [Placement(env, act, replay, learn) for env in slots("EnvStep") for act in slots("Act")
            for replay in slots("ReplayAdd") for learn in learn_slots]


@dataclass(frozen=True)
class Candidate:
    """One way to run: an executor, its actor processes (0 for inline), a placement, and where
    the actors' policy runs (``inference``; the inline executor acts in its own loop)."""

    executor: str
    actors: int
    placement: Placement
    inference: str = "actor"
    num_envs: int = 1  # envs per actor (inline: stepped together)

    def __str__(self) -> str:
        envs = f", {self.num_envs} envs" if self.num_envs != 1 else ""
        if self.executor == "inline":
            return "inline" + envs
        central = ", central inference" if self.inference == "central" else ""
        return f"{self.executor}, {self.actors} actor{'s' if self.actors != 1 else ''}{envs}{central}"


@dataclass
class Plan:
    algo: str
    env: str
    num_envs: int
    objective: str
    fingerprint: str  # the machine the profile was measured on
    placement: Placement
    prediction: Prediction | None  # None for a plan edited by hand or made by the fixed rule
    runner_ups: list[tuple[Candidate, Prediction]]
    executor: str = "inline"
    actors: int = 0  # actor processes of a parallel executor
    meters: list[str] = field(default_factory=list)  # what measured the profile's energy (shown with the prediction)
    steps: int | None = None  # the run length it was ranked for (start-up included); None: learning-phase rate
    inference: str = "actor"  # local executor: the actors' policy in each actor, or batched centrally on the Act slot

    def to_dict(self) -> dict[str, Any]:
        def predicted(p: Prediction) -> dict[str, Any]:
            out = {"env_steps_per_s": round(p.env_steps_per_s, 1), "bottleneck": p.bottleneck,
                   "us_per_call": {k: round(1e6 * v, 2) for k, v in p.per_call_s.items()},
                   "us_per_env_step": {k: round(1e6 * v, 2) for k, v in p.per_env_step_s.items()}}
            if p.stage_rates:
                out["stage_env_steps_per_s"] = {k: round(v, 1) for k, v in p.stage_rates.items()}
            out["joules_per_env_step"] = p.joules_per_env_step  # None: energy was not measured in the profile
            out["startup_s"] = round(p.startup_s, 3)
            if self.steps:
                out["run_env_steps_per_s"] = round(p.run_env_steps_per_s(self.steps), 1)
            return out

        chosen = predicted(self.prediction) if self.prediction else None
        if chosen is not None:  # what the prediction was made for: a hand edit of these drops it on load
            chosen["made_for"] = self._choice_digest()

        return {
            "format": PLAN_FORMAT, "algo": self.algo, "env": self.env, "num_envs": self.num_envs,
            "objective": self.objective, "machine": self.fingerprint,
            "executor": self.executor, "actors": self.actors, "inference": self.inference, "placement": self.placement.to_dict(),
            "predicted": chosen, "energy_meters": self.meters, "run_steps": self.steps,
            "runner_ups": [{"executor": c.executor, "actors": c.actors, "inference": c.inference, "num_envs": c.num_envs,
                            "placement": c.placement.to_dict(),
                            "predicted": predicted(pr)} for c, pr in self.runner_ups],
        }

    def _choice_digest(self) -> str:
        choice = {"executor": self.executor, "actors": self.actors, "num_envs": self.num_envs,
                  "placement": self.placement.to_dict()}
        if self.inference != "actor":  # plans written before central inference keep their digest
            choice["inference"] = self.inference
        return hashlib.sha256(json.dumps(choice, sort_keys=True).encode()).hexdigest()[:12]

    def save(self, path: str | Path) -> Path:
        return write_json(path, self.to_dict())

    @classmethod
    def load(cls, path: str | Path) -> "Plan":
        """A plan file, validated: format, placement fields, registered backends, present devices."""
        path = Path(path)
        data = read_json(path, "plan", f"make one with `hetrl plan ALGO ENV --out {path}`",
                         "fix it or make a new one with `hetrl plan`")
        if not isinstance(data, dict) or data.get("format") != PLAN_FORMAT:
            raise HetrlError(f"{path} is not a hetrl plan (expected format {PLAN_FORMAT})")
        missing = [k for k in ("algo", "env", "placement") if k not in data]
        if missing:
            raise HetrlError(f"plan {path} lacks {', '.join(missing)}")
        try:
            placement = Placement.from_dict(data["placement"])
            placement.validate()
        except HetrlError as exc:
            raise HetrlError(f"plan {path}: {exc}") from None
        executor, actors, inference = data.get("executor", "inline"), data.get("actors", 0), data.get("inference", "actor")
        num_envs = data.get("num_envs", 1)
        if not isinstance(num_envs, int) or isinstance(num_envs, bool) or num_envs < 1:
            raise HetrlError(f"plan {path}: num_envs must be a whole number, at least 1, got {num_envs!r}")
        if executor not in PLAN_EXECUTORS:
            raise HetrlError(f"plan {path}: executor must be one of {', '.join(PLAN_EXECUTORS)}, got {executor!r}")
        if inference not in INFERENCE:
            raise HetrlError(f"plan {path}: inference must be one of {', '.join(INFERENCE)}, got {inference!r}")
        if inference == "central" and executor != "local":
            raise HetrlError(f"plan {path}: central inference runs with the local executor, not {executor}; "
                             "set executor to local, or inference to actor")
        if not isinstance(actors, int) or isinstance(actors, bool) or actors < 0 or (executor != "inline" and actors < 1):
            raise HetrlError(f"plan {path}: actors must be a whole number, at least 1 for the {executor} executor, got {actors!r}")
        plan = cls(data["algo"], data["env"], num_envs, data.get("objective", "throughput"),
                   data.get("machine", "unknown"), placement, None, [], executor, actors, inference=inference)
        plan.prediction = _saved_prediction(data.get("predicted"), plan._choice_digest())
        meters, steps = data.get("energy_meters"), data.get("run_steps")
        plan.meters = [str(m) for m in meters] if isinstance(meters, list) else []
        plan.steps = steps if isinstance(steps, int) and not isinstance(steps, bool) and steps > 0 else None
        return plan


def _saved_prediction(saved: Any, digest: str) -> Prediction | None:
    """The prediction a plan file carries, if it still describes the file's choice (not hand-edited
    since) and reads back whole; None otherwise, so a run never shows another plan's prediction."""
    if not isinstance(saved, dict) or saved.get("made_for") != digest:
        return None
    try:
        per_call = {str(k): float(v) / 1e6 for k, v in saved["us_per_call"].items()}
        per_step = {str(k): float(v) / 1e6 for k, v in saved["us_per_env_step"].items()}
        stages = saved.get("stage_env_steps_per_s")
        stages = {str(k): float(v) for k, v in stages.items()} if stages else None
        joules = saved.get("joules_per_env_step")
        return Prediction(per_call, per_step, stages, float(joules) if joules is not None else None,
                          float(saved.get("startup_s", 0.0)))
    except (KeyError, TypeError, ValueError, AttributeError):
        return None


ENV_CHOICES = (1, 2, 4, 8, 16)  # envs per actor (inline: per iteration) a plan chooses among when the run leaves it open


def make_plan(profile: Profile, agent: AgentConfig, num_envs: int, objective: str = "throughput",
              learn_device: str | None = None, learn_threads: int | None = None, executors: tuple[str, ...] = ("inline",),
              actors: int = 0, cores: int | None = None, weight_sync_every: int = 1, steps: int | None = None,
              inference: tuple[str, ...] = INFERENCE) -> Plan:
    """The best way to run for ``objective`` among every placement the profile can cost, under each
    of ``executors`` (``local``: with 1 to ``cores`` actor processes, or exactly ``actors``, acting
    in each actor (numpy) or centrally (any Act slot), as ``inference`` allows), with ``num_envs``
    envs per actor (0: each of :data:`ENV_CHOICES`; the model counts throughput only, not what
    more envs per actor change in learning). With ``steps`` (the run's length), throughput is the
    rate over the whole run, actor start-up included: a short run may not win back what starting
    actor processes costs."""
    if objective not in OBJECTIVES:
        raise HetrlError(f"objective {objective!r} is unknown; choose one of {', '.join(OBJECTIVES)}")
    cores = cores or os.cpu_count() or 1
    costed: list[tuple[Candidate, Prediction]] = []
    for placement, n in itertools.product(candidates(profile, learn_device, learn_threads), [num_envs] if num_envs else ENV_CHOICES):
        try:
            if "inline" in executors:
                costed.append((Candidate("inline", 0, placement, num_envs=n), predict(placement, profile, agent, n)))
        except HetrlError:  # a combination the profile cannot cost (e.g. an unmeasured transfer) is passed over
            continue
        if "local" not in executors:
            continue
        ways = [w for w in INFERENCE if w in inference and (w == "central" or placement.act == Slot("numpy", "cpu"))]  # actors act with numpy
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
                runner_ups, best.executor, best.actors, profile_meters(profile), steps, best.inference)


def profile_meters(profile: Profile) -> list[str]:
    """The meters whose energy the profile's rows sum (e.g. ["nvml:gpu0", "rapl:package-0"])."""
    return sorted({m.strip() for t in profile.timings if t.energy_meters for m in t.energy_meters.split(",")})


def plan_tables(plan: Plan) -> list[Table]:
    """The chosen plan (placement and predicted cost per env step) and its runner-ups."""
    how = "inline" if plan.executor == "inline" else f"{plan.executor} executor, {plan.actors} actor processes"
    how += f", {plan.num_envs} envs {'each' if plan.executor != 'inline' else 'stepped together'}" if plan.num_envs != 1 else ""
    how += ", central inference" if plan.inference == "central" else ""
    chosen = Table(title=f"plan for {plan.algo} on {plan.env}: {how} ({plan.objective}; machine {plan.fingerprint})",
                   title_justify="left")
    for col in ("primitive", "placement", "predicted µs/call", "predicted µs/env step"):
        chosen.add_column(col, justify="left" if col in ("primitive", "placement") else "right")
    pred = plan.prediction
    for primitive, where in plan.placement.by_primitive().items():
        if pred is not None and primitive not in pred.per_call_s:
            continue
        call = f"{1e6 * pred.per_call_s[primitive]:,.1f}" if pred else "-"
        step = f"{1e6 * pred.per_env_step_s[primitive]:,.1f}" if pred else "-"
        mark = " (bottleneck)" if pred and primitive == pred.bottleneck else ""
        chosen.add_row(primitive + mark, where, call, step)
    for extra, where in (("Transfer", "replay -> learner"), ("Loop", "executor's own work"),
                         ("WeightFetch", "shared copy -> actors"), ("InferenceServe", "learner answers an actor"),
                         ("InferenceTrip", "an actor's round trip")):
        if pred is not None and extra in pred.per_call_s:
            step = pred.per_env_step_s.get(extra)  # none for a wait (InferenceTrip)
            chosen.add_row(extra, where, f"{1e6 * pred.per_call_s[extra]:,.1f}", "-" if step is None else f"{1e6 * step:,.1f}")
    if pred is not None:
        chosen.caption = f"predicted: {pred.env_steps_per_s:,.0f} env steps/s in the learning phase (a model's prediction)"
        meters = ", ".join(plan.meters) or "the profile's meters"
        chosen.caption += (f"; {pred.joules_per_env_step:.4f} J per env step (from energy per call measured by {meters})"
                           if pred.joules_per_env_step else "; energy: not in the profile (no meter worked)")
        if pred.stage_rates:
            stages = ", ".join(f"{k} {v:,.0f}" for k, v in pred.stage_rates.items())
            chosen.caption += f"; stages (env steps/s each could sustain): {stages}; bottleneck: {pred.bottleneck}"
        if pred.startup_s:
            chosen.caption += f"; starting and stopping the actors: {pred.startup_s:.1f} s (measured)"
        if plan.steps:
            chosen.caption += (f"; over the run's {plan.steps:,} env steps, start-up included: "
                               f"{pred.run_env_steps_per_s(plan.steps):,.0f} env steps/s (predicted)")
    tables = [chosen]
    if plan.runner_ups:
        others = Table(title="runner-up plans (predicted)", title_justify="left")
        columns = ["executor", "act", "replay", "learn", "env steps/s"] + (["over the run"] if plan.steps else []) + ["bottleneck"]
        for col in columns:
            others.add_column(col, justify="right" if col in ("env steps/s", "over the run") else "left")
        for c, p in plan.runner_ups:
            rates = [f"{p.env_steps_per_s:,.0f}"] + ([f"{p.run_env_steps_per_s(plan.steps):,.0f}"] if plan.steps else [])
            others.add_row(str(c), str(c.placement.act), str(c.placement.replay), str(c.placement.learn), *rates, p.bottleneck)
        tables.append(others)
    return tables


def _covers_the_registry(profile: Profile, algorithm: Algorithm) -> bool:
    """True when the profile measured every registered implementation the model uses (of those
    that can serve ``algorithm``)."""
    needed = {"EnvStep", "Act", "ReplayAdd", "ReplaySample", "Learn", "WeightSync"}
    have = {(t.primitive, t.backend) for t in profile.timings}
    devices = {t.device for t in profile.timings}
    return ("ActorStart", "local") in have and all((p, b) in have for p in needed for b, impl in implementations(p).items()
               if not impl.unsupported(algorithm) and any(impl.runs_on(d) for d in devices))


def _cached_profile(path: Path, algorithm: Algorithm) -> Profile | None:
    if not path.exists():
        return None
    try:
        profile = Profile.load(path)
    except HetrlError:  # a damaged cache entry is measured again
        return None
    return profile if _covers_the_registry(profile, algorithm) else None


def search_space(config: TrainConfig) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The executors and inference ways a plan for ``config`` chooses among (the ray executor is
    placed by the inline model; central inference, asked for by name, exists in the local executor only)."""
    executors = {"auto": ("inline", "local"), "ray": ("inline",)}.get(config.executor, (config.executor,))
    if config.inference == "auto":
        return executors, INFERENCE
    return (("local",) if config.inference == "central" else executors), (config.inference,)


def plan_for_run(config: TrainConfig, algorithm: Algorithm, announce: Callable[[str], None] = lambda _: None,
                 objective: str = "throughput") -> Plan:
    """The plan a run uses: ``auto`` (planned from this machine's profile, measured once and
    cached), ``rule`` (the fixed rule of :func:`default_placement`), or a plan.json path."""
    threads = config.threads or (torch.get_num_threads() if "OMP_NUM_THREADS" in os.environ else 0)
    if config.plan == "rule":
        work = (algorithm.learner_parameters(), config.agent.batch_size)
        placement = default_placement(resolve_device(config.device), work, threads)
        executor = "inline" if config.executor == "auto" else config.executor
        actors = 0 if executor == "inline" else (config.actors or default_actors())
        return Plan(config.algo, config.env, config.num_envs or 1, "rule", "-", placement, None, [], executor, actors)
    if config.plan == "auto":
        learn_device = None if config.device == "auto" else str(resolve_device(config.device))
        machine = describe_machine()
        path = default_path(machine, config.algo, config.env, config.agent)
        profile = _cached_profile(path, algorithm)
        if profile is None:
            announce(f"profiling {config.algo} on {config.env} on this machine (once; cached in {path})")
            profile = profile_workload(config.algo, config.env, config.agent, machine=machine)
            profile.save(path)
        executors, inference = search_space(config)
        plan = make_plan(profile, config.agent, config.num_envs, objective, learn_device, threads or None,
                         executors, config.actors, weight_sync_every=config.weight_sync_every, steps=config.steps,
                         inference=inference)
        if config.executor == "ray":  # placed by the inline model; the ray executor itself is not modelled
            plan.executor, plan.actors, plan.prediction = "ray", config.actors or default_actors(), None
        return plan
    plan = Plan.load(config.plan)
    if (plan.algo, plan.env) != (config.algo, config.env):
        raise HetrlError(f"plan {config.plan} is for {plan.algo} on {plan.env}, not {config.algo} on {config.env}")
    return plan
