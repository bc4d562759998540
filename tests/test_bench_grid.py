"""bench/grid.py's command line: a bad --cells entry is one clear error, under python -O too."""

import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "bench"
sys.path.insert(0, str(BENCH))

import grid  # noqa: E402  (bench/ is not a package)


def test_a_cell_parses_and_a_bad_ratio_or_shape_is_refused():
    cell = grid.Cell.parse("dqn:CartPole-v1:64,64:64:1")
    assert (cell.algo, cell.env_id, cell.hidden, cell.batch, cell.ratio) == ("dqn", "CartPole-v1", "64,64", 64, "1")
    with pytest.raises(ValueError, match="ratio '0.5' is not one of"):
        grid.Cell.parse("dqn:CartPole-v1:64,64:64:0.5")
    with pytest.raises(ValueError):
        grid.Cell.parse("dqn:CartPole-v1:64")


@pytest.mark.parametrize("flags", [[], ["-O"]])
def test_the_command_line_refuses_a_bad_cell_in_one_line(flags):
    proc = subprocess.run([sys.executable, *flags, str(BENCH / "grid.py"), "--cells", "dqn:CartPole-v1:64,64:64:0.5"],
                          capture_output=True, text=True, check=False)
    assert proc.returncode == 2
    assert "--cells takes algo:env:hidden:batch:ratio with ratio in" in proc.stderr and "Traceback" not in proc.stderr
