"""Async env stepping (``async_envs``): an acting role's N envs as two halves, A and B, each its
own EnvStep stepping in the background, so that acting on one half overlaps emulating the other.

One :meth:`EnvHalves.step` steps every env once, as a synchronous EnvStep does, in this order::

    (A is stepping, with actions chosen on its observations at the end of the last call)
    act on B          while A steps
    recv A, send B
    act on A's new observations, send A      while B steps
    recv B            (A steps on while the caller stores the transitions and learns)

It returns every env's transition as one full batch (env i at row i, as in sync stepping), so the
n-step assembler, the frame stacks and the replay see exactly the per-env data sync stepping gives:
the halves are fixed (A: envs ``0..N/2-1``, B: the rest) and each is an EnvStep of its own,
seeded ``seed`` and ``seed + N/2``, so env i is seeded ``seed + i`` either way. What differs from
sync stepping: half A's next actions are chosen one call early (before the caller's WeightSync and
learning of that call), and exploration draws are made per half, so the same seed draws other
random actions. EnvPool's own async mode (``batch_size < num_envs``: whichever envs finish first
come back) is not used: its halves change with thread timing, so a seeded run would not repeat.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import numpy as np

from hetrl.errors import HetrlError
from hetrl.primitives import implementations
from hetrl.protocol import EnvStep

# Actions for one half: (its observations, the index of its first env)
ActHalf = Callable[[np.ndarray, int], np.ndarray]


def async_problem(env_cls: type[EnvStep], num_envs: int) -> str | None:
    """Why ``async_envs`` cannot run with this EnvStep and env count (None: it can), with the fix."""
    if not env_cls.steps_in_background:
        return (f"async_envs needs an EnvStep that steps in the background (ale-vector or envpool), not "
                f"{env_cls.backend}; set async_envs=false, or a plan.json whose EnvStep is one of those (--plan auto and rule choose one)")
    if num_envs < 2:
        return f"async_envs steps two halves of the envs in turn and needs num_envs >= 2 (got {num_envs}); raise num_envs or set async_envs=false"
    return None


def background_env_backends(algorithm: Any) -> list[str]:
    """The EnvStep backends that can step ``algorithm``'s env in the background (what ``async_envs``
    needs), in the registry's order; the planner keeps to these when the setting is on."""
    return [backend for backend, impl in implementations("EnvStep").items()
            if impl.cls.steps_in_background and not impl.unsupported(algorithm)]


def no_background_env(algorithm: Any) -> HetrlError:
    """The error for ``async_envs`` where no EnvStep can step this env in the background."""
    return HetrlError(f"async_envs needs an EnvStep that steps in the background (ale-vector or envpool: ALE/ envs), "
                      f"and none can step {algorithm.spec.env_id}; set async_envs=false")


class EnvHalves:
    """Two EnvSteps (``make(seed, num_envs)``) stepped in turn against acting; see the module."""

    steps_in_background = True

    def __init__(self, make: Callable[[int, int], EnvStep], num_envs: int, seed: int,
                 timed: Callable[[str, float], None] | None = None) -> None:
        self.num_envs, self.split = num_envs, num_envs // 2
        self._seed = seed
        self._in_flight: np.ndarray | None = None  # A's actions, sent and not yet received
        self.halves = [make(seed, max(self.split, 1))]
        problem = async_problem(type(self.halves[0]), num_envs)
        if problem:
            self.close()
            raise HetrlError(problem)
        self.halves.append(make(seed + self.split, num_envs - self.split))
        self._timed = timed or (lambda name, seconds: None)
        self.obs: np.ndarray | None = None  # per env, the observation its next (or in-flight) action was chosen on
        self.finished: list[tuple[float, int]] = []

    @property
    def seed(self) -> int:
        return self._seed

    @seed.setter
    def seed(self, seed: int) -> None:  # a resumed run reseeds before reset, as with one EnvStep
        self._seed = seed
        self.halves[0].seed, self.halves[1].seed = seed, seed + self.split

    @property
    def slot(self) -> Any:
        return self.halves[0].slot

    @slot.setter
    def slot(self, slot: Any) -> None:
        for half in self.halves:
            half.slot = slot

    def describe(self) -> str:
        return f"{self.halves[0].describe()}, async halves of {self.split} + {self.num_envs - self.split} envs"

    def reset(self) -> np.ndarray:
        self._drain()
        self.obs = np.concatenate([half.reset() for half in self.halves])
        return self.obs

    def step(self, act: ActHalf) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        """Every env stepped once; ``act(obs, first)`` chooses the actions of the half whose first env
        is ``first``. Returns the actions taken and the full batch of outputs (rows in env order)."""
        a, b = self.halves
        k = self.split
        if self._in_flight is None:  # the first step: nothing was sent yet
            self._in_flight = act(self.obs[:k], 0)
            self._send(a, self._in_flight)
        actions_b = act(self.obs[k:], k)
        out_a = self._recv(a)
        self._send(b, actions_b)
        actions_a, self._in_flight = self._in_flight, act(out_a["next_obs"], 0)
        self._send(a, self._in_flight)
        out_b = self._recv(b)
        out = {key: np.concatenate([out_a[key], out_b[key]]) for key in out_a}
        self.finished = [*a.finished, *b.finished]
        self.obs = out["next_obs"]
        return np.concatenate([actions_a, actions_b]), out

    def _send(self, half: EnvStep, actions: np.ndarray) -> None:
        start = time.perf_counter()
        half.send(actions)
        self._timed("EnvStep", time.perf_counter() - start)

    def _recv(self, half: EnvStep) -> dict[str, np.ndarray]:
        start = time.perf_counter()
        out = half.recv()
        self._timed("EnvStep", time.perf_counter() - start)
        return out

    def _drain(self) -> None:
        """Wait for A's step in flight, if any (its transition is dropped: only reset and close call this)."""
        if self._in_flight is not None:
            self._in_flight = None
            self.halves[0].recv()

    def close(self) -> None:
        try:
            self._drain()
        finally:
            for half in self.halves:
                half.close()

    def __getstate__(self) -> dict[str, Any]:
        raise TypeError("async env halves cannot be pickled (a step is in flight)")
