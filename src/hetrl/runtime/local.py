"""The local executor: actors in worker processes, the learner in this one, joined by shared memory.

Each actor steps its own vector of envs with a numpy copy of the policy (``inference="actor"``),
or with actions the learner's process computes for every actor in one batched call on the Act
slot's backend and device (``inference="central"``, ``runtime/inference.py``), and writes n-step
transitions into its shared-memory ring; the learner drains the rings into the replay (ReplayAdd),
runs the updates the rate limiter allows (with ``prefetch``, sampling the next batch in a thread
while it learns on the current one: off by default, since on a 2-core host the sampling thread's
share of the GIL cost more than it hid; docs/benchmarks.md, 'Measurements behind the code') and
publishes the policy weights every ``weight_sync_every`` updates. Ctrl-C
reaches only this process (actors ignore SIGINT); ``close`` stops every actor within seconds and
removes every segment. An actor that dies is restarted and counted, unless the run is stopping
(``should_stop``: a signal asked for it), which also ends the actors' start-up early.
"""

from __future__ import annotations

import os
import signal
import sys
import time
import traceback
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import numpy as np
import torch

from hetrl.algos import Algorithm
from hetrl.errors import ActorsFailed, HetrlError
from hetrl.nets.host_mirror import HostMirror
from hetrl.envs.pixels import packages
from hetrl.primitives import LIBRARY, build, check_placement
from hetrl.protocol import Placement
from hetrl.replay.frames import FrameReplay, FrameStream
from hetrl.runtime.acting_role import Actor, ActorSpec
from hetrl.runtime.inference import INFERENCE, InferenceClient, InferenceServer, InferenceStopped, inference_layout
from hetrl.runtime.learner_role import LearnerRole
from hetrl.runtime.parallel import ParallelBookkeeping
from hetrl.runtime.processes import actor_context, without_main
from hetrl.runtime.schedule import ReplaySchedule
from hetrl.runtime.shared import (
    ACTING_VERSION, ALLOWED_ENV_STEPS, BASE_ENV_STEPS, FRAMES_WRITTEN, STOP, SharedArrays, SharedHandle, SharedTimers,
    SharedWeights, TransitionRing, check_store_order, control_layout, frame_ring_layout, pid_alive, ring_layout,
    sweep_stale_segments,
)
from hetrl.runtime.timers import Timers, merge_timers

RING_CAPACITY = 4096  # transitions per actor between two drains; far above the limiter's lead
EPISODE_CAPACITY = 1024
# close() waits this long for the actors to see the stop flag (they do within milliseconds, unless one is still
# starting: importing, building its envs), then terminates them, then kills them: all gone within about 2 s
STOP_TIMEOUT_S, TERMINATE_TIMEOUT_S = 1.0, 0.5
WATCH_EVERY_S = 0.2  # how often the learner checks that its actors are alive
QUICK_DEATH_S = 5.0  # an actor dying this soon after (re)starting, three times in a row, fails the run
ACTOR_PRELOAD = tuple(f"hetrl.primitives.{name}" for name in LIBRARY)  # an actor builds its EnvStep and Act from these
MAX_BURST = 64  # updates per iteration at most, so that rings are drained and actors fed in between
# A waiting actor sleeps, doubling the nap from WAIT_MIN_S to WAIT_MAX_S: on a machine with fewer
# cores than processes, frequent wake-ups of idle actors preempt the learner and cut its rate sharply
# (docs/benchmarks.md, 'Measurements behind the code'). The limiter's lead keeps the learner fed meanwhile.
WAIT_MIN_S, WAIT_MAX_S = 5e-5, 2e-3
IDLE_WAIT_S = 2e-4  # an idle learner's nap (with central inference: until a request comes, at most this)


def actor_preload(env_id: str) -> tuple[str, ...]:
    """What the fork server imports once for every actor of a run on ``env_id``: the primitives and
    the env's packages. Whoever starts the server first (a run, or the profiler's round trip) passes
    it, since a server's list is fixed when it starts (:func:`actor_context`)."""
    return ACTOR_PRELOAD + packages(env_id)


def ring_frame_capacity(num_envs: int, n_step: int, stack: int) -> int:
    """Frames in a frame ring: the rows' worth (one frame per transition) plus room for what an actor
    holds, so it never waits on itself: stacks and n-step queues span at most n_step + stack steps
    of at most 2 * stack new frames per env (a final obs and a reset obs, each wholly new), plus a step's."""
    return RING_CAPACITY + (n_step + stack + 2) * num_envs * 2 * stack


def exit_reason(exitcode: int | None) -> str:
    """How a process ended, from its exit code: a signal's name for a negative one."""
    if exitcode is not None and exitcode < 0:
        try:
            return f"killed by {signal.Signals(-exitcode).name}"
        except ValueError:
            return f"killed by signal {-exitcode}"
    return f"exit code {exitcode}"


def _stderr(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def _never() -> bool:
    return False


class LocalExecutor(ParallelBookkeeping):
    name = "local"

    def __init__(self, algo: Algorithm, placement: Placement, num_envs: int, seed: int, actors: int,
                 weight_sync_every: int = 1, prefetch: bool = False, log: Callable[[str], None] = _stderr,
                 inference: str = "actor", should_stop: Callable[[], bool] = _never,
                 async_envs: bool = False, flush_denormals: bool = True) -> None:
        check_store_order()  # before anything is built: a run on ARM is refused before its run directory is made
        check_placement(placement, algo)
        if actors < 1:
            raise HetrlError(f"the local executor needs at least 1 actor (got {actors})")
        if inference not in INFERENCE:
            raise HetrlError(f"inference must be one of {', '.join(INFERENCE)}, got {inference!r}")
        cfg = algo.config
        self.algo, self.placement, self.seed, self.log = algo, placement, seed, log
        self.should_stop = should_stop  # whether the run is stopping (a signal): start and restart no more actors
        self.actors, self.num_envs, self.weight_sync_every = actors, num_envs, weight_sync_every
        self.timers = Timers()
        self.rng = np.random.default_rng(seed)
        self.learning = LearnerRole(algo, placement, seed, self.rng, self.timers)
        self.learner, self.replay = self.learning.learner, self.learning.replay
        # A frame replay is fed frames, not stacks: the actors send each new frame once and transitions as frame ids
        self.frames = isinstance(self.replay, FrameReplay)
        self.spec = ActorSpec(algo.name, algo.spec.origin, cfg, num_envs, seed, placement, algo.spec.atari, self.frames,
                              async_envs, flush_denormals)
        self.inference = inference
        # central inference: the acting copy lives here, on the placement's Act slot, synced as inline does
        self.policy = (build("Act", placement.act, algo, seed, source=self.learner.policy_network)
                       if inference == "central" else None)
        self._actors_ran: dict[str, str] = {}  # what the actors report they built
        self.synced_at = -1  # learner.updates at the acting copy's last sync (central inference)
        self.server: InferenceServer | None = None
        self.limiter = ReplaySchedule.of(cfg, actors, num_envs)
        self.env_steps = 0
        self._init_bookkeeping()
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="hetrl-prefetch") if prefetch else None
        self._prefetched: Future | None = None
        self._started = False
        self._closed = False

    @property
    def updates(self) -> int:
        return self.learner.updates

    @property
    def policy_network(self) -> torch.nn.Module:
        return self.learner.policy_network

    # --- lifecycle -----------------------------------------------------------------------------
    def _start(self) -> None:
        swept = sweep_stale_segments()
        if swept:
            self.log(f"removed {len(swept)} shared-memory segment(s) that killed hetrl processes left in /dev/shm")
        spec = self.algo.spec
        self._policy_mirror = HostMirror(self.policy_network)
        self.control = SharedArrays(control_layout(self.actors))
        self.weights = SharedWeights(SharedArrays(SharedWeights.layout(self._policy_mirror.refresh())))
        if self.frames:
            layout = frame_ring_layout(RING_CAPACITY, ring_frame_capacity(self.num_envs, self.algo.config.n_step,
                                                                          spec.obs_shape[0]),
                                       EPISODE_CAPACITY, spec.obs_shape, spec.action_shape, spec.action_dtype)
        else:
            layout = ring_layout(RING_CAPACITY, EPISODE_CAPACITY, spec.obs_shape, spec.action_shape, spec.action_dtype,
                                 spec.obs_dtype)
        self.rings = [TransitionRing(SharedArrays(layout)) for _ in range(self.actors)]
        self.streams = [FrameStream(r.frames) for r in self.rings] if self.frames else []
        self.actor_timers = [SharedTimers(r.block["timer_seconds"], r.block["timer_calls"]) for r in self.rings]
        flags = self.control["flags"]
        flags[BASE_ENV_STEPS] = self.env_steps
        flags[ALLOWED_ENV_STEPS] = self.limiter.allowed_env_steps(self.updates)
        self._publish()
        # the fork server imports what every actor needs (torch, the primitives, MinAtar's package: seconds)
        # once, so an actor (re)starts in a fraction of that
        self._ctx = actor_context(actor_preload(self.algo.spec.env_id))
        if self.inference == "central":
            explore, random_actions = self.algo.draw_exploration(np.random.default_rng(0), self.num_envs)
            layout = inference_layout(self.actors, self.num_envs, spec.obs_shape, spec.action_shape, spec.action_dtype,
                                      explore, random_actions, spec.obs_dtype)
            self.server = InferenceServer(layout, lambda: self._ctx.Pipe(duplex=False))
        # each actor's messages (what it built, its traceback if it fails) come through a pipe of its own: pipes
        # leave nothing behind when the process group is killed, where a queue's named semaphores would stay
        self._inbox: list[Any] = [None] * self.actors
        self._procs: list[Any] = [None] * self.actors
        self._incarnations = [0] * self.actors
        self._started_at = [0.0] * self.actors
        self._quick_deaths = [0] * self.actors
        self._started = True
        self._last_watch = time.perf_counter()
        for i in range(self.actors):
            if self.should_stop():  # Ctrl-C or SIGTERM during the start-up: start no more
                self.log(f"stopping: {i} of {self.actors} actors started")
                break
            self._spawn(i)

    def _spawn(self, index: int) -> None:
        inference = None
        if self.server is not None:
            self.server.forget(index)  # a request its predecessor left unanswered
            inference = self.server.client_args(index)
        reader, writer = self._ctx.Pipe(duplex=False)
        proc = self._ctx.Process(
            target=actor_process, name=f"hetrl-actor-{index}", daemon=True,
            args=(self.spec, index, self._incarnations[index], self.rings[index].block.handle, self.control.handle,
                  self.weights.block.handle, os.getpid(), writer, inference),
        )
        try:
            with without_main():
                proc.start()
        finally:
            writer.close()  # the actor has its own copy
        if self._inbox[index] is not None:
            self._inbox[index].close()
        self._inbox[index] = reader
        self._procs[index] = proc
        self._started_at[index] = time.perf_counter()

    def _messages(self) -> dict[int, str]:
        """Read what the actors sent: record what they built; return the tracebacks of those that failed."""
        errors: dict[int, str] = {}
        for index, inbox in enumerate(self._inbox):
            try:
                while inbox is not None and inbox.poll():
                    kind, body = inbox.recv()
                    if kind == "ran":
                        self._actors_ran.update(body)
                    else:
                        errors[index] = body
            except (EOFError, OSError):  # the actor is gone and said everything it had to
                pass
        return errors

    def replay_bytes(self) -> int:
        return self.learning.replay.nbytes

    def ring_bytes(self) -> int:
        """Bytes the actors wrote into the rings so far (rows and frames; see ``TransitionRing.bytes_written``)."""
        return sum(ring.bytes_written() for ring in self.rings) if self._started else 0

    def ran(self) -> dict[str, str]:
        """Where each primitive ran: the learner's side from its objects, the actors' as they reported."""
        if self._started and not self._closed:
            self._messages()
        n = self.actors
        where = {key: f"{value}, {n} actor{'s' if n != 1 else ''}" for key, value in self._actors_ran.items()}
        if self.policy is not None:
            where["Act"] = f"{self.policy.describe()}, learner's process, batched over {n} actor{'s' if n != 1 else ''}"
        return {**where, **self.learning.ran()}

    def actor_pids(self) -> list[int]:
        return [p.pid for p in self._procs if p is not None] if self._started else []

    def _watch_actors(self) -> None:
        if self.should_stop():  # the run is stopping: an actor that died (a SIGTERM to the group) stays dead
            return
        errors = self._messages()
        for i, proc in enumerate(self._procs):
            if proc is None or proc.exitcode is None:
                continue
            proc.join()
            why = errors.get(i, "").strip().splitlines()[-1:] or [exit_reason(proc.exitcode)]
            if i in errors:
                self.log(f"actor {i} crashed:\n{errors[i]}")
            quick = time.perf_counter() - self._started_at[i] < QUICK_DEATH_S
            self._quick_deaths[i] = self._quick_deaths[i] + 1 if quick else 0
            if self._quick_deaths[i] >= 3:
                look = ("see its traceback above and fix the environment or config" if i in errors else
                        "it left no traceback: something outside it ended it (the out-of-memory killer, a signal to "
                        "its process); check the system log (dmesg) and the memory the run takes")
                raise ActorsFailed(f"actor {i} failed three times right after starting ({why[0]}); {look}")
            self.restarts += 1
            self._incarnations[i] += 1
            self.log(f"actor {i} stopped ({why[0]}); restarted it (restart {self.restarts} of this run)")
            self._spawn(i)

    def close(self) -> None:
        """Stop every actor (ask, then terminate, then kill) and remove every shared segment."""
        if self._closed:
            return
        self._closed = True
        if self._pool is not None:
            self._pool.shutdown(wait=True)
        if not self._started:
            return
        self.control["flags"][STOP] = 1
        procs = [p for p in self._procs if p is not None]
        deadline = time.perf_counter() + STOP_TIMEOUT_S
        for proc in procs:
            proc.join(max(0.0, deadline - time.perf_counter()))
        late = [p for p in procs if p.is_alive()]
        for proc in late:
            proc.terminate()
        deadline = time.perf_counter() + TERMINATE_TIMEOUT_S
        for proc in late:
            proc.join(max(0.0, deadline - time.perf_counter()))
        for proc in late:
            if proc.is_alive():  # still starting, with SIGTERM not yet unblocked
                proc.kill()
                proc.join(1.0)
        for inbox in self._inbox:
            if inbox is not None:
                inbox.close()
        for block in [self.control, self.weights.block, *(r.block for r in self.rings)]:
            block.close()
        if self.server is not None:
            self.server.close()

    # --- the learner's loop --------------------------------------------------------------------
    def iteration(self) -> None:
        """Drain the actors' rings into the replay, then run the updates the limiter allows."""
        if not self._started:
            self._start()
        now = time.perf_counter()
        if now - self._last_watch > WATCH_EVERY_S:
            self._watch_actors()
            self._last_watch = now
        flags = self.control["flags"]
        steps = int(flags[BASE_ENV_STEPS] + self.control["actor_steps"].sum())
        self.env_steps = max(self.env_steps, steps)
        served = self._serve()
        drained = False
        for i, ring in enumerate(self.rings):
            chunk = ring.pop(release=not self.frames)
            if chunk is not None:
                drained = True
                if self.frames:
                    self.learning.add_frames(self.streams[i], chunk)  # reads the chunk's frames from the ring...
                    ring.release()  # ...before the actor may overwrite them
                else:
                    self.learning.add(chunk)
                lag = max(0, self.updates - int(ring.header[ACTING_VERSION]))
                self._interval_staleness.append(lag)
            self.finished.extend(ring.pop_episodes())
        owed = self.limiter.updates_owed(self.env_steps, self.updates) if self.learning.can_sample() else 0
        if owed:
            self._learn(min(owed, MAX_BURST))
            self.trace.append((self.env_steps, self.updates))
        elif not drained and not served:
            with self.timers.time("LearnerWait"):
                if self.server is not None:
                    self.server.wait(IDLE_WAIT_S)
                else:
                    time.sleep(IDLE_WAIT_S)

    def _learn(self, count: int) -> None:
        """``count`` updates. A prefetched batch never outlives this call (none is fetched after the
        last update), so outside it the replay has one user."""
        learning, flags = self.learning, self.control["flags"]
        for i in range(count):
            batch, on_device = self._prefetched.result() if self._prefetched else learning.sample(self.env_steps)
            self._prefetched = None
            if self._pool is not None and i + 1 < count:  # sample the next batch while this one learns
                self._prefetched = self._pool.submit(learning.sample, self.env_steps)
            out = learning.learn_on(on_device)
            self._wait_prefetch()  # the replay is touched by one thread at a time
            learning.update_priorities(batch, out)
            # every update lets the actors on: raised after a whole burst, the limit would hold them
            # still while the learner works through what they owe, and the learner would then wait for them
            flags[ALLOWED_ENV_STEPS] = self.limiter.allowed_env_steps(self.updates)
            if self.server is not None:
                self._serve()  # actors wait on every update: answer them between updates, not after the burst
            elif self.updates % self.weight_sync_every == 0:
                self._publish()

    def _wait_prefetch(self) -> None:
        if self._prefetched is not None:
            self._prefetched.exception()  # waits; the result stays in the future

    def _serve(self) -> int:
        """Central inference: act for every actor waiting, in one call (after WeightSync, when the
        learner moved ``weight_sync_every`` updates since the acting copy's last sync)."""
        server = self.server
        if server is None or not server.pending():
            return 0
        if self.synced_at < 0 or self.updates - self.synced_at >= self.weight_sync_every:
            with self.timers.time("WeightSync"):
                self.policy.sync()
            self.synced_at = self.updates
        start = time.perf_counter()
        act_span = self.timers.time("Act")
        level, policy = self.algo.exploration(self.env_steps), self.policy

        def act(obs: np.ndarray, explore: np.ndarray, random_actions: np.ndarray) -> np.ndarray:
            with act_span:
                return policy.act(obs, explore, random_actions, level)

        before = act_span.seconds
        served = server.serve(act, self.synced_at)
        self.timers.add("InferenceServe", time.perf_counter() - start - (act_span.seconds - before))
        return served

    def _publish(self) -> None:
        with self.timers.time("WeightSync"):
            self.weights.publish(self._policy_mirror.refresh(), self.updates)

    # --- what the session reads ----------------------------------------------------------------
    def drain_losses(self) -> float | None:
        return self.learning.drain_losses()

    def drain_actor_losses(self) -> float | None:
        return self.learning.drain_actor_losses()

    def timer_totals(self) -> dict[str, tuple[float, int, int]]:
        """name -> (seconds, calls, processes doing it)."""
        return merge_timers(self.timers.totals(), [t.totals() for t in self.actor_timers] if self._started else [])

    # --- checkpoints -------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """Counters, replay and networks exactly; actors' envs and generators are not saved (a
        resumed run starts fresh actors)."""
        return {
            "executor": self.name,
            "env_steps": self.env_steps,
            "rng": self.rng.bit_generator.state,
            "finished": list(self.finished),
            "restarts": self.restarts,
            **self.learning.state_dict(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self._check_checkpoint(state, self._started)
        self.env_steps = state["env_steps"]
        self.rng.bit_generator.state = state["rng"]
        self.finished = list(state["finished"])
        self.restarts = state["restarts"]
        self.learning.load_state_dict(state)


def actor_process(spec: ActorSpec, index: int, incarnation: int, ring_handle: SharedHandle, control_handle: SharedHandle,
                  weights_handle: SharedHandle, parent_pid: int, outbox: Any, inference: tuple[Any, ...] | None = None) -> None:
    """An actor's main: step, publish transitions, stay within the limiter; exit when told to or
    when the learner's process is gone. ``outbox``: where it tells the learner what it built and,
    if it fails, its traceback. ``inference``: the learner's central inference to act through
    (``InferenceServer.client_args``); None to act with the actor's own copy."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the learner's to handle
    # the fork server blocks SIGINT and SIGTERM (hetrl.runtime.processes.actor_context): SIGTERM ends an actor
    signal.pthread_sigmask(signal.SIG_UNBLOCK, (signal.SIGINT, signal.SIGTERM))
    blocks: list[SharedArrays] = []
    client = None
    try:
        ring_block, control, weights_block = (SharedArrays(handle=h) for h in (ring_handle, control_handle, weights_handle))
        blocks = [ring_block, control, weights_block]
        ring, weights = TransitionRing(ring_block), SharedWeights(weights_block)
        timers = SharedTimers(ring_block["timer_seconds"], ring_block["timer_calls"])
        flags, actor_steps = control["flags"], control["actor_steps"]
        if inference is not None:
            client = InferenceClient(*inference, should_stop=lambda: bool(flags[STOP]) or not _alive(parent_pid))
        loop = Actor(spec, spec.actor_seed(index, incarnation), timers, client.act if client else None,
                     int(ring.header[FRAMES_WRITTEN]))
        outbox.send(("ran", loop.ran()))
        n, room, version, steps, nap = spec.num_envs, loop.max_rows_per_step(), -1, 0, WAIT_MIN_S
        role = loop.role
        while not flags[STOP]:
            if client is None and weights.version() != version:
                start = time.perf_counter()
                version = weights.read_into(loop.weights)
                loop.weights_arrived()
                ring.header[ACTING_VERSION] = version
                timers.add("WeightFetch", time.perf_counter() - start)
            env_steps = int(flags[BASE_ENV_STEPS] + actor_steps.sum())
            allowed = int(flags[ALLOWED_ENV_STEPS])
            if ((0 <= allowed < env_steps + n) or ring.free() < room
                    or (spec.frames and ring.frames_free(role.oldest_frame()) < role.max_frames_per_step())):
                start = time.perf_counter()
                time.sleep(nap)
                nap = min(2 * nap, WAIT_MAX_S)
                timers.add("ActorWait", time.perf_counter() - start)
                if not _alive(parent_pid):
                    break
                continue
            nap = WAIT_MIN_S
            try:
                ready, episodes = loop.step(env_steps)
            except InferenceStopped:
                break
            if client is not None:
                ring.header[ACTING_VERSION] = client.version
            if spec.frames:
                ring.push_frames(role.new_frames())  # before the rows that refer to them
            if ready is not None:
                ring.push(ready)
            if episodes:
                ring.push_episodes(episodes)
            actor_steps[index] += n
            steps += 1
            if steps % 256 == 0 and not _alive(parent_pid):
                break
        loop.close()
    except BaseException:
        try:
            outbox.send(("error", traceback.format_exc()[-32_000:]))  # well within a pipe's buffer
        except OSError:  # the learner is gone
            pass
        raise SystemExit(1) from None
    finally:
        outbox.close()
        if client is not None:
            client.close()
        for block in blocks:
            block.close()


def _alive(pid: int) -> bool:
    """Whether process ``pid`` still exists (actors are children of the fork server, not of the
    learner, so the parent pid cannot tell)."""
    return pid_alive(pid)
