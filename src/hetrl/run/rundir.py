"""The run directory: config, placement, metrics, TensorBoard events, checkpoints, plots.

Writes are atomic (temp file, then rename), and nothing that exists is overwritten by a new run:
a directory that already holds a run is refused.
"""

from __future__ import annotations

import os
import re
import time
from pathlib import Path
from typing import Any

import torch

from hetrl.config import TrainConfig, load_config, save_config
from hetrl.errors import HetrlError
from hetrl.files import file_part

CHECKPOINT_FORMAT = "hetrl-checkpoint-v1"
_STEP_FILE = re.compile(r"step_(\d+)\.pt$")
BEST = "best.pt"  # the policy of the best evaluation so far; never a periodic checkpoint (no training state)


class RunDir:
    def __init__(self, path: Path) -> None:
        self.path = Path(path)

    config = property(lambda self: self.path / "config.json")
    plan = property(lambda self: self.path / "plan.json")
    metrics = property(lambda self: self.path / "metrics.csv")
    tensorboard = property(lambda self: self.path / "tb")
    checkpoint_dir = property(lambda self: self.path / "checkpoints")
    plot = property(lambda self: self.path / "returns.png")
    summary = property(lambda self: self.path / "summary.json")
    best = property(lambda self: self.checkpoint_dir / BEST)

    @classmethod
    def create(cls, path: str | Path | None, config: TrainConfig, root: str | Path = "runs") -> "RunDir":
        if path is None:
            stamp = time.strftime("%Y%m%d-%H%M%S")
            base = Path(root) / f"{config.algo}_{file_part(config.env)}_s{config.seed}_{stamp}"
            path, k = base, 1
            while path.exists():
                path, k = base.with_name(f"{base.name}_{k}"), k + 1
        run = cls(Path(path))
        if run.config.exists():
            raise HetrlError(
                f"{run.path} already holds a run; continue it with `hetrl resume {run.path}` or choose another --run-dir"
            )
        run.checkpoint_dir.mkdir(parents=True, exist_ok=True)
        save_config(config, run.config)
        return run

    @classmethod
    def open(cls, path: str | Path) -> "RunDir":
        run = cls(Path(path))
        if not run.path.is_dir():
            raise HetrlError(f"run directory {run.path} does not exist")
        if not run.config.exists():
            raise HetrlError(f"{run.path} is not a hetrl run directory (no config.json); pass the folder `hetrl train` created")
        return run

    def load_config(self) -> TrainConfig:
        return load_config(self.config, invalid_hint="restore it from a copy")

    # --- checkpoints -------------------------------------------------------------------------
    def checkpoints(self) -> list[Path]:
        """Checkpoint files, oldest step first."""
        found = [(int(m.group(1)), p) for p in self.checkpoint_dir.glob("step_*.pt") if (m := _STEP_FILE.search(p.name))]
        return [p for _, p in sorted(found)]

    def save_checkpoint(self, state: dict[str, Any], env_steps: int) -> Path:
        return self._write(self.checkpoint_dir / f"step_{env_steps:010d}.pt", state)

    def save_best(self, state: dict[str, Any]) -> Path:
        """``checkpoints/best.pt``: replaced atomically, so a crash leaves the previous best whole."""
        return self._write(self.best, {"kind": "best", **state})

    def _write(self, path: Path, state: dict[str, Any]) -> Path:
        tmp = path.with_suffix(".tmp")
        torch.save({"format": CHECKPOINT_FORMAT, **state}, tmp)
        os.replace(tmp, path)
        return path

    def load_checkpoint(self, path: str | Path | None = None) -> tuple[Path, dict[str, Any]]:
        """The newest checkpoint, or ``path``; a missing or corrupt file is a HetrlError."""
        if path is None:
            found = self.checkpoints()
            if not found:
                raise HetrlError(f"{self.path} has no checkpoint in {self.checkpoint_dir}; nothing to resume or evaluate")
            path = found[-1]
        path = Path(path)
        if not path.exists():
            raise HetrlError(f"checkpoint {path} does not exist")
        try:
            state = torch.load(path, map_location="cpu", weights_only=False)
        except Exception as exc:  # truncated zip, bad pickle, wrong file type: all mean "corrupt"
            older = [p.name for p in self.checkpoints() if p != path]
            hint = f"use an earlier one with --checkpoint ({', '.join(older)})" if older else "no earlier checkpoint exists"
            raise HetrlError(f"checkpoint {path} is corrupt or truncated ({type(exc).__name__}); {hint}") from None
        if not isinstance(state, dict) or state.get("format") != CHECKPOINT_FORMAT:
            raise HetrlError(f"{path} is not a hetrl checkpoint (expected format {CHECKPOINT_FORMAT})")
        return path, state
