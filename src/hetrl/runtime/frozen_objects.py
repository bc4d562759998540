"""Python's cyclic garbage collector kept off the objects that outlive a run.

When a run starts training, the process already holds several hundred thousand objects that live
as long as it does: the modules of torch, numpy, gymnasium and matplotlib, the networks, the envs.
A full collection walks every one of them, and one comes due whenever many new objects survive
at once, as when a module is first imported in the middle of a run (TensorBoard's writer at the
run's start, say). Each such collection walks the whole heap (docs/results.md, 'A full garbage
collection at the start of every run'). ``gc.freeze`` moves every object there is to a generation
that no collection walks; what the run itself makes and drops is still collected as before. At the
end the objects go back (``gc.unfreeze``): whatever of them died meanwhile is freed then, and
nothing stays frozen after the call.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def objects_frozen() -> Iterator[None]:
    """Every object that exists now is left out of collections until the context ends. Where some
    are frozen already (by the caller, or by a session training beside this one), this does nothing:
    unfreezing is then theirs to do."""
    if gc.get_freeze_count():
        yield
        return
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()
