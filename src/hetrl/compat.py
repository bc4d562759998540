"""Loading what older versions wrote: classes that moved since a checkpoint pickled them.

An inline checkpoint pickles its EnvStep object (the envs' exact state, for bit-exact resume);
a checkpoint written before the primitives package names that class by its old module. That
pickle is unpickled only when trusted (hetrl.run.safe_state: signed by this user's key, or the
user said so); the rest of a checkpoint is read with ``torch.load(weights_only=True)``.
"""

from __future__ import annotations

import io
import pickle
from typing import Any

MOVED = {  # (old module, old name) -> (new module, new name)
    ("hetrl.envs.batch", "EnvBatch"): ("hetrl.primitives.env_step_gymnasium", "EnvStepGymnasium"),
}


class _Unpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        module, name = MOVED.get((module, name), (module, name))
        return super().find_class(module, name)


def unpickle(data: bytes) -> Any:
    """``pickle.loads`` that also finds the classes of :data:`MOVED` under their old names."""
    return _Unpickler(io.BytesIO(data)).load()
