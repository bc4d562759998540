"""Stopping a run on a signal: Ctrl-C (SIGINT) and SIGTERM (``docker stop``, Slurm, ``kill``) alike.

While a session trains, the first of these signals asks the run to stop: the training loop ends at
the end of its iteration, the local executor starts (or restarts) no more actors and the Ray
executor stops connecting, and the session writes its checkpoint, stops every process and returns
(the CLI exits with 128 + the signal's number: 130 for SIGINT, 143 for SIGTERM). A second signal
is answered on stderr and changes nothing: the checkpoint is still written. A third stops at once,
without it (:class:`hetrl.errors.StopRequested`). The handlers are installed in the main thread
only (a run driven from another thread keeps the process's own), for the run's duration, and the
previous ones are restored after.
"""

from __future__ import annotations

import os
import signal
import threading
from typing import Any, Self

from hetrl.errors import StopRequested

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)
QUIT_AT = 3  # the signal that stops at once, without the checkpoint (the second is only answered)


class StopSignals:
    """A flag the stop signals set; a context manager installs and restores the handlers."""

    def __init__(self) -> None:
        self.signum: int | None = None  # the first stop signal received
        self.count = 0
        self._previous: dict[int, Any] = {}

    @property
    def set(self) -> bool:
        return self.signum is not None

    def requested(self) -> bool:
        """Whether a stop was asked for (what the executors are given to check)."""
        return self.signum is not None

    @property
    def name(self) -> str:
        return signal.Signals(self.signum).name if self.signum is not None else ""

    def __enter__(self) -> Self:
        if threading.current_thread() is threading.main_thread():
            for signum in STOP_SIGNALS:
                try:
                    self._previous[signum] = signal.signal(signum, self._handle)
                except (ValueError, OSError):  # an interpreter that does not own its signals (embedded)
                    pass
        return self

    def __exit__(self, *exc: object) -> None:
        self._restore()

    def _restore(self) -> None:
        for signum, previous in self._previous.items():
            signal.signal(signum, signal.SIG_DFL if previous is None else previous)  # None: installed outside Python
        self._previous = {}

    def _handle(self, signum: int, frame: Any) -> None:
        self.count += 1
        if self.signum is None:
            self.signum = signum
            return
        if self.count >= QUIT_AT:
            self._restore()
            _say(f"hetrl: {signal.Signals(signum).name} again: quitting without writing the checkpoint")
            raise StopRequested(signum)
        # the main thread may be inside a write to stderr: os.write does not re-enter Python's buffered file
        _say(f"hetrl: {signal.Signals(signum).name}: already stopping, writing the checkpoint and stopping the actors; "
             f"press Ctrl-C again to quit without the checkpoint")


def _say(text: str) -> None:
    try:
        os.write(2, f"\n{text}\n".encode())
    except OSError:
        pass
