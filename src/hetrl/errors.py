"""User-facing errors.

A :class:`HetrlError` is a problem with the user's input or files (unknown algorithm, missing
device, corrupt checkpoint...). Its message is one line that names the problem and the fix; the
CLI prints it without a traceback and exits with code 2. Anything else is a bug in hetrl.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable


class HetrlError(Exception):
    """A problem the user can fix; the message says what to change."""

    exit_code = 2


def did_you_mean(name: str, choices: Iterable[str]) -> str:
    """A ' (did you mean X?)' suffix when ``name`` is close to one of ``choices``."""
    close = difflib.get_close_matches(name, list(choices), n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""


class ActorsFailed(HetrlError):
    """An actor failed three times right after starting: the run cannot go on as configured. The
    session saves the learner's state first, and says where."""


class StopRequested(KeyboardInterrupt):
    """A run stopped at once by a signal, without its checkpoint: the third Ctrl-C (or SIGTERM) of
    a run that was already stopping, or one while nothing had started (connecting to a Ray
    cluster). ``signum`` is the signal's number; the CLI exits with 128 + ``signum``."""

    def __init__(self, signum: int, message: str = "") -> None:
        super().__init__(message)
        self.signum = signum
