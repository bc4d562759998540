"""The learner side of every executor: ReplayAdd, ReplaySample, Transfer, Learn, PriorityUpdate.

Executors differ in where transitions come from (the inline loop, actor processes, Ray actors);
what happens to them once they reach the learner is the same, so it is written once here.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from hetrl.algos import Algorithm
from hetrl.primitives import build, get, implementations
from hetrl.protocol import LEARN_INPUTS, Placement
from hetrl.runtime.timers import Timers


def to_device(batch: dict[str, Any], device: torch.device) -> dict[str, torch.Tensor]:
    """Transfer: host arrays or tensors elsewhere become tensors on ``device`` (zero-copy on the host)."""
    return {k: torch.as_tensor(batch[k], device=device) for k in LEARN_INPUTS}


def needs_transfer(placement: Placement) -> bool:
    """False where the learner reads the replay's numpy batch as it is (a host replay feeding a
    learner that takes host arrays, Learn/numba): no Transfer happens, and the model costs none.
    A learner backend the library lacks (a what-if device's, planner/whatif.py) is fed a Transfer."""
    learn = implementations("Learn").get(placement.learn.backend)
    return not (get("ReplayAdd", placement.replay.backend).cls.host_arrays and learn is not None and learn.takes_host_arrays)


def _mean(losses: list[torch.Tensor]) -> float | None:
    return torch.stack(losses).mean().item() if losses else None


class LearnerRole:
    """The replay and the learner, as the placement puts them; every call is timed in ``timers``.

    ``rng`` draws the replay's sampling inputs (the executor may share it with its acting draws,
    as the inline executor does, to keep one random stream).
    """

    def __init__(self, algo: Algorithm, placement: Placement, seed: int, rng: np.random.Generator, timers: Timers) -> None:
        cfg = algo.config
        self.config, self.rng, self.timers = cfg, rng, timers
        self.learn = build("Learn", placement.learn, algo, seed)
        self.learner = self.learn.learner
        self.replay = build("ReplayAdd", placement.replay, algo, seed)
        self.host_replay = self.replay.host_arrays  # sample gives numpy arrays; priorities go back as numpy
        self.transfers = needs_transfer(placement)
        self.losses: list[torch.Tensor] = []  # not yet reported
        self.actor_losses: list[torch.Tensor] = []  # of the updates that stepped an actor, not yet reported

    @property
    def updates(self) -> int:
        return self.learner.updates

    def ran(self) -> dict[str, str]:
        """Where the replay's primitives and Learn ran."""
        replay = self.replay.describe()
        return {"ReplayAdd": replay, "ReplaySample": replay, "PriorityUpdate": replay, "Learn": self.learn.describe()}

    def can_sample(self) -> bool:
        return len(self.replay) >= self.config.batch_size

    def add(self, transitions: dict[str, np.ndarray]) -> None:
        with self.timers.time("ReplayAdd"):
            self.replay.add(**transitions)

    def add_frames(self, stream: Any, rows: dict[str, np.ndarray]) -> None:
        """ReplayAdd of transitions as frame ids of ``stream`` (a frame replay's ``add_frames``)."""
        with self.timers.time("ReplayAdd"):
            self.replay.add_frames(stream, **rows)

    def sample(self, env_steps: int) -> tuple[dict[str, Any], dict[str, Any]]:
        """ReplaySample, then Transfer to the learner's device: (the batch as sampled, the learner's inputs)."""
        uniform = self.rng.random(self.config.batch_size)
        with self.timers.time("ReplaySample"):
            batch = self.replay.sample(uniform, self.config.beta(env_steps))
        if not self.transfers:
            return batch, {k: batch[k] for k in LEARN_INPUTS}
        with self.timers.time("Transfer"):
            on_device = to_device(batch, self.learn.device)
        return batch, on_device

    def learn_on(self, on_device: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        with self.timers.time("Learn"):
            out = self.learn.learn(**on_device)
        self.losses.append(out["loss"])
        if "actor_loss" in out:
            self.actor_losses.append(out["actor_loss"])
        return out

    def update_priorities(self, batch: dict[str, Any], out: dict[str, torch.Tensor]) -> None:
        if self.config.prioritized:
            with self.timers.time("PriorityUpdate"):
                td = out["td_errors"].cpu().numpy() if self.host_replay else out["td_errors"]
                self.replay.update_priorities(batch["indices"], td)

    def update(self, env_steps: int) -> None:
        """One gradient update: sample, transfer, learn, update priorities."""
        batch, on_device = self.sample(env_steps)
        self.update_priorities(batch, self.learn_on(on_device))

    def drain_losses(self) -> float | None:
        """Mean loss since the last call (one device synchronisation)."""
        losses, self.losses = self.losses, []
        return _mean(losses)

    def drain_actor_losses(self) -> float | None:
        """Mean actor loss of the actor steps since the last call; None where there were none (DQN
        has no actor; TD3 steps its actor every ``policy_delay`` updates)."""
        losses, self.actor_losses = self.actor_losses, []
        return _mean(losses)

    def state_dict(self) -> dict[str, Any]:
        return {"replay": self.replay.state_dict(), "learner": self.learner.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """``state`` without a replay (an evaluation reads no replay file) leaves the replay empty."""
        if state.get("replay") is not None:
            self.replay.load_state_dict(state["replay"])
        self.learner.load_state_dict(state["learner"])
