"""Write docs/api.md, the reference of hetrl's Python API, from the docstrings and signatures.

    python docs/make_api.py            # rewrite docs/api.md
    python docs/make_api.py --check    # exit 1 if docs/api.md is not what the code says (a test runs this)
"""

from __future__ import annotations

import argparse
import dataclasses
import inspect
import sys
from pathlib import Path
from typing import Any

OUT = Path(__file__).resolve().parent / "api.md"

# (module, name) in the order the page shows them; the top-level names are hetrl's exports
ENTRIES = [
    ("hetrl", "train"), ("hetrl", "resume"), ("hetrl", "evaluate"), ("hetrl", "TrainResult"), ("hetrl", "EvalResult"),
    ("hetrl", "load"), ("hetrl", "Policy"), ("hetrl", "Callback"), ("hetrl", "CallbackInfo"), ("hetrl", "HetrlError"),
    ("hetrl.envs", "AtariOptions"), ("hetrl.envs", "make_env"), ("hetrl.envs", "env_spec"), ("hetrl.envs", "EnvSpec"),
    ("hetrl.tabular", "collect"), ("hetrl.tabular", "TabularConfig"), ("hetrl.tabular", "train_tabular"),
]


def _field_comments(cls: type) -> dict[str, str]:
    """The comment after each field of a dataclass's source (``name: type = default  # comment``)."""
    import re

    try:
        source = inspect.getsource(cls)
    except (OSError, TypeError):
        return {}
    out = {}
    for line in source.splitlines():
        match = re.match(r"\s+(\w+): [^#]*#\s*(.*)$", line)
        if match:
            out[match.group(1)] = match.group(2).strip()
    return out


def _doc(obj: Any) -> str:
    return inspect.cleandoc(obj.__doc__ or "").strip()


def _signature(name: str, obj: Any) -> str:
    try:
        return f"{name}{inspect.signature(obj)}"
    except (TypeError, ValueError):
        return name


def _members(cls: type) -> list[tuple[str, Any]]:
    """Public methods and properties defined on ``cls`` itself (not inherited from object)."""
    out = []
    for name, member in vars(cls).items():
        if name.startswith("_") and name != "__call__":
            continue
        if isinstance(member, (property, staticmethod, classmethod)) or inspect.isfunction(member):
            out.append((name, member))
    return out


def render() -> str:
    import importlib

    lines = ["# hetrl's Python API", "",
             "Generated from the docstrings by `python docs/make_api.py` (a test checks that this page is current).",
             "The command line (`hetrl --help`, `hetrl train --help`) takes the same settings as `--set KEY=VALUE`.", ""]
    for module_name, name in ENTRIES:
        module = importlib.import_module(module_name)
        obj = getattr(module, name, None)
        if obj is None:
            continue
        where = f"{module_name}.{name}"
        if inspect.isclass(obj):
            lines += [f"## `{where}`", ""]
            if dataclasses.is_dataclass(obj):
                doc = _doc(obj)
                lines += ([] if doc.startswith(f"{name}(") else [doc, ""])  # not dataclass's generated signature
                fields = [f for f in dataclasses.fields(obj) if not f.name.startswith("_")]
                comments = _field_comments(obj)
                if fields:
                    lines += ["| field | type | default | meaning |", "|---|---|---|---|"]
                    for f in fields:
                        default = ("–" if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
                                   else repr(f.default) if f.default is not dataclasses.MISSING else "(made fresh)")
                        cells = [f"`{f.name}`", f"`{f.type}`", f"`{default}`", comments.get(f.name, "")]
                        lines.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
                    lines.append("")
            else:
                lines += ["```python", f"class {_signature(name, obj)}", "```", "", _doc(obj), ""]
            for member_name, member in _members(obj):
                target = member.fget if isinstance(member, property) else getattr(member, "__func__", member)
                doc = _doc(target)
                kind = "property " if isinstance(member, property) else ""
                head = member_name if isinstance(member, property) else _signature(member_name, target)
                lines += [f"- {kind}`{head}`" + (f": {doc}" if doc else "")]
            lines.append("")
        else:
            lines += [f"## `{where}`", "", "```python", _signature(where, obj), "```", "", _doc(obj), ""]
    return "\n".join(line.rstrip() for line in lines).rstrip() + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true", help="exit 1 if docs/api.md differs from what the code says")
    args = parser.parse_args()
    text = render()
    if args.check:
        current = OUT.read_text() if OUT.exists() else ""
        if current != text:
            print(f"{OUT} is out of date: run python docs/make_api.py", file=sys.stderr)
            return 1
        return 0
    OUT.write_text(text)
    print(f"wrote {OUT}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
