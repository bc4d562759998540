"""Exploration over time: the ``explore`` inputs of Act for one acting role's envs, step after step.

Most algorithms draw fresh exploration every step (epsilon-greedy, Gaussian action noise, SAC's own
Gaussian): :class:`FreshDraws`, the algorithm's ``draw_exploration`` as it is. Two explore with
noise that is correlated in time, so something must remember it between steps:

- :class:`HeldDraws`: the same draws for ``period`` steps, then new ones. gSDE (SAC with
  ``use_sde``) holds its matrices of standard normals so that, while held, the noise is a smooth
  function of the state (Raffin et al. 2022); Stable-Baselines3 redraws them at the start of every
  rollout (every ``train_freq`` steps) or every ``sde_sample_freq`` steps.
- :class:`OrnsteinUhlenbeck`: per env, ``x <- x - theta * x * dt + sqrt(dt) * N(0, 1)``, reset to 0
  when the env's episode ends (Lillicrap et al. 2016's DDPG noise; SB3's
  ``OrnsteinUhlenbeckActionNoise`` with its theta 0.15 and dt 0.01). The process has unit sigma: the
  algorithm's exploration level (``action_noise``) scales it, as it scales Gaussian noise.

The acting role owns one (``Algorithm.exploration_process``) and draws from its own generator, so
the inline executor's checkpoint holds it (``state_dict``) and a resumed run explores as the
uninterrupted one does. Only draws made for acting during training go through it: the profiler,
central inference's layout and ``Policy.predict`` call ``draw_exploration`` directly.
"""

from __future__ import annotations

from typing import Any, Protocol

import numpy as np


class DrawsExploration(Protocol):
    def draw_exploration(self, rng: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray]: ...


class FreshDraws:
    """New draws every step: the algorithm's ``draw_exploration``, nothing remembered."""

    def __init__(self, algo: DrawsExploration, n: int) -> None:
        self.algo, self.n = algo, n

    def draw(self, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        return self.algo.draw_exploration(rng, self.n)

    def episodes_ended(self, done: np.ndarray) -> None:
        """``done``: per env, whether its episode ended at the last step."""

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        pass


class HeldDraws(FreshDraws):
    """The algorithm's draws, held for ``period`` steps (calls of :meth:`draw`), then redrawn."""

    def __init__(self, algo: DrawsExploration, n: int, period: int) -> None:
        super().__init__(algo, n)
        if period < 1:
            raise ValueError(f"a hold period must be >= 1 step (got {period})")
        self.period, self.calls = period, 0
        self.held: tuple[np.ndarray, np.ndarray] | None = None

    def draw(self, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        if self.held is None or self.calls % self.period == 0:
            self.held = self.algo.draw_exploration(rng, self.n)
        self.calls += 1
        return self.held

    def state_dict(self) -> dict[str, Any]:
        return {"calls": self.calls, "held": None if self.held is None else tuple(a.copy() for a in self.held)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.calls = int(state["calls"])
        self.held = None if state["held"] is None else tuple(np.array(a) for a in state["held"])  # type: ignore[assignment]


class OrnsteinUhlenbeck(FreshDraws):
    """Per env and action dimension, a unit-sigma Ornstein-Uhlenbeck process in units of ``unit``
    (half the action range), reset to 0 when the env's episode ends: the ``explore`` input of an
    additive-noise action rule (DDPG's), whose second input (``random_actions``) is unused."""

    THETA, DT = 0.15, 1e-2  # Stable-Baselines3's OrnsteinUhlenbeckActionNoise defaults

    def __init__(self, algo: DrawsExploration, n: int, unit: np.ndarray) -> None:
        super().__init__(algo, n)
        self.unit = np.asarray(unit, dtype=np.float32)
        self.x = np.zeros((n, self.unit.size), dtype=np.float32)
        self._unused = np.zeros_like(self.x)

    def draw(self, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        increments = rng.standard_normal(self.x.shape, dtype=np.float32)
        self.x += np.float32(-self.THETA * self.DT) * self.x + np.float32(np.sqrt(self.DT)) * increments
        return self.x * self.unit, self._unused

    def episodes_ended(self, done: np.ndarray) -> None:
        self.x[np.asarray(done, dtype=bool)] = 0.0

    def state_dict(self) -> dict[str, Any]:
        return {"x": self.x.copy()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.x[...] = state["x"]
