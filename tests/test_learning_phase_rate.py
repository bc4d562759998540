"""The learning-phase rate (``learning_env_steps_per_s``, what the planner's prediction is checked
against) leaves every evaluation's time out of the learning phase once, the final one included."""

import time

import numpy as np

import hetrl
from hetrl.training import Session

PAUSE_S = 2.0


def test_a_long_final_evaluation_is_left_out_once(tmp_path, monkeypatch):
    real = Session.evaluate
    spent: list[float] = []  # each evaluation's whole time: the pause and the real episode after it

    def slow_evaluate(self, episodes: int) -> np.ndarray:  # an Atari game's full episode, say
        begun = time.perf_counter()
        time.sleep(PAUSE_S)
        try:
            return real(self, episodes)
        finally:
            spent.append(time.perf_counter() - begun)

    monkeypatch.setattr(Session, "evaluate", slow_evaluate)
    result = hetrl.train("dqn", "CartPole-v1", steps=800, run_dir=tmp_path / "run", hidden=(8, 8), learning_starts=0,
                         batch_size=16, eval_episodes=1, eval_every=400, log_every=100, plan="rule", progress=False)
    # learning starts at once, so the learning phase is the loop less the evaluation at 400 steps;
    # wall_s is the loop less the final evaluation: the rate is steps over about wall_s - spent[0]
    # (the real episode after the pause counts too: a greedy CartPole episode can take a tenth of the loop)
    assert len(spent) == 2 and min(spent) > PAUSE_S and result.wall_s > spent[0]
    loop_training_s = result.wall_s - spent[0]
    assert result.learning_env_steps_per_s is not None
    assert 0.8 * 800 / loop_training_s < result.learning_env_steps_per_s < 1.25 * 800 / loop_training_s, (
        result.learning_env_steps_per_s, result.wall_s)
