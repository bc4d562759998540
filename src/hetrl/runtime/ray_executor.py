"""The ray executor: actors and the learner (with its replay beside it) as Ray actors, this process
coordinating them.

Actors return chunks of transitions through the object store (with a frame replay, each new frame
once and the transitions as frame ids: ``runtime/frame_chunks.py``, which says why a restarted
actor starts a fresh frame stream and what a lost chunk leaves behind); the coordinator forwards
their references to the learner without copying them here, issues new chunks only as far as the
replay-ratio limiter allows, and passes the learner's latest weights to each actor's next chunk.
Every role asks Ray for explicit resources (1 CPU per actor; the learner's threads as CPUs and a
GPU when it learns on CUDA), and a cluster that cannot hold them is an error at start, not a run
that stays pending. The learner stays on this process's node where it fits; the actors spread over
the cluster's nodes (``spread``), or go where Ray's default scheduling puts them (``pack``). An
actor whose node leaves the cluster is restarted where there is room, else the run goes on with
fewer (said in one line, counted in ``actors_lost``); chunks lost with it are dropped, never what
the replay holds. A lost learner is :class:`LearnerLost`. ``address`` connects to an existing
cluster (``ray start --head``); without it a local one is started and stopped with the run. An
address where no Ray cluster answers is an error within ``CONNECT_TIMEOUT_S`` (Ray itself would
retry for many minutes, deaf to Ctrl-C), and Ctrl-C or SIGTERM stop the connecting at once.
"""

from __future__ import annotations

import signal
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import numpy as np
import torch

from hetrl.algos import Algorithm
from hetrl.config import MAX_CHUNK_STEPS, RAY_SPREADS
from hetrl.errors import ActorsFailed, HetrlError, LearnerLost, StopRequested, int_problem
from hetrl.nets import numpy_params
from hetrl.primitives import check_placement, get
from hetrl.protocol import Placement
from hetrl.replay.frames import FrameReplay
from hetrl.runtime.acting_role import Actor, ActorSpec
from hetrl.runtime.denormals import set_flushing
from hetrl.runtime.frame_chunks import ChunkStreams, frame_chunk
from hetrl.runtime.learner_role import LearnerRole
from hetrl.runtime.parallel import ParallelBookkeeping
from hetrl.runtime.ray_address import POLL_S, check_reachable
from hetrl.runtime.schedule import ReplaySchedule
from hetrl.runtime.timers import Timers, merge_timers

TRANSITION_FIELDS = ("obs", "actions", "rewards", "next_obs", "discounts")
CONNECT_TIMEOUT_S = 25.0  # to reach a cluster at --ray-address and join it, then a clear error
_connects: list[threading.Thread] = []  # every thread that has run ray.init against an address


def connect_pending() -> bool:
    """Whether a ``ray.init`` this process gave up on is still running (inside Ray's C++ client). A
    process that then finalizes normally can abort beside it (``std::bad_alloc`` from the client's
    teardown, exit code -6 instead of the error's); the command line ends at once instead
    (``cli.main``)."""
    return any(thread.is_alive() for thread in _connects)


def _never() -> bool:
    return False


def _stderr(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def _import_ray() -> Any:
    try:
        import ray
    except ImportError:
        raise HetrlError("the ray executor needs Ray: pip install 'hetrl[ray]' (or use --executor local)") from None
    return ray


class RayActorRole:
    """An actor as a Ray actor: ``collect`` steps its envs ``steps`` times with the given weights.
    ``stream``: (actor index, incarnation), the frame stream its chunks belong to (``spec.frames``)."""

    def __init__(self, spec: ActorSpec, seed: int, stream: tuple[int, int] = (0, 0)) -> None:
        import ray

        self.timers = Timers()
        self.loop = Actor(spec, seed, self.timers)
        self.frames, self.stream = spec.frames, stream
        self.version = -1
        self.node = ray.get_runtime_context().get_node_id()

    def collect(self, steps: int, env_steps: int, weights: dict[str, np.ndarray] | None, version: int) -> tuple[dict, dict | None]:
        if weights is not None and version != self.version:
            start = time.perf_counter()
            for name, value in weights.items():
                np.copyto(self.loop.weights[name], value)
            self.loop.weights_arrived()
            self.version = version
            self.timers.add("WeightFetch", time.perf_counter() - start)
        chunks, episodes = [], []
        for k in range(steps):
            ready, finished = self.loop.step(env_steps + k * self.loop.num_envs)
            if ready is not None:
                chunks.append(ready if self.frames else {key: np.array(ready[key]) for key in TRANSITION_FIELDS})
            episodes += finished
        if self.frames:  # always sent: later chunks may refer to its frames
            transitions = frame_chunk(self.loop.role, chunks, self.stream)
        else:
            transitions = {key: np.concatenate([c[key] for c in chunks]) for key in TRANSITION_FIELDS} if chunks else None
        meta = {"steps": steps * self.loop.num_envs, "episodes": episodes, "version": self.version,
                "timers": self.timers.totals(), "ran": self.loop.ran(), "node": self.node}
        return meta, transitions


class RayLearnerRole:
    """The learner and its replay as one Ray actor."""

    def __init__(self, algo: Algorithm, placement: Placement, seed: int, threads: int | None,
                 flush_denormals: bool = True) -> None:
        set_flushing(flush_denormals)  # before torch's thread pool starts, so that its threads inherit it
        if threads:
            torch.set_num_threads(threads)
        import ray

        self.timers = Timers()
        self.role = LearnerRole(algo, placement, seed, np.random.default_rng(seed), self.timers)
        self.streams = ChunkStreams(algo.spec.obs_shape[1:]) if isinstance(self.role.replay, FrameReplay) else None
        self.node = ray.get_runtime_context().get_node_id()

    def step(self, chunk_refs: list[Any], env_steps: int, updates: int, sync_every: int) -> dict[str, Any]:
        """Add the chunks (object references, fetched here from the store), run up to ``updates``
        updates; returns counters, losses, fresh weights and the positions of the chunks that were
        lost (their node left the cluster before they were fetched)."""
        import ray

        role, lost = self.role, []
        for i, ref in enumerate(chunk_refs):
            try:
                chunk = ray.get(ref)
            except ray.exceptions.ObjectLostError:  # its only copy was on a node that is gone
                lost.append(i)
                continue
            if chunk is None:
                continue
            if self.streams is None:
                role.add(chunk)
            elif (received := self.streams.receive(chunk)) is not None:
                role.add_frames(*received)  # before the next chunk's frames are written
        synced = None
        for _ in range(updates if role.can_sample() else 0):
            role.update(env_steps)
            if role.updates % sync_every == 0:
                synced = role.updates
        weights = None
        if synced is not None:
            with self.timers.time("WeightSync"):
                weights = numpy_params(role.learner.policy_network)
        return {"updates": role.updates, "loss": role.drain_losses(), "actor_loss": role.drain_actor_losses(), "weights": weights,
                "timers": self.timers.totals(), "ran": role.ran(), "replay_bytes": role.replay.nbytes,
                "replay_size": len(role.replay), "lost": lost, "node": self.node,
                "dropped": self.streams.dropped if self.streams is not None else 0}

    def weights(self) -> dict[str, np.ndarray]:
        return numpy_params(self.role.learner.policy_network)

    def state_dict(self) -> dict[str, Any]:
        return self.role.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.role.load_state_dict(state)


class RayExecutor(ParallelBookkeeping):
    name = "ray"

    def __init__(self, algo: Algorithm, placement: Placement, num_envs: int, seed: int, actors: int,
                 weight_sync_every: int = 1, address: str | None = None, log: Callable[[str], None] = _stderr,
                 should_stop: Callable[[], bool] = _never, chunk_steps: int = 0, spread: str = "spread",
                 learner_node: str | None = None, async_envs: bool = False, flush_denormals: bool = True) -> None:
        """``chunk_steps``: steps of each env an actor takes per chunk it returns (0: a chunk is
        half the limiter's lead shared by the actors); ``spread``: one of ``RAY_SPREADS``;
        ``learner_node``: the Ray node id the learner must run on (default: this process's node,
        where it fits)."""
        check_placement(placement, algo)
        self.ray = _import_ray()
        if actors < 1:
            raise HetrlError(f"the ray executor needs at least 1 actor (got {actors})")
        if spread not in RAY_SPREADS:
            raise HetrlError(f"ray_spread {spread!r} is unknown; use one of {', '.join(RAY_SPREADS)}")
        if problem := int_problem("ray_chunk_steps", chunk_steps, 0, MAX_CHUNK_STEPS):
            raise HetrlError(f"{problem}; 0 lets the executor choose")
        cfg = algo.config
        if chunk_steps * num_envs > cfg.buffer_size:
            raise HetrlError(f"a chunk of ray_chunk_steps x num_envs = {chunk_steps * num_envs:,} transitions exceeds the "
                             f"replay's capacity (buffer_size {cfg.buffer_size:,}); lower ray_chunk_steps")
        self.spread, self.learner_node = spread, learner_node
        self.algo, self.placement, self.seed, self.address, self.log = algo, placement, seed, address, log
        self.should_stop = should_stop  # whether the run is stopping (a signal): connecting stops at once
        self.actors, self.num_envs, self.weight_sync_every = actors, num_envs, weight_sync_every
        # A frame replay is fed frames, not stacks (as the local executor's): each new frame once, transitions as frame ids
        self.frames = issubclass(get("ReplayAdd", placement.replay.backend).cls, FrameReplay)
        self.spec = ActorSpec(algo.name, algo.spec.origin, cfg, num_envs, seed, placement, algo.spec.atari, self.frames,
                              async_envs=async_envs, flush_denormals=flush_denormals)
        self.limiter, self.chunk_steps = chunk_schedule(cfg, actors, num_envs, chunk_steps)
        self.policy_network = algo.make_policy_network()
        self.timers = Timers()
        self.env_steps = 0  # steps whose transitions reached this process
        self.updates = 0
        self._init_bookkeeping()
        self._losses: list[float] = []
        self._actor_losses: list[float] = []
        self._actor_timers: list[dict[str, tuple[float, int]]] = [{} for _ in range(actors)]
        self._learner_timers: dict[str, tuple[float, int]] = {}
        self._ran: dict[str, str] = {}  # as the actors and the learner report it
        self._replay_bytes = 0
        self.replay_size = 0  # transitions in the learner's replay, as it last reported
        self.lost_steps = 0  # env steps whose chunk went with its node before the learner fetched it
        self.dropped = 0  # transitions the learner dropped: a frame they refer to never arrived (frame_chunks.py)
        self.actor_nodes: list[str | None] = [None] * actors  # the Ray node each actor last reported from
        self.learner_node_id: str | None = None
        self._restore: dict[str, Any] | None = None
        self._started = self._closed = False

    # --- lifecycle -----------------------------------------------------------------------------
    def _resources(self) -> tuple[dict[str, float], dict[str, float]]:
        """(an actor's, the learner's) Ray resources."""
        device = torch.device(self.placement.learn.device)
        learner = {"CPU": float(self.placement.learn.threads or 1)}
        if device.type == "cuda":
            learner["GPU"] = 1.0
        elif device.type != "cpu":
            learner[device.type] = 1.0  # a custom resource the cluster's nodes declare (ray start --resources)
        return {"CPU": 1.0}, learner

    def _start(self) -> None:
        ray = self.ray
        self._owns_ray = not ray.is_initialized()
        if self._owns_ray:
            self._init_ray()
        actor_needs, learner_needs = self._resources()
        needed: dict[str, float] = dict(learner_needs)
        for key, value in actor_needs.items():
            needed[key] = needed.get(key, 0.0) + self.actors * value
        have = ray.cluster_resources()
        for key, value in needed.items():
            if have.get(key, 0.0) < value:
                self.close()
                raise HetrlError(
                    f"the Ray cluster has {have.get(key, 0.0):g} {key} but this plan needs {value:g} "
                    f"({self.actors} actors x {actor_needs.get(key, 0):g} + learner {learner_needs.get(key, 0):g}); "
                    f"use fewer --actors, or add nodes with `ray start --address=HEAD:6379`")
        actor_strategy, learner_strategy = self._strategies()
        self._actor_needs = actor_needs
        self._actor_cls = ray.remote(**_options(actor_needs, actor_strategy))(RayActorRole)
        learner_cls = ray.remote(**_options(learner_needs, learner_strategy))(RayLearnerRole)
        self.learner = learner_cls.remote(self.algo, self.placement, self.seed, self.placement.learn.threads,
                                          self.spec.flush_denormals)
        if self._restore is not None:
            ray.get(self.learner.load_state_dict.remote(self._restore))
            self._restore = None
        self._weights = ray.put(ray.get(self.learner.weights.remote()))
        self._version = self.updates
        self._load_policy(ray.get(self._weights))
        self._incarnations = [0] * self.actors
        self._handles = [self._new_actor(i) for i in range(self.actors)]
        self._collecting: dict[Any, int] = {}  # meta ref -> actor index
        self._transitions: dict[Any, Any] = {}  # meta ref -> transitions ref
        self._issued = self.env_steps  # env steps asked for, delivered or not
        self._queued: list[Any] = []  # transitions refs for the learner's next call
        self._queued_steps: list[int] = []  # the env steps each of them holds
        self._learning_steps: list[int] = []  # the same, for the learner call in flight
        self._learning: Any = None  # the learner call in flight
        self._learned_steps = self.env_steps  # env steps whose transitions the learner has been sent
        self._started = True

    def _strategies(self) -> tuple[Any, Any]:
        """(the actors', the learner's) Ray scheduling strategies: actors over the nodes (SPREAD) or
        Ray's default; the learner on ``learner_node`` (hard), else on this process's node when it
        fits there (soft: a GPU elsewhere still takes it)."""
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        actor = "SPREAD" if self.spread == "spread" else "DEFAULT"
        if self.learner_node is not None:
            return actor, NodeAffinitySchedulingStrategy(self.learner_node, soft=False)
        try:
            here = self.ray.get_runtime_context().get_node_id()
        except Exception:  # noqa: BLE001 (a Ray Client driver has no node of its own)
            return actor, "DEFAULT"
        return actor, NodeAffinitySchedulingStrategy(here, soft=True)

    def _init_ray(self) -> None:
        """Start a local Ray cluster, or join the one at ``address``: first a TCP check that
        something listens there, then ``ray.init`` in a thread this one waits on, so that an
        address that answers but is no Ray cluster fails within ``CONNECT_TIMEOUT_S`` and a stop
        signal is seen while it connects (Ray's C++ client holds the calling thread). Ray's own
        SIGTERM handler (an immediate exit) is undone: SIGTERM stays the session's."""
        ray = self.ray
        options = {"include_dashboard": False, "logging_level": "ERROR", "log_to_driver": True}
        sigterm = signal.getsignal(signal.SIGTERM)
        try:
            if self.address is None:
                ray.init(**options)
                return
            deadline = time.monotonic() + CONNECT_TIMEOUT_S
            check_reachable(self.address, CONNECT_TIMEOUT_S, self._check_stop)
            outcome: list[BaseException | None] = []

            def connect() -> None:
                try:
                    ray.init(address=self.address, **options)
                    outcome.append(None)
                except BaseException as exc:  # noqa: BLE001 (whatever it is, the waiting thread raises it)
                    outcome.append(exc)

            thread = threading.Thread(target=connect, name="hetrl-ray-connect", daemon=True)
            _connects.append(thread)
            thread.start()
            while not outcome:
                if self.should_stop() or time.monotonic() > deadline:
                    self._owns_ray = False  # the thread may still be inside ray.init: no ray.shutdown beside it
                self._check_stop()
                if time.monotonic() > deadline:
                    raise HetrlError(f"no Ray cluster answered at {self.address} within {CONNECT_TIMEOUT_S:g} s (something "
                                     f"listens there, but is it a Ray head's GCS port, 6379 unless `ray start --head "
                                     f"--port` chose another?); check --ray-address")
                thread.join(POLL_S)
            if outcome[0] is not None:
                raise HetrlError(f"cannot join the Ray cluster at {self.address} ({str(outcome[0]).splitlines()[0][:300]}); "
                                 f"check --ray-address") from None
        finally:
            if threading.current_thread() is threading.main_thread() and signal.getsignal(signal.SIGTERM) is not sigterm:
                signal.signal(signal.SIGTERM, signal.SIG_DFL if sigterm is None else sigterm)

    def _check_stop(self) -> None:
        if self.should_stop():  # nothing has started: stop now, with nothing to save
            raise StopRequested(signal.SIGINT, f"stopped while connecting to the Ray cluster at {self.address}")

    def _new_actor(self, index: int) -> Any:
        incarnation = self._incarnations[index]
        return self._actor_cls.remote(self.spec, self.spec.actor_seed(index, incarnation), (index, incarnation))

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if not self._started and not getattr(self, "_owns_ray", False):
            return
        ray = self.ray
        for handle in getattr(self, "_handles", []):
            if handle is not None:
                ray.kill(handle)
        if getattr(self, "learner", None) is not None:
            ray.kill(self.learner)
        if getattr(self, "_owns_ray", False):
            ray.shutdown()

    # --- coordination ------------------------------------------------------------------------
    def iteration(self) -> None:
        if not self._started:
            self._start()
        ray = self.ray
        progressed = self._receive_chunks()
        progressed |= self._receive_learner()
        self._issue_learning()
        self._issue_collects()
        if not progressed:
            pending = list(self._collecting) + ([self._learning] if self._learning is not None else [])
            with self.timers.time("CoordinatorWait"):
                ray.wait(pending, num_returns=1, timeout=0.01)

    def _receive_chunks(self) -> bool:
        ray = self.ray
        if not self._collecting:
            return False
        ready, _ = ray.wait(list(self._collecting), num_returns=len(self._collecting), timeout=0)
        for ref in ready:
            index = self._collecting.pop(ref)
            transitions = self._transitions.pop(ref)
            try:
                meta = ray.get(ref)
            except (ray.exceptions.RayActorError, ray.exceptions.RayTaskError) as exc:
                self._actor_failed(index, exc)
                continue
            self.env_steps += meta["steps"]
            self.finished += meta["episodes"]
            self._actor_timers[index] = meta["timers"]
            self.actor_nodes[index] = meta["node"]
            n = self.live_actors()
            self._ran.update({k: f"{v}, {n} actor{'s' if n != 1 else ''}" for k, v in meta["ran"].items()})
            self._interval_staleness.append(max(0, self.updates - meta["version"]))
            self._queued.append(transitions)
            self._queued_steps.append(meta["steps"])
        return bool(ready)

    def live_actors(self) -> int:
        return sum(handle is not None for handle in self._handles) if self._started else self.actors

    def _actor_failed(self, index: int, exc: Exception) -> None:
        """Restart actor ``index``: where it was when its node is still there (a crash frees its
        CPU), elsewhere when its node is gone and another has room; else go on without it."""
        ray = self.ray
        self._issued -= self.chunk_steps * self.num_envs  # that chunk never arrived
        why = f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"
        node = self.actor_nodes[index]
        gone = node is not None and node not in {n["NodeID"] for n in ray.nodes() if n["Alive"]}
        ray.kill(self._handles[index])
        free = ray.available_resources()
        if not gone or all(free.get(key, 0.0) >= value for key, value in self._actor_needs.items()):
            self.restarts += 1
            self._incarnations[index] += 1
            self._handles[index] = self._new_actor(index)
            where = f"its node {node[:8]} left the cluster; " if gone else ""
            self.log(f"actor {index} failed ({why}); {where}restarted it (restart {self.restarts} of this run)")
            return
        self._handles[index] = None
        self.actors_lost += 1
        live = self.live_actors()
        if not live:
            raise ActorsFailed(f"every actor is lost (the last, actor {index}, with its node {node[:8]}: {why}) and the "
                               f"Ray cluster has no free CPU to restart one; add nodes or free CPUs")
        self.log(f"actor {index} lost with its node {node[:8]} ({why}); no node has a free CPU to restart it, so the "
                 f"run goes on with {live} actor{'s' if live != 1 else ''} ({self.actors_lost} lost)")

    def _receive_learner(self) -> bool:
        ray = self.ray
        if self._learning is None:
            return False
        ready, _ = ray.wait([self._learning], timeout=0)
        if not ready:
            return False
        try:
            result = ray.get(self._learning)
        except ray.exceptions.RayActorError as exc:
            raise self._learner_lost(exc) from None
        self._learning = None
        lost = sum(self._learning_steps[i] for i in result["lost"])
        if lost:  # counted when their actor reported; their transitions never reached the replay
            self.lost_steps += lost
            self.env_steps -= lost
            self._learned_steps -= lost
            self._issued -= lost
            self.log(f"{len(result['lost'])} chunk(s) of {lost:,} env steps were lost with their node before the learner "
                     f"fetched them; the replay keeps everything it held ({self.lost_steps:,} env steps lost in this run)")
        self.updates = result["updates"]
        self.replay_size = result["replay_size"]
        self.learner_node_id = result["node"]
        if result["dropped"] > self.dropped:  # a gap in a live frame stream (frame_chunks.py): said, never silent
            self.log(f"{result['dropped'] - self.dropped:,} transitions referred to frames of a chunk that never reached the "
                     f"learner and were left out of the replay ({result['dropped']:,} in this run)")
        self.dropped = result["dropped"]
        self._learner_timers = result["timers"]
        self._ran.update(result["ran"])
        self._replay_bytes = result["replay_bytes"]
        if result["loss"] is not None:
            self._losses.append(result["loss"])
        if result["actor_loss"] is not None:
            self._actor_losses.append(result["actor_loss"])
        if result["weights"] is not None:
            self._weights = ray.put(result["weights"])
            self._version = self.updates
            self._load_policy(result["weights"])
        self.trace.append((self._learned_steps, self.updates))
        return True

    def _issue_learning(self) -> None:
        if self._learning is not None:
            return
        steps = self.env_steps  # every delivered chunk goes with this call
        owed = self.limiter.updates_owed(steps, self.updates)
        if not self._queued and not owed:
            return
        self._learning = self.learner.step.remote(self._queued, steps, owed, self.weight_sync_every)
        self._learned_steps = steps
        self._learning_steps = self._queued_steps
        self._queued, self._queued_steps = [], []

    def _issue_collects(self) -> None:
        busy = set(self._collecting.values())
        allowed = self.limiter.allowed_env_steps(self.updates)
        chunk = self.chunk_steps * self.num_envs
        for index, handle in enumerate(self._handles):
            if handle is None or index in busy or (allowed >= 0 and self._issued + chunk > allowed):
                continue
            meta, transitions = handle.collect.options(num_returns=2).remote(self.chunk_steps, self._issued, self._weights, self._version)
            self._collecting[meta] = index
            self._transitions[meta] = transitions
            self._issued += chunk

    def _learner_lost(self, exc: Exception) -> LearnerLost:
        where = f" with its node {self.learner_node_id[:8]}" if self.learner_node_id else ""
        return LearnerLost(f"the learner was lost{where} ({type(exc).__name__}: {str(exc).splitlines()[0][:200]}); its "
                           f"networks and replay went with it, so the run stops at env step {self._learned_steps:,}")

    def nodes(self) -> dict[str, Any]:
        """The Ray node ids the learner and each actor last reported from (None: not yet, or lost)."""
        live = self._handles if self._started else [None] * self.actors
        return {"learner": self.learner_node_id,
                "actors": [node if handle is not None else None for node, handle in zip(self.actor_nodes, live)]}

    def _load_policy(self, weights: dict[str, np.ndarray]) -> None:
        self.policy_network.load_state_dict({k: torch.from_numpy(np.array(v)) for k, v in weights.items()})

    def _settle(self) -> None:
        """Wait for the learner call in flight (so its state and counters agree)."""
        if self._started and self._learning is not None:
            self.ray.wait([self._learning])
            self._receive_learner()

    # --- what the session reads ----------------------------------------------------------------
    def drain_losses(self) -> float | None:
        losses, self._losses = self._losses, []
        return float(np.mean(losses)) if losses else None

    def drain_actor_losses(self) -> float | None:
        losses, self._actor_losses = self._actor_losses, []
        return float(np.mean(losses)) if losses else None

    def replay_bytes(self) -> int:
        """As the learner last reported it (0 before its first report)."""
        return self._replay_bytes

    def ran(self) -> dict[str, str]:
        """Where each primitive ran, as the Ray actors and the learner reported it."""
        return dict(self._ran)

    def timer_totals(self) -> dict[str, tuple[float, int, int]]:
        """name -> (seconds, calls, processes doing it); this process's waiting included."""
        return merge_timers({**self.timers.totals(), **self._learner_timers}, self._actor_timers)

    # --- checkpoints -------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        self._settle()
        try:
            learner = self.ray.get(self.learner.state_dict.remote()) if self._started else self._restore
        except self.ray.exceptions.RayActorError as exc:
            raise self._learner_lost(exc) from None
        return {"executor": self.name, "env_steps": self._learned_steps if self._started else self.env_steps,
                "finished": list(self.finished), "restarts": self.restarts, "actors_lost": self.actors_lost,
                **(learner or {})}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self._check_checkpoint(state, self._started)
        self.env_steps = state["env_steps"]
        self.updates = state["learner"]["updates"]
        self.finished = list(state["finished"])
        self.restarts = state["restarts"]
        self.actors_lost = state.get("actors_lost", 0)  # checkpoints written before nodes could be lost
        self._restore = {"replay": state.get("replay"), "learner": state["learner"]}
        # the coordinator's copy of the policy (evaluation, `hetrl eval`) is the checkpoint's at once
        self.policy_network.load_state_dict(state["learner"][self.algo.policy_key])


def chunk_schedule(agent: Any, actors: int, num_envs: int, chunk_steps: int = 0) -> tuple[ReplaySchedule, int]:
    """The limiter and the steps per env of a chunk: ``chunk_steps``, with the limiter's lead raised
    to hold every actor's chunk in flight and another issued; 0: half the default lead shared by the
    actors."""
    limiter = ReplaySchedule.of(agent, actors, num_envs)
    if chunk_steps:
        return replace(limiter, lead=max(limiter.lead, 2 * actors * chunk_steps * num_envs)), chunk_steps
    return limiter, max(1, limiter.lead // (2 * actors * num_envs))


def _options(resources: dict[str, float], strategy: Any = "DEFAULT") -> dict[str, Any]:
    """Ray actor options from a resource dict (CPU, GPU, and custom ones) and a scheduling strategy."""
    custom = {k: v for k, v in resources.items() if k not in ("CPU", "GPU")}
    options: dict[str, Any] = {"num_cpus": resources.get("CPU", 0), "num_gpus": resources.get("GPU", 0),
                               "scheduling_strategy": strategy}
    if custom:
        options["resources"] = custom
    return options
