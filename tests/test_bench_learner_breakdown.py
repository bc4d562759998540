"""bench/learner_breakdown.py: every part of the update it reports was timed, and they add up to it."""

import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "bench"


@pytest.mark.parametrize("algo", ["td3", "dqn"])
def test_the_breakdown_times_the_products_and_the_compiled_kernels_of_an_update(algo):
    proc = subprocess.run([sys.executable, str(BENCH / "learner_breakdown.py"), "--algo", algo, "--hidden", "32,32",
                           "--batch", "32", "--threads", "1", "--calls", "5"],
                          capture_output=True, text=True, check=False, cwd=BENCH.parent, timeout=300)
    assert proc.returncode == 0, proc.stderr
    rows = {}
    for line in proc.stdout.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 2 and cells[1].replace(",", "").isdigit():
            rows[cells[0]] = int(cells[1].replace(",", ""))
    assert rows["whole update"] > 0 and rows["torch.mm, torch.bmm (BLAS products)"] > 0  # TD3's twin heads are a torch.bmm
    kernels = {label: us for label, us in rows.items() if "." in label and not label.startswith("torch.")}
    assert "fused_mlp.clip_and_adam" in kernels  # Adam, wrapped where the flat learners call it
    assert len(kernels) >= 3, rows
    parts = sum(us for label, us in rows.items() if label != "whole update")
    assert abs(parts - rows["whole update"]) <= len(rows)  # the rest is what the timed parts leave: rounding only
