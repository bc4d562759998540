"""What a person sees: a progress bar during training and a summary table at the end."""

from __future__ import annotations

import time

from typing import TYPE_CHECKING

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn
from rich.table import Column
from rich.table import Table

if TYPE_CHECKING:
    from hetrl.run.result import TrainResult


PLAIN_EVERY_S = 10.0  # without a terminal: a progress line this often (and at the end)


def progress_bar(console: Console, enabled: bool) -> "Progress | PlainProgress":
    """A live bar on a terminal, which keeps the step count, elapsed time and ETA at 80 columns
    (the description and the rates give way first); elsewhere (a log file, CI) a plain line every
    PLAIN_EVERY_S seconds."""
    if enabled and not console.is_terminal:
        return PlainProgress(console)
    squeeze = dict(no_wrap=True, overflow="ellipsis", min_width=0)
    return Progress(
        TextColumn("[bold]{task.description}", table_column=Column(ratio=1, **squeeze)),
        BarColumn(bar_width=12),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
        TextColumn("{task.fields[stats]}", table_column=Column(ratio=3, **squeeze)),
        console=console,
        disable=not enabled,
        expand=True,
    )


class PlainProgress:
    """Progress as plain lines (steps, share done, rates, returns, elapsed, ETA), for logs."""

    def __init__(self, console: Console, every_s: float = PLAIN_EVERY_S) -> None:
        self.console, self.every_s = console, every_s
        self._tasks: dict[int, dict] = {}

    def __enter__(self) -> "PlainProgress":
        return self

    def __exit__(self, *exc: object) -> None:
        for task in self._tasks.values():
            self._line(task)

    def add_task(self, description: str, total: int | None, completed: int = 0, unit: str = "env steps",
                 **fields: str) -> int:
        now = time.monotonic()
        self._tasks[len(self._tasks)] = {"description": description, "total": total, "completed": completed, "unit": unit,
                                         "start": now, "start_completed": completed, "last": now, "fields": fields}
        return len(self._tasks) - 1

    def update(self, task_id: int, completed: int, total: int | None = None, **fields: str) -> None:
        task = self._tasks[task_id]
        task["completed"] = completed
        if total is not None:
            task["total"] = total
        task["fields"].update(fields)
        if time.monotonic() - task["last"] >= self.every_s:
            self._line(task)

    def _line(self, task: dict) -> None:
        now = time.monotonic()
        task["last"] = now
        done, total, elapsed = task["completed"], task["total"] or 0, now - task["start"]
        rate = (done - task["start_completed"]) / elapsed if elapsed > 0 else 0.0
        eta = f"{(total - done) / rate:,.0f} s" if rate > 0 and done < total else "-"
        stats = task["fields"].get("stats", "")
        self.console.print(f"{task['description']}: {done:,}/{total:,} {task['unit']} ({done / max(1, total):.0%}), "
                           f"{elapsed:,.0f} s elapsed, ETA {eta}" + (f"; {stats}" if stats else ""),
                           highlight=False, soft_wrap=True)


def summary_table(result: "TrainResult") -> Table:
    table = Table(title=f"hetrl {result.algo} on {result.env}", show_header=False, title_justify="left")
    table.add_column(style="bold")
    table.add_column()
    ev = result.eval_return_mean
    evaluation = "n/a" if ev is None else f"{ev:.1f} ± {result.eval_return_std:.1f} over {result.eval_episodes} episodes"
    rows = [
        ("run directory", str(result.run_dir)),
        ("defaults", result.defaults or "n/a"),
        ("env steps", f"{result.env_steps:,}" + (f" (stopped early: the target return was reached at {result.solved_at:,})" if result.solved_at else "")
         + (f" (stopped by a callback at {result.stopped_at:,})" if result.stopped_at is not None else "")),
        ("gradient updates", f"{result.updates:,}"),
        ("wall time", f"{result.wall_s:.1f} s"),
        ("env steps/s", f"{result.env_steps_per_s:,.0f} (measured, whole run)"),
        ("env steps/s, learning phase", _learning_rate(result)),
        ("updates/s", f"{result.updates_per_s:,.0f} (measured)"),
        ("executor", result.executor + (f", {_count(result.actors, 'actor process', 'actor processes')}, "
                                        f"{_count(result.actor_restarts, 'restart')}"
                                        + (f", {result.actors_lost} lost" if result.actors_lost else "") if result.actors else "")),
        ("replay ratio", _ratio(result)),
        ("replay memory", _replay_memory(result)),
        ("profile", result.profile_check or "n/a (no profile: plan rule or a plan file)"),
        ("policy staleness", _staleness(result)),
        ("energy", _energy(result)),
        ("accelerator busy, learning phase", result.accelerator_busy),
        ("final evaluation return", evaluation),
        ("best evaluation return", _best(result)),
    ]
    for name, value in rows:
        table.add_row(name, value)
    return table


def _count(n: int, one: str, many: str | None = None) -> str:
    return f"{n:,} {one if n == 1 else (many or one + 's')}"


def _replay_memory(result: "TrainResult") -> str:
    if not result.replay_bytes or not result.replay_capacity:
        return "n/a"
    return (f"{result.replay_bytes / 2**20:,.1f} MiB for {result.replay_capacity:,} transitions "
            f"({result.replay_bytes / result.replay_capacity:,.0f} bytes per transition, measured)")


def _best(result: "TrainResult") -> str:
    if result.best_eval_return_mean is None:
        return "n/a"
    return (f"{result.best_eval_return_mean:.1f} ± {result.best_eval_return_std:.1f} at env step {result.best_eval_step:,}"
            f" (checkpoints/best.pt; `hetrl eval` uses it, --checkpoint final the final one)")


def _energy(result: "TrainResult") -> str:
    text = result.energy
    if result.joules_per_env_step:
        text += f"; {result.joules_per_env_step:.4f} J per env step {result.energy_status}"
        if result.joules_per_update:
            text += f", {result.joules_per_update:.4f} J per gradient update"
    if result.predicted_joules_per_env_step:
        text += f", {result.predicted_joules_per_env_step:.4f} predicted by the plan's model"
    return text


def _ratio(result: "TrainResult") -> str:
    text = f"{result.replay_ratio:g} configured"
    if result.replay_ratio_measured is not None:
        text += f", {result.replay_ratio_measured:.3f} measured"
    if result.replay_ratio_window_error is not None:
        text += f" (worst 1,000-step window off by {100 * result.replay_ratio_window_error:.1f}%)"
    return text


def _staleness(result: "TrainResult") -> str:
    if result.staleness_mean is None:
        return "n/a"
    return f"{result.staleness_mean:.2f} updates on average, {result.staleness_max} at most (measured)"


def _learning_rate(result: "TrainResult") -> str:
    measured = "n/a" if result.learning_env_steps_per_s is None else f"{result.learning_env_steps_per_s:,.0f} measured"
    if result.predicted_env_steps_per_s is None:
        why = "the plan was not made from a profile for this executor and actor count"
        return f"{measured} (no prediction: {why})"
    share = result.predicted_cpu_share
    load = "" if share is None or share >= 0.95 else f" at the {share:.0%} of a core this process got at the start"
    return f"{measured}, {result.predicted_env_steps_per_s:,.0f} predicted by the plan's model{load}"


def placement_table(result: "TrainResult") -> Table:
    table = Table(title="where each primitive ran: measured in this run, predicted by the plan", title_justify="left")
    for col in ("primitive", "placement", "calls", "µs/call", "predicted µs/call", "share of its processes' wall"):
        table.add_column(col, justify="left" if col in ("primitive", "placement") else "right")
    timing = {name: (calls, us, share) for name, calls, us, share in result.timers}
    predicted = result.predicted_us_per_call or {}
    names = list(result.placement) + [name for name in timing if name not in result.placement]
    for primitive in names:
        if primitive not in timing and primitive not in predicted and primitive in ("Transfer", "ActorWait", "LearnerWait"):
            continue
        where = result.placement.get(primitive, "-")
        calls, us, share = timing.get(primitive, (0, 0.0, 0.0))
        guess = f"{predicted[primitive]:,.1f}" if primitive in predicted else "-"
        table.add_row(primitive, where, f"{calls:,}", f"{us:,.1f}", guess, f"{100 * share:.1f}%")
    return table
