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
from hetrl.protocol import Placement

if TYPE_CHECKING:
    from hetrl.config import TrainConfig


def default_actors() -> int:
    """The fixed rule: one actor per core left beside the learner's (at least one)."""
    return max(1, (os.cpu_count() or 1) - 1)


def make_executor(kind: str, actors: int, config: "TrainConfig", algo: Algorithm, placement: Placement,
                  log: Callable[[str], None], inference: str = "actor", num_envs: int | None = None) -> Any:
    """The ``kind`` executor (inline, local or ray) with ``actors`` actor processes of ``num_envs``
    envs each (default: the config's); ``inference`` (local): the actors' policy in each actor, or
    batched centrally in the learner's process."""
    num_envs = num_envs or config.num_envs
    if kind == "local":
        from hetrl.runtime.local import LocalExecutor

        return LocalExecutor(algo, placement, num_envs, config.seed, actors,
                             weight_sync_every=config.weight_sync_every, prefetch=config.prefetch, log=log,
                             inference=inference)
    if kind == "ray":
        from hetrl.runtime.ray_executor import RayExecutor

        return RayExecutor(algo, placement, num_envs, config.seed, actors,
                           weight_sync_every=config.weight_sync_every, address=config.ray_address, log=log)
    from hetrl.runtime.inline import InlineExecutor

    return InlineExecutor(algo, placement, num_envs, config.seed)
