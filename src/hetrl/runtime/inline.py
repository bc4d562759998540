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
from hetrl.protocol import get
from hetrl.runtime.nstep import NStepAssembler
from hetrl.runtime.placement import Placement
from hetrl.runtime.timers import Timers

LEARN_INPUTS = ("obs", "actions", "rewards", "next_obs", "discounts", "weights")


def to_device(batch: dict[str, Any], device: torch.device) -> dict[str, torch.Tensor]:
    """Transfer: host arrays or tensors elsewhere become tensors on ``device`` (zero-copy on the host)."""
    return {k: torch.as_tensor(batch[k], device=device) for k in LEARN_INPUTS}


class InlineExecutor:
    def __init__(self, algo: Algorithm, placement: Placement, num_envs: int, seed: int) -> None:
        placement.validate()
        cfg, spec = algo.config, algo.spec
        self.algo, self.placement, self.seed = algo, placement, seed
        self.env = get("EnvStep", placement.env.backend).cls(spec.env_id, num_envs, seed)
        self.learn = get("Learn", placement.learn.backend).cls(algo, placement.learn.device, seed)
        self.learner = self.learn.learner
        self.policy = get("Act", placement.act.backend).cls(self.learner.policy_network, algo.action_rule, placement.act.device)
        self.replay = get("ReplayAdd", placement.replay.backend).cls(
            cfg.buffer_size, spec.obs_shape, spec.action_shape, spec.action_dtype,
            prioritized=cfg.prioritized, alpha=cfg.alpha, eps=cfg.priority_eps, device=placement.replay.device,
        )
        self.host_replay = placement.replay.backend == "numpy"
        self.nstep = NStepAssembler(num_envs, cfg.n_step, cfg.gamma)
        self.rng = np.random.default_rng(seed)
        self.timers = Timers()
        self.env_steps = 0
        self.iterations = 0
        self.updates_due = 0.0
        self.synced_at = -1  # learner.updates at the last WeightSync
        self.finished: list[tuple[float, int]] = []  # (return, length) of episodes not yet reported
        self.losses: list[torch.Tensor] = []  # not yet reported
        self.obs = self.env.reset()

    @property
    def updates(self) -> int:
        return self.learner.updates

    def iteration(self) -> None:
        """Step every env once, store the transitions, and run the updates the replay ratio asks for."""
        algo, cfg, timers = self.algo, self.algo.config, self.timers
        n = self.env.num_envs
        if self.env_steps < cfg.learning_starts:
            actions = algo.random_actions(self.rng, n)
        else:
            if self.synced_at != self.learner.updates:
                with timers.time("WeightSync"):
                    self.policy.sync()
                self.synced_at = self.learner.updates
            explore, random_actions = algo.draw_exploration(self.rng, n)
            with timers.time("Act"):
                actions = self.policy.act(self.obs, explore, random_actions, algo.exploration(self.env_steps))
        with timers.time("EnvStep"):
            out = self.env.step(actions)
        self.finished.extend(self.env.finished)
        ready = self.nstep(self.obs, actions, out["rewards"], out["final_obs"], out["terminated"], out["truncated"])
        if ready is not None:
            with timers.time("ReplayAdd"):
                self.replay.add(**ready)
        self.obs = out["next_obs"]
        self.env_steps += n
        self.iterations += 1
        if self.env_steps >= cfg.learning_starts and len(self.replay) >= cfg.batch_size:
            self.updates_due += n * cfg.replay_ratio
            if self.iterations % cfg.train_every == 0:
                while self.updates_due >= 1:
                    self._update()
                    self.updates_due -= 1

    def _update(self) -> None:
        cfg, timers = self.algo.config, self.timers
        uniform = self.rng.random(cfg.batch_size)
        with timers.time("ReplaySample"):
            batch = self.replay.sample(uniform, cfg.beta(self.env_steps))
        with timers.time("Transfer"):
            on_device = to_device(batch, self.learn.device)
        with timers.time("Learn"):
            out = self.learn.learn(**on_device)
        if cfg.prioritized:
            with timers.time("PriorityUpdate"):
                td = out["td_errors"].cpu().numpy() if self.host_replay else out["td_errors"]
                self.replay.update_priorities(batch["indices"], td)
        self.losses.append(out["loss"])

    def drain_losses(self) -> float | None:
        """Mean loss since the last call (one device synchronisation)."""
        if not self.losses:
            return None
        mean = torch.stack(self.losses).mean().item()
        self.losses = []
        return mean

    def drain_episodes(self) -> list[tuple[float, int]]:
        done, self.finished = self.finished, []
        return done

    def close(self) -> None:
        self.env.close()

    # --- checkpoints -------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        try:
            envs = pickle.dumps(self.env)
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
            "obs": self.obs,
            "finished": list(self.finished),
            "nstep": self.nstep.state_dict(),
            "replay": self.replay.state_dict(),
            "learner": self.learner.state_dict(),
            "policy": self.policy.state_dict(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.env_steps = state["env_steps"]
        self.iterations = state["iterations"]
        self.updates_due = state["updates_due"]
        self.synced_at = state["synced_at"]
        self.rng.bit_generator.state = state["rng"]
        if state["envs"] is not None:
            self.env.close()
            self.env = pickle.loads(state["envs"])
            self.obs = state["obs"]
        else:
            self.env.seed = self.seed + self.env_steps
            self.obs = self.env.reset()
        self.finished = list(state["finished"])
        self.nstep.load_state_dict(state["nstep"])
        self.replay.load_state_dict(state["replay"])
        self.learner.load_state_dict(state["learner"])
        self.policy.load_state_dict(state["policy"])
