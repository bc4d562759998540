"""The inline executor: replay ratio, vector envs, per-primitive timers."""

import pytest
import torch

from hetrl.algos import DQNConfig, make_algorithm
from hetrl.envs import env_spec
from hetrl.planner.rule import default_placement
from hetrl.runtime.inline import InlineExecutor
from hetrl.runtime.timers import timer_table


def executor(num_envs=1, **cfg):
    algo = make_algorithm("dqn", env_spec("CartPole-v1"), DQNConfig(hidden=(16, 16), batch_size=16, **cfg))
    return InlineExecutor(algo, default_placement(torch.device("cpu"), (1, 1)), num_envs, seed=0)


@pytest.mark.parametrize("num_envs, ratio, train_every", [(1, 1.0, 1), (4, 0.25, 1), (3, 0.5, 8), (2, 2.0, 1)])
def test_replay_ratio_is_held(num_envs, ratio, train_every):
    ex = executor(num_envs, learning_starts=100, replay_ratio=ratio, train_every=train_every)
    while ex.env_steps < 2_000:
        ex.iteration()
    first = -(-100 // num_envs) * num_envs  # env_steps after the first iteration that reaches learning_starts
    owed = (ex.env_steps - first + num_envs) * ratio  # that iteration's own steps count
    burst = num_envs * train_every * ratio
    assert owed - burst - 1 <= ex.updates <= owed + 1
    assert ex.env_steps % num_envs == 0


def test_no_updates_before_learning_starts():
    ex = executor(learning_starts=500, replay_ratio=1.0, train_every=1)
    while ex.env_steps < 499:
        ex.iteration()
    assert ex.updates == 0 and len(ex.replay) == 499 and "Act" not in ex.timers.calls  # random actions only
    for _ in range(10):
        ex.iteration()
    assert ex.updates > 0 and ex.timers.calls["Act"] > 0


def test_every_primitive_is_timed_once_per_call():
    ex = executor(learning_starts=50, prioritized=True, train_every=1, replay_ratio=0.5)
    syncs, synced_at = 0, -1
    for _ in range(200):
        if ex.env_steps >= 50 and ex.updates != synced_at:  # WeightSync: before an Act whenever the learner moved
            syncs, synced_at = syncs + 1, ex.updates
        ex.iteration()
    calls = ex.timers.calls
    assert calls["EnvStep"] == calls["ReplayAdd"] == 200 and calls["Act"] == 150  # random actions before step 50
    # updates from the 50th step on (the replay holds a batch of 16 by then), half an update per step
    assert ex.updates == 75
    for name in ("ReplaySample", "Transfer", "Learn", "PriorityUpdate"):
        assert calls[name] == 75, name
    assert calls["WeightSync"] == syncs and 70 <= syncs <= 76


def test_the_timer_table_is_per_call_cost_and_share_of_wall_time():
    totals = {"EnvStep": (0.5, 100, 1), "Learn": (2.0, 10, 1), "Act": (3.0, 300, 2)}  # Act: 2 processes
    assert timer_table(totals, wall=4.0) == [
        ("Learn", 10, pytest.approx(2e5), 0.5),  # 200 ms a call, half the wall time
        ("Act", 300, pytest.approx(1e4), 0.375),  # 3 s over 2 processes' 4 s each
        ("EnvStep", 100, pytest.approx(5e3), 0.125),
    ]
    assert timer_table({"Act": (1.0, 0, 1)}, wall=0.0) == [("Act", 0, 1e6, 0.0)]  # no calls, no time: no division by 0


def test_acting_policy_follows_the_learner():
    ex = executor(learning_starts=50, train_every=1, replay_ratio=1.0)
    for _ in range(100):
        ex.iteration()
    learner_q = {k: v.numpy().copy() for k, v in ex.learner.policy_network.state_dict().items()}
    ex.iteration()  # the Act of this iteration syncs first
    for name, value in ex.policy.params.items():
        assert (value == learner_q[name]).all(), name


def test_one_replay_schedule_for_the_loop_the_limiter_and_the_model():
    from hetrl.runtime.schedule import ReplaySchedule

    bursty = ReplaySchedule(0.5, learning_starts=100, burst=4)
    due = 0.0
    for iteration in range(1, 9):
        due = bursty.accrue(due, 1)
        assert bursty.burst_now(iteration) == (iteration % 4 == 0)
    assert due == 4.0
    assert bursty.syncs_per_iteration(1) == 0.25  # the learner moves once a burst
    assert ReplaySchedule(0.25, 0).syncs_per_iteration(1) == 0.25
    assert ReplaySchedule(2.0, 0).syncs_per_iteration(1) == 1.0
    assert ReplaySchedule(0.0, 0).syncs_per_iteration(4) == 0.0
    limiter = ReplaySchedule(0.5, learning_starts=100, lead=32)
    assert limiter.updates_owed(300, 90) == 10 and limiter.updates_owed(300, 100) == 0
    assert limiter.allowed_env_steps(100) == 100 + 200 + 32
    with pytest.raises(ValueError):
        ReplaySchedule(0.5, 0, burst=0)
