"""The objects that outlive a run kept out of garbage collections while it trains and profiles
(runtime/frozen_objects.py), and given back afterwards."""

import gc
import weakref

import pytest

import hetrl
from hetrl.runtime.frozen_objects import objects_frozen


@pytest.fixture(autouse=True)
def nothing_frozen():
    """Each test starts and ends with no object frozen (as the test process has)."""
    gc.unfreeze()
    yield
    gc.unfreeze()


class Cycle:
    def __init__(self) -> None:
        self.me = self


def test_objects_made_before_the_context_are_left_out_of_collections_and_freed_after_it():
    before = weakref.ref(Cycle())  # garbage only a collection frees (a reference cycle)
    with objects_frozen():
        assert gc.get_freeze_count() > 0
        gc.collect()
        assert before() is not None  # made before: frozen, so no collection frees it
        inside = weakref.ref(Cycle())
        gc.collect()
        assert inside() is None  # what the run makes and drops is collected as before
    assert gc.get_freeze_count() == 0
    gc.collect()
    assert before() is None  # given back, and freed


def test_objects_frozen_by_the_caller_stay_frozen():
    gc.freeze()
    frozen = gc.get_freeze_count()
    with objects_frozen():
        pass
    assert gc.get_freeze_count() == frozen


def test_a_context_that_raises_still_gives_the_objects_back():
    with pytest.raises(RuntimeError), objects_frozen():
        raise RuntimeError("the run failed")
    assert gc.get_freeze_count() == 0


class Seen(hetrl.Callback):
    def __init__(self) -> None:
        self.frozen: list[int] = []

    def on_step(self, info) -> None:
        self.frozen.append(gc.get_freeze_count())


def test_a_run_trains_with_the_objects_before_it_frozen_and_gives_them_back(tmp_path, fixed_plan):
    seen = Seen()
    hetrl.train("dqn", "CartPole-v1", steps=300, run_dir=tmp_path / "run", plan=str(fixed_plan("dqn", "CartPole-v1")),
                learning_starts=100, hidden=(16,), eval_every=0, eval_episodes=1, progress=False, callbacks=[seen])
    assert seen.frozen and min(seen.frozen) > 0
    assert gc.get_freeze_count() == 0


def test_a_profile_measures_with_the_objects_before_it_frozen(monkeypatch):
    from hetrl import profile as profile_module
    from hetrl.config import make_config

    counts = []
    real_jobs = profile_module._jobs

    def jobs(*args, **kwargs):
        for label, measure in list(real_jobs(*args, **kwargs))[:1]:  # one measurement is enough to see
            yield label, lambda measure=measure: (counts.append(gc.get_freeze_count()), measure())[1]

    monkeypatch.setattr(profile_module, "_jobs", jobs)
    cfg = make_config("dqn", "CartPole-v1", overrides=["hidden=16"])
    profile_module.profile_workload("dqn", "CartPole-v1", cfg.agent, ["cpu"], threads=[1], energy=False)
    assert counts and counts[0] > 0
    assert gc.get_freeze_count() == 0
