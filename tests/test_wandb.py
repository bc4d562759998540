"""Weights & Biases as a metrics sink (hetrl.run.wandb_sink): what reaches wandb's API, through a
stand-in module (every test but the last, which drives the real wandb offline where it is
installed); and a run that asks for wandb without it stops before writing anything."""

import csv
import json
import math
import sys
from types import SimpleNamespace

import pytest

import hetrl
from hetrl.cli import main
from hetrl.errors import HetrlError
from hetrl.run.metrics import tensorboard_tag

SMALL = {"seed": 0, "plan": "rule", "device": "cpu", "progress": False, "hidden": (16, 16), "batch_size": 16,
         "learning_starts": 100, "log_every": 200, "eval_every": 0, "eval_episodes": 2}


class FakeRun:
    def __init__(self, init: dict) -> None:
        self.init, self.logged, self.finished = init, [], []

    def log(self, data, step=None):
        self.logged.append((step, dict(data)))

    def finish(self, exit_code=None):
        self.finished.append(exit_code)


@pytest.fixture
def fake_wandb(monkeypatch):
    """The ``wandb`` module as a stand-in recording each run it starts."""
    runs: list[FakeRun] = []

    def init(**kwargs):
        runs.append(FakeRun(kwargs))
        return runs[-1]

    monkeypatch.setitem(sys.modules, "wandb", SimpleNamespace(init=init))
    return runs


def _rows(run_dir):
    with open(run_dir / "metrics.csv") as f:
        return list(csv.DictReader(f))


def _expected(row):
    """A metrics.csv row as the sink logs it: the columns with a number, under their TensorBoard tags."""
    return {tensorboard_tag(k): float(v) for k, v in row.items()
            if k != "env_steps" and v not in ("", None) and not math.isnan(float(v))}


def test_each_metrics_row_goes_to_wandb_under_the_tensorboard_tags_and_a_resume_continues_the_run(tmp_path, fake_wandb):
    result = hetrl.train("dqn", "CartPole-v1", steps=600, run_dir=tmp_path / "run", wandb_project="hetrl-test",
                         wandb_entity="team", wandb_mode="offline", **SMALL)
    run_dir = result.run_dir
    (run,) = fake_wandb
    init = run.init
    run_id = (run_dir / "wandb" / "hetrl-run-id").read_text().strip()
    assert init["project"] == "hetrl-test" and init["entity"] == "team" and init["mode"] == "offline"
    assert init["dir"] == str(run_dir) and init["name"] == run_dir.name == "run"
    assert init["id"] == run_id and init["resume"] is None
    assert json.loads(json.dumps(init["config"])) == json.loads((run_dir / "config.json").read_text())  # the run's config
    rows = _rows(run_dir)
    assert [step for step, _ in run.logged] == [int(r["env_steps"]) for r in rows] == [200, 400, 600]
    for (_, logged), row in zip(run.logged, rows):
        assert logged == pytest.approx(_expected(row))
    assert {"rollout/return_mean", "train/loss", "train/updates", "time/env_steps_per_s", "time/share_Learn",
            "system/actor_restarts"} <= set(run.logged[-1][1])
    assert "eval/eval_return_mean" in run.logged[-1][1] and "train/actor_loss" not in run.logged[-1][1]  # DQN: no actor
    assert run.finished == [0]

    hetrl.resume(run_dir, steps=800, progress=False)
    resumed = fake_wandb[1]
    assert resumed.init["id"] == run_id and resumed.init["resume"] == "allow"  # the same W&B run goes on
    assert [step for step, _ in resumed.logged] == [800] and resumed.finished == [0]

    evaluated = hetrl.evaluate(run_dir, episodes=1, checkpoint="final")  # evaluation logs nothing
    assert evaluated.env_steps == 800 and len(fake_wandb) == 2


def test_the_actor_loss_reaches_wandb(tmp_path, fake_wandb):
    hetrl.train("td3", "Pendulum-v1", steps=400, run_dir=tmp_path / "td3", wandb_project="p", **SMALL)
    logged = fake_wandb[0].logged
    assert [step for step, _ in logged] == [200, 400]
    assert all(math.isfinite(values["train/actor_loss"]) for _, values in logged)


def test_a_run_that_fails_marks_its_wandb_run_failed(tmp_path, fake_wandb):
    class Boom(hetrl.Callback):
        def on_step(self, info):
            if info.env_steps >= 300:
                raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):
        hetrl.train("dqn", "CartPole-v1", steps=600, run_dir=tmp_path / "x", wandb_project="p", callbacks=[Boom()], **SMALL)
    assert fake_wandb[0].finished == [1] and [step for step, _ in fake_wandb[0].logged] == [200]


def test_without_wandb_a_run_that_asks_for_it_stops_before_writing_anything(tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "wandb", None)  # `import wandb` raises ImportError
    with pytest.raises(HetrlError, match=r"wandb is not installed: pip install 'hetrl\[wandb\]'"):
        hetrl.train("dqn", "CartPole-v1", steps=600, run_dir=tmp_path / "api", wandb_project="p", **SMALL)
    assert not (tmp_path / "api").exists()
    code = main(["train", "dqn", "CartPole-v1", "--steps", "600", "--run-dir", str(tmp_path / "cli"), "--plan", "rule",
                 "--set", "wandb_project=p", "--no-progress"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "hetrl[wandb]" in err[0] and not (tmp_path / "cli").exists()


def test_wandb_settings_are_checked():
    from hetrl.config import make_config

    for setting, message in (("wandb_mode=offlin", "did you mean 'offline'"), ("wandb_project= ", "must name a W&B project")):
        with pytest.raises(HetrlError, match=message):
            make_config("dqn", "CartPole-v1", overrides=[setting]).validate()
    config = make_config("dqn", "CartPole-v1", overrides=["wandb_project=p", "wandb_mode=disabled", "wandb_entity=me"])
    config.validate()
    assert (config.wandb_project, config.wandb_mode, config.wandb_entity) == ("p", "disabled", "me")


def test_the_real_wandb_offline(tmp_path, monkeypatch):
    """wandb itself (where installed) accepts what the sink passes, offline, and keeps its files in RUN/wandb."""
    wandb = pytest.importorskip("wandb")
    monkeypatch.setenv("WANDB_MODE", "offline")  # wandb_mode left unset: the variable decides
    monkeypatch.setenv("WANDB_SILENT", "true")
    started = []
    real_init = wandb.init

    def init(**kwargs):
        run = real_init(**kwargs)
        logged, real_log = [], run.log
        run.log = lambda data, step=None: (logged.append((step, dict(data))), real_log(data, step=step))[1]
        started.append((kwargs, run, logged))
        return run

    monkeypatch.setattr(wandb, "init", init)
    result = hetrl.train("dqn", "CartPole-v1", steps=400, run_dir=tmp_path / "real", wandb_project="hetrl-test", **SMALL)
    (kwargs, run, logged) = started[0]
    assert kwargs["mode"] is None and run.config["agent"]["hidden"] == [16, 16] and run.config["steps"] == 400
    assert [step for step, _ in logged] == [200, 400] and "train/loss" in logged[-1][1]
    run_id = (result.run_dir / "wandb" / "hetrl-run-id").read_text().strip()
    assert list((result.run_dir / "wandb").glob(f"offline-run-*-{run_id}/run-{run_id}.wandb"))


def test_overwrite_starts_a_new_wandb_run(tmp_path):
    """--overwrite removes RUN/wandb with the rest of a run stopped before its first checkpoint, so
    the run made in its place gets a W&B run of its own, not the removed one's id."""
    from hetrl.config import make_config
    from hetrl.run.rundir import RunDir

    config = make_config("dqn", "CartPole-v1")
    run = RunDir.create(tmp_path / "r", config)
    (run.path / "wandb").mkdir()
    (run.path / "wandb" / "hetrl-run-id").write_text("abc\n")
    run.unlock()  # as the session's train does at its end
    again = RunDir.create(tmp_path / "r", config, overwrite=True)
    assert again.replaced and not (again.path / "wandb").exists()
