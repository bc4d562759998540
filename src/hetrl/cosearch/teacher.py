"""The teacher of a search: a trained DQN agent (a hetrl run directory), the states it is asked
about, and its Q-values on them.

States come from the run's replay (the newest checkpoint whose replay file was kept: what the
teacher learned from, Rusu et al. 2016's "Policy Distillation" distils from the teacher's replay
memory too) or, where none was kept, from the teacher playing: its exploring policy (epsilon at the
floor training ended with) on training envs. Either way with whole transitions, so the search may
add a TD loss on them.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from pathlib import Path

import numpy as np
import torch

from hetrl.algos.dqn import DQN
from hetrl.cosearch.options import SOURCES
from hetrl.errors import HetrlError
from hetrl.policy import Policy, load
from hetrl.run.rundir import RunDir
from hetrl.run.saved_network import q_head

Q_BATCH = 4096  # observations per teacher forward


@dataclass
class TeacherData:
    """Transitions (host tensors, observations in the env's dtype) and the teacher's Q-values on
    ``obs``; ``source`` says where they came from."""

    obs: torch.Tensor
    actions: torch.Tensor
    rewards: torch.Tensor
    next_obs: torch.Tensor
    discounts: torch.Tensor
    q: torch.Tensor
    source: str

    def __len__(self) -> int:
        return len(self.obs)

    @property
    def q_variance(self) -> float:
        """The variance of the teacher's Q-values over every item and action (what the relative MSE
        divides by; at least a tiny positive number)."""
        return max(float(self.q.var(unbiased=False)), 1e-8)

    def take(self, indices: torch.Tensor, device: str | torch.device = "cpu") -> dict[str, torch.Tensor]:
        """A batch of items ``indices`` on ``device``: every field but ``source``."""
        return {f.name: getattr(self, f.name)[indices].to(device) for f in fields(self) if f.name != "source"}

    def split(self, fraction: float, generator: torch.Generator) -> tuple[TeacherData, TeacherData]:
        """Two disjoint random parts, the first ``fraction`` of the items (bi-level search: weights on
        one, architecture on the other)."""
        order = torch.randperm(len(self), generator=generator)
        cut = min(len(self) - 1, max(1, round(fraction * len(self))))
        return self.subset(order[:cut], "train split"), self.subset(order[cut:], "validation split")

    def with_states(self, obs: torch.Tensor, note: str) -> TeacherData:
        """These items and ``obs`` after them, as states without transitions: no action taken
        (0), no reward, discount 0 (no bootstrap), themselves as next state, and no teacher Q-values
        (zeros): for a fit that labels states by the network's own head, not by these fields."""
        n = len(obs)
        return TeacherData(torch.cat([self.obs, obs]), torch.cat([self.actions, self.actions.new_zeros(n)]),
                           torch.cat([self.rewards, self.rewards.new_zeros(n)]), torch.cat([self.next_obs, obs]),
                           torch.cat([self.discounts, self.discounts.new_zeros(n)]),
                           torch.cat([self.q, self.q.new_zeros(n, self.q.shape[1])]), f"{self.source} {note}")

    def subset(self, indices: torch.Tensor, note: str) -> TeacherData:
        return TeacherData(**self.take(indices), source=f"{self.source} ({note})")


class Teacher:
    """A run's greedy Q-network (best checkpoint by default, as ``hetrl eval``) and its policy."""

    def __init__(self, run_dir: str | Path, checkpoint: str | None = None, policy: Policy | None = None) -> None:
        """``policy``: the run's policy where the caller has loaded it already (``checkpoint``'s)."""
        self.run = RunDir.open(run_dir)
        self.policy: Policy = policy if policy is not None else load(run_dir, checkpoint)
        self.config = self.run.load_config()
        if not isinstance(self.policy.algo, DQN):
            raise HetrlError(f"{run_dir} is a {self.policy.algo.name} run; a teacher is a DQN agent (dqn, exit-dqn): "
                             "the search distils Q-values over discrete actions")
        self._q = q_head(self.policy.network)

    @property
    def spec(self):
        return self.policy.spec

    @property
    def gamma(self) -> float:
        return float(self.policy.algo.config.gamma)

    def q_values(self, obs: torch.Tensor) -> torch.Tensor:
        """The teacher's Q-values (float32, on the host) on host observations."""
        with torch.no_grad():
            return torch.cat([self._q(obs[i:i + Q_BATCH]) for i in range(0, len(obs), Q_BATCH)]).float()

    def data(self, n: int, source: str = "auto", seed: int = 0) -> TeacherData:
        """``n`` transitions from ``source``: ``replay`` (an error where no replay file was kept),
        ``play``, or ``auto`` (the replay where there is one, else play)."""
        if source not in SOURCES:
            raise HetrlError(f"states from {source!r}: one of {', '.join(SOURCES)}")
        found = self._replay_transitions(n, seed) if source != "play" else None
        if found is None and source == "replay":
            raise HetrlError(f"{self.run.path} kept no replay file (checkpoint_replay=none, or no checkpoint yet); "
                             "take states from the teacher's play instead")
        transitions, where = found or (self._played(n, seed), f"{n:,} env steps of the teacher's policy")
        obs = torch.as_tensor(transitions["obs"])
        return TeacherData(obs, torch.as_tensor(transitions["actions"]).long(),
                           torch.as_tensor(transitions["rewards"]).float(), torch.as_tensor(transitions["next_obs"]),
                           torch.as_tensor(transitions["discounts"]).float(), self.q_values(obs), where)

    def _replay_transitions(self, n: int, seed: int) -> tuple[dict[str, np.ndarray], str] | None:
        """``n`` transitions of the newest kept replay, without repeats where it holds that many
        (uniform; a prioritized replay is drawn by priority), or None where none was kept."""
        from hetrl.primitives import build
        from hetrl.protocol import Slot

        kept = self.run.resumable()
        if not kept:
            return None
        path, state = self.run.load_checkpoint(kept[-1], replay=True, env_state="never")
        saved = state.get("executor", {}).get("replay")
        if saved is None:
            return None
        backend = "frames-numpy" if "frame_capacity" in saved else "numpy"  # a frame replay stores frames once
        replay = build("ReplayAdd", Slot(backend, "cpu"), self.policy.algo, seed)
        replay.load_state_dict(saved)
        rng = np.random.default_rng(seed)
        size = len(replay)
        if replay.prioritized or n > size:
            uniform = rng.random(n)
        else:  # floor(u * size) of u = (k + 1/2) / size is item k: n distinct items
            uniform = (rng.permutation(size)[:n] + 0.5) / size
        batch = replay.sample(uniform)
        drawn = "by priority" if replay.prioritized else "uniformly"
        return batch, f"{n:,} transitions drawn {drawn} from the replay of {path.name} ({size:,} held)"

    def _played(self, n: int, seed: int) -> dict[str, np.ndarray]:
        """``n`` transitions of the teacher's exploring policy on one training env."""
        env = self.spec.make(training=True)
        obs, _ = env.reset(seed=seed)
        out: dict[str, list] = {k: [] for k in ("obs", "actions", "rewards", "next_obs", "discounts")}
        gamma = self.gamma
        for _ in range(n):
            action = self.policy.predict(obs, deterministic=False)
            next_obs, reward, terminated, truncated, _ = env.step(int(action))
            for key, value in zip(out, (obs, action, reward, next_obs, 0.0 if terminated else gamma)):
                out[key].append(value)
            obs = env.reset()[0] if terminated or truncated else next_obs
        env.close()
        return {k: np.asarray(v, dtype=self.spec.obs_dtype if "obs" in k else None) for k, v in out.items()}
