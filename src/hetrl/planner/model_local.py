"""The performance model of the local executor (runtime/local.py): actor processes beside the
learner, with the actors acting on their own copies (:func:`predict_parallel`) or through central
inference (:func:`predict_central`, runtime/inference.py). Both are built from the inline model's
per-call costs (planner/model.py) and follow the executor's loop: the rate limiter holds the
replay ratio, so concurrent stages go at the pace of the slowest.
"""

from __future__ import annotations

from hetrl.algos import AgentConfig
from hetrl.errors import HetrlError
from hetrl.planner.model import Prediction, cost, energy_per_env_step, in_run_factor, measured_as, predict
from hetrl.profile import Profile
from hetrl.protocol import Placement
from hetrl.runtime.schedule import ReplaySchedule


ACTOR_WORK = ("EnvStep", "Act", "WeightFetch", "Loop")  # done in the actor processes of a parallel executor


def predict_parallel(placement: Placement, profile: Profile, agent: AgentConfig, num_envs: int, actors: int,
                     cores: int, weight_sync_every: int = 1, inference: str = "actor") -> Prediction:
    """The local executor as a pipeline of concurrent stages, each with its sustainable env steps/s
    (``inference="central"``: see :func:`predict_central`):

    - ``actors``: each actor process does EnvStep, Act (the placement's slot, on the host), its loop work and weight fetches
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
    call, n, ratio = dict(serial.per_call_s), num_envs, ReplaySchedule.of(agent).ratio
    sync = call["WeightSync"]  # the learner publishes: a copy of the policy's parameters from its device
    fetch = cost(profile, *measured_as("WeightFetch", placement, agent, n))  # an actor copies them, host to host
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
    return Prediction(call, per_step, rates, energy_per_env_step(profile, placement, agent, n, call, per_step),
                      _actor_start_s(profile, actors), serial.modelled)


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
            single = cost(profile, "Learn", placement.learn.backend, "cpu", agent.batch_size, 1)
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
    call, n, ratio = dict(serial.per_call_s), num_envs, ReplaySchedule.of(agent).ratio
    batch = actors * n
    act = placement.act
    call["Act"] = cost(profile, "Act", act.backend, act.device, batch) * in_run_factor(profile, "Act", placement)
    call["InferenceTrip"] = trip = cost(profile, "InferenceTrip", "pipe", "cpu", 1)
    call["InferenceServe"] = serve = cost(profile, "InferenceServe", "pipe", "cpu", 1)
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
    return Prediction(call, per_step, rates, energy_per_env_step(profile, placement, agent, n, call, per_step, {"Act": batch}),
                      _actor_start_s(profile, actors), serial.modelled)


def _actor_start_s(profile: Profile, actors: int) -> float:
    """The profile's ActorStart at the nearest measured actor count (processes fork from one server,
    in parallel, so it hardly grows with the count); 0 where it was not measured."""
    rows = [t for t in profile.timings if t.primitive == "ActorStart"]
    return min(rows, key=lambda t: abs(t.size - actors)).median_s if rows else 0.0
