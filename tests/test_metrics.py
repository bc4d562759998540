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
