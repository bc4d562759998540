"""Checkpoint states in a form ``torch.load(weights_only=True)`` reads: no file can run code.

**The format** (``hetrl-checkpoint-v3``). A state is a tree of dicts (str or int keys), lists and
tuples whose leaves are tensors, ``None``, bools, ints (of any size: PCG64's 128-bit states stay
plain ints), floats, complex numbers, strings and bytes, plus two tagged dicts that :func:`decode`
turns back into what was saved:

- ``{"__hetrl__": "ndarray", "dtype": "<f4", "shape": (..), "data": tensor}``: a numpy array
  (``"scalar": True``: a numpy scalar, such as an action taken out of an array). ``data`` is the
  array as a tensor of its own dtype (``torch.from_numpy``: bool, (u)int8-64, float16-64,
  complex), or its bytes as a uint8 tensor for the dtypes torch lacks (strings, datetimes,
  longdouble, other byte orders). Arrays of Python objects and structured dtypes are refused.
- ``{"__hetrl__": "pickle", "data": bytes, "mac": hex or None}``: a :class:`Pickle`, the one
  thing in a checkpoint that is code to run: the inline executor's env batch (Gymnasium envs,
  whose exact state makes a resumed run bit-identical), which has no other general form. ``mac``
  is an HMAC-SHA256 of the bytes under this user's checkpoint key (:func:`key_path`, made on first
  use, readable by its owner only).

Numpy's random generators save ``bit_generator.state`` (a dict of strings and ints), torch's a
uint8 tensor, Python's ``random`` a tuple of ints; none needs a tag. Anything else (a dataclass, an
enum, a deque) is refused when the checkpoint is written, naming where it is in the state.

**The trust rule.** Files are read by torch's weights_only unpickler alone, which builds
containers and tensors and calls nothing else; a :class:`Pickle` inside is unpickled only as the
reader asks (``env_state``):

- ``"signed"`` (``hetrl resume``, the default): only when its HMAC verifies under this user's key,
  i.e. hetrl wrote it under this account (or one sharing the key file). A run resumed from a file
  made elsewhere, by an older hetrl, or altered, restarts its envs from a seeded reset and says so
  in one line.
- ``"any"`` (``hetrl resume --trust-env-state``, ``hetrl.resume(..., trust_env_state=True)``):
  always; for a file whose origin the user vouches for.
- ``"never"`` (``hetrl.load``, ``hetrl eval``, ``hetrl export``): not at all; a policy is tensors.

**Older files** (``v1``, ``v2``) hold numpy arrays as pickles of numpy's classes: they are read
with ``weights_only=True`` too, allowing numpy's array, dtype and scalar reconstructors (nothing
that can run other code: an array of objects is refused) and only when the file is not v3; their
env state is unsigned, so it is restored with ``env_state="any"`` only.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import pickle
import re
import secrets
import warnings
from collections import OrderedDict
from pathlib import Path
from typing import Any

import numpy as np
import torch

from hetrl.files import write_file

FORMAT = "hetrl-checkpoint-v3"
LEGACY_FORMATS = ("hetrl-checkpoint-v1", "hetrl-checkpoint-v2")
ENV_STATE = ("never", "signed", "any")
TAG = "__hetrl__"
_PLAIN = (type(None), bool, int, float, complex, str, bytes, torch.Size, torch.dtype, torch.device)
_MAC_DOMAIN = b"hetrl checkpoint pickle v1\0"


class Pickle(bytes):
    """Bytes that are a pickle: saved with this user's HMAC, unpickled on load only when trusted."""


class UnsafeCheckpoint(Exception):
    """The file names code to run (a class or function weights_only does not allow)."""


# --- encode / decode ----------------------------------------------------------------------------
def encode(tree: Any, path: str = "state") -> Any:
    """``tree`` in the safe form (the module docstring); ``TypeError`` names anything it cannot hold."""
    if isinstance(tree, Pickle):
        data = bytes(tree)
        return {TAG: "pickle", "data": data, "mac": _mac(data, create=True)}
    if isinstance(tree, np.generic):  # before the plain types: np.float64 is a float
        return {**_encode_array(np.asarray(tree), path), "scalar": True}
    if isinstance(tree, np.ndarray):
        return _encode_array(tree, path)
    if type(tree) in _PLAIN or type(tree) in (torch.Tensor, torch.nn.Parameter):
        return tree
    if type(tree) in (dict, OrderedDict):
        if TAG in tree:
            raise TypeError(f"{path} has the key {TAG!r}, which checkpoints reserve")
        out = type(tree)()
        for key, value in tree.items():
            if type(key) not in (str, int):
                raise TypeError(f"{path} has a key of type {type(key).__name__} ({key!r}); checkpoints take str and int keys")
            out[key] = encode(value, f"{path}.{key}")
        if hasattr(tree, "_metadata"):  # a module's state_dict: its version record
            out._metadata = tree._metadata  # type: ignore[attr-defined]
        return out
    if type(tree) in (list, tuple):
        return type(tree)(encode(v, f"{path}[{i}]") for i, v in enumerate(tree))
    raise TypeError(f"{path} is a {type(tree).__module__}.{type(tree).__qualname__}, which a checkpoint read with "
                    "weights_only=True cannot hold (tensors, numpy arrays, numbers, strings, bytes, dicts, lists, tuples)")


def _encode_array(array: np.ndarray, path: str) -> dict[str, Any]:
    dtype = array.dtype
    if dtype.hasobject or dtype.fields is not None:
        raise TypeError(f"{path} is a numpy array of dtype {dtype}: arrays of objects and structured arrays cannot be saved")
    flat = np.ascontiguousarray(array)
    with warnings.catch_warnings():  # a read-only array: the tensor is only written to the file
        warnings.simplefilter("ignore", UserWarning)
        try:
            data = torch.from_numpy(flat)
        except (TypeError, ValueError):  # a dtype torch lacks, or another byte order: its bytes
            data = torch.from_numpy(flat.reshape(-1).view(np.uint8))
    return {TAG: "ndarray", "dtype": dtype.str, "shape": tuple(array.shape), "data": data}


def decode(tree: Any, env_state: str = "signed") -> tuple[Any, list[str]]:
    """``tree`` as it was saved, and why each :class:`Pickle` left out was (it becomes ``None``).
    Numpy arrays in the tree (an older file's) stay as they are. ``ValueError``: a malformed tag."""
    if env_state not in ENV_STATE:
        raise ValueError(f"env_state is one of {ENV_STATE}, not {env_state!r}")
    dropped: list[str] = []
    return _decode(tree, env_state, dropped), dropped


def _decode(tree: Any, env_state: str, dropped: list[str]) -> Any:
    if type(tree) in (dict, OrderedDict):
        if TAG in tree:
            return _untag(tree, env_state, dropped)
        out = type(tree)((k, _decode(v, env_state, dropped)) for k, v in tree.items())
        if hasattr(tree, "_metadata"):
            out._metadata = tree._metadata  # type: ignore[attr-defined]
        return out
    if type(tree) in (list, tuple):
        return type(tree)(_decode(v, env_state, dropped) for v in tree)
    return tree


def _untag(tag: dict[str, Any], env_state: str, dropped: list[str]) -> Any:
    kind = tag[TAG]
    if kind == "ndarray":
        data, dtype, shape = tag.get("data"), np.dtype(str(tag.get("dtype"))), tag.get("shape")
        if not torch.is_tensor(data) or dtype.hasobject or dtype.fields is not None or not isinstance(shape, (list, tuple)):
            raise ValueError(f"a malformed array record (dtype {dtype})")
        array = data.cpu().numpy()
        if array.dtype != dtype:  # saved as its bytes
            array = array.view(dtype)
        array = array.reshape(tuple(int(d) for d in shape))
        return array[()] if tag.get("scalar") else array
    if kind == "pickle":
        data, mac = tag.get("data"), tag.get("mac")
        if not isinstance(data, bytes) or not (mac is None or isinstance(mac, str)):
            raise ValueError("a malformed pickle record")
        if env_state == "any":
            return Pickle(data)
        if env_state == "signed":
            expected = _mac(data, create=False)
            if mac is not None and expected is not None and hmac.compare_digest(mac, expected):
                return Pickle(data)
            dropped.append("it is not signed with this user's checkpoint key" if mac is None else
                           "its signature does not match this user's checkpoint key")
        else:
            dropped.append("this reader never unpickles")
        return None
    raise ValueError(f"an unknown record {kind!r}")


def unsigned(data: bytes) -> dict[str, Any]:
    """An older file's pickle as a record without signature (decode restores it with ``env_state="any"`` only)."""
    return {TAG: "pickle", "data": bytes(data), "mac": None}


# --- files --------------------------------------------------------------------------------------
def save(tree: Any, path: str | Path) -> Path:
    """Write ``tree`` in the safe form to ``path``, atomically (:func:`hetrl.files.write_file`:
    a full disk is a one-line error naming the file and about how much it needed)."""
    encoded = encode(tree)
    return write_file(path, lambda f: torch.save(encoded, f), size=nbytes(encoded))


def nbytes(tree: Any) -> int:
    """About the bytes an encoded tree takes in a file: its tensors' and byte strings' sizes."""
    if torch.is_tensor(tree):
        return tree.nbytes
    if isinstance(tree, bytes):
        return len(tree)
    if isinstance(tree, dict):
        return sum(nbytes(v) for v in tree.values())
    if isinstance(tree, (list, tuple)):
        return sum(nbytes(v) for v in tree)
    return 0


def read(path: str | Path) -> Any:
    """The raw tree of a file (:func:`decode` it), read with ``weights_only=True``; an older file
    (v1, v2) with numpy's array reconstructors allowed as well (the module docstring).
    :class:`UnsafeCheckpoint`: the file names a class or function beyond those; any other error
    (a truncated file, not a torch file) is raised as it comes."""
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as exc:
        refused = _refused(exc)
    if not refused.startswith("numpy"):
        raise UnsafeCheckpoint(f"it names code to run ({refused})")
    allow = getattr(torch.serialization, "safe_globals", None)
    if allow is None:
        raise UnsafeCheckpoint("it is in an older format (numpy arrays inside), which this torch cannot read safely: "
                               "torch>=2.5 can")
    try:
        with allow(_legacy_numpy()):
            tree = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as exc:
        raise UnsafeCheckpoint(f"it names code to run ({_refused(exc)})") from None
    if not (isinstance(tree, dict) and tree.get("format") in LEGACY_FORMATS):
        raise UnsafeCheckpoint("it holds numpy objects, which only files of the older formats v1 and v2 may")
    return tree


def _refused(exc: pickle.UnpicklingError) -> str:
    """The global a weights_only load refused (re-raises ``exc`` when it is not that kind of error)."""
    found = re.search(r"Unsupported global: GLOBAL (\S+)", str(exc))
    if found is None:
        raise exc
    return found.group(1)


def _legacy_numpy() -> list[Any]:
    """What numpy arrays and scalars pickled by numpy 1.x (numpy.core) or 2.x (numpy._core) need:
    the array and scalar reconstructors, ndarray, dtype and the numeric and bool dtypes' classes
    (for their BUILD). Not the object dtype's class; and numpy refuses an object array from bytes."""
    try:
        from numpy._core import multiarray
    except ImportError:  # numpy 1.x
        from numpy.core import multiarray  # type: ignore[no-redef]

    found: list[Any] = [np.ndarray, np.dtype, *{type(np.dtype(c)) for c in "?bBhHiIlLqQefdFD"}]
    for module in ("numpy._core.multiarray", "numpy.core.multiarray"):
        found += [(multiarray._reconstruct, f"{module}._reconstruct"), (multiarray.scalar, f"{module}.scalar")]
    return found


# --- the key ------------------------------------------------------------------------------------
def key_path() -> Path:
    """This user's checkpoint key: ``$XDG_CONFIG_HOME/hetrl/checkpoint.key`` (``~/.config/...``)."""
    return Path(os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config") / "hetrl" / "checkpoint.key"


def _key(create: bool) -> bytes | None:
    path = key_path()
    try:
        key = path.read_bytes()
        return key if len(key) >= 32 else None
    except FileNotFoundError:
        if not create:
            return None
    except OSError:
        return None
    try:  # written whole, then linked into place: two processes making it at once agree on one key
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as out:
            out.write(secrets.token_bytes(32))
        try:
            os.link(tmp, path)
        except FileExistsError:
            pass
        finally:
            tmp.unlink()
        return path.read_bytes()
    except OSError:  # no writable config directory: the pickle is saved unsigned
        return None


def _mac(data: bytes, create: bool) -> str | None:
    key = _key(create)
    return None if key is None else hmac.new(key, _MAC_DOMAIN + data, hashlib.sha256).hexdigest()
