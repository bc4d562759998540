import json

import pytest

from hetrl.config import apply_overrides, config_from_dict, default_config, load_config, save_config
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
