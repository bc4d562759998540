"""Files hetrl writes and reads: every write goes through :func:`atomic_path` (or :func:`write_file`,
:func:`write_text`, :func:`write_json` on top of it), so that a file holds either its old or its
whole new content, and a failure of the file system is one line naming the path and the cause.

A write goes to a temp file of its own beside the target (``NAME.<pid>.tmp``: concurrent writers
never share one), which is fsynced, renamed over the target, and the directory fsynced, so a crash
or power loss leaves the old file or the new one. Any failure removes the temp file; an OSError
(also one wrapped by a library, as torch.save wraps a full disk's) becomes a :class:`HetrlError`:
"no space left on device writing checkpoints/step_0000003000.pt (2.8 MB); free some space:
the files written before are intact".
"""

from __future__ import annotations

import errno
import json
import os
import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

from hetrl.errors import HetrlError

TEMP = re.compile(r"^.+\.(\d+)\.tmp$")  # NAME.<pid>.tmp: a temp file of :func:`atomic_path`, written by process pid
_FIX = {  # what to do about an errno, after the message
    errno.ENOSPC: "free some space: the files written before are intact",
    errno.EDQUOT: "free some space (disk quota): the files written before are intact",
    errno.EACCES: "choose a location you can write to",
    errno.EPERM: "choose a location you can write to",
    errno.EROFS: "choose a location on a writable file system",
    errno.ENOTDIR: "a part of the path is a file: choose another location",
    errno.EISDIR: "it is a directory: name a file",
    errno.EEXIST: "a part of the path is a file: choose another location",
}


def file_part(text: str) -> str:
    """``text`` (an env id, ``module:Id``, a factory's ``module:qualname``) as part of a file name:
    every character other than letters, digits and ``_.=-`` becomes ``-``."""
    return re.sub(r"[^A-Za-z0-9_.=-]", "-", text)


def size_text(n: int) -> str:
    """``n`` bytes as 512 B, 3.4 kB, 2.8 MB, 1.2 GB."""
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} B"


def fs_error(exc: OSError, path: str | Path, size: int | None = None) -> HetrlError:
    """``exc`` (writing ``path``) as one line: the cause, the path, the size if known, the fix."""
    code = exc.errno if exc.errno is not None else 0
    cause = (os.strerror(code) if code else str(exc) or type(exc).__name__).lower()
    fix = _FIX.get(code)
    return HetrlError(f"{cause} writing {path}" + (f" ({size_text(size)})" if size else "") + (f"; {fix}" if fix else ""))


def os_error_in(exc: BaseException) -> OSError | None:
    """The OSError behind ``exc``: itself, or its cause or context (torch.save reports a full disk
    as a RuntimeError raised while handling the file object's OSError)."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        if isinstance(exc, OSError):
            return exc
        seen.add(id(exc))
        exc = exc.__cause__ or exc.__context__
    return None


@contextmanager
def fs_errors(path: str | Path, size: int | None = None) -> Iterator[None]:
    """File-system failures inside the block, as :func:`fs_error` for ``path``; others as they come."""
    try:
        yield
    except Exception as exc:
        found = os_error_in(exc)
        if found is None or isinstance(exc, HetrlError):
            raise
        raise fs_error(found, path, size) from None


def ensure_dir(path: str | Path) -> Path:
    """``path`` and its parents made where missing; a failure is one line (:func:`fs_error`)."""
    path = Path(path)
    with fs_errors(path):
        path.mkdir(parents=True, exist_ok=True)
    return path


@contextmanager
def atomic_path(path: str | Path, size: int | None = None) -> Iterator[Path]:
    """A temp path to write ``path``'s new content to (for writers that want a path); once the
    block ends it replaces ``path`` (the module docstring). ``size``: the bytes it will take, said
    in an error."""
    path = Path(path)
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    with fs_errors(path, size):
        ensure_dir(path.parent)
        try:
            yield tmp
            _fsync(tmp)
            os.replace(tmp, path)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        _fsync(path.parent)


def write_file(path: str | Path, write: Callable[[IO[bytes]], Any] | bytes, size: int | None = None) -> Path:
    """Write ``path`` atomically: ``write(file)`` (torch.save, np.save...) or these bytes."""
    data = write if isinstance(write, bytes) else None
    with atomic_path(path, len(data) if data is not None else size) as tmp, open(tmp, "wb") as f:
        if data is not None:
            f.write(data)
        else:
            write(f)
    return Path(path)


def write_text(path: str | Path, text: str) -> Path:
    return write_file(path, text.encode())


def write_json(path: str | Path, data: Any, indent: int = 2) -> Path:
    """Write ``data`` so that ``path`` holds either the old or the whole new file, never a part."""
    return write_text(path, json.dumps(data, indent=indent) + "\n")


def _fsync(path: Path) -> None:
    """Flush ``path`` (a file or a directory) to the disk; a file system that cannot sync a
    directory (EINVAL) is left as it is."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    except OSError as exc:
        if exc.errno not in (errno.EINVAL, errno.ENOTSUP) or not path.is_dir():
            raise
    finally:
        os.close(fd)


def check_writable(path: str | Path, what: str, directory: bool = False, make_parents: bool = True) -> Path:
    """Before any work: refuse, in one line naming ``what`` (``--run-dir``, ``--out``), a ``path``
    that hetrl could not write: a file where a ``directory`` is wanted or the reverse, a parent that
    is a file, a missing parent (unless ``make_parents``), or a location that is read-only or not
    writable for this user."""
    path = Path(path)
    if path.exists() and path.is_dir() != directory:
        want = "a directory" if directory else "a file"
        raise HetrlError(f"{what} {path} is {'a directory' if path.is_dir() else 'a file'}, not {want}; choose another {what}")
    if not make_parents and not path.parent.is_dir():
        raise HetrlError(f"cannot write {path}: directory {path.parent} does not exist; create it or pass another {what}")
    base = next(p for p in (path, *path.parents) if p.exists() or p.is_symlink())
    if not base.is_dir():
        raise HetrlError(f"{what} {path}: {base} is a file, not a directory; choose another {what}")
    code = (errno.EROFS if os.statvfs(base).f_flag & os.ST_RDONLY else
            errno.EACCES if not os.access(base, os.W_OK | os.X_OK) else 0)
    if code:
        raise HetrlError(f"{what} {path} cannot be written: {base} is "
                         f"{'on a read-only file system' if code == errno.EROFS else 'not writable by this user'}; "
                         f"choose another {what}")
    return path


def read_config_file(path: str | Path, what: str, invalid_hint: str = "") -> Any:
    """A config the user wrote: YAML for a .yaml/.yml file, JSON otherwise (JSON is YAML, too)."""
    path = Path(path)
    if path.suffix.lower() == ".toml":
        raise HetrlError(f"{what} {path}: TOML is not read; write the settings as YAML (.yaml) or JSON (.json)")
    if path.suffix.lower() not in (".yaml", ".yml"):
        return read_json(path, what, invalid_hint=invalid_hint)
    import yaml

    try:
        return yaml.safe_load(path.read_text())
    except FileNotFoundError:
        raise HetrlError(f"{what} {path} does not exist") from None
    except (yaml.YAMLError, UnicodeDecodeError) as exc:
        where = getattr(exc, "problem_mark", None)
        at = f" at line {where.line + 1}" if where is not None else ""
        raise HetrlError(f"{what} {path} is not valid YAML{at}" + (f"; {invalid_hint}" if invalid_hint else "")) from None


def read_json(path: str | Path, what: str, missing_hint: str = "", invalid_hint: str = "") -> Any:
    """The parsed file; a missing or unparsable one is a HetrlError naming ``what`` and the hint."""
    path = Path(path)
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        raise HetrlError(f"{what} {path} does not exist" + (f"; {missing_hint}" if missing_hint else "")) from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise HetrlError(f"{what} {path} is not valid JSON ({exc})" + (f"; {invalid_hint}" if invalid_hint else "")) from None
