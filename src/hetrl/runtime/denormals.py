"""Denormal floats flushed to zero on the host while a run computes (the ``flush_denormals`` setting).

Adam's first moment decays by beta1 = 0.9 each update wherever a gradient has been zero for a while
(ReLU units that rarely fire). Within a few hundred updates it is in float32's denormal range (below
1.2e-38), and it stays there, never reaching zero: 0.9 times the denormal of 4 units in the last
place rounds back to it. On x86 CPUs every operation on a denormal takes a microcode assist, many
times slower than a normal one, and a learner with many such moments runs well below its profiled
speed (docs/results.md, 'Denormals').
With the CPU's flush-to-zero and denormals-are-zero modes (FTZ/DAZ, torch.set_flush_denormal) such
values count as zero, as TensorFlow and XLA compute on CPUs by default. Values that small change no
parameter: Adam divides the moment by the square root of the second one, which stays normal.

The mode is a CPU thread's (its MXCSR register), and a thread starts with the mode of the thread that
started it: it must be set before the learner's thread pools start (torch's OpenMP pool starts at the
first multi-threaded operation, or ``torch.set_num_threads``), which is why a session sets it before
it plans (the profile times learners on several threads). Threads started while it is set keep it
after the context ends; threads started before it was set compute with denormals.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np
import torch

_DENORMAL = np.float32(1e-40)  # below float32's smallest normal, 1.17549435e-38


def flushing() -> bool:
    """Whether this thread treats denormal float32 inputs as zero (the DAZ half of the mode)."""
    return float(np.multiply(np.array([_DENORMAL]), np.float32(1.0))[0]) == 0.0


def set_flushing(on: bool) -> bool:
    """Turn this thread's flush-to-zero mode on or off for good (an actor or learner process's own
    thread); returns whether torch could set it on this CPU (x86 with SSE3 among others)."""
    return bool(torch.set_flush_denormal(on))


@contextmanager
def flush_denormals(on: bool = True) -> Iterator[None]:
    """This thread flushes denormals (``on``) or keeps them while the context is open, and returns to
    its mode before it on exit."""
    before = flushing()
    changed = on != before and set_flushing(on)
    try:
        yield
    finally:
        if changed:
            set_flushing(before)
