"""The executors (inline, local, ray) and what they share."""

from __future__ import annotations

from hetrl.errors import HetrlError


def check_written_by(written_by: str, name: str) -> None:
    """Refuse a checkpoint that another executor (``written_by``) wrote into the ``name`` executor:
    their states differ. A run's executor is the one its config.json names (resume takes no --set)."""
    if written_by != name:
        raise HetrlError(f"this checkpoint was written by the {written_by} executor, not the {name} one; resume it with "
                         f"\"executor\": \"{written_by}\" in the run's config.json")
