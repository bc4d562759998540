"""Choosing and building an executor: inline, local (actor processes) or ray (a Ray cluster).

Every executor offers the same surface to a training session: ``iteration()``, ``env_steps``,
``updates``, ``policy_network``, ``drain_losses/episodes/staleness()``, ``timer_totals()``,
``ratio_error()``, ``restarts``, ``state_dict()/load_state_dict()`` and ``close()``.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from hetrl.algos import Algorithm
from hetrl.runtime.placement import Placement

if TYPE_CHECKING:
    from hetrl.config import TrainConfig


def actor_count(config: "TrainConfig") -> int:
    """The configured actors, or one per core left beside the learner's (at least one)."""
    if config.actors:
        return config.actors
    return max(1, (os.cpu_count() or 1) - 1)


def make_executor(config: "TrainConfig", algo: Algorithm, placement: Placement, log: Callable[[str], None]) -> Any:
    if config.executor == "local":
        from hetrl.runtime.local import LocalExecutor

        return LocalExecutor(algo, placement, config.num_envs, config.seed, actor_count(config),
                             weight_sync_every=config.weight_sync_every, log=log)
    if config.executor == "ray":
        from hetrl.runtime.ray_executor import RayExecutor

        return RayExecutor(algo, placement, config.num_envs, config.seed, actor_count(config),
                           weight_sync_every=config.weight_sync_every, address=config.ray_address, log=log)
    from hetrl.runtime.inline import InlineExecutor

    return InlineExecutor(algo, placement, config.num_envs, config.seed)
