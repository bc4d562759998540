"""bench/workers.py: a bench script's --worker run in a fresh interpreter, its JSON, its errors."""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))

from workers import BENCH, run_worker  # noqa: E402  (bench/ is not a package)

SCRIPT = '''
import json, os, sys
if sys.argv[2] == "fail":
    print("line one", file=sys.stderr); print("the last words", file=sys.stderr); sys.exit(3)
print("some progress")
print(json.dumps({"argv": sys.argv[1:], "omp": os.environ.get("OMP_NUM_THREADS"),
                  "mkl": os.environ.get("MKL_NUM_THREADS"), "path": os.environ["PYTHONPATH"],
                  "extra": os.environ.get("EXTRA")}))
'''


@pytest.fixture
def script(tmp_path):
    path = tmp_path / "worker.py"
    path.write_text(SCRIPT)
    return path


def test_the_last_json_line_comes_back_with_threads_set_or_unset(script, monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "7")
    out = run_worker(script, ["job", "x"], 2, first_on_path=["/somewhere"], env={"EXTRA": "yes"})
    assert out["argv"] == ["--worker", "job", "x"] and out["omp"] == out["mkl"] == "2" and out["extra"] == "yes"
    assert out["path"].split(":")[:2] == ["/somewhere", str(BENCH)]
    unset = run_worker(script, ["job"], None)
    assert unset["omp"] is None and unset["mkl"] is None  # the library sees the machine as a user's run does


def test_a_failing_worker_raises_with_the_tail_of_its_stderr(script):
    with pytest.raises(RuntimeError) as info:
        run_worker(script, ["fail"], 1, tail_lines=1)
    assert str(info.value) == "the last words"
