"""The performance model of the ray executor (runtime/ray_executor.py): the local executor's actor
and learner stages (planner/model_local.py, each actor acting with its own copy), with the
object-store transfer of each chunk (the profile's ``ChunkTransfer`` rows, measured on the Ray
cluster the profiler was connected to, of the chunk that travels: frames and frame ids where the
placement's replay is a frame replay, backend ``ray:nodes+frames``; else whole transitions) in the
actors' stage: an actor's next chunk is issued once
its last one arrived, so each actor waits one transfer per ``chunk_steps x num_envs`` env steps.
Every role holds the CPUs it asks Ray for, so the stages share no cores (no ``cores`` stage).
Ray's actor start-up is not measured (``startup_s`` 0), nor the transfer's energy (the energy per
env step leaves it out).
"""

from __future__ import annotations

from hetrl.algos import AgentConfig
from hetrl.planner.model import Prediction, cost
from hetrl.planner.model_local import ACTOR_WORK, predict_parallel
from hetrl.profile import Profile, chunk_backend_name
from hetrl.replay.footprint import is_frame_replay
from hetrl.protocol import Placement


def chunk_backend(profile: Profile, frames: bool = False) -> str | None:
    """The ChunkTransfer rows' backend, across nodes where the profile measured that; None: no rows
    of the chunks that travel (``frames``: a frame replay's chunks, frames and frame ids)."""
    backends = {t.backend for t in profile.timings
                if t.primitive == "ChunkTransfer" and t.backend.endswith("+frames") == frames}
    across = chunk_backend_name(True, frames)
    return across if across in backends else min(backends, default=None)


def predict_ray(placement: Placement, profile: Profile, agent: AgentConfig, num_envs: int, actors: int, chunk_steps: int,
                weight_sync_every: int = 1) -> Prediction | None:
    """None where the profile has no ChunkTransfer rows of the chunks the placement's replay is sent
    (it was not made on a Ray cluster, or measured the other kind of chunk)."""
    backend = chunk_backend(profile, is_frame_replay(placement.replay.backend))
    if backend is None:
        return None
    own_cores = actors + (placement.learn.threads or 1)  # what the roles ask Ray for: nobody waits for a core
    base = predict_parallel(placement, profile, agent, num_envs, actors, own_cores, weight_sync_every)
    chunk = chunk_steps * num_envs
    transfer = cost(profile, "ChunkTransfer", backend, "cpu", chunk)
    per_step = {**base.per_env_step_s, "ChunkTransfer": transfer / chunk}
    actor_s = sum(per_step[name] for name in (*ACTOR_WORK, "ChunkTransfer") if name in per_step)
    rates = {"actors": actors / actor_s, "learner": base.stage_rates["learner"]}
    return Prediction({**base.per_call_s, "ChunkTransfer": transfer}, per_step, rates, base.joules_per_env_step, 0.0,
                      base.modelled)
