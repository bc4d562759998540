"""hetrl: fast, power-efficient deep reinforcement learning on heterogeneous hardware.

    import hetrl
    result = hetrl.train("dqn", "CartPole-v1", steps=100_000, stop_at_return=475)
    hetrl.resume(result.run_dir, steps=150_000)
    hetrl.evaluate(result.run_dir, episodes=20).mean

Names are imported on first use: ``import hetrl.tabular`` (or a tabular worker process) does not
load torch and gymnasium.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from hetrl.lazy import lazy_exports

__version__ = "0.1.0"

_EXPORTS = {
    "train": "hetrl.api",
    "resume": "hetrl.api",
    "evaluate": "hetrl.api",
    "EvalResult": "hetrl.api",
    "load": "hetrl.policy",
    "Policy": "hetrl.policy",
    "TrainResult": "hetrl.run.result",
    "HetrlError": "hetrl.errors",
    "Callback": "hetrl.run.callbacks",
    "CallbackInfo": "hetrl.run.callbacks",
}
__all__ = sorted(_EXPORTS)

if TYPE_CHECKING:
    from hetrl.api import EvalResult, evaluate, resume, train
    from hetrl.errors import HetrlError
    from hetrl.policy import Policy, load
    from hetrl.run.callbacks import Callback, CallbackInfo
    from hetrl.run.result import TrainResult

__getattr__ = lazy_exports(__name__, _EXPORTS)
