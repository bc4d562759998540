"""Choosing and building an executor: inline, local (actor processes) or ray (a Ray cluster).

Every executor offers the same surface to a training session, ``hetrl.protocol.Executor``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from hetrl.algos import Algorithm
from hetrl.protocol import Executor

if TYPE_CHECKING:
    from hetrl.config import TrainConfig
    from hetrl.planner.choice import RunPlan


def _never() -> bool:
    return False


def make_executor(run: "RunPlan", config: "TrainConfig", algo: Algorithm, log: Callable[[str], None],
                  should_stop: Callable[[], bool] = _never) -> Executor:
    """The executor ``run`` names (inline, local or ray), with its actors, envs per actor, placement
    and inference; ``config`` gives the settings that are not decisions (seed, weight pushes,
    prefetch, the Ray address). ``should_stop``: whether the run is stopping (a signal asked for
    it), which the parallel executors check while they start actors, restart them or connect."""
    if run.executor == "local":
        from hetrl.runtime.local import LocalExecutor

        return LocalExecutor(algo, run.placement, run.num_envs, config.seed, run.actors,
                             weight_sync_every=config.weight_sync_every, prefetch=config.prefetch, log=log,
                             inference=run.inference, should_stop=should_stop, async_envs=config.async_envs,
                             flush_denormals=config.flush_denormals)
    if run.executor == "ray":
        from hetrl.runtime.ray_executor import RayExecutor

        return RayExecutor(algo, run.placement, run.num_envs, config.seed, run.actors,
                           weight_sync_every=config.weight_sync_every, address=config.ray_address, log=log,
                           should_stop=should_stop, chunk_steps=config.ray_chunk_steps, spread=config.ray_spread,
                           async_envs=config.async_envs, flush_denormals=config.flush_denormals)
    from hetrl.runtime.inline import InlineExecutor

    return InlineExecutor(algo, run.placement, run.num_envs, config.seed, async_envs=config.async_envs)
