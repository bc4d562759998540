"""Denormal floats flushed to zero while a run computes (runtime/denormals.py, the ``flush_denormals``
setting): the mode itself, its effect on each host learner's Adam, and where a run sets it (the
session, actor processes, the Ray learner)."""

from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch

import hetrl
from hetrl.algos import make_algorithm
from hetrl.config import make_config
from hetrl.envs import env_spec
from hetrl.planner.rule import default_placement
from hetrl.primitives import build
from hetrl.protocol import Slot
from hetrl.runtime.acting_role import Actor
from hetrl.runtime.denormals import flush_denormals, flushing, set_flushing
from hetrl.runtime.timers import Timers

DENORMAL = 1e-39  # float32: below the smallest normal, 1.17549435e-38


@pytest.fixture(autouse=True)
def mode_kept():
    """Each test leaves this thread's mode (and torch's thread count) as it found them."""
    if not set_flushing(flushing()):
        pytest.skip("torch cannot set flush-to-zero on this CPU")
    before, threads = flushing(), torch.get_num_threads()
    yield before
    set_flushing(before)
    torch.set_num_threads(threads)


def products() -> tuple[float, float]:
    """A denormal times one in numpy and in torch: zero where denormals are flushed."""
    return (float(np.float32(DENORMAL) * np.ones(1, np.float32)[0]),
            (torch.full((4,), DENORMAL) * 1.0)[0].item())


def test_the_context_flushes_denormals_inside_and_restores_the_mode_before_it(mode_kept):
    for outer in (False, True):
        set_flushing(outer)
        with flush_denormals():
            assert flushing() and products() == (0.0, 0.0)
            with flush_denormals(False):
                assert not flushing() and all(p > 0.0 for p in products())
            assert flushing()
        assert flushing() == outer
    with pytest.raises(ZeroDivisionError), flush_denormals():
        1 / 0
    assert flushing()  # the mode of the last round (on), restored past the error


def dead_unit_moment(backend: str, flush: bool) -> torch.Tensor:
    """Adam's first moment of a hidden unit's input weights after one update in which the unit is dead
    (its bias far below any input), starting from a denormal moment: 0.9 x a denormal."""
    algo = make_algorithm("dqn", env_spec("CartPole-v1"), make_config("dqn", "CartPole-v1", overrides=["hidden=16,16"]).agent)
    learner = build("Learn", Slot(backend, "cpu", threads=1), algo, 0).learner
    g = torch.Generator().manual_seed(0)
    batch = {"obs": torch.randn(32, 4, generator=g), "actions": torch.randint(0, 2, (32,), generator=g),
             "rewards": torch.ones(32), "next_obs": torch.randn(32, 4, generator=g), "discounts": torch.full((32,), 0.99),
             "weights": torch.ones(32)}
    learner.update(batch)  # Adam's state exists from here on
    state = learner.state_dict()
    state["q"]["trunk.0.bias"][3] = -1e4
    state["q"]["trunk.0.weight"][3] = 0.0
    for moments in state["optimizer"]["state"].values():
        moments["exp_avg"].fill_(DENORMAL)
    learner.load_state_dict(state)
    with flush_denormals(flush):
        learner.update(batch)
    return learner.state_dict()["optimizer"]["state"][0]["exp_avg"][3].clone()


@pytest.mark.parametrize("backend", ["torch", "blas", "numba"])
def test_each_host_learner_zeroes_adams_denormal_moments_where_they_are_flushed(backend):
    kept = dead_unit_moment(backend, flush=False)
    assert torch.all((kept > 0) & (kept < 1.1754944e-38)), kept  # 0.9 x 1e-39, still denormal
    assert torch.all(dead_unit_moment(backend, flush=True) == 0.0)


class Seen(hetrl.Callback):
    def __init__(self) -> None:
        self.modes: set[bool] = set()

    def on_step(self, info) -> None:
        self.modes.add(flushing())


@pytest.mark.parametrize("flush", [True, False])
def test_a_run_computes_in_the_setting_s_mode_and_returns_to_the_mode_before_it(tmp_path, fixed_plan, mode_kept, flush):
    seen = Seen()
    settings = {} if flush else {"flush_denormals": False}  # on by default
    hetrl.train("dqn", "CartPole-v1", steps=300, run_dir=tmp_path / "run", plan=str(fixed_plan("dqn", "CartPole-v1")),
                learning_starts=100, hidden=(16,), eval_every=300, eval_episodes=1, progress=False, callbacks=[seen], **settings)
    assert seen.modes == {flush}
    assert flushing() == mode_kept


@pytest.mark.parametrize("flush", [True, False])
def test_an_actor_process_computes_in_the_run_s_mode(flush):
    """The local executor's actors are given the run's setting, and an actor sets it where it runs."""
    from hetrl.runtime.local import LocalExecutor

    cfg = make_config("dqn", "CartPole-v1", overrides=["hidden=16"])
    algo = make_algorithm("dqn", env_spec("CartPole-v1"), cfg.agent)
    placement = default_placement(torch.device("cpu"), (1, 1), threads=1)
    spec = LocalExecutor(algo, placement, 1, 0, actors=1, log=lambda m: None, flush_denormals=flush).spec  # no actor started yet
    assert spec.flush_denormals == flush
    set_flushing(not flush)
    Actor(spec, 0, Timers())
    assert flushing() == flush


@pytest.mark.parametrize("flush", [True, False])
def test_the_ray_learner_and_actors_compute_in_the_run_s_mode(monkeypatch, flush):
    """Without a cluster: ``ray`` is a stand-in (as tests/test_metrics.py's)."""
    import sys

    from hetrl.runtime.ray_executor import RayExecutor, RayLearnerRole

    monkeypatch.setitem(sys.modules, "ray", SimpleNamespace(get_runtime_context=lambda: SimpleNamespace(get_node_id=lambda: "n")))
    cfg = make_config("dqn", "CartPole-v1", overrides=["hidden=16"])
    algo = make_algorithm("dqn", env_spec("CartPole-v1"), cfg.agent)
    placement = default_placement(torch.device("cpu"), (1, 1), threads=1)
    set_flushing(not flush)
    RayLearnerRole(algo, placement, seed=0, threads=None, flush_denormals=flush)
    assert flushing() == flush
    executor = RayExecutor(algo, placement, 1, 0, actors=1, log=lambda m: None, flush_denormals=flush)
    assert executor.spec.flush_denormals == flush


class _Measured(Exception):
    """Stops a command where its measurement starts: the test has seen the mode by then."""


@pytest.mark.parametrize("flush", [True, False])
def test_hetrl_profile_measures_in_the_mode_a_run_computes_in(monkeypatch, mode_kept, tmp_path, flush):
    from hetrl import profile as profile_module
    from hetrl.cli import main

    modes = []

    def measured(*args, **kwargs):
        modes.append(flushing())
        raise _Measured

    monkeypatch.setattr(profile_module, "profile_workload", measured)
    set_flushing(False)
    with pytest.raises(_Measured):
        main(["profile", "dqn", "CartPole-v1", "--no-progress", "--out", str(tmp_path / "profile.json")]
             + ([] if flush else ["--set", "flush_denormals=false"]))
    assert modes == [flush] and not flushing()


def test_the_cosearch_supernet_trains_with_denormals_flushed(monkeypatch, mode_kept, tmp_path):
    from hetrl.cosearch import pipeline

    modes = []

    def searched(*args, **kwargs):
        modes.append(flushing())
        raise _Measured

    monkeypatch.setattr(pipeline, "search", searched)
    monkeypatch.setattr(pipeline, "Teacher", lambda *a: SimpleNamespace(
        config=SimpleNamespace(env="CartPole-v1"), spec=env_spec("CartPole-v1"),
        data=lambda *a: SimpleNamespace(source="test"), policy=SimpleNamespace(source=Path("teacher.pt"))))
    set_flushing(False)
    with pytest.raises(_Measured):
        pipeline.cosearch("CartPole-v1", tmp_path / "teacher", hardware="macs", out=tmp_path / "out")
    assert modes == [True] and not flushing()
