"""Metric rows, written to metrics.csv and to TensorBoard event files, and to any further sink
(Weights & Biases: hetrl.run.wandb_sink).

metrics.csv is appended to, a row at a time. A crash or a full disk can leave its last row cut
short: the reader skips such a row, and the writer cuts it off before appending (with a note), so
that no later row is glued to it.
"""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Protocol

from hetrl.errors import HetrlError
from hetrl.files import fs_errors, write_text

# the timed stages whose share of wall time each row records (share_<stage>)
STAGES = ("EnvStep", "Act", "WeightSync", "WeightFetch", "ReplayAdd", "ReplaySample", "Transfer", "Learn", "PriorityUpdate",
          "ActorWait", "LearnerWait")

COLUMNS = (
    "env_steps", "updates", "wall_s", "episodes", "return_mean", "length_mean", "loss", "actor_loss", "exploration",
    "env_steps_per_s", "updates_per_s", "eval_return_mean", "eval_return_std",
    "actor_restarts", "actors_lost", "staleness_mean", "staleness_max",
    *(f"share_{name}" for name in STAGES),
)


# TensorBoard groups, as Stable-Baselines3 and CleanRL name theirs; a column not listed goes to train/
GROUPS = {
    "rollout": ("episodes", "return_mean", "length_mean", "exploration"),
    "train": ("updates", "loss", "actor_loss", "staleness_mean", "staleness_max"),
    "eval": ("eval_return_mean", "eval_return_std"),
    "time": ("wall_s", "env_steps_per_s", "updates_per_s"),
    "system": ("actor_restarts", "actors_lost"),
}
_GROUP_OF = {column: group for group, columns in GROUPS.items() for column in columns}


def tensorboard_tag(column: str) -> str:
    """``rollout/return_mean``, ``time/share_Learn``: the column under its group."""
    group = "time" if column.startswith("share_") else _GROUP_OF.get(column, "train")
    return f"{group}/{column}"


def _csv_columns(csv_path: Path) -> list[str]:
    """The columns of an existing metrics.csv, in its order, so that appending keeps its layout: a
    file written before a column existed is first rewritten with every column (its rows left empty
    in the new ones); a column it has that COLUMNS no longer lists stays, after them."""
    header, rows = _read_rows(csv_path)
    if not header:
        return list(COLUMNS)
    if all(c in header for c in COLUMNS):
        return header
    columns = [*COLUMNS, *(c for c in header if c not in COLUMNS)]
    write_text(csv_path, _csv_text(columns, rows))  # the old file or the whole new one, never a part
    return columns


def _read_rows(csv_path: Path) -> tuple[list[str], list[dict[str, Any]]]:
    """The header and rows of metrics.csv (none if it is missing), without a last row cut short."""
    try:
        text = csv_path.read_text()
    except FileNotFoundError:
        return [], []
    reader = csv.DictReader(io.StringIO(text[: text.rfind("\n") + 1]))
    return list(reader.fieldnames or ()), list(reader)


def _csv_text(columns: list[str], rows: list[dict[str, Any]]) -> str:
    """A metrics.csv with ``columns`` holding ``rows`` (fields a row lacks left empty)."""
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=columns)
    writer.writeheader()
    writer.writerows({k: row.get(k) or "" for k in columns} for row in rows)
    return out.getvalue()


def repair_torn_row(csv_path: Path) -> str | None:
    """Cut off a last row without its line end (a crash or a full disk left it); says so, or None."""
    try:
        data = csv_path.read_bytes()
    except FileNotFoundError:
        return None
    if not data or data.endswith(b"\n"):
        return None
    keep = data.rfind(b"\n") + 1
    with fs_errors(csv_path), csv_path.open("r+b") as f:
        f.truncate(keep)
    return (f"{csv_path} ended in a row cut short ({len(data) - keep} bytes; a crash or a full disk leaves one): "
            f"removed it, the rows before are kept")


def split_metrics(csv_path: Path, step: int, dest: Path) -> int:
    """Move the rows of ``csv_path`` past env step ``step`` into ``dest`` (a metrics.csv of the same
    columns); returns how many moved. ``dest`` is written first: an interruption leaves rows in
    both, never in neither."""
    columns, rows = _read_rows(csv_path)
    later = [row for row in rows if _number(row.get("env_steps")) > step]
    if later:
        write_text(dest, _csv_text(columns, later))
        write_text(csv_path, _csv_text(columns, [row for row in rows if not _number(row.get("env_steps")) > step]))
    return len(later)


def _number(text: Any) -> float:
    """A csv field as a number (NaN when it is not one: no comparison holds, and readers skip it)."""
    try:
        return float(text)
    except (TypeError, ValueError):
        return math.nan


class MetricsSink(Protocol):
    """Somewhere else each row goes (a :class:`hetrl.run.wandb_sink.WandbSink`)."""

    def write(self, row: dict[str, Any]) -> None: ...

    def close(self, failed: bool = False) -> None: ...


class MetricsWriter:
    """Each row to metrics.csv, to TensorBoard and to every one of ``sinks``; ``close`` closes them all."""

    def __init__(self, csv_path: Path, tensorboard_dir: Path, resume_step: int | None = None,
                 sinks: Sequence[MetricsSink] = (), note: Callable[[str], None] = lambda _: None) -> None:
        from torch.utils.tensorboard import SummaryWriter

        repaired = repair_torn_row(csv_path)
        if repaired:
            note(repaired)
        self._path, self._tb_dir = csv_path, tensorboard_dir
        self._columns = _csv_columns(csv_path)
        with fs_errors(csv_path):
            new = not csv_path.exists() or csv_path.stat().st_size == 0
            self._file = csv_path.open("a", newline="")
            self._csv = csv.DictWriter(self._file, fieldnames=self._columns)
            if new:
                self._csv.writeheader()
        with fs_errors(tensorboard_dir):  # purge_step drops events past the checkpoint a resumed run restarts from
            self._tb = SummaryWriter(str(tensorboard_dir), purge_step=resume_step)
        self._sinks = list(sinks)
        self._closed = False

    def write(self, row: dict[str, Any]) -> None:
        with fs_errors(self._path):
            self._csv.writerow({k: ("" if row.get(k) is None else row[k]) for k in self._columns})
            self._file.flush()
        step = int(row["env_steps"])
        with fs_errors(self._tb_dir):
            for key, value in row.items():
                if key != "env_steps" and isinstance(value, (int, float)) and not math.isnan(value):
                    self._tb.add_scalar(tensorboard_tag(key), value, step)
        for sink in self._sinks:
            sink.write(row)

    def close(self, failed: bool = False) -> None:
        """Close every output once (later calls do nothing); ``failed``: the run ended in an error."""
        if self._closed:
            return
        self._closed = True
        for close, path in ((self._file.close, self._path), (self._tb.close, self._tb_dir)):
            try:
                with fs_errors(path):
                    close()
            except HetrlError:
                if not failed:  # a run failing already (a full disk, say) keeps its own error
                    raise
        for sink in self._sinks:
            sink.close(failed)


def read_metrics(csv_path: Path) -> list[dict[str, float | None]]:
    """Rows of metrics.csv as numbers, one per env step: rows written at the same step (a final
    evaluation, or a resumed run re-logging steps after its checkpoint) merge, newer values winning.
    A last row cut short is skipped, and so is a row without its step; other fields that are not
    numbers read as NaN."""
    merged: dict[float, dict[str, float | None]] = {}
    for row in _read_rows(csv_path)[1]:
        values = {k: _number(v) for k, v in row.items() if isinstance(k, str) and v not in ("", None)}
        if not math.isnan(values.get("env_steps", math.nan)):
            merged.setdefault(values["env_steps"], dict.fromkeys(COLUMNS)).update(values)
    return [merged[k] for k in sorted(merged)]
