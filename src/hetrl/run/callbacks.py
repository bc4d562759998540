"""Callbacks: the user's code at three points of a run, in the process that drives it.

    class StopAt(hetrl.Callback):
        def on_step(self, info):
            return info.env_steps >= 5_000        # True stops the run

    hetrl.train("dqn", "CartPole-v1", callbacks=[StopAt()])

``on_step`` is called once per iteration of the training loop (the inline executor: one step of
its batch of envs; local and ray: one learner iteration, which may bring many env steps),
``on_eval`` after each evaluation and ``on_checkpoint`` after each checkpoint is written. Each gets a
:class:`CallbackInfo`; one that returns True stops the run at the end of that iteration, as Ctrl-C
would, except that the run then evaluates its final policy as a finished run does: a checkpoint
is written and the summary says "stopped by a callback". Callbacks run in the main process with
every executor, so they may hold any state.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from hetrl.errors import HetrlError

HOOKS = ("on_step", "on_eval", "on_checkpoint")


@dataclass(frozen=True)
class CallbackInfo:
    """Where the run is; what a hook does not concern is None."""

    run_dir: Path
    env_steps: int
    updates: int
    episodes: int  # training episodes finished in this session so far
    episode_returns: tuple[float, ...]  # on_step: the returns of the episodes finished since the last on_step
    eval_return_mean: float | None = None  # on_eval: this evaluation's mean and std over its episodes
    eval_return_std: float | None = None
    checkpoint: Path | None = None  # on_checkpoint: the file just written


class Callback:
    """Subclass and override any of the three hooks; return True to stop the run, None or False to go on."""

    def on_step(self, info: CallbackInfo) -> bool | None:
        """After each iteration of the training loop; keep it cheap."""
        return None

    def on_eval(self, info: CallbackInfo) -> bool | None:
        """After each evaluation (``eval_every`` env steps, and the final one)."""
        return None

    def on_checkpoint(self, info: CallbackInfo) -> bool | None:
        """After each checkpoint is written (``checkpoint_every`` env steps, and the last one)."""
        return None


class Callbacks:
    """The run's callbacks called together: a hook of every callback that defines it, in order; True
    when any asks to stop. A hook a callback inherits from :class:`Callback` unchanged is not called."""

    def __init__(self, callbacks: Sequence[Callback] = ()) -> None:
        self._methods: dict[str, list[Callable[[CallbackInfo], bool | None]]] = {hook: [] for hook in HOOKS}
        if not isinstance(callbacks, (list, tuple)):
            raise HetrlError(f"callbacks must be a list of hetrl.Callback objects, not {type(callbacks).__name__} {callbacks!r}")
        for callback in callbacks:
            found = {hook: getattr(callback, hook, None) for hook in HOOKS}
            if not any(callable(method) for method in found.values()):
                raise HetrlError(f"callback {callback!r} has none of {', '.join(HOOKS)}; subclass hetrl.Callback")
            for hook, method in found.items():
                if callable(method) and getattr(type(callback), hook, None) is not getattr(Callback, hook):
                    self._methods[hook].append(method)
        self.stepping = bool(self._methods["on_step"])  # on_step's info is made only then

    def call(self, hook: str, info: CallbackInfo) -> bool:
        stops = [bool(method(info)) for method in self._methods[hook]]  # every callback is called, then any may stop
        return any(stops)
