"""DQN's defaults for MinAtar ids, from the reference agent of Young and Tian (2019), the MinAtar
repository's ``examples/dqn.py``, translated to hetrl's settings. ``default_config`` applies them
to a config it builds for a ``MinAtar/*`` id; a ``--set`` or config file still overrides each.

One dict, so it moves as it is into a table of tuned defaults per (algorithm, env id).

Translations and choices:

- ``target_update_every``: the reference copies the target every 1,000 env steps with one update
  per env step (``train_every=1``, ``replay_ratio=1``), so 1,000 updates.
- Epsilon: the reference decays 1 -> 0.1 over the 100k frames after its 5,000-step replay start;
  hetrl's schedule counts env steps from 0, so it ends at 105,000.
- Optimizer: the reference uses centred RMSProp (lr 2.5e-4, alpha 0.95, eps 0.01); hetrl's
  learners, checkpoints and host re-implementations are Adam-shaped, so this uses Adam at
  lr 1e-4, the learning rate Dopamine's MinAtar DQN (Obando-Ceron and Castro 2021, "Revisiting
  Rainbow") and CleanRL's Atari DQN use with Adam.
- ``double``: False, as in the reference (plain DQN targets), so that curves compare with its.
- ``max_grad_norm``: None (the reference does not clip); the loss is Huber in both.
"""

from __future__ import annotations

from typing import Any

DQN_MINATAR: dict[str, Any] = {
    "batch_size": 32,
    "buffer_size": 100_000,
    "learning_starts": 5_000,
    "train_every": 1,
    "replay_ratio": 1.0,
    "target_update_every": 1_000,
    "tau": 1.0,
    "gamma": 0.99,
    "lr": 1e-4,
    "double": False,
    "eps_start": 1.0,
    "eps_end": 0.1,
    "eps_decay_steps": 105_000,
    "max_grad_norm": None,
    "network": "auto",  # the MinAtar network (one 3x3 conv of 16 filters, 128 units) for 10x10 images
}


def minatar_defaults(algo: str, env_id: str) -> dict[str, Any]:
    """The agent settings that replace an algorithm's defaults for ``env_id`` (empty: none)."""
    if algo == "dqn" and env_id.startswith("MinAtar/"):
        return dict(DQN_MINATAR)
    return {}
