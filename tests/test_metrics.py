"""Metric rows reach TensorBoard under grouped tags (rollout/, train/, eval/, time/, system/); the
actor's loss of DDPG, TD3 and SAC reaches them from every executor."""

import csv
import math
import sys
from types import SimpleNamespace

import numpy as np
import pytest

from hetrl.run.metrics import COLUMNS, MetricsWriter, read_metrics, tensorboard_tag


def test_every_column_has_a_group():
    groups = {tensorboard_tag(c).split("/")[0] for c in COLUMNS if c != "env_steps"}
    assert groups == {"rollout", "train", "eval", "time", "system"}
    assert tensorboard_tag("return_mean") == "rollout/return_mean"
    assert tensorboard_tag("eval_return_mean") == "eval/eval_return_mean"
    assert tensorboard_tag("share_Learn") == "time/share_Learn"
    assert tensorboard_tag("loss") == "train/loss"
    assert tensorboard_tag("actor_loss") == "train/actor_loss"


def test_the_event_file_holds_the_grouped_tags(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    writer = MetricsWriter(tmp_path / "metrics.csv", tmp_path / "tb")
    writer.write({"env_steps": 100, "return_mean": 12.5, "loss": 0.3, "eval_return_mean": 20.0, "env_steps_per_s": 900.0,
                  "share_Learn": 0.4, "actor_restarts": 0})
    writer.close()
    events = EventAccumulator(str(tmp_path / "tb"))
    events.Reload()
    assert set(events.Tags()["scalars"]) == {"rollout/return_mean", "train/loss", "eval/eval_return_mean",
                                              "time/env_steps_per_s", "time/share_Learn", "system/actor_restarts"}
    assert events.Scalars("rollout/return_mean")[0].value == 12.5


def _train(tmp_path, name, **settings):
    import hetrl

    result = hetrl.train("dqn", "CartPole-v1", steps=600, seed=0, run_dir=tmp_path / name, progress=False, plan="rule",
                         learning_starts=100, log_every=200, eval_episodes=2, **settings)
    with open(result.run_dir / "metrics.csv") as f:
        return result, list(csv.DictReader(f))


def test_metrics_csv_has_one_row_per_step_and_the_final_evaluation_in_the_last(tmp_path):
    for eval_every in (0, 200, 500):
        result, rows = _train(tmp_path, f"e{eval_every}", eval_every=eval_every)
        steps = [int(r["env_steps"]) for r in rows]
        assert steps == sorted(set(steps)) and steps[-1] == 600, (eval_every, steps)
        assert rows[-1]["eval_return_mean"] != "" and result.eval_return_mean == float(rows[-1]["eval_return_mean"])
        assert any(r["loss"] for r in rows) and all(r["actor_loss"] == "" for r in rows)  # DQN has no actor


def test_a_target_reached_at_the_end_of_the_budget_is_no_early_stop(tmp_path):
    early, rows = _train(tmp_path, "early", eval_every=200, stop_at_return=0.0)
    assert early.solved_at == 200 and early.env_steps == 200 and int(rows[-1]["env_steps"]) == 200
    at_end, _ = _train(tmp_path, "end", eval_every=600, stop_at_return=0.0)
    assert at_end.solved_at is None and at_end.env_steps == 600


# --- the actor's loss -----------------------------------------------------------------------------
CONTINUOUS = {"steps": 600, "seed": 0, "plan": "rule", "device": "cpu", "progress": False, "hidden": (16, 16),
              "batch_size": 32, "learning_starts": 300, "log_every": 200, "eval_every": 0, "eval_episodes": 1}


def _rows(result):
    with open(result.run_dir / "metrics.csv") as f:
        return list(csv.DictReader(f))


def _actor_losses(rows):
    """The actor_loss of every row but the first, which ends before learning starts (at 300 env steps)."""
    assert len(rows) == 3 and int(rows[0]["env_steps"]) < 300 and rows[0]["actor_loss"] == ""
    return [float(r["actor_loss"]) for r in rows[1:]]


@pytest.mark.parametrize("algo", ["ddpg", "td3", "sac"])
def test_actor_loss_is_a_column_and_a_tensorboard_tag_of_every_actor_critic(tmp_path, algo):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    import hetrl

    result = hetrl.train(algo, "Pendulum-v1", run_dir=tmp_path / algo, **CONTINUOUS)
    losses = _actor_losses(_rows(result))
    assert all(math.isfinite(v) for v in losses), losses
    assert [m["actor_loss"] for m in result.metrics] == [None, *losses]
    events = EventAccumulator(str(result.run_dir / "tb"))
    events.Reload()
    assert [e.value for e in events.Scalars("train/actor_loss")] == pytest.approx(losses)


def test_actor_loss_comes_back_from_the_actor_processes_run(tmp_path):
    import hetrl

    result = hetrl.train("td3", "Pendulum-v1", run_dir=tmp_path / "local", executor="local", actors=1, **CONTINUOUS)
    losses = _actor_losses(_rows(result))
    assert all(math.isfinite(v) for v in losses), losses


def test_the_ray_learner_reports_its_actor_loss_to_the_coordinator(monkeypatch):
    """RayLearnerRole.step's result carries the actor's loss and RayExecutor averages it, without a
    cluster: ``ray`` is a stand-in whose object references are the objects themselves."""
    import torch

    from hetrl.algos import make_algorithm
    from hetrl.config import make_config
    from hetrl.envs import env_spec
    from hetrl.planner.rule import default_placement
    from hetrl.runtime.ray_executor import RayExecutor, RayLearnerRole

    fake = SimpleNamespace(get=lambda refs: refs, wait=lambda refs, timeout=None: (list(refs), []), put=lambda x: x,
                           get_runtime_context=lambda: SimpleNamespace(get_node_id=lambda: "node-1"))
    monkeypatch.setitem(sys.modules, "ray", fake)
    cfg = make_config("td3", "Pendulum-v1", overrides=["hidden=16,16", "batch_size=16", "learning_starts=0"])
    algo = make_algorithm("td3", env_spec("Pendulum-v1"), cfg.agent)
    placement = default_placement(torch.device("cpu"), (1, 1), threads=1)
    rng = np.random.default_rng(0)
    chunk = {"obs": rng.standard_normal((32, 3), dtype=np.float32), "actions": algo.random_actions(rng, 32),
             "rewards": rng.standard_normal(32, dtype=np.float32), "next_obs": rng.standard_normal((32, 3), dtype=np.float32),
             "discounts": np.full(32, 0.98, np.float32)}
    role = RayLearnerRole(algo, placement, seed=0, threads=None)
    results = [role.step([chunk], 32, 4, 100), role.step([], 32, 1, 100)]
    assert math.isfinite(results[0]["actor_loss"])  # updates 2 and 4 stepped TD3's actor
    assert results[1]["actor_loss"] is None and math.isfinite(results[1]["loss"])  # update 5 did not
    ex = RayExecutor(algo, placement, 1, 0, actors=1, log=lambda m: None)
    ex._learned_steps = 32
    for result in results:
        ex._learning = result
        assert ex._receive_learner()
    assert ex.drain_actor_losses() == pytest.approx(results[0]["actor_loss"]) and ex.drain_actor_losses() is None


def test_a_metrics_csv_written_before_a_column_existed_is_extended_on_resume(tmp_path):
    """Appending rows of the new columns under an old header would shift every value after them."""
    path = tmp_path / "metrics.csv"
    old = [c for c in COLUMNS if c != "actor_loss"] + ["retired"]
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=old)
        writer.writeheader()
        writer.writerow({"env_steps": 100, "loss": 0.5, "exploration": 0.1, "retired": 7})
    writer = MetricsWriter(path, tmp_path / "tb", resume_step=100)
    writer.write({"env_steps": 200, "loss": 0.25, "actor_loss": -3.0, "exploration": 0.1})
    writer.close()
    with path.open() as f:
        header = next(csv.reader(f))
    assert header == [*COLUMNS, "retired"]
    first, second = read_metrics(path)
    assert (first["loss"], first["actor_loss"], first["exploration"], first["retired"]) == (0.5, None, 0.1, 7.0)
    assert (second["loss"], second["actor_loss"], second["exploration"]) == (0.25, -3.0, 0.1)
    MetricsWriter(path, tmp_path / "tb").close()  # a header that is already whole is kept as it is
    with path.open() as f:
        assert next(csv.reader(f)) == header
