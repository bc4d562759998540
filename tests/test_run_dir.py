"""Run directories that cannot be corrupted (issue 24, items 4 to 6).

- One writer per run directory (run.lock): two runs started together into one directory, a resume
  or a train while a run holds it (eval reads meanwhile), the stale lock of a killed run.
- A metrics.csv whose last row was cut short is read, and repaired on resume.
- A directory holding checkpoints but no config.json is never taken for an empty one.
(Resuming from an older checkpoint, which moves the later timeline aside: tests/test_checkpoints.py.)
"""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from test_files import FLAGS, one_line_error, temp_files
from test_resume import SMALL

import hetrl
from hetrl.cli import main
from hetrl.run.metrics import read_metrics
from hetrl.run.rundir import RunDir

SRC = Path(__file__).resolve().parents[1] / "src"  # the hetrl these tests are part of, for the subprocesses
ENV = {**os.environ, "OMP_NUM_THREADS": "1",
       "PYTHONPATH": os.pathsep.join(filter(None, [str(SRC), os.environ.get("PYTHONPATH")]))}
RUN = dict(seed=3, progress=False, plan="rule", eval_episodes=2, log_every=100, eval_every=0, checkpoint_every=100,
           **SMALL["dqn"])


def snapshot(path: Path) -> dict[str, bytes]:
    return {str(p.relative_to(path)): p.read_bytes() for p in sorted(path.rglob("*")) if p.is_file()}


# --- C: one writer per run directory ---------------------------------------------------------
RACE = """
import os, sys, time
from pathlib import Path
import hetrl.run.rundir as rundir

folder, create, save_config = Path(sys.argv[1]), rundir.RunDir.create.__func__, rundir.save_config

def barrier(name):
    (folder / f"{name}.{os.getpid()}").touch()
    while not (folder / name).exists():
        time.sleep(0.0005)

def create_together(cls, *args, **kwargs):  # both processes create the run directory at the same moment...
    barrier("create")
    return create(cls, *args, **kwargs)

def save_config_together(*args):  # ...and whoever gets to writing its config waits for the other to get there too
    barrier("config")
    return save_config(*args)

rundir.RunDir.create, rundir.save_config = classmethod(create_together), save_config_together
from hetrl.cli import main
raise SystemExit(main(sys.argv[2:]))
"""


def test_two_runs_started_together_into_one_directory(tmp_path):
    """Both processes reach the run directory's creation together; where both then got as far as
    writing a config.json (a check-then-write creation), both would be accepted and write into
    one directory. Exactly one must train; the other is refused in one line; nothing is corrupt."""
    run, sync = tmp_path / "run", tmp_path / "sync"
    sync.mkdir()
    command = [sys.executable, "-c", RACE, str(sync), "train", "dqn", "CartPole-v1", "--steps", "400",
               "--run-dir", str(run), *FLAGS]
    procs = [subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ENV) for _ in range(2)]

    def release(name: str, until) -> None:
        deadline = time.time() + 120
        while not until():
            assert time.time() < deadline, [p.communicate() for p in procs]
            time.sleep(0.01)
        (sync / name).touch()

    try:
        release("create", lambda: len(list(sync.glob("create.*"))) == 2 or any(p.poll() is not None for p in procs))
        release("config", lambda: len(list(sync.glob("config.*"))) == 2 or any(p.poll() is not None for p in procs))
        outcomes = sorted((p.wait(timeout=300), p.communicate()[1]) for p in procs)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    (won, _), (lost, err) = outcomes
    assert (won, lost) == (0, 2), outcomes
    lines = err.strip().splitlines()
    assert "Traceback" not in err and lines[-1].startswith("hetrl: error: ")
    assert "is in use by another hetrl process (PID" in lines[-1]
    # one run, whole: every checkpoint loads, one metrics row per step, nothing partial left
    assert json.loads((run / "config.json").read_text())["steps"] == 400
    assert [p.name for p in RunDir.open(run).checkpoints()] == [f"step_{s:010d}.pt" for s in (200, 300, 400)]
    for path in RunDir.open(run).checkpoints():
        RunDir.open(run).load_checkpoint(path, replay=False)
    rows = (run / "metrics.csv").read_text().splitlines()
    assert [int(r.split(",")[0]) for r in rows[1:]] == [100, 200, 300, 400] and len({r.count(",") for r in rows}) == 1
    assert temp_files(run) == [] and (run / "run.lock").read_text() == ""


def test_a_run_in_progress_is_not_resumed_twice_but_can_be_evaluated(tmp_path, capsys):
    run = tmp_path / "run"
    hetrl.train("dqn", "CartPole-v1", steps=300, run_dir=run, **RUN)
    seen = {}

    class Meanwhile(hetrl.Callback):
        def on_checkpoint(self, info):
            if not seen:  # while this resume holds the run
                capsys.readouterr()
                seen["resume"] = main(["resume", str(run), "--steps", "900", "--no-progress"]), one_line_error(capsys)
                seen["train"] = main(["train", "dqn", "CartPole-v1", "--run-dir", str(run), *FLAGS]), one_line_error(capsys)
                seen["eval"] = main(["eval", str(run), "--checkpoint", "final", "--episodes", "1"])

    hetrl.resume(run, steps=500, callbacks=[Meanwhile()], progress=False)
    for command in ("resume", "train"):
        code, message = seen[command]
        assert code == 2 and f"{run} is in use by another hetrl process (PID {os.getpid()}" in message
        assert "`hetrl eval` reads it meanwhile" in message
    assert seen["eval"] == 0
    assert (run / "run.lock").read_text() == ""  # released: a later resume goes ahead
    assert hetrl.resume(run, steps=600, progress=False).env_steps == 600


def test_the_lock_of_a_killed_run_is_taken_over_with_a_note(tmp_path, capsys):
    run = tmp_path / "run"
    proc = subprocess.Popen([sys.executable, "-m", "hetrl", "train", "dqn", "CartPole-v1", "--steps", "1000000",
                             "--run-dir", str(run), "--executor", "inline", *FLAGS], stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True, env=ENV, start_new_session=True)
    try:
        deadline = time.time() + 120
        while not list((run / "checkpoints").glob("step_*.pt")):
            assert time.time() < deadline and proc.poll() is None, proc.communicate()[1][-3000:]
            time.sleep(0.05)
        assert (run / "run.lock").read_text() == f"{proc.pid}\n"
        assert main(["resume", str(run), "--no-progress"]) == 2
        assert f"is in use by another hetrl process (PID {proc.pid}" in one_line_error(capsys)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)  # no clean-up: the lock file keeps its PID
        proc.communicate()
    partial = run / "checkpoints" / f"step_0000099999.pt.{proc.pid}.tmp"  # what a kill during a write leaves
    partial.write_bytes(b"half a checkpoint")
    newest = int(RunDir.open(run).checkpoints()[-1].name[5:15])
    assert hetrl.resume(run, steps=newest + 100, progress=False).env_steps == newest + 100
    err = capsys.readouterr().err
    assert f"note: took over {run / 'run.lock'} from PID {proc.pid}, which ended without releasing it" in err
    assert "partial file(s) that a killed writer left: " in err and partial.name in err and temp_files(run) == []


# --- D: a torn last row of metrics.csv -------------------------------------------------------
def test_a_metrics_csv_cut_short_is_read_and_repaired_on_resume(tmp_path, capsys):
    run = tmp_path / "run"
    hetrl.train("dqn", "CartPole-v1", steps=300, run_dir=run, **RUN)
    with (run / "metrics.csv").open("a") as f:
        f.write("400,50,1.2")  # a crash (or a full disk) in the middle of a row
    assert [row["env_steps"] for row in read_metrics(run / "metrics.csv")] == [100, 200, 300]
    capsys.readouterr()
    assert hetrl.resume(run, steps=500, progress=False).env_steps == 500
    notes = [line for line in capsys.readouterr().err.splitlines() if "cut short" in line]
    assert len(notes) == 1 and notes[0].startswith(f"note: {run / 'metrics.csv'} ended in a row cut short (10 bytes")
    rows = (run / "metrics.csv").read_text().splitlines()
    assert [int(r.split(",")[0]) for r in rows[1:]] == [100, 200, 300, 400, 500] and len({r.count(",") for r in rows}) == 1
    assert [row["env_steps"] for row in hetrl.resume(run, steps=600, progress=False).metrics][-1] == 600


# --- E: checkpoints without config.json ------------------------------------------------------
def test_a_directory_with_checkpoints_but_no_config_is_never_taken_for_empty(tmp_path, capsys):
    run = tmp_path / "run"
    hetrl.train("dqn", "CartPole-v1", steps=200, run_dir=run, **RUN)
    (run / "config.json").unlink()
    before = snapshot(run)
    for command in (["train", "dqn", "CartPole-v1", "--steps", "300", "--run-dir", str(run), *FLAGS],
                    ["train", "dqn", "CartPole-v1", "--steps", "300", "--run-dir", str(run), "--overwrite", *FLAGS],
                    ["resume", str(run)]):
        assert main(command) == 2
        message = one_line_error(capsys)
        assert f"{run} holds checkpoints but no config.json" in message and "put its config.json back" in message
    assert snapshot(run) == before


def test_a_config_folder_or_a_checkpoints_file_is_named_as_such(tmp_path, capsys):
    """Not read as 'a run stopped before its first checkpoint' or 'has no checkpoint'."""
    run = tmp_path / "run"
    (run / "config.json").mkdir(parents=True)
    assert main(["train", "dqn", "CartPole-v1", "--steps", "300", "--run-dir", str(run), *FLAGS]) == 2
    assert f"{run / 'config.json'} is a folder, not the file a run directory keeps there" in one_line_error(capsys)
    other = tmp_path / "other"
    hetrl.train("dqn", "CartPole-v1", steps=200, run_dir=other, **RUN)
    for path in (other / "checkpoints").iterdir():
        path.unlink()
    (other / "checkpoints").rmdir()
    (other / "checkpoints").write_text("")
    assert main(["resume", str(other)]) == 2
    assert f"{other / 'checkpoints'} is a file, not the folder a run directory keeps there" in one_line_error(capsys)
