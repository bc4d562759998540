"""Every file hetrl writes goes through one helper (hetrl.files), and no file-system failure is a
traceback (issue 24, items 2 and 3).

- A write is atomic: a temp file of its own writer, fsynced, renamed, the directory fsynced; a
  failure is one line naming the path and the cause, and leaves no temp file.
- A run directory or --out that cannot be written (a file, a read-only or unwritable directory) is
  refused before any work; the profile cache falls back to memory.
- A full disk (a small tmpfs, as root): a one-line "no space left" error, nothing partial left,
  the earlier checkpoints whole, and a resume once space is freed.
"""

import errno
import json
import os
import subprocess
from pathlib import Path

import pytest

from hetrl.cli import main
from hetrl.errors import HetrlError
from hetrl.files import atomic_path, write_file, write_json
from hetrl.run.metrics import read_metrics
from hetrl.run.rundir import RunDir

FLAGS = ["--plan", "rule", "--no-progress", "--seed", "3", "--set", "hidden=16,16", "--set", "learning_starts=200",
         "--set", "batch_size=16", "--set", "buffer_size=500", "--set", "log_every=100", "--set", "eval_every=0",
         "--set", "eval_episodes=2", "--set", "checkpoint_every=100"]


def one_line_error(capsys) -> str:
    """The error a command ended with: the last line it wrote to stderr, and its only error."""
    lines = capsys.readouterr().err.strip().splitlines()
    assert [line for line in lines if line.startswith("hetrl: error: ")] == lines[-1:], lines
    assert not any("Traceback" in line for line in lines), lines
    return lines[-1]


def temp_files(path: Path) -> list[str]:
    return sorted(p.name for p in path.rglob("*.tmp"))


def mount_tmpfs(path: Path, options: str) -> None:
    """A tmpfs at ``path`` (``options``: size=..., ro); skips the test where that cannot be done."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    path.mkdir(exist_ok=True)
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(path)], check=False, capture_output=True,
                          text=True)
    if done.returncode != 0:
        pytest.skip(f"mount -t tmpfs failed here ({done.stderr.strip()})")


@pytest.fixture
def read_only_dir(tmp_path):
    """A directory this process cannot write: a read-only tmpfs as root, mode 555 otherwise."""
    path = tmp_path / "read-only"
    if os.geteuid() == 0:
        mount_tmpfs(path, "ro,size=1m")
        yield path
        subprocess.run(["umount", str(path)], check=True)
    else:
        path.mkdir()
        path.chmod(0o555)
        yield path
        path.chmod(0o755)


# --- A: one helper for every write -------------------------------------------------------------
def test_a_write_is_fsynced_then_renamed_from_a_temp_file_of_its_own(tmp_path, monkeypatch):
    events = []
    real_fsync, real_replace = os.fsync, os.replace
    monkeypatch.setattr(os, "fsync", lambda fd: (events.append(("fsync", Path(f"/proc/self/fd/{fd}").resolve().name)),
                                                 real_fsync(fd))[1])
    monkeypatch.setattr(os, "replace", lambda src, dst: (events.append(("replace", Path(src).name)), real_replace(src, dst))[1])
    write_json(tmp_path / "plan.json", {"a": 1})
    tmp = f"plan.json.{os.getpid()}.tmp"
    assert events == [("fsync", tmp), ("replace", tmp), ("fsync", tmp_path.name)]  # the file, the rename, the folder
    assert json.loads((tmp_path / "plan.json").read_text()) == {"a": 1} and temp_files(tmp_path) == []


@pytest.mark.parametrize("failure, cause", [
    (OSError(errno.ENOSPC, "No space left on device"), "no space left on device"),
    (OSError(errno.EDQUOT, "Disk quota exceeded"), "disk quota exceeded"),
    (OSError(errno.EIO, "Input/output error"), "input/output error"),
])
def test_a_failed_write_is_one_line_with_the_cause_and_leaves_the_old_file(tmp_path, failure, cause):
    target = tmp_path / "checkpoints" / "step_0000003000.pt"
    write_file(target, b"old")

    def torch_like(f):  # torch.save reports the file object's OSError as a RuntimeError raised while handling it
        f.write(b"partial")
        try:
            raise failure
        except OSError:
            raise RuntimeError("[enforce fail at inline_container.cc:672] unexpected pos 64 vs 0") from None

    with pytest.raises(HetrlError) as raised:
        write_file(target, torch_like, size=2_800_000)
    assert str(raised.value).startswith(f"{cause} writing {target} (2.8 MB)") and "\n" not in str(raised.value)
    assert target.read_bytes() == b"old" and temp_files(tmp_path) == []


def test_other_errors_pass_through_and_leave_no_temp_file(tmp_path):
    with pytest.raises(ValueError, match="not the file system"), atomic_path(tmp_path / "x.json") as tmp:
        tmp.write_text("half")
        raise ValueError("not the file system")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("where", ["a file", "under a file", "read-only"])
def test_a_run_dir_that_cannot_be_written_is_refused_before_any_work(tmp_path, read_only_dir, capsys, monkeypatch, where):
    (tmp_path / "file").write_text("not a directory")
    run_dir = {"a file": tmp_path / "file", "under a file": tmp_path / "file" / "run",
               "read-only": read_only_dir / "run"}[where]
    import hetrl.training

    def no_planning(*args, **kwargs):
        raise AssertionError("planned a run whose directory cannot be written")

    monkeypatch.setattr(hetrl.training, "resolve", no_planning)
    assert main(["train", "dqn", "CartPole-v1", "--steps", "300", "--run-dir", str(run_dir), *FLAGS]) == 2
    message = one_line_error(capsys)
    assert f"--run-dir {run_dir}" in message and "choose another --run-dir" in message
    assert {"a file": "is a file, not a directory", "under a file": f"{tmp_path / 'file'} is a file",
            "read-only": "is on a read-only file system" if os.geteuid() == 0 else "is not writable"}[where] in message


@pytest.mark.parametrize("command, target, message", [
    (["plan", "dqn", "CartPole-v1", "--profile", "p.json", "--out"], "DIR", "--out {} is a directory, not a file"),
    (["profile", "dqn", "CartPole-v1", "--out"], "RO/p.json", "--out {} cannot be written"),
    (["export", "no/such/run", "--out"], "FILE/p.pt", "is a file, not a directory"),
    (["sweep", "dqn", "CartPole-v1", "--out"], "FILE", "--out {} is a file, not a directory"),
    (["exits", "sweep", "no/such/run", "--out"], "RO/exits", "--out {} cannot be written"),
    (["tabular", "collect", "FrozenLake-v1", "--out"], "DIR", "--out {} is a directory, not a file"),
    (["tabular", "train", "FrozenLake-v1", "--dataset", "no.npz", "--save-q"], "DIR/no/q.npy", "directory {} does not exist"),
])
def test_an_out_path_that_cannot_be_written_is_refused_before_any_work(tmp_path, read_only_dir, capsys, command, target,
                                                                      message):
    (tmp_path / "FILE").write_text("a file")
    (tmp_path / "DIR").mkdir()
    path = Path(target.replace("RO", str(read_only_dir)).replace("FILE", str(tmp_path / "FILE"))
                .replace("DIR", str(tmp_path / "DIR")))
    assert main([*command, str(path)]) == 2
    shown = path.parent if "does not exist" in message else path
    assert message.format(shown) in one_line_error(capsys)


def test_an_unwritable_profile_cache_falls_back_to_memory(tmp_path, monkeypatch, capsys):
    """Plain `hetrl train` (an auto plan, whose profile is cached) with XDG_CACHE_HOME a file."""
    cache = tmp_path / "cache-is-a-file"
    cache.write_text("")
    monkeypatch.setenv("XDG_CACHE_HOME", str(cache))
    flags = [f for f in FLAGS if f not in ("--plan", "rule")]
    assert main(["train", "dqn", "CartPole-v1", "--steps", "300", "--run-dir", str(tmp_path / "a"), *flags]) == 0
    err = capsys.readouterr().err.replace("\n", "")  # as printed, before the console wrapped it
    assert err.count("warning: the profile cache cannot be written (not a directory writing ") == 1, err
    assert "the profile is kept in memory, for this process only" in err
    # the same process plans again from the profile it kept
    assert main(["train", "dqn", "CartPole-v1", "--steps", "300", "--run-dir", str(tmp_path / "b"), *flags]) == 0
    assert "profiling dqn" not in capsys.readouterr().err


# --- B: a full disk --------------------------------------------------------------------------
def test_a_full_disk_is_one_line_and_loses_nothing(tmp_path, capsys):
    """A 3.5 MB tmpfs holds the first checkpoint (a 2.2 MB replay file) but not the second's."""
    disk = tmp_path / "disk"
    mount_tmpfs(disk, "size=3500k")
    try:
        run = disk / "run"
        args = ["train", "dqn", "CartPole-v1", "--steps", "400", "--run-dir", str(run), *FLAGS, "--set", "buffer_size=40000"]
        assert main(args) == 2
        message = one_line_error(capsys)
        assert f"no space left on device writing {run / 'checkpoints' / 'replay_step_0000000200.pt'} (" in message
        assert "free some space: the files written before are intact" in message
        assert temp_files(disk) == []  # the partial file is gone: it would keep the disk full
        assert [p.name for p in RunDir.open(run).checkpoints()] == ["step_0000000100.pt"]
        _, state = RunDir.open(run).load_checkpoint()  # whole, with its replay
        assert state["executor"]["env_steps"] == 100 and "replay" in state["executor"]
        subprocess.run(["mount", "-o", "remount,size=16m", str(disk)], check=True)  # space freed
        assert main(["resume", str(run), "--no-progress"]) == 0
        assert RunDir.open(run).checkpoints()[-1].name == "step_0000000400.pt"
        assert [row["env_steps"] for row in read_metrics(run / "metrics.csv")] == [100, 200, 300, 400]
    finally:
        subprocess.run(["umount", str(disk)], check=True)
