import json

import pytest

from hetrl.config import apply_overrides, config_from_dict, default_config, load_config, make_config, save_config
from hetrl.errors import HetrlError


def test_generic_defaults_come_from_the_algorithm():
    cfg = default_config("DQN", "CartPole-v1", tuned=False)
    assert cfg.algo == "dqn" and cfg.agent.lr == pytest.approx(2.3e-3) and cfg.agent.double and cfg.steps == 100_000
    td3 = default_config("td3", "Pendulum-v1", tuned=False).agent
    assert td3.twin_critics and td3.policy_delay == 2 and td3.target_noise == pytest.approx(0.2)


def test_overrides_are_parsed_by_field_type():
    cfg = apply_overrides(default_config("dqn", "CartPole-v1"), [
        "lr=1e-4", "hidden=64,64", "dueling=true", "steps=2e5", "agent.n_step=3", "stop_at_return=none", "device=cpu",
    ])
    assert cfg.agent.lr == 1e-4 and cfg.agent.hidden == (64, 64) and cfg.agent.dueling is True
    assert cfg.steps == 200_000 and isinstance(cfg.steps, int) and cfg.agent.n_step == 3
    assert cfg.stop_at_return is None and cfg.device == "cpu"


@pytest.mark.parametrize("item, message", [
    ("lr", "expects key=value"),
    ("=3", "expects key=value"),
    ("lrr=0.1", "no such setting.*did you mean 'lr'"),
    ("steps=1.5", "expected an integer"),
    ("dueling=maybe", "expected true or false"),
    ("hidden=a,b", "comma-separated list of integers"),
    ("algo=ddpg", "positional argument"),
])
def test_malformed_overrides_name_the_problem(item, message):
    with pytest.raises(HetrlError, match=message):
        apply_overrides(default_config("dqn", "CartPole-v1"), [item])


def test_round_trip_through_json(tmp_path):
    cfg = apply_overrides(default_config("td3", "Pendulum-v1"), ["hidden=8,8", "seed=3", "tau=0.01"])
    save_config(cfg, tmp_path / "c.json")
    again = load_config(tmp_path / "c.json")
    assert again == cfg


def test_bad_config_files(tmp_path):
    with pytest.raises(HetrlError, match="does not exist"):
        load_config(tmp_path / "missing.json")
    (tmp_path / "bad.json").write_text("{not json")
    with pytest.raises(HetrlError, match="not valid JSON"):
        load_config(tmp_path / "bad.json")
    with pytest.raises(HetrlError, match="unknown setting 'lrate'"):
        config_from_dict({"algo": "dqn", "env": "CartPole-v1", "agent": {"lrate": 1}})
    with pytest.raises(HetrlError, match="expected an integer"):
        config_from_dict({"algo": "dqn", "env": "CartPole-v1", "steps": "many"})
    (tmp_path / "typed.json").write_text(json.dumps({"algo": "dqn", "env": "CartPole-v1", "agent": {"hidden": [8, 8]}}))
    assert load_config(tmp_path / "typed.json").agent.hidden == (8, 8)


@pytest.mark.parametrize("overrides, message", [
    (["inference=centre"], "inference 'centre' is unknown.*did you mean 'central'"),
    (["inference=central", "executor=inline"], "central inference runs with the local executor, not inline"),
    (["inference=central", "executor=ray"], "central inference runs with the local executor, not ray"),
])
def test_inference_is_validated_with_the_fix(overrides, message):
    cfg = apply_overrides(default_config("dqn", "CartPole-v1"), overrides)
    with pytest.raises(HetrlError, match=message):
        cfg.validate()
    apply_overrides(cfg, ["inference=central", "executor=local"]).validate()


def test_the_python_api_applies_typed_values_without_a_text_round_trip():
    from hetrl.config import apply_values

    cfg = apply_values(default_config("dqn", "CartPole-v1"),
                       {"device": "cpu", "hidden": (64, 32), "lr": 1e-3, "steps": 5_000, "stop_at_return": 475, "prioritized": True})
    assert (cfg.device, cfg.agent.hidden, cfg.agent.lr, cfg.steps, cfg.stop_at_return, cfg.agent.prioritized) == (
        "cpu", (64, 32), 1e-3, 5_000, 475.0, True)
    assert isinstance(cfg.stop_at_return, float)
    with pytest.raises(HetrlError, match="no setting 'learning_rat' for dqn"):
        apply_values(cfg, {"learning_rat": 1e-3})
    with pytest.raises(HetrlError, match="batch_size"):
        apply_values(cfg, {"batch_size": "many"})
    with pytest.raises(HetrlError, match="hidden"):
        apply_values(cfg, {"hidden": (64, "wide")})


@pytest.mark.parametrize("text, value", [("100000", 100_000), ("100_000", 100_000), ("1e5", 100_000), ("100k", 100_000),
                                         ("1.5M", 1_500_000), ("2K", 2_000)])
def test_counts_are_read_as_people_write_them(text, value):
    from hetrl.config import parse_count

    assert parse_count(text) == value
    assert apply_overrides(default_config("dqn", "CartPole-v1"), [f"steps={text}"]).steps == value


def test_other_libraries_names_are_answered_with_hetrls():
    for key, ours in [("learning_rate", "lr"), ("gradient_steps", "replay_ratio"), ("train_freq", "train_every"),
                      ("target_update_interval", "target_update_every")]:
        with pytest.raises(HetrlError, match=f"hetrl calls it {ours}"):
            apply_overrides(default_config("dqn", "CartPole-v1"), [f"{key}=1"])
    with pytest.raises(HetrlError, match="1.5"):
        apply_overrides(default_config("dqn", "CartPole-v1"), ["steps=1.5"])


def test_a_partial_yaml_or_json_config_file(tmp_path):
    from hetrl.config import make_config

    (tmp_path / "some.yaml").write_text("steps: 20k\nseed: 4\nagent:\n  lr: 0.0005\n  hidden: [64, 64]\n")
    cfg = make_config("dqn", "Acrobot-v1", tmp_path / "some.yaml", ["batch_size=32"])
    assert (cfg.env, cfg.steps, cfg.seed, cfg.agent.lr, cfg.agent.hidden, cfg.agent.batch_size) == (
        "Acrobot-v1", 20_000, 4, 5e-4, (64, 64), 32)
    (tmp_path / "some.json").write_text(json.dumps({"agent": {"gamma": 0.95}}))
    assert make_config("dqn", "CartPole-v1", tmp_path / "some.json").agent.gamma == 0.95
    (tmp_path / "bad.yaml").write_text("agent: [unclosed\n")
    with pytest.raises(HetrlError, match="not valid YAML at line"):
        make_config("dqn", "CartPole-v1", tmp_path / "bad.yaml")
    (tmp_path / "ddpg.yaml").write_text("algo: ddpg\n")
    with pytest.raises(HetrlError, match="the config is for ddpg, not dqn"):
        make_config("dqn", "CartPole-v1", tmp_path / "ddpg.yaml")


@pytest.mark.parametrize("setting, fix", [
    ("max_grad_norm=-1", "null for no clipping"), ("max_grad_norm=0", "null for no clipping"),
    ("lr=nan", "finite"), ("replay_ratio=nan", "finite"), ("gamma=inf", "finite"),
    ("alpha=-1", "prioritisation exponent"), ("beta0=-3", "in \\[0, 1\\]"),
    ("eps_start=5", "0 <= eps_end <= eps_start <= 1"), ("eps_end=-2", "0 <= eps_end <= eps_start <= 1"),
    ("learning_starts=-5", "learning_starts must be >= 0"),
])
def test_settings_a_backend_would_read_its_own_way_are_refused(setting, fix):
    """One meaning on every backend: torch's clip_grad_norm_ scales gradients by a negative factor at
    max_grad_norm=-1 (gradient ascent) and zeroes them at 0, where the numba learner skipped clipping."""
    from hetrl.algos import make_algorithm
    from hetrl.envs import env_spec

    cfg = make_config("dqn", "CartPole-v1", None, [setting])
    with pytest.raises(HetrlError, match=fix):
        make_algorithm("dqn", env_spec("CartPole-v1"), cfg.agent)
