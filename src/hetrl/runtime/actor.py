"""The actor role: a vector of envs stepped with a copy of the policy, its transitions assembled
into n-step ones. Transport-free, so the local executor (shared memory) and the Ray executor
(object store) run the same loop."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import numpy as np
import torch

from hetrl.algos import AgentConfig, make_algorithm
from hetrl.envs import env_spec
from hetrl.nets import numpy_params
from hetrl.protocol import get
from hetrl.runtime.nstep import NStepAssembler


class TimerSink(Protocol):
    def add(self, name: str, seconds: float, calls: int = 1) -> None: ...


@dataclass(frozen=True)
class ActorSpec:
    """Everything an actor process needs to build its loop (picklable)."""

    algo: str
    env: str
    agent: AgentConfig
    num_envs: int
    seed: int

    def actor_seed(self, index: int, incarnation: int) -> int:
        """Distinct streams per actor and per restart of an actor."""
        return self.seed + 10_007 * (index + 1) + 1_000_003 * incarnation


# Central inference: (obs, explore, random_actions) -> actions, answered by the learner's process
RemoteAct = Callable[[np.ndarray, np.ndarray, np.ndarray], np.ndarray]


class ActorLoop:
    """``remote``: act through central inference (its round trip timed as ``InferenceWait``)
    instead of with the actor's own numpy copy of the policy."""

    def __init__(self, spec: ActorSpec, seed: int, timers: TimerSink, remote: RemoteAct | None = None) -> None:
        torch.set_num_threads(1)  # an actor acts with numpy; torch only builds the network's shape
        self.algo = make_algorithm(spec.algo, env_spec(spec.env), spec.agent)
        self.num_envs, self.timers = spec.num_envs, timers
        self.env = get("EnvStep", "gymnasium").cls(spec.env, spec.num_envs, seed)
        network = self.algo.make_policy_network()
        self.params, self._forward = numpy_params(network), network.forward_numpy
        self.nstep = NStepAssembler(spec.num_envs, spec.agent.n_step, spec.agent.gamma)
        self.rng = np.random.default_rng(seed)
        self.remote = remote
        self.obs = self.env.reset()

    def max_rows_per_step(self) -> int:
        """The most transitions one step can emit (every env ending an n-step queue)."""
        return self.num_envs * self.nstep.n

    def step(self, env_steps: int) -> tuple[dict[str, np.ndarray] | None, list[tuple[float, int]]]:
        """One step of every env; ``env_steps`` is the run's count so far (for the schedules).
        Returns the transitions ready for the replay and the episodes that ended."""
        algo, n = self.algo, self.num_envs
        if env_steps < algo.config.learning_starts:
            actions = algo.random_actions(self.rng, n)
        else:
            explore, random_actions = algo.draw_exploration(self.rng, n)
            start = time.perf_counter()
            if self.remote is not None:
                actions = self.remote(self.obs, explore, random_actions)
                self.timers.add("InferenceWait", time.perf_counter() - start)
            else:
                actions = algo.action_rule(self._forward(self.params, self.obs), explore, random_actions, algo.exploration(env_steps))
                self.timers.add("Act", time.perf_counter() - start)
        start = time.perf_counter()
        out = self.env.step(actions)
        self.timers.add("EnvStep", time.perf_counter() - start)
        ready = self.nstep(self.obs, actions, out["rewards"], out["final_obs"], out["terminated"], out["truncated"])
        self.obs = out["next_obs"]
        return ready, self.env.finished

    def close(self) -> None:
        self.env.close()
