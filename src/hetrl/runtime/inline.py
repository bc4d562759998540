"""The inline executor: one process, primitives called in order. The reference semantics.

Deterministic for a seed: every random draw comes from one numpy generator owned here (and the
learner's seeded torch generator), so a run that is checkpointed and resumed is bit-identical to
one that was not.
"""

from __future__ import annotations

import pickle
import warnings
from typing import Any

import numpy as np
import torch

from hetrl.algos import Algorithm
from hetrl.primitives import check_placement
from hetrl.protocol import Placement
from hetrl.runtime.acting_role import ActingRole
from hetrl.runtime import check_written_by
from hetrl.runtime.learner_role import LearnerRole
from hetrl.runtime.schedule import ReplaySchedule
from hetrl.runtime.timers import Timers, merge_timers
from hetrl.compat import unpickle
from hetrl.run.safe_state import Pickle


class InlineExecutor:
    name = "inline"

    def __init__(self, algo: Algorithm, placement: Placement, num_envs: int, seed: int, async_envs: bool = False) -> None:
        check_placement(placement, algo)
        self.algo, self.placement, self.seed = algo, placement, seed
        self.rng = np.random.default_rng(seed)  # acting draws and replay sampling: one stream
        self.timers = Timers()
        self.learning = LearnerRole(algo, placement, seed, self.rng, self.timers)
        self.learner, self.replay = self.learning.learner, self.learning.replay
        self.schedule = ReplaySchedule.of(algo.config)
        self.acting = ActingRole(algo, placement, num_envs, seed, self.rng, self.timers, self.learner.policy_network,
                                  async_envs=async_envs)
        self.env_steps = 0
        self.iterations = 0
        self.updates_due = 0.0
        self.synced_at = -1  # learner.updates at the last WeightSync
        self.finished: list[tuple[float, int]] = []  # (return, length) of episodes not yet reported

    @property
    def updates(self) -> int:
        return self.learner.updates

    @property
    def policy_network(self) -> torch.nn.Module:
        return self.learner.policy_network

    @property
    def policy(self):  # the acting copy (Act)
        return self.acting.policy

    @property
    def env(self):  # the EnvStep implementation
        return self.acting.env

    def replay_bytes(self) -> int:
        return self.learning.replay.nbytes

    def ran(self) -> dict[str, str]:
        return {**self.acting.ran(), **self.learning.ran()}

    def timer_totals(self) -> dict[str, tuple[float, int, int]]:
        """name -> (seconds, calls, processes doing it): one process here."""
        return merge_timers(self.timers.totals(), [])

    def drain_staleness(self) -> tuple[float | None, int | None]:
        """The inline loop syncs the acting copy before every Act: its policy is never stale."""
        return (0.0, 0) if self.env_steps >= self.algo.config.learning_starts else (None, None)

    def run_staleness(self) -> tuple[float, int]:
        return 0.0, 0

    def ratio_error(self) -> float | None:
        """Not held per window here: updates come in bursts of ``train_every`` env steps."""
        return None

    restarts = 0  # no actor processes to restart
    actors_lost = 0

    def iteration(self) -> None:
        """Step every env once, store the transitions, and run the updates the replay ratio asks for."""
        cfg, acting = self.algo.config, self.acting
        n = acting.num_envs
        if self.env_steps >= cfg.learning_starts and self.synced_at != self.learner.updates:
            acting.sync()
            self.synced_at = self.learner.updates
        ready, finished = acting.step(self.env_steps)
        self.finished.extend(finished)
        if ready is not None:
            self.learning.add(ready)
        self.env_steps += n
        self.iterations += 1
        if self.env_steps >= cfg.learning_starts and len(self.replay) >= cfg.batch_size:
            self.updates_due = self.schedule.accrue(self.updates_due, n)
            if self.schedule.burst_now(self.iterations):
                while self.updates_due >= 1:
                    self.learning.update(self.env_steps)
                    self.updates_due -= 1

    def drain_losses(self) -> float | None:
        return self.learning.drain_losses()

    def drain_actor_losses(self) -> float | None:
        return self.learning.drain_actor_losses()

    def drain_episodes(self) -> list[tuple[float, int]]:
        done, self.finished = self.finished, []
        return done

    def close(self) -> None:
        self.acting.close()

    # --- checkpoints -------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        try:  # the envs' exact state; a pickle, which a checkpoint signs and loading unpickles only when trusted
            envs = Pickle(pickle.dumps(self.acting.env))
        except Exception as exc:  # an env with unpicklable state (a simulator handle, say)
            warnings.warn(f"environment state cannot be saved ({exc}); a resumed run will reset its envs")
            envs = None
        return {
            "env_steps": self.env_steps,
            "iterations": self.iterations,
            "updates_due": self.updates_due,
            "synced_at": self.synced_at,
            "rng": self.rng.bit_generator.state,
            "envs": envs,
            "obs": self.acting.obs,
            "finished": list(self.finished),
            "nstep": self.acting.nstep.state_dict(),
            "exploration": self.acting.exploration.state_dict(),
            **self.learning.state_dict(),
            "policy": self.acting.policy.state_dict(),
            "executor": self.name,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        check_written_by(state.get("executor", self.name), self.name)
        self.env_steps = state["env_steps"]
        self.iterations = state["iterations"]
        self.updates_due = state["updates_due"]
        self.synced_at = state["synced_at"]
        self.rng.bit_generator.state = state["rng"]
        acting = self.acting
        if state["envs"] is not None:  # None: not saved, or left out as untrusted (hetrl.run.safe_state)
            acting.env.close()
            slot = acting.env.slot
            acting.env = unpickle(state["envs"])
            acting.env.slot = slot
            acting.obs = state["obs"]
        else:
            acting.env.seed = self.seed + self.env_steps
            acting.obs = acting.env.reset()
        self.finished = list(state["finished"])
        acting.nstep.load_state_dict(state["nstep"])
        if "exploration" in state:  # absent from checkpoints written before exploration had a memory
            acting.exploration.load_state_dict(state["exploration"])
        self.learning.load_state_dict(state)
        acting.policy.load_state_dict(state["policy"])
