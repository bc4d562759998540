"""JSON files the user keeps (configs, plans, profiles): written atomically, read with clear errors."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

from hetrl.errors import HetrlError


def file_part(text: str) -> str:
    """``text`` (an env id, ``module:Id``, a factory's ``module:qualname``) as part of a file name:
    every character other than letters, digits and ``_.=-`` becomes ``-``."""
    return re.sub(r"[^A-Za-z0-9_.=-]", "-", text)


def write_json(path: str | Path, data: Any, indent: int = 2) -> Path:
    """Write ``data`` so that ``path`` holds either the old or the whole new file, never a part."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".{os.getpid()}.tmp")  # concurrent writers each rename a whole file
    tmp.write_text(json.dumps(data, indent=indent) + "\n")
    os.replace(tmp, path)
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
