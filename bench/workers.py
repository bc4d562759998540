"""The parent side of a bench script's ``--worker`` mode, shared by peers.py, grid.py and pixels.py:
run ``SCRIPT --worker JOB...`` in a fresh interpreter (so every library starts cold, with its own
thread settings) and read the JSON line it prints last."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
THREAD_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS")


def worker_environ(threads: int | None, first_on_path: Sequence[str] = (),
                   env: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment of a bench subprocess: OMP/MKL threads set to ``threads`` (None: unset, as a
    user's run finds them), bench/ on PYTHONPATH after ``first_on_path``, and ``env`` added."""
    environ = {k: v for k, v in os.environ.items() if k not in THREAD_VARIABLES}
    if threads is not None:
        environ.update({name: str(threads) for name in THREAD_VARIABLES})
    environ["PYTHONPATH"] = os.pathsep.join(filter(None, [*first_on_path, str(BENCH), os.environ.get("PYTHONPATH", "")]))
    environ.update(env or {})
    return environ


def run_worker(script: Path, job: Sequence[str], threads: int | None, *, first_on_path: Sequence[str] = (),
               env: Mapping[str, str] | None = None, tail_lines: int = 12) -> dict[str, Any]:
    """The JSON ``script --worker JOB...`` prints last; RuntimeError with its stderr's last
    ``tail_lines`` lines when it fails. ``threads``: OMP/MKL threads, or None to leave them unset, so
    that the library sees the machine as a user's run does. bench/ is on PYTHONPATH, after
    ``first_on_path`` (a checkout whose hetrl should win); ``env`` adds variables."""
    proc = subprocess.run([sys.executable, str(script), "--worker", *job], check=False, capture_output=True, text=True,
                          env=worker_environ(threads, first_on_path, env), cwd=BENCH.parent)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    if proc.returncode != 0 or not lines:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-tail_lines:]
        raise RuntimeError("\n".join(tail) or f"exit code {proc.returncode}")
    return json.loads(lines[-1])
