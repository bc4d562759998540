"""What is learned: near-optimal policies on FrozenLake, and the evaluation against value iteration."""

import numpy as np
import pytest

from hetrl.tabular.evaluate import TabularModel, evaluate, greedy_policy
from hetrl.tabular.train import TabularConfig, train_tabular

GAMMA = 0.99


@pytest.fixture(scope="module")
def frozenlake_model(frozenlake_100k):
    return TabularModel.from_env(frozenlake_100k.make_env())


def test_value_iteration_solves_frozenlake(frozenlake_model):
    q_star = frozenlake_model.value_iteration(GAMMA)
    np.testing.assert_allclose(frozenlake_model.backup(q_star.max(axis=1), GAMMA), q_star, atol=1e-9)
    # the well-known optimal value of the start state of slippery 4x4 FrozenLake at gamma 0.99
    assert frozenlake_model.start @ q_star.max(axis=1) == pytest.approx(0.5420, abs=1e-4)
    policy = greedy_policy(q_star)
    np.testing.assert_allclose(frozenlake_model.policy_values(policy, GAMMA), q_star.max(axis=1), atol=1e-8)
    always_left = np.zeros(16, dtype=np.int64)
    assert frozenlake_model.success_probability(always_left, 100) < frozenlake_model.success_probability(policy, 100)


@pytest.mark.parametrize("number_format", ["fp32", "int32"])
def test_data_parallel_q_learning_is_near_optimal_on_frozenlake(frozenlake_100k, number_format):
    # 100k transitions of a random policy on slippery 4x4 FrozenLake, split over 2 units
    config = TabularConfig(number_format=number_format, units=2, epochs=10, alpha=0.02, gamma=GAMMA)
    result = train_tabular(frozenlake_100k, config)
    evaluation = evaluate(frozenlake_100k.make_env(), result.q, GAMMA, episodes=2000, seed=1)
    optimal = evaluation.optimal_success_probability
    assert optimal == pytest.approx(0.74, abs=0.01)
    assert evaluation.success_probability >= optimal - 0.05  # exact, from the model
    assert evaluation.success_rate >= optimal - 0.05  # 2000 rollouts: standard error 0.01
    assert 0 <= evaluation.value_gap < 0.02
    assert evaluation.q_error < 0.3
    assert result.updates == 1_000_000 and result.merges == 1


def test_evaluating_the_optimal_table_shows_no_gap(frozenlake_model, frozenlake_100k):
    q_star = frozenlake_model.value_iteration(GAMMA)
    evaluation = evaluate(frozenlake_100k.make_env(), q_star, GAMMA, episodes=300)
    assert evaluation.value_gap == pytest.approx(0, abs=1e-8)
    assert evaluation.q_error == pytest.approx(0, abs=1e-12)
    assert evaluation.success_probability == evaluation.optimal_success_probability


def test_a_bad_table_shows_a_gap(frozenlake_100k):
    evaluation = evaluate(frozenlake_100k.make_env(), np.zeros((16, 4)), GAMMA, episodes=300)  # always left
    assert evaluation.value_gap > 0.3
    assert evaluation.success_rate < 0.1


def test_evaluation_on_cliffwalking_and_taxi():
    import gymnasium as gym

    # CliffWalking-v1 has no time limit: a policy that walks into a wall must still end
    cliff = evaluate(gym.make("CliffWalking-v1"), np.zeros((48, 4)), GAMMA, episodes=3)
    assert cliff.success_rate == 0 and cliff.mean_return == -1000
    taxi = gym.make("Taxi-v4")
    q_star = TabularModel.from_env(taxi).value_iteration(GAMMA)
    solved = evaluate(taxi, q_star, GAMMA, episodes=100)
    assert solved.success_rate == 1.0 and solved.mean_return > 5


@pytest.mark.parametrize("env_id, decision_states", [("FrozenLake-v1", 11), ("Taxi-v4", 400), ("CliffWalking-v1", 37)])
def test_decision_states_leave_out_unreachable_and_terminal_states(env_id, decision_states):
    import gymnasium as gym

    # FrozenLake: not the 4 holes and the goal; Taxi: not the 100 delivered states; CliffWalking:
    # not the 10 cliff cells (stepping there resets to the start) and the goal
    assert TabularModel.from_env(gym.make(env_id)).decision_states().sum() == decision_states
