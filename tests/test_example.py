"""examples/dqn_reference.py is what the inline executor does: same seed, same placement, same
settings -> the same learner, bit for bit; and it runs as a plain script."""

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from hetrl.algos import DQNConfig, make_algorithm
from hetrl.envs import env_spec
from hetrl.protocol import Placement, Slot
from hetrl.runtime.inline import InlineExecutor

EXAMPLE = Path(__file__).parents[1] / "examples" / "dqn_reference.py"
SMALL = dict(hidden=(32, 32), learning_starts=300, batch_size=32, buffer_size=2_000, train_every=4, replay_ratio=0.5,
             target_update_every=50, prioritized=True, n_step=3)


def _example():
    spec = importlib.util.spec_from_file_location("dqn_reference", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("placement", [
    None,  # the example's own: numba acting and learning
    Placement(Slot("gymnasium"), Slot("numpy"), Slot("torch"), Slot("torch", threads=1)),
], ids=["numba", "torch"])
def test_the_reference_script_trains_what_the_inline_executor_trains(placement):
    example = _example()
    placement = placement or example.PLACEMENT
    learner, _ = example.train(1_500, seed=5, placement=placement, num_envs=2, **SMALL)
    algo = make_algorithm("dqn", env_spec("CartPole-v1"), DQNConfig(**SMALL))
    inline = InlineExecutor(algo, placement, 2, seed=5)
    while inline.env_steps < 1_500:
        inline.iteration()
    inline.close()
    assert learner.updates == inline.updates > 0
    mine, theirs = learner.state_dict(), inline.learner.state_dict()
    for name in ("q", "q_target"):
        for key, value in mine[name].items():
            assert torch.equal(value, theirs[name][key]), (name, key)


def test_the_reference_script_runs_as_a_plain_script():
    proc = subprocess.run([sys.executable, str(EXAMPLE), "--steps", "1500"], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "greedy return over 10 episodes" in proc.stdout
