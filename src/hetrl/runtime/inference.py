"""Central inference for the local executor: actors send their observations to the learner's
process, which acts for all of them in one batched call on the Act slot's backend and device, and
sends the actions back (as SEED RL does on its learner; Sample Factory runs separate policy workers).

Why: acting in each actor copies the policy into every actor and runs it one small batch at a time
on the host; acting centrally batches every actor's envs into one call, on any Act backend (a
compiled host MLP, or a GPU beside the learner), and needs no weight copies to the actors. What it
costs: an actor waits a round trip for each step's actions, and while the learner is inside an
update it serves nobody. The planner weighs both (``hetrl.planner.model_local``).

Each actor owns a request slot in one shared block: it writes its observations and exploration
draws, then bumps its ``requested`` counter (data before counter, as in ``shared.py``); the learner
answers every pending slot at once, writes the actions and the policy version, and bumps ``served``.
Wake-ups go through pipes, a byte each way, so neither side spins on a machine with fewer cores
than processes: an actor blocks until its actions are ready, an idle learner until a request comes.
Exploration stays the actor's: its own generator draws, the learner applies the algorithm's rule.
"""

from __future__ import annotations

import os
import select
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from hetrl.runtime.processes import actor_context, without_main
from hetrl.runtime.shared import Layout, SharedArrays, SharedHandle

INFERENCE = ("actor", "central")  # where a local run's actors act: with their own copy, or through this module
STOP_POLL_S = 0.1  # how often a waiting actor checks whether it should stop

ActFn = Callable[[np.ndarray, np.ndarray, np.ndarray], np.ndarray]  # (obs, explore, random_actions) -> actions


class InferenceStopped(Exception):
    """Raised in an actor waiting for actions when it is told to stop (or its learner is gone)."""


def inference_layout(actors: int, num_envs: int, obs_shape: tuple[int, ...], action_shape: tuple[int, ...],
                     action_dtype: str, explore: np.ndarray, random_actions: np.ndarray,
                     obs_dtype: str = "float32") -> Layout:
    """A request slot per actor; ``explore`` and ``random_actions`` are one actor's draws, for
    their shapes and dtypes (the algorithm's ``draw_exploration`` for ``num_envs`` envs);
    observations as the env gives them (``obs_dtype``: uint8 for pixel envs)."""
    return {
        "requested": ((actors,), "int64"),  # written by each actor, its own entry
        "served": ((actors,), "int64"),  # written by the learner
        "version": ((actors,), "int64"),  # the learner's update count of the policy that acted
        "obs": ((actors, num_envs, *obs_shape), obs_dtype),
        "explore": ((actors, *explore.shape), explore.dtype.str),
        "random_actions": ((actors, *random_actions.shape), random_actions.dtype.str),
        "actions": ((actors, num_envs, *action_shape), action_dtype),
    }


class InferenceServer:
    """The learner's side: the shared block and the pipes, created here; ``serve`` answers every
    pending request in one call of ``act``."""

    def __init__(self, layout: Layout, pipe: Callable[[], tuple[Any, Any]]) -> None:
        """``pipe`` makes a one-way (reader, writer) pair of connections that a process start can
        pass to a child (``multiprocessing`` context's ``Pipe(duplex=False)``)."""
        self.block = SharedArrays(layout)
        self.actors = self.block["requested"].shape[0]
        self.requested, self.served = self.block["requested"], self.block["served"]
        self._request_reader, self._request_writer = pipe()  # every actor writes; the learner reads
        self._replies = [pipe() for _ in range(self.actors)]  # the learner writes; actor i reads
        self._request_fd = self._request_reader.fileno()
        os.set_blocking(self._request_fd, False)
        self._reply_fds = [writer.fileno() for _, writer in self._replies]
        self._obs, self._explore = self.block["obs"], self.block["explore"]
        self._random, self._actions, self._version = self.block["random_actions"], self.block["actions"], self.block["version"]

    def client_args(self, index: int) -> tuple[SharedHandle, int, Any, Any]:
        """What actor ``index`` needs (picklable across a process start)."""
        return self.block.handle, index, self._request_writer, self._replies[index][0]

    def forget(self, index: int) -> None:
        """Drop actor ``index``'s unanswered request (the actor died; its successor asks anew)."""
        self.served[index] = self.requested[index]

    def serve(self, act: ActFn, version: int) -> int:
        """Answer every pending request with one ``act`` call; returns the requests answered.
        Plain ints and basic indexing: with a few actors, numpy's fancy indexing cost more than
        the rest of an answer (docs/benchmarks.md, 'Measurements behind the code')."""
        asked = self.requested.tolist()  # counters first: each one's data was written before it
        served = self.served.tolist()
        waiting = [i for i in range(self.actors) if asked[i] != served[i]]
        if not waiting:
            return 0
        if len(waiting) == self.actors:  # all of them: the slots are already one contiguous batch
            obs, explore, random_actions = self._obs, self._explore, self._random
        elif len(waiting) == 1:
            i = waiting[0]
            obs, explore, random_actions = self._obs[i:i + 1], self._explore[i:i + 1], self._random[i:i + 1]
        else:
            obs, explore, random_actions = self._obs[waiting], self._explore[waiting], self._random[waiting]
        n = obs.shape[1]
        rows = len(waiting) * n
        actions = act(obs.reshape(rows, *obs.shape[2:]), explore.reshape(rows, *explore.shape[2:]),
                      random_actions.reshape(rows, *random_actions.shape[2:]))
        for j, i in enumerate(waiting):
            self._actions[i] = actions[j * n:(j + 1) * n]
            self._version[i] = version
            self.served[i] = asked[i]
            os.write(self._reply_fds[i], b"\1")
        self._drain_requests()
        return len(waiting)

    def pending(self) -> bool:
        return self.requested.tolist() != self.served.tolist()

    def wait(self, timeout_s: float) -> None:
        """Block until a request arrives or ``timeout_s`` passes."""
        if not self.pending():
            select.select([self._request_fd], [], [], timeout_s)
        self._drain_requests()

    def _drain_requests(self) -> None:
        try:
            while len(os.read(self._request_fd, 4096)) == 4096:
                pass
        except BlockingIOError:
            pass

    def close(self) -> None:
        for conn in (self._request_reader, self._request_writer, *(c for pair in self._replies for c in pair)):
            conn.close()
        self.block.close()


class InferenceClient:
    """An actor's side: ``act`` sends one step's observations and draws and waits for the actions."""

    def __init__(self, handle: SharedHandle, index: int, request_writer: Any, reply_reader: Any,
                 should_stop: Callable[[], bool]) -> None:
        self.block = SharedArrays(handle=handle)
        self.index, self.should_stop = index, should_stop
        self._request_writer, self._reply_reader = request_writer, reply_reader  # kept open while in use
        self._request_fd, self._reply_fd = request_writer.fileno(), reply_reader.fileno()
        b = self.block
        self._requested, self._served, self._version = b["requested"], b["served"], b["version"]
        self._obs, self._explore, self._random = b["obs"][index], b["explore"][index], b["random_actions"][index]
        self._actions = b["actions"][index]

    @property
    def version(self) -> int:
        """The learner's update count of the policy that chose the last actions."""
        return int(self._version[self.index])

    def act(self, obs: np.ndarray, explore: np.ndarray, random_actions: np.ndarray) -> np.ndarray:
        i = self.index
        self._obs[...] = obs
        self._explore[...] = explore
        self._random[...] = random_actions
        ticket = int(self._requested[i]) + 1
        self._requested[i] = ticket  # published after the data
        try:
            os.write(self._request_fd, b"\1")
        except BrokenPipeError:  # the learner is gone
            raise InferenceStopped from None
        while self._served[i] != ticket:
            if select.select([self._reply_fd], [], [], STOP_POLL_S)[0]:
                if not os.read(self._reply_fd, 64):  # end of file: the learner is gone
                    raise InferenceStopped
            elif self.should_stop():
                raise InferenceStopped
        return self._actions.copy()

    def close(self) -> None:
        self.block.close()


# --- what a round trip costs, for the profiler ------------------------------------------------
TRIP_BLOCKS, TRIP_ROUNDS, TRIP_WARMUP = 7, 200, 100


def measure_round_trip(layout: Layout, preload: Sequence[str] = ()) -> tuple[list[float], list[float]]:
    """Seconds per round trip as an actor sees it, and the learner's seconds per answered request
    (its share of the work: gathering, writing back, waking the actor), per timed block. One actor
    process asks while this process answers with a free ``act`` (no policy: Act is profiled
    alone), so the figures are the transport's cost; the actor is started from the local
    executor's fork server, as a run's are (``preload``: what that server imports, where this call
    starts it: ``hetrl.runtime.local.actor_preload``)."""
    ctx = actor_context(preload)
    server = InferenceServer(layout, lambda: ctx.Pipe(duplex=False))
    results, sender = ctx.Pipe(duplex=False)  # a pipe, not a queue: no named semaphore a kill could leave behind
    proc = ctx.Process(target=_asking_actor, args=(server.client_args(0), sender), daemon=True)
    actions = np.zeros_like(server.block["actions"][0])
    serve_s: list[float] = []
    try:
        with without_main():
            proc.start()
        sender.close()
        answered, spent = 0, 0.0
        while proc.is_alive() or server.pending():
            server.wait(STOP_POLL_S)
            start = time.perf_counter()
            if server.serve(lambda obs, explore, random_actions: actions, 0):
                spent += time.perf_counter() - start
                answered += 1
                if answered == TRIP_ROUNDS:
                    serve_s.append(spent / answered)
                    answered, spent = 0, 0.0
        proc.join()
        try:
            trips = results.recv() if results.poll() else None
        except EOFError:  # the actor died before sending
            trips = None
    finally:
        results.close()
        server.close()
    if proc.exitcode != 0 or not trips:
        raise RuntimeError(f"the round-trip measurement's actor failed (exit code {proc.exitcode})")
    return trips, serve_s[1:]  # the first block held the warm-up


def _asking_actor(args: tuple[Any, ...], results: Any) -> None:
    client = InferenceClient(*args, should_stop=lambda: False)
    shape = client._obs.shape
    obs, explore, random_actions = np.zeros(shape, client._obs.dtype), client._explore.copy(), client._random.copy()
    trips = []
    for block in range(TRIP_BLOCKS + 1):
        start = time.perf_counter()
        for _ in range(TRIP_ROUNDS if block else TRIP_WARMUP):
            client.act(obs, explore, random_actions)
        if block:
            trips.append((time.perf_counter() - start) / TRIP_ROUNDS)
    client.close()
    results.send(trips)
    results.close()
