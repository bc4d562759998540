"""hetrl: fast, power-efficient deep reinforcement learning on heterogeneous hardware.

    import hetrl
    result = hetrl.train("dqn", "CartPole-v1", steps=100_000, stop_at_return=475)
    hetrl.resume(result.run_dir, steps=150_000)
    hetrl.evaluate(result.run_dir, episodes=20).mean
"""

from hetrl.api import EvalResult, evaluate, resume, train
from hetrl.errors import HetrlError
from hetrl.training import TrainResult

__version__ = "0.1.0"
__all__ = ["EvalResult", "HetrlError", "TrainResult", "evaluate", "resume", "train"]
