"""Evaluation of a Q-table: greedy rollouts, and, where the env exposes its transition model
(``env.unwrapped.P``, as FrozenLake, Taxi and CliffWalking do), exact values against the optimum
from value iteration.

An episode is a *success* when it terminates (not by the time limit) with the largest reward of
the model: the goal of FrozenLake (+1, holes give 0), a Taxi drop-off (+20), the goal of
CliffWalking (-1, as every step). Without a model: terminated with a positive last reward.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import gymnasium as gym
import numpy as np

# Episode cap for envs registered without a time limit (CliffWalking-v1 has none).
DEFAULT_MAX_STEPS = 1000


def greedy_policy(q: np.ndarray) -> np.ndarray:
    """The greedy action of every state (the first one on ties)."""
    return np.asarray(q).argmax(axis=1)


@dataclass(frozen=True, eq=False)
class TabularModel:
    """An env's transition model as flat arrays, one entry per (state, action, outcome)."""

    n_states: int
    n_actions: int
    sa: np.ndarray  # s * n_actions + a
    prob: np.ndarray
    next_state: np.ndarray
    reward: np.ndarray
    terminated: np.ndarray
    start: np.ndarray  # initial state distribution, [n_states]

    @classmethod
    def from_env(cls, env: gym.Env) -> TabularModel | None:
        """The model of ``env``, or None if it exposes no complete ``P``."""
        base = env.unwrapped
        table = getattr(base, "P", None)
        n_states, n_actions = int(env.observation_space.n), int(env.action_space.n)
        if not isinstance(table, dict) or len(table) != n_states:
            return None
        entries = [
            (s * n_actions + a, p, s2, r, done)
            for s in range(n_states)
            for a in range(n_actions)
            for p, s2, r, done in table[s].get(a, ())
        ]
        sa, prob, next_state, reward, terminated = (np.array(column) for column in zip(*entries))
        if len(np.unique(sa)) != n_states * n_actions:
            return None
        start = getattr(base, "initial_state_distrib", None)
        if start is None:
            start = np.bincount([int(env.reset(seed=i)[0]) for i in range(1000)], minlength=n_states) / 1000
        return cls(
            n_states, n_actions, sa.astype(np.int64), prob.astype(np.float64), next_state.astype(np.int64),
            reward.astype(np.float64), terminated.astype(bool), np.asarray(start, dtype=np.float64),
        )

    @property
    def success_reward(self) -> float:
        return float(self.reward.max())

    def decision_states(self) -> np.ndarray:
        """Mask of the states an episode can be in when acting: reachable from a start state
        without passing a termination (unreachable and terminal states are never learned)."""
        reached = self.start > 0
        frontier = reached.copy()
        going_on = (self.prob > 0) & ~self.terminated
        while frontier.any():
            new = np.zeros(self.n_states, dtype=bool)
            new[self.next_state[going_on & frontier[self.sa // self.n_actions]]] = True
            frontier = new & ~reached
            reached |= new
        return reached

    def backup(self, values: np.ndarray, gamma: float) -> np.ndarray:
        """``Q(s, a) = E[r + gamma * V(s')]``, with no bootstrap from terminal transitions."""
        bootstrap = np.where(self.terminated, 0.0, gamma * values[self.next_state])
        q = np.bincount(self.sa, self.prob * (self.reward + bootstrap), minlength=self.n_states * self.n_actions)
        return q.reshape(self.n_states, self.n_actions)

    def value_iteration(self, gamma: float, tol: float = 1e-10) -> np.ndarray:
        """The optimal ``Q*`` (``gamma < 1``)."""
        values = np.zeros(self.n_states)
        while True:
            q = self.backup(values, gamma)
            new = q.max(axis=1)
            if np.abs(new - values).max() < tol:
                return q
            values = new

    def policy_values(self, policy: np.ndarray, gamma: float, tol: float = 1e-10) -> np.ndarray:
        """``V^policy`` of a deterministic policy (``gamma < 1``)."""
        values = np.zeros(self.n_states)
        states = np.arange(self.n_states)
        while True:
            new = self.backup(values, gamma)[states, policy]
            if np.abs(new - values).max() < tol:
                return new
            values = new

    def success_probability(self, policy: np.ndarray, horizon: int) -> float:
        """The exact probability that ``policy`` succeeds within ``horizon`` steps from a start state."""
        success = (self.terminated & (self.reward >= self.success_reward)).astype(np.float64)
        states = np.arange(self.n_states)
        p = np.zeros(self.n_states)
        for _ in range(horizon):
            later = np.where(self.terminated, 0.0, p[self.next_state])
            q = np.bincount(self.sa, self.prob * (success + later), minlength=self.n_states * self.n_actions)
            p = q.reshape(self.n_states, self.n_actions)[states, policy]
        return float(self.start @ p)


@dataclass(frozen=True)
class Evaluation:
    """How good the greedy policy of a Q-table is. Model-based fields are None without a model."""

    episodes: int
    mean_return: float
    success_rate: float
    success_probability: float | None = None  # exact, within the episode step limit
    optimal_success_probability: float | None = None  # of the greedy policy of Q*
    policy_value: float | None = None  # E over start states of V^greedy
    optimal_value: float | None = None  # E over start states of V*
    q_error: float | None = None  # max |Q - Q*| over the decision states

    @property
    def value_gap(self) -> float | None:
        """``V*(s0) - V^greedy(s0)``: how much return the greedy policy gives away.

        Clamped at 0: the two values are exact only to value iteration's tolerance.
        """
        if self.optimal_value is None or self.policy_value is None:
            return None
        return max(0.0, self.optimal_value - self.policy_value)


def rollouts(env: gym.Env, policy: np.ndarray, episodes: int, seed: int, success_reward: float | None) -> tuple[np.ndarray, np.ndarray]:
    """Returns and successes of ``episodes`` episodes of a deterministic policy."""
    max_steps = (env.spec.max_episode_steps if env.spec else None) or DEFAULT_MAX_STEPS
    returns, successes = np.zeros(episodes), np.zeros(episodes, dtype=bool)
    actions = policy.tolist()
    state = int(env.reset(seed=seed)[0])
    for episode in range(episodes):
        if episode:
            state = int(env.reset()[0])
        for _ in range(max_steps):
            state, reward, terminated, truncated, _ = env.step(actions[int(state)])
            returns[episode] += reward
            if terminated:
                successes[episode] = reward >= success_reward if success_reward is not None else reward > 0
            if terminated or truncated:
                break
    return returns, successes


def evaluate(env: gym.Env, q: np.ndarray, gamma: float, episodes: int = 1000, seed: int = 0) -> Evaluation:
    """Greedy rollouts of ``q`` on ``env``; with a model (and ``gamma < 1``) also exact values."""
    policy = greedy_policy(q)
    model = TabularModel.from_env(env)
    returns, successes = rollouts(env, policy, episodes, seed, model.success_reward if model else None)
    result = Evaluation(episodes, float(returns.mean()), float(successes.mean()))
    if model is None or gamma >= 1.0:
        return result
    horizon = (env.spec.max_episode_steps if env.spec else None) or DEFAULT_MAX_STEPS
    q_star = model.value_iteration(gamma)
    optimal = greedy_policy(q_star)
    return replace(
        result,
        success_probability=model.success_probability(policy, horizon),
        optimal_success_probability=model.success_probability(optimal, horizon),
        policy_value=float(model.start @ model.policy_values(policy, gamma)),
        optimal_value=float(model.start @ q_star.max(axis=1)),
        q_error=float(np.abs(np.asarray(q, dtype=np.float64) - q_star)[model.decision_states()].max()),
    )
