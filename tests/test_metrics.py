"""Metric rows reach TensorBoard under grouped tags (rollout/, train/, eval/, time/, system/)."""

from hetrl.run.metrics import COLUMNS, MetricsWriter, tensorboard_tag


def test_every_column_has_a_group():
    groups = {tensorboard_tag(c).split("/")[0] for c in COLUMNS if c != "env_steps"}
    assert groups == {"rollout", "train", "eval", "time", "system"}
    assert tensorboard_tag("return_mean") == "rollout/return_mean"
    assert tensorboard_tag("eval_return_mean") == "eval/eval_return_mean"
    assert tensorboard_tag("share_Learn") == "time/share_Learn"
    assert tensorboard_tag("loss") == "train/loss"


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
    import csv

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


def test_a_target_reached_at_the_end_of_the_budget_is_no_early_stop(tmp_path):
    early, rows = _train(tmp_path, "early", eval_every=200, stop_at_return=0.0)
    assert early.solved_at == 200 and early.env_steps == 200 and int(rows[-1]["env_steps"]) == 200
    at_end, _ = _train(tmp_path, "end", eval_every=600, stop_at_return=0.0)
    assert at_end.solved_at is None and at_end.env_steps == 600
