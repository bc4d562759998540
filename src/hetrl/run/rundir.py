"""The run directory: config, placement, metrics, TensorBoard events, checkpoints, plots.

Writes are atomic (temp file, then rename), and nothing that exists is overwritten by a new run:
a directory that already holds a run is refused (one stopped before its first checkpoint may be
replaced with ``overwrite``).

A periodic checkpoint is ``checkpoints/step_N.pt`` (the training state) and, beside it,
``checkpoints/replay_step_N.pt`` (the replay's contents: by far the largest part). The step file
names its replay file and a token the replay file repeats, so a replay file is never taken for
another checkpoint of the same step. ``checkpoint_replay`` says which checkpoints keep their
replay file (``newest``, ``all``, ``none``) and ``keep_checkpoints`` how many step files are kept.
Each new checkpoint is written replay file first, step file second, then the older files are
pruned: a crash at any point leaves every earlier checkpoint whole and at worst files that the
pruning would have removed. Checkpoints written before this layout (format v1) hold their replay
inline and load as they are.

**One writer at a time.** A process that trains or resumes a run holds ``run.lock`` (an
exclusive ``flock``, with its PID inside) for the run's life: a second ``hetrl train`` into the
same directory, or a second ``hetrl resume``, is refused in one line naming that PID; ``hetrl
eval`` reads without it. The lock is released when the process ends, however it ends, so a lock
file still naming a PID whose lock is free was left by a killed process: it is taken over, with a
note, and the partial files that process left (``NAME.<pid>.tmp``, :mod:`hetrl.files`) are removed.

**Timelines.** Resuming from a checkpoint older than the newest moves the newer checkpoints, their
replay files, best.pt if it is newer and the metrics rows past that step into
``branches/<time>/`` (with a copy of config.json and plan.json: a run directory of its own, which
``hetrl eval`` reads), so the run goes on along one timeline and nothing saved is lost. A directory
holding checkpoints but no config.json is never taken for an empty one.

Every file is written in the form :mod:`hetrl.run.safe_state` describes (format v3): it loads with
``torch.load(weights_only=True)``, and so does every read here; older files (v1, v2) are read the
same way with numpy's array reconstructors allowed. The inline executor's env state is the one
pickle inside, unpickled only as ``env_state`` says: by default when this user's key signed it.
"""

from __future__ import annotations

import fcntl
import os
import re
import shutil
import time
import uuid
from pathlib import Path
from typing import IO, Any

from hetrl.config import TrainConfig, load_config, save_config
from hetrl.errors import HetrlError
from hetrl.files import (
    TEMP,
    check_writable,
    ensure_dir,
    file_part,
    fs_error,
    fs_errors,
    write_file,
)
from hetrl.run import safe_state
from hetrl.run.metrics import split_metrics
from hetrl.runtime.shared import pid_alive

# v2: the replay is in a file of its own (replay_file); v3: v2's layout, readable with weights_only=True
CHECKPOINT_FORMAT = safe_state.FORMAT
READABLE_FORMATS = (*safe_state.LEGACY_FORMATS, CHECKPOINT_FORMAT)
_STEP_FILE = re.compile(r"^step_(\d+)\.pt$")
_REPLAY_FILE = re.compile(r"^replay_step_(\d+)\.pt$")
BEST = "best.pt"  # the policy of the best evaluation so far; never a periodic checkpoint (no training state)
# what a run directory holds (README "What a run directory holds"): what `overwrite` removes, config.json
# last (until it goes, the directory is still a run: an interrupted removal is refused and can be retried)
_RUN_FILES = ("plan.json", "metrics.csv", "tb", "wandb", "checkpoints", "returns.png", "summary.json", "config.json")
LOCK = "run.lock"  # held (flock) by the process training or resuming the run; its PID inside


class RunDir:
    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.replaced = False  # create(overwrite=True) removed a run stopped before its first checkpoint
        self.notes: list[str] = []  # what the user should hear of (a stale lock taken over), for the session to print
        self._lock: IO[str] | None = None

    config = property(lambda self: self.path / "config.json")
    plan = property(lambda self: self.path / "plan.json")
    metrics = property(lambda self: self.path / "metrics.csv")
    tensorboard = property(lambda self: self.path / "tb")
    checkpoint_dir = property(lambda self: self.path / "checkpoints")
    plot = property(lambda self: self.path / "returns.png")
    summary = property(lambda self: self.path / "summary.json")
    best = property(lambda self: self.checkpoint_dir / BEST)
    lock_file = property(lambda self: self.path / LOCK)
    branches = property(lambda self: self.path / "branches")

    @staticmethod
    def check_target(path: str | Path | None, root: str | Path = "runs", overwrite: bool = False) -> None:
        """Before any work (a plan may profile for tens of seconds): refuse a run directory hetrl
        could not write (a file, a read-only or unwritable location:
        :func:`hetrl.files.check_writable`), or one :meth:`create` would refuse as it stands (a run
        is there). :meth:`create` checks again, under the lock."""
        check_writable(root if path is None else path, "--run-dir", directory=True)
        if path is not None and Path(path).is_dir():
            run = RunDir(Path(path))
            run.check_not_in_use()  # a run in use says so first, as create's lock would
            run.check_free(overwrite)

    def check_free(self, overwrite: bool = False) -> None:
        """Refuse, in one line, a directory that holds a run a new one may not replace: a run with
        checkpoints, a run stopped before its first one unless ``overwrite``, or checkpoints
        without config.json."""
        self.check_layout()
        if self.config.exists():
            if self.checkpoints():
                refused = "--overwrite replaces only a run stopped before its first checkpoint; " if overwrite else ""
                raise HetrlError(f"{self.path} already holds a run with checkpoints; {refused}continue it with "
                                 f"`hetrl resume {self.path}` or choose another --run-dir")
            if not overwrite:
                raise HetrlError(f"{self.path} holds a run stopped before its first checkpoint (nothing to resume); start "
                                 f"afresh there by adding --overwrite (hetrl.train: overwrite=True), or choose another --run-dir")
        elif self.checkpoints() or self.best.exists():
            raise HetrlError(self.no_config())

    @classmethod
    def create(cls, path: str | Path | None, config: TrainConfig, root: str | Path = "runs",
               overwrite: bool = False) -> RunDir:
        """A new run directory, locked (:meth:`lock`). ``overwrite``: replace a run that stopped
        before its first periodic checkpoint (its files are removed); a run holding one is never
        removed, and neither is a directory holding checkpoints without config.json."""
        run = cls(Path(path) if path is not None else _new_path(root, config))
        run.lock()
        try:
            run.check_free(overwrite)
            if run.config.exists():  # a run stopped before its first checkpoint, which overwrite replaces
                run.remove_unstarted()
                run.replaced = True
            save_config(config, run.config)
            ensure_dir(run.checkpoint_dir)
        except BaseException:
            run.unlock()
            raise
        return run

    @classmethod
    def open(cls, path: str | Path, lock: bool = False) -> RunDir:
        """An existing run; ``lock``: hold its lock (:meth:`lock`), as resuming does (reading it, as
        evaluation does, needs none)."""
        run = cls(Path(path))
        if not run.path.is_dir():
            found = "is a file, not a run directory" if run.path.exists() else "does not exist"
            raise HetrlError(f"run directory {run.path} {found}")
        run.check_layout()
        if not run.config.exists():
            if run.checkpoints() or run.best.exists():
                raise HetrlError(run.no_config())
            raise HetrlError(f"{run.path} is not a hetrl run directory (no config.json); pass the folder `hetrl train` created")
        if lock:
            run.lock()
        return run

    def check_layout(self) -> None:
        """Refuse, in one line, a run directory whose config.json is not a file or whose
        checkpoints is not a folder (read as an unstarted run, or one without checkpoints)."""
        for path, want in ((self.config, "file"), (self.checkpoint_dir, "folder")):
            if path.exists() and path.is_dir() != (want == "folder"):
                found = "a folder" if path.is_dir() else "a file"
                raise HetrlError(f"{path} is {found}, not the {want} a run directory keeps there; move it away, or "
                                 f"choose another --run-dir")

    def no_config(self) -> str:
        """The refusal of a directory that holds checkpoints but lost its config.json."""
        return (f"{self.path} holds checkpoints but no config.json (deleted, or an incomplete copy), so it is neither "
                f"empty nor resumable; put its config.json back (from a copy of the run) and `hetrl resume {self.path}`, "
                f"or choose another --run-dir")

    # --- the lock ----------------------------------------------------------------------------
    def lock(self) -> None:
        """Hold ``run.lock`` until :meth:`unlock` or this process ends: an exclusive ``flock`` on
        the file, which then holds this PID. Held by a running process: a HetrlError naming it. A
        PID left in a free lock file (a killed process's) is taken over with a note in
        :attr:`notes`, and the temp files of dead writers are removed."""
        if self._lock is not None:
            return
        ensure_dir(self.path)
        with fs_errors(self.lock_file):
            handle = open(self.lock_file, "a+")  # noqa: SIM115 (held open for the run's life: unlock closes it)
        try:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                raise self._in_use(handle) from None
            handle.seek(0)
            previous = handle.read().strip()
            with fs_errors(self.lock_file):
                handle.seek(0)
                handle.truncate()
                handle.write(f"{os.getpid()}\n")
                handle.flush()
        except BaseException:
            handle.close()
            raise
        self._lock = handle
        if previous and previous != str(os.getpid()):
            self.notes.append(f"took over {self.lock_file} from PID {previous}, which ended without releasing it "
                              f"(killed or crashed)")
        removed = self._dead_temps()
        for path in removed:
            path.unlink(missing_ok=True)
        if removed:
            self.notes.append(f"removed {len(removed)} partial file(s) that a killed writer left: "
                              f"{', '.join(p.name for p in removed)}")

    def _in_use(self, handle: IO[str]) -> HetrlError:
        handle.seek(0)
        holder = handle.read().strip() or "unknown"
        return HetrlError(f"{self.path} is in use by another hetrl process (PID {holder}, training or resuming it); "
                          f"wait for it to end or stop it (`kill {holder}` writes its checkpoint), then try again; "
                          f"`hetrl eval` reads it meanwhile")

    def check_not_in_use(self) -> None:
        """Refuse a run whose lock another process holds, as :meth:`lock` would, but without taking
        it (nothing written, no stale lock or temp file taken over: :meth:`lock` does that)."""
        if self._lock is not None or not self.lock_file.is_file():
            return
        with fs_errors(self.lock_file), open(self.lock_file) as handle:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                raise self._in_use(handle) from None
            fcntl.flock(handle, fcntl.LOCK_UN)

    def unlock(self) -> None:
        """Release ``run.lock`` (emptied first: an empty lock file claims nothing); nothing if not held."""
        handle, self._lock = self._lock, None
        if handle is None:
            return
        try:
            handle.seek(0)
            handle.truncate()
        except OSError:
            pass  # the lock is released on close all the same
        finally:
            handle.close()

    def _dead_temps(self) -> list[Path]:
        """Temp files (``NAME.<pid>.tmp``) in the run and checkpoints folders whose writer is gone."""
        found = []
        for folder in (self.path, self.checkpoint_dir):
            for path in folder.glob("*.tmp"):
                match = TEMP.match(path.name)
                if match and int(match.group(1)) != os.getpid() and not pid_alive(int(match.group(1))):
                    found.append(path)
        return found

    def load_config(self) -> TrainConfig:
        return load_config(self.config, invalid_hint="restore it from a copy", saved_run=True)

    def remove_unstarted(self) -> None:
        """Remove the files of a run that has no periodic checkpoint (other files are left)."""
        if self.checkpoints():
            raise HetrlError(f"{self.path} holds checkpoints; it is not removed")
        for video in [*self.path.glob("eval_*.gif"), *self.path.glob("eval_*.mp4")]:
            video.unlink()
        for name in _RUN_FILES:
            target = self.path / name
            if target.is_dir() and not target.is_symlink():
                shutil.rmtree(target)
            elif target.exists() or target.is_symlink():
                target.unlink()

    # --- checkpoints -------------------------------------------------------------------------
    def checkpoints(self) -> list[Path]:
        """Periodic checkpoint files (step_*.pt), oldest step first."""
        return [p for _, p in self._numbered(_STEP_FILE)]

    def replay_files(self) -> list[Path]:
        """The replay files (replay_step_*.pt), oldest step first."""
        return [p for _, p in self._numbered(_REPLAY_FILE)]

    def _numbered(self, pattern: re.Pattern[str]) -> list[tuple[int, Path]]:
        found = [(int(m.group(1)), p) for p in self.checkpoint_dir.glob("*.pt") if (m := pattern.match(p.name))]
        return sorted(found)

    def save_checkpoint(self, state: dict[str, Any], env_steps: int, replay: Any = None, *,
                        replay_policy: str = "newest", keep: int | None = None) -> Path:
        """Write ``step_N.pt`` holding ``state`` and, unless ``replay_policy`` is ``none``,
        ``replay_step_N.pt`` holding ``replay`` (the executor's replay state), then prune (:meth:`prune`)."""
        name = f"step_{env_steps:010d}.pt"
        state = {**state, "replay_file": None}
        if replay is not None and replay_policy != "none":
            token = uuid.uuid4().hex
            replay_path = self._write(self.checkpoint_dir / f"replay_{name}",
                                      {"kind": "replay", "env_steps": env_steps, "token": token, "replay": replay})
            state.update(replay_file=replay_path.name, replay_token=token)
        path = self._write(self.checkpoint_dir / name, state)
        self.prune(env_steps, keep, replay_policy)
        return path

    def prune(self, newest: int, keep: int | None, replay_policy: str) -> None:
        """After the checkpoint of step ``newest`` was written: delete the step files older than it
        beyond the newest ``keep`` (it included; 0 or None keeps all), then the replay files older
        than it that ``replay_policy`` does not keep (``all``: those of the step files kept). Files
        of later steps (a run resumed from an earlier checkpoint leaves them) are left alone, and
        so is best.pt. A step file goes before its replay file: an interrupted prune leaves only
        files it would have deleted."""
        older = [(step, path) for step, path in self._numbered(_STEP_FILE) if step < newest]
        doomed = older[: max(0, len(older) - (keep - 1))] if keep else []
        for _, path in doomed:
            path.unlink(missing_ok=True)
        kept = {step for step, _ in older} - {step for step, _ in doomed}
        for step, path in self._numbered(_REPLAY_FILE):
            if step < newest and (replay_policy != "all" or step not in kept):
                path.unlink(missing_ok=True)

    def save_best(self, state: dict[str, Any]) -> Path:
        """``checkpoints/best.pt``: replaced atomically, so a crash leaves the previous best whole."""
        return self._write(self.best, {"kind": "best", **state})

    def _write(self, path: Path, state: dict[str, Any]) -> Path:
        return safe_state.save({"format": CHECKPOINT_FORMAT, **state}, path)

    def branch_off(self, step: int) -> str | None:
        """Before a run goes on from the checkpoint of env step ``step``: move what lies past it
        (step and replay files of later steps, best.pt if a later evaluation wrote it, metrics rows
        past ``step``) into ``branches/<time>/``, a run directory of its own (config.json and
        plan.json copied). Returns the note to show, or None when nothing lies past ``step``. A
        step file moves before its replay file, so an interruption leaves no step file here
        without its replay; moving again finishes the job into another branch folder."""
        later = [path for n, path in self._numbered(_STEP_FILE) if n > step]
        if not later:
            return None
        branch = _new_folder(self.branches / time.strftime("%Y%m%d-%H%M%S"))
        for name in ("config.json", "plan.json"):
            if (self.path / name).exists():
                write_file(branch / name, (self.path / name).read_bytes())
        moved = ensure_dir(branch / "checkpoints")
        later += [path for n, path in self._numbered(_REPLAY_FILE) if n > step]
        if self.best.exists() and self._best_step() > step:
            later.append(self.best)
        for path in later:
            with fs_errors(moved / path.name):
                os.replace(path, moved / path.name)
        rows = split_metrics(self.metrics, step, branch / "metrics.csv")
        what = f"{len(later)} file(s) of later steps" + (f" and {rows} metrics row(s) past step {step:,}" if rows else "")
        return (f"resuming from env step {step:,}, before the newest checkpoint: moved {what} aside into {branch} (a run "
                f"directory of its own: `hetrl eval {branch}`), so this run goes on from here and a plain `hetrl resume` "
                f"continues this timeline")

    def _best_step(self) -> int:
        """The env step of best.pt (a best.pt that cannot be read counts as later than any step)."""
        try:
            _, state = self.load_checkpoint(self.best, replay=False, env_state="never")
            return int(state["env_steps"])
        except (HetrlError, KeyError, TypeError, ValueError):
            return 1 << 62

    def load_checkpoint(self, path: str | Path | None = None, replay: bool = True,
                        env_state: str = "signed") -> tuple[Path, dict[str, Any]]:
        """The newest checkpoint, or ``path``; a missing, corrupt or unsafe file is a HetrlError.

        ``replay``: put the replay, read from the checkpoint's replay file, into the executor state
        (``state["executor"]["replay"]``), as checkpoints before v2 held it; where it cannot be
        (none was saved, it was pruned, or it is unreadable) the state has no replay and
        ``state["replay_missing"]`` says why. Without ``replay`` (evaluation, export) the replay
        file is not read.

        ``env_state``: when the env state (a pickle) is unpickled: ``"signed"`` by this user's key,
        ``"any"`` or ``"never"`` (:mod:`hetrl.run.safe_state`); where it is not, it is None and
        ``state["env_state_dropped"]`` says why.
        """
        if env_state not in safe_state.ENV_STATE:
            raise ValueError(f"env_state is one of {safe_state.ENV_STATE}, not {env_state!r}")
        if path is None:
            found = self.checkpoints()
            if not found:
                raise HetrlError(f"{self.path} has no checkpoint in {self.checkpoint_dir}; nothing to resume or evaluate")
            path = found[-1]
        path = Path(path)
        state = self._read(path, env_state)
        if state.get("kind") == "replay":
            step_file = path.name.removeprefix("replay_")
            raise HetrlError(f"{path} holds only the replay of {step_file}; pass {step_file} instead")
        if replay and state.get("replay_file") is not None:
            found, why = self._read_replay(path, state)
            if found is not None:
                state["executor"]["replay"] = found
            else:
                state["replay_missing"] = why
        elif replay and "replay_file" in state:
            state["replay_missing"] = "it was saved without the replay (checkpoint_replay=none)"
        return path, state

    def _read(self, path: Path, env_state: str) -> dict[str, Any]:
        if not path.is_file():
            own = self.checkpoint_dir / path.name
            hint = f" (the run's own is {own})" if own.is_file() and not path.is_absolute() else ""
            found = "is a directory; pass a checkpoint file (checkpoints/step_N.pt)" if path.is_dir() else f"does not exist{hint}"
            raise HetrlError(f"checkpoint {path} {found}")
        try:
            state, dropped = _decoded(path, env_state)
        except safe_state.UnsafeCheckpoint as exc:
            raise HetrlError(f"{path} is refused: {exc}; hetrl reads checkpoints with torch.load(weights_only=True), "
                             f"which runs no code from a file, and hetrl writes none that needs more") from None
        except HetrlError:
            raise
        except Exception as exc:  # truncated zip, bad pickle, wrong file type, malformed record: all mean "corrupt"
            raise HetrlError(f"checkpoint {path} is corrupt or truncated ({type(exc).__name__}); "
                             f"{self._other_checkpoints(path)}") from None
        if dropped:
            state["env_state_dropped"] = (dropped[0] if state["format"] == CHECKPOINT_FORMAT else
                                          "it was written by an older hetrl, which did not sign env states")
        return state

    def _other_checkpoints(self, path: Path, shown: int = 3) -> str:
        """Where to go instead of the unreadable ``path``: the newest other step files that read
        whole, as paths ``--checkpoint`` takes."""
        readable = []
        for other in reversed(self.checkpoints()):
            if len(readable) == shown:
                break
            try:
                if other.resolve() != path.resolve() and _decoded(other, "never"):
                    readable.append(str(other))
            except Exception:  # noqa: BLE001 (corrupt too: not offered)
                continue
        if not readable:
            return "no other checkpoint of this run reads whole"
        return f"pass another with --checkpoint: {', '.join(readable)}"

    def _read_replay(self, path: Path, state: dict[str, Any]) -> tuple[Any, str]:
        """(the replay state, "") or (None, why not) for the step file ``path``."""
        replay_path = path.parent / state["replay_file"]
        if not replay_path.exists():
            return None, (f"its replay ({replay_path.name}) was not kept (checkpoint_replay=newest keeps only the newest "
                          f"checkpoint's)")
        try:
            saved, _ = _decoded(replay_path, "never")
        except safe_state.UnsafeCheckpoint as exc:
            return None, f"its replay file {replay_path.name} is refused ({exc})"
        except Exception as exc:  # noqa: BLE001 (as for a step file: any failure to read means corrupt)
            return None, f"its replay file {replay_path.name} is corrupt or truncated ({type(exc).__name__})"
        if saved.get("token") != state.get("replay_token"):
            return None, f"{replay_path.name} holds the replay of another checkpoint of that step"
        return saved["replay"], ""

    def resumable(self) -> list[Path]:
        """Step files whose replay file is there (cheap: checkpoints before v2, which hold their
        replay inline, are not listed)."""
        replays = {p.name.removeprefix("replay_") for p in self.replay_files()}
        return [p for p in self.checkpoints() if p.name in replays]


def _decoded(path: Path, env_state: str) -> tuple[dict[str, Any], list[str]]:
    """A checkpoint file's state as saved (:func:`safe_state.read`, then :func:`safe_state.decode`)
    and why its env state was left out, if it was."""
    raw = safe_state.read(path)
    if not isinstance(raw, dict) or raw.get("format") not in READABLE_FORMATS:
        raise HetrlError(f"{path} is not a hetrl checkpoint (expected format {CHECKPOINT_FORMAT})")
    executor = raw.get("executor")
    if raw["format"] != CHECKPOINT_FORMAT and isinstance(executor, dict) and isinstance(executor.get("envs"), bytes):
        executor["envs"] = safe_state.unsigned(executor["envs"])  # an older file's env pickle: never signed
    return safe_state.decode(raw, env_state)


def _new_folder(base: Path) -> Path:
    """``base``, or ``base_1``, ``base_2``... whichever this call creates first (two processes
    never get the same one)."""
    path, k = base, 1
    while True:
        try:
            path.mkdir(parents=True)
            return path
        except FileExistsError:
            path, k = base.with_name(f"{base.name}_{k}"), k + 1
        except OSError as exc:
            raise fs_error(exc, path) from None


def _new_path(root: str | Path, config: TrainConfig) -> Path:
    """A new run directory under ``root``: ALGO_ENV_sSEED_TIME, made here (``_1``... when taken)."""
    return _new_folder(Path(root) / f"{config.algo}_{file_part(config.env)}_s{config.seed}_{time.strftime('%Y%m%d-%H%M%S')}")
