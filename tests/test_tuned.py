"""Tuned defaults per (algorithm, env id): picked by env id, overridden by --config and --set, never
applied to a saved run; generic defaults for other envs; the one-line error for a missing extra."""

import json
import sys

import pytest

from hetrl import tuned
from hetrl.cli import main
from hetrl.config import default_config, defaults_origin, make_config
from hetrl.errors import HetrlError

TINY = ["--steps", "300", "--set", "hidden=8,8", "--set", "learning_starts=100", "--set", "batch_size=16",
        "--set", "eval_episodes=2", "--set", "eval_every=150", "--set", "log_every=100", "--no-progress", "--plan", "rule"]


def test_the_translation_of_sb3_settings():
    acrobot = tuned.translate("dqn", tuned.ZOO["dqn"]["Acrobot-v1"])
    # gradient_steps -1 at train_freq 4: one update per env step; the target interval of 250 env steps
    # is 250 updates; exploration over 12% of 100k env steps
    assert acrobot["replay_ratio"] == 1.0 and acrobot["train_every"] == 4 and acrobot["target_update_every"] == 250
    assert acrobot["eps_decay_steps"] == 12_000 and acrobot["eps_end"] == 0.1 and acrobot["steps"] == 100_000
    assert acrobot["hidden"] == (256, 256) and acrobot["lr"] == 6.3e-4 and acrobot["double"] is False
    cartpole = tuned.translate("dqn", tuned.ZOO["dqn"]["CartPole-v1"])
    # a target interval (10 env steps) shorter than the burst period (256): one copy per 128-update burst
    assert cartpole["target_update_every"] == 128 and cartpole["replay_ratio"] == 0.5 and cartpole["eps_decay_steps"] == 8_000
    car = tuned.translate("dqn", tuned.ZOO["dqn"]["MountainCar-v0"])
    assert car["target_update_every"] == 300 and car["replay_ratio"] == 0.5 and car["train_every"] == 16
    mcc = tuned.translate("td3", tuned.ZOO["td3"]["MountainCarContinuous-v0"])  # keys the zoo omits: SB3's defaults
    assert mcc["gamma"] == 0.99 and mcc["learning_starts"] == 100 and mcc["buffer_size"] == 1_000_000
    assert mcc["policy_delay"] == 2 and mcc["target_noise"] == 0.2 and mcc["action_noise"] == 0.5
    assert mcc["noise_type"] == "ornstein-uhlenbeck" and tuned.TUNED[("td3", "Pendulum-v1")]["noise_type"] == "normal"


def test_the_translation_of_sac_rows():
    pendulum = tuned.translate("sac", tuned.ZOO["sac"]["Pendulum-v1"])  # lr only: SB3's SAC defaults for the rest
    assert pendulum["lr"] == 1e-3 and pendulum["hidden"] == (256, 256) and pendulum["ent_coef"] == "auto"
    assert pendulum["buffer_size"] == 1_000_000 and pendulum["learning_starts"] == 100 and pendulum["tau"] == 0.005
    assert pendulum["replay_ratio"] == 1.0 and pendulum["policy_delay"] == 1 and pendulum["steps"] == 20_000
    lunar = tuned.translate("sac", tuned.ZOO["sac"]["LunarLanderContinuous-v3"])  # lin_7.3e-4 -> constant 7.3e-4
    assert lunar["lr"] == 7.3e-4 and "lr" in tuned.deviations("sac", "LunarLanderContinuous-v3")
    car = tuned.TUNED[("sac", "MountainCarContinuous-v0")]  # a fixed temperature, 32 updates per 32 env steps
    assert car["ent_coef"] == "0.1" and car["train_every"] == 32 and car["replay_ratio"] == 1.0 and car["gamma"] == 0.9999
    assert car["use_sde"] and car["log_std_init"] == -3.67 and car["use_expln"] and car["sde_sample_freq"] == -1
    assert not tuned.deviations("sac", "MountainCarContinuous-v0")  # gSDE as the zoo has it
    assert not tuned.TUNED[("sac", "Pendulum-v1")]["use_sde"]
    assert default_config("sac", "Pendulum-v1").agent.lr == 1e-3


def test_every_row_is_a_valid_config():
    for (algo, env), settings in tuned.TUNED.items():
        cfg = default_config(algo, env)
        assert cfg.steps == settings["steps"]
        assert not cfg.agent.validate(), (algo, env, cfg.agent.validate())
        for key, value in settings.items():
            assert getattr(cfg.agent if key != "steps" else cfg, key) == value, (algo, env, key)


def test_the_table_is_picked_by_env_id():
    acrobot, cartpole = default_config("dqn", "Acrobot-v1"), default_config("dqn", "CartPole-v1")
    assert acrobot.agent.lr == pytest.approx(6.3e-4) and acrobot.agent.batch_size == 128 and acrobot.steps == 100_000
    assert cartpole.agent.batch_size == 64 and cartpole.agent.train_every == 256
    assert default_config("td3", "Pendulum-v1").agent.gamma == 0.98
    generic = default_config("dqn", "CartPole-v0")  # no row: the algorithm's own defaults
    assert generic == default_config("dqn", "CartPole-v0", tuned=False)
    assert generic.agent.batch_size == 64 and generic.steps == 100_000


def test_every_atari_game_takes_the_zoos_atari_row():
    """The zoo's ``atari`` row, translated: target every 1,000 env steps at 1 update per 4 env steps
    is 250 updates; epsilon 1 -> 0.01 over a tenth of 10M steps; the network from the frames."""
    for algo in ("dqn", "exit-dqn"):
        for env in ("ALE/Breakout-v5", "ALE/Pong-v5"):
            cfg = default_config(algo, env)
            a = cfg.agent
            assert (cfg.steps, a.lr, a.batch_size, a.buffer_size, a.learning_starts) == (10_000_000, 1e-4, 32, 100_000, 100_000)
            assert (a.train_every, a.replay_ratio, a.target_update_every, a.tau, a.double) == (4, 0.25, 250, 1.0, False)
            assert (a.eps_start, a.eps_end, a.eps_decay_steps, a.max_grad_norm, a.network) == (1.0, 0.01, 1_000_000, 10.0, "auto")
            assert not a.validate()
            assert defaults_origin(algo, env).startswith(f"tuned for {env} as an Atari game, from ")
    assert make_config("dqn", "ALE/Breakout-v5", None, ["learning_starts=1000"]).agent.learning_starts == 1000
    assert "every ALE/ id" in defaults_origin("dqn", "CartPole-v0")  # the generic line lists the family
    assert default_config("ddpg", "ALE/Breakout-v5", tuned=True) == default_config("ddpg", "ALE/Breakout-v5", tuned=False)


def test_precedence_generic_tuned_config_set(tmp_path):
    base = tmp_path / "partial.json"
    base.write_text(json.dumps({"algo": "dqn", "env": "CartPole-v1", "agent": {"batch_size": 32, "lr": 1e-2}}))
    cfg = make_config("dqn", "Acrobot-v1", base, ["lr=5e-4"])
    assert cfg.agent.batch_size == 32  # the file beats the table
    assert cfg.agent.lr == 5e-4  # --set beats the file
    assert cfg.agent.target_update_every == 250 and cfg.steps == 100_000  # the table fills what the file leaves out
    assert make_config("dqn", "Acrobot-v1", {"agent": {"gamma": 0.9}}).agent.buffer_size == 50_000
    assert make_config("dqn", "Acrobot-v1", None, ["steps=777"]).steps == 777


def test_defaults_origin_says_where_settings_came_from():
    assert defaults_origin("dqn", "Acrobot-v1") == "tuned for Acrobot-v1, from rl-baselines3-zoo"
    text = defaults_origin("dqn", "CartPole-v0", "c.json", ["seed=3", "lr=1e-3", "agent.gamma=0.9"])
    assert text.startswith("generic dqn defaults (no tuned row for CartPole-v0; rows exist for Acrobot-v1, CartPole-v1")
    assert text.endswith("; then --config c.json; set explicitly: lr, gamma")  # run plumbing (seed) not listed


def test_train_says_which_defaults_in_its_first_line_and_summary(tmp_path, capfd):
    run = tmp_path / "acrobot"
    assert main(["train", "dqn", "Acrobot-v1", "--run-dir", str(run), "--seed", "2", *TINY]) == 0
    captured = capfd.readouterr()
    err, out = captured.err, captured.out
    assert err.splitlines()[0].startswith("defaults: tuned for Acrobot-v1, from rl-baselines3-zoo; set explicitly: steps, hidden")
    summary = json.loads((run / "summary.json").read_text())
    assert summary["defaults"].startswith("tuned for Acrobot-v1, from rl-baselines3-zoo")
    assert "tuned for Acrobot-v1" in out  # and in the summary table (stdout)
    config = json.loads((run / "config.json").read_text())
    assert config["agent"]["target_update_every"] == 250 and config["agent"]["hidden"] == [8, 8]

    other = tmp_path / "v0"
    assert main(["train", "dqn", "CartPole-v0", "--run-dir", str(other), *TINY]) == 0
    assert capfd.readouterr().err.splitlines()[0].startswith("defaults: generic dqn defaults (no tuned row for CartPole-v0")
    assert json.loads((other / "summary.json").read_text())["defaults"].startswith("generic dqn defaults")


def test_a_resumed_run_keeps_its_saved_config(tmp_path, monkeypatch, capfd):
    import hetrl
    from hetrl.run.rundir import RunDir

    run = tmp_path / "r"
    assert main(["train", "dqn", "CartPole-v1", "--run-dir", str(run), *TINY]) == 0
    saved = RunDir.open(run).load_config()
    monkeypatch.setitem(tuned.TUNED, ("dqn", "CartPole-v1"), {**tuned.TUNED[("dqn", "CartPole-v1")], "gamma": 0.5, "lr": 0.1})
    assert default_config("dqn", "CartPole-v1").agent.gamma == 0.5  # the table changed...
    capfd.readouterr()
    hetrl.resume(run, steps=400, progress=False)
    again = RunDir.open(run).load_config()
    assert again.agent.gamma == saved.agent.gamma == 0.99 and again.agent.lr == saved.agent.lr and again.steps == 400
    first = capfd.readouterr().err.splitlines()[0]
    assert first.startswith("defaults: the run's saved") and "(made from: tuned for CartPole-v1" in first


def test_missing_box2d_is_one_line_naming_the_extra(monkeypatch, tmp_path, capsys):
    from hetrl.envs import make_env

    monkeypatch.setitem(sys.modules, "Box2D", None)  # as if the package were not installed
    with pytest.raises(HetrlError, match=r"^environment 'LunarLander-v3' needs Box2D: pip install 'hetrl\[box2d\]'$"):
        make_env("LunarLander-v3")
    assert main(["train", "td3", "BipedalWalker-v3", "--run-dir", str(tmp_path / "w"), "--no-progress"]) == 2
    assert "pip install 'hetrl[box2d]'" in capsys.readouterr().err
    assert not (tmp_path / "w").exists()
