"""Metric rows, written to metrics.csv and to TensorBoard event files."""

from __future__ import annotations

import csv
import math
import os
from pathlib import Path
from typing import Any

# the timed stages whose share of wall time each row records (share_<stage>)
STAGES = ("EnvStep", "Act", "WeightSync", "WeightFetch", "ReplayAdd", "ReplaySample", "Transfer", "Learn", "PriorityUpdate",
          "ActorWait", "LearnerWait")

COLUMNS = (
    "env_steps", "updates", "wall_s", "episodes", "return_mean", "length_mean", "loss", "actor_loss", "exploration",
    "env_steps_per_s", "updates_per_s", "eval_return_mean", "eval_return_std",
    "actor_restarts", "staleness_mean", "staleness_max",
    *(f"share_{name}" for name in STAGES),
)


# TensorBoard groups, as Stable-Baselines3 and CleanRL name theirs; a column not listed goes to train/
GROUPS = {
    "rollout": ("episodes", "return_mean", "length_mean", "exploration"),
    "train": ("updates", "loss", "actor_loss", "staleness_mean", "staleness_max"),
    "eval": ("eval_return_mean", "eval_return_std"),
    "time": ("wall_s", "env_steps_per_s", "updates_per_s"),
    "system": ("actor_restarts",),
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
    if not csv_path.exists() or csv_path.stat().st_size == 0:
        return list(COLUMNS)
    with csv_path.open(newline="") as f:
        reader = csv.DictReader(f)
        header = list(reader.fieldnames or ())
        if all(c in header for c in COLUMNS):
            return header
        rows = list(reader)
    columns = [*COLUMNS, *(c for c in header if c not in COLUMNS)]
    tmp = csv_path.with_suffix(f".{os.getpid()}.tmp")
    with tmp.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=columns)
        writer.writeheader()
        writer.writerows({k: row.get(k) or "" for k in columns} for row in rows)
    os.replace(tmp, csv_path)  # the old file or the whole new one, never a part
    return columns


class MetricsWriter:
    def __init__(self, csv_path: Path, tensorboard_dir: Path, resume_step: int | None = None) -> None:
        from torch.utils.tensorboard import SummaryWriter

        self._columns = _csv_columns(csv_path)
        new = not csv_path.exists() or csv_path.stat().st_size == 0
        self._file = csv_path.open("a", newline="")
        self._csv = csv.DictWriter(self._file, fieldnames=self._columns)
        if new:
            self._csv.writeheader()
        # purge_step drops events past the checkpoint a resumed run restarts from
        self._tb = SummaryWriter(str(tensorboard_dir), purge_step=resume_step)

    def write(self, row: dict[str, Any]) -> None:
        self._csv.writerow({k: ("" if row.get(k) is None else row[k]) for k in self._columns})
        self._file.flush()
        step = int(row["env_steps"])
        for key, value in row.items():
            if key != "env_steps" and isinstance(value, (int, float)) and not math.isnan(value):
                self._tb.add_scalar(tensorboard_tag(key), value, step)

    def close(self) -> None:
        self._file.close()
        self._tb.close()


def read_metrics(csv_path: Path) -> list[dict[str, float | None]]:
    """Rows of metrics.csv as numbers, one per env step: rows written at the same step (a final
    evaluation, or a resumed run re-logging steps after its checkpoint) merge, newer values winning."""
    if not csv_path.exists():
        return []
    merged: dict[float, dict[str, float | None]] = {}
    with csv_path.open() as f:
        for row in csv.DictReader(f):
            values = {k: float(v) for k, v in row.items() if v not in ("", None)}
            merged.setdefault(values["env_steps"], dict.fromkeys(COLUMNS)).update(values)
    return [merged[k] for k in sorted(merged)]
