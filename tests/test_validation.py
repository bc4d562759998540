"""One validation layer (issue 24): settings from config files, dicts and the API's keywords are
type-checked with the file and key named; seeds, stop_at_return, num_envs and the replay's memory
are checked before anything is written; the API's arguments are checked for type; the user's
own code failing is one line saying where. Every error is one HetrlError line."""

import json
import math

import numpy as np
import pytest

import hetrl
from hetrl.algos import DQNConfig, make_algorithm
from hetrl.config import check_replay_memory, config_from_dict, make_config
from hetrl.envs import env_spec
from hetrl.errors import MAX_SEED, HetrlError, check_int, field_type_problems
from hetrl.protocol import Slot
from hetrl.tabular.schedule import Order

TINY = dict(progress=False, plan="rule", hidden=(16, 16), learning_starts=50, batch_size=16, eval_episodes=2,
            log_every=100, eval_every=0)


def one_line(exc: pytest.ExceptionInfo) -> str:
    message = str(exc.value)
    assert "\n" not in message
    return message


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    path = tmp_path_factory.mktemp("runs") / "dqn"
    hetrl.train("dqn", "CartPole-v1", steps=200, run_dir=path, **TINY)
    return path


# --- config files and dicts ------------------------------------------------------------------
@pytest.mark.parametrize("text, message", [
    ('{"steps": null}', r"c.json: steps is null; expected an integer \(leave steps out for its default\)"),
    ('{"seed": null}', "c.json: seed is null"),
    ('{"executor": null}', "c.json: executor is null; expected a string"),
    ('{"agent": {"lr": null}}', r"c.json \(dqn's agent settings\): lr is null; expected a number"),
    ('{"agent": {"hidden": null}}', "hidden is null; expected a comma-separated list of integers"),
    ('{"stop_at_return": null}', None),  # an optional setting takes null
])
def test_a_null_in_a_config_file_is_refused_unless_the_setting_takes_none(tmp_path, text, message):
    (tmp_path / "c.json").write_text(text)
    if message is None:
        assert make_config("dqn", "CartPole-v1", tmp_path / "c.json").stop_at_return is None
        return
    with pytest.raises(HetrlError, match=message) as info:
        make_config("dqn", "CartPole-v1", tmp_path / "c.json")
    one_line(info)


def test_a_type_error_in_a_config_file_names_the_file_not_set(tmp_path):
    """Issue 24 item 10: it read `--set steps=abc` for a file's steps."""
    (tmp_path / "c.yaml").write_text("steps: abc\n")
    with pytest.raises(HetrlError) as info:
        make_config("dqn", "CartPole-v1", tmp_path / "c.yaml")
    assert "--set" not in str(info.value) and f"{tmp_path / 'c.yaml'}: steps=abc: expected an integer" in one_line(info)
    with pytest.raises(HetrlError, match="^--set steps=abc: expected an integer$"):  # --set keeps its own wording
        make_config("dqn", "CartPole-v1", None, ["steps=abc"])


@pytest.mark.parametrize("data, message", [
    ({"agent": {"hidden": 64}}, "hidden=64: expected a comma-separated list"),
    ({"agent": {"hidden": [64, "x"]}}, "hidden=x: expected an integer"),
    ({"agent": {"lr": True}}, "lr=True: expected a number"),
    ({"agent": {"prioritized": 2}}, "prioritized=2: expected true or false"),
    ({"steps": 1.5}, "steps=1.5: expected an integer"),
    ({"steps": math.nan}, "steps=nan: expected an integer"),
    ({"wrappers": 5}, "wrappers=5: expected a comma-separated list of names"),
    ({"env_kwargs": [1]}, r"env_kwargs=\[1\]: expected a JSON object"),
    ({"agent": {"double": "maybe"}}, "double=maybe: expected true or false"),
])
def test_values_of_the_wrong_type_are_refused_by_key(data, message):
    with pytest.raises(HetrlError, match=message) as info:
        config_from_dict({"algo": "dqn", "env": "CartPole-v1", **data}, "c.json")
    assert one_line(info).startswith("c.json")


def test_a_control_character_in_a_value_cannot_break_the_one_line():
    """Found by tests/test_fuzz_settings.py: U+0085 (a line break to str.splitlines) was echoed as it was."""
    with pytest.raises(HetrlError) as info:
        config_from_dict({"algo": "dqn", "env": "CartPole-v1", "agent": {"alpha": "\x85"}}, "c.json")
    assert str(info.value) == "c.json (dqn's agent settings): alpha='\\x85': expected a number"
    assert len(str(info.value).splitlines()) == 1


def test_values_people_write_are_read_as_the_setting_takes_them():
    cfg = config_from_dict({"algo": "sac", "env": "Pendulum-v1", "steps": "20k", "seed": 3.0,
                            "agent": {"lr": 1, "ent_coef": 0.1, "hidden": [8, 8.0]}})
    assert (cfg.steps, cfg.seed, cfg.agent.lr, cfg.agent.ent_coef, cfg.agent.hidden) == (20_000, 3, 1.0, "0.1", (8, 8))
    assert isinstance(cfg.agent.lr, float) and not field_type_problems(cfg) and not field_type_problems(cfg.agent)


def test_an_unknown_agent_setting_names_the_algorithm(tmp_path):
    with pytest.raises(HetrlError, match=r"c.json \(ddpg's agent settings\): unknown setting 'double'"):
        config_from_dict({"algo": "ddpg", "env": "Pendulum-v1", "agent": {"double": True}}, "c.json")


def test_the_type_check_of_a_dataclass_names_each_field():
    with pytest.raises(HetrlError, match=r"hidden must be a comma-separated list of integers, e.g. 64,64 \(got int 64\)"):
        make_algorithm("dqn", env_spec("CartPole-v1"), DQNConfig(hidden=64))  # type: ignore[arg-type]


# --- run settings ----------------------------------------------------------------------------
@pytest.mark.parametrize("overrides, message", [
    (["seed=-1"], f"seed must be between 0 and {MAX_SEED:,} \\(got -1\\)"),
    ([f"seed={2**70}"], "seed must be between 0 and"),
    (["stop_at_return=nan"], "stop_at_return must be a finite number"),
    (["cpu_watts=0"], r"cpu_watts must be the host CPU's power in watts, above 0 and at most 10,000 \(got 0.0\)"),
    (["cpu_watts=inf"], "cpu_watts must be the host CPU's power in watts"),
    (["cpu_watts=65000"], r"at most 10,000 \(got 65000.0\)"),
    (["gpu_watts=-300"], r"gpu_watts must be a GPU's power in watts, above 0 and at most 10,000 \(got -300.0\)"),
    (["gpu_watts=nan"], "gpu_watts must be a GPU's power in watts"),
    (["gpu_watts=700000"], r"at most 10,000 \(got 700000.0\); e.g. its TDP, or none where an NVML meter measures it"),
    (["num_envs=100000", "steps=2000"], r"num_envs \(100000\) must not exceed steps \(2000\)"),
])
def test_run_settings_no_backend_could_use_are_refused(overrides, message):
    with pytest.raises(HetrlError, match=message) as info:
        make_config("dqn", "CartPole-v1", None, overrides).validate()
    one_line(info)


def test_a_replay_beyond_the_free_memory_is_refused_before_it_is_allocated():
    cfg = make_config("dqn", "CartPole-v1", None, ["buffer_size=1e12"])
    spec = env_spec("CartPole-v1")
    with pytest.raises(HetrlError, match=r"buffer_size=1,000,000,000,000 needs at least .* GiB of replay on cpu \(48 bytes "
                                         r"per transition.*more than the 1.0 GiB free there; set buffer_size=11,184,810 or less"):
        check_replay_memory(cfg, spec, Slot("numpy", "cpu"), free=2**30)
    cfg.agent.buffer_size = 10_000_000  # 458 MiB: fits
    check_replay_memory(cfg, spec, Slot("numpy", "cpu"), free=2**30)
    cfg.agent.buffer_size, cfg.force = 10**12, True  # --force tries anyway
    check_replay_memory(cfg, spec, Slot("numpy", "cpu"), free=2**30)


def test_a_frame_replay_is_counted_by_frames():
    cfg = make_config("dqn", "CartPole-v1", None, ["buffer_size=1000000"])
    spec = env_spec("hetrl/Bytes-v0")  # uint8 images of 2 stacked 36x36 frames
    free = cfg.agent.buffer_size * int(np.prod(spec.obs_shape))  # one observation per transition
    check_replay_memory(cfg, spec, Slot("frames-numpy", "cpu"), free=free)  # one frame each: fits
    with pytest.raises(HetrlError, match="buffer_size"):  # obs and next_obs each: does not
        check_replay_memory(cfg, spec, Slot("numpy", "cpu"), free=free)


def test_hetrl_train_refuses_a_replay_beyond_the_memory_without_writing(tmp_path):
    with pytest.raises(HetrlError, match="needs at least .* of replay"):
        hetrl.train("dqn", "CartPole-v1", 200, run_dir=tmp_path / "r", **{**TINY, "buffer_size": 10**12})
    assert not (tmp_path / "r").exists()


# --- the API's arguments ---------------------------------------------------------------------
@pytest.mark.parametrize("call, message", [
    (lambda d: hetrl.train(123, "CartPole-v1", 200, run_dir=d, **TINY), "algo must be an algorithm's name"),
    (lambda d: hetrl.train("dqn", None, 200, run_dir=d, **TINY), "env must be a Gymnasium id"),
    (lambda d: hetrl.train("dqn", "CartPole-v1", 200, config=42, run_dir=d, **TINY), "config must be a YAML or JSON file"),
    (lambda d: hetrl.train("dqn", "CartPole-v1", 200, run_dir=123, **TINY), "run_dir must be a path"),
    (lambda d: hetrl.train("dqn", "CartPole-v1", "many", run_dir=d, **TINY), "steps=many: expected an integer"),
    (lambda d: hetrl.train("dqn", "CartPole-v1", True, run_dir=d, **TINY), "steps=True: expected an integer"),
    (lambda d: hetrl.train("dqn", "CartPole-v1", 200, seed=1.5, run_dir=d, **TINY), "seed=1.5: expected an integer"),
    (lambda d: hetrl.train("dqn", "CartPole-v1", 200, callbacks=5, run_dir=d, **TINY), "callbacks must be a list"),
    (lambda d: hetrl.train("dqn", "CartPole-v1", 200, env_kwargs=5, run_dir=d, **TINY), "env_kwargs must be a dict"),
    (lambda d: hetrl.train("dqn", "CartPole-v1", 200, wrappers=5, run_dir=d, **TINY), "wrappers must be a list"),
    (lambda d: hetrl.train("dqn", "CartPole-v1", 200, run_dir=d, **{**TINY, "hidden": 64}), "hidden=64: expected a comma"),
    (lambda d: hetrl.train("dqn", "CartPole-v1", 200, run_dir=d, **{**TINY, "lr": math.nan}), "lr must be a finite number"),
])
def test_the_api_checks_its_arguments_before_writing(tmp_path, call, message):
    with pytest.raises(HetrlError, match=message) as info:
        call(tmp_path / "r")
    one_line(info)
    assert not (tmp_path / "r").exists()


@pytest.mark.parametrize("call, message", [
    (lambda r: hetrl.evaluate(r, episodes=0), r"episodes must be >= 1 \(got 0\)"),
    (lambda r: hetrl.evaluate(r, episodes="5"), "episodes must be a whole number, not str '5'"),
    (lambda r: hetrl.evaluate(r, episodes=2.5), "episodes must be a whole number, not float"),
    (lambda r: hetrl.evaluate(123), "run_dir must be a path"),
    (lambda r: hetrl.evaluate(r, 2, checkpoint=5), "checkpoint must be a path"),
    (lambda r: hetrl.evaluate(r, 2, seed=-1), "seed must be between 0 and"),
    (lambda r: hetrl.resume(r, "x", progress=False), "steps must be a whole number"),
    (lambda r: hetrl.resume(None), "run_dir must be a path"),
    (lambda r: hetrl.load(123), "run must be a path"),
    (lambda r: hetrl.load(r, seed=2**40), "seed must be between 0 and"),
])
def test_evaluate_resume_and_load_check_their_arguments(run, call, message):
    with pytest.raises(HetrlError, match=message) as info:
        call(run)
    one_line(info)


def test_the_cli_refuses_no_episodes_with_the_apis_message(run, capsys):
    from hetrl.cli import main

    assert main(["eval", str(run), "--episodes", "0"]) == 2
    assert capsys.readouterr().err.strip() == "hetrl: error: episodes must be >= 1 (got 0)"


def test_predict_refuses_what_is_not_an_observation(run):
    policy = hetrl.load(run)
    with pytest.raises(HetrlError, match=r"predict: observations must be numbers \(float32, shape \(4,\)"):
        policy.predict("left")
    with pytest.raises(HetrlError, match="predict: the observations hold NaN"):
        policy.predict(np.full(4, np.nan))
    assert policy.predict(np.zeros(4)) in (0, 1)


def _raising_factory():
    raise RuntimeError("no env today")


def test_the_users_code_failing_is_one_line_saying_where(tmp_path):
    with pytest.raises(HetrlError) as info:
        hetrl.train("dqn", _raising_factory, 200, run_dir=tmp_path / "r", **TINY)
    assert one_line(info).startswith(f"env factory {__name__}:_raising_factory raised RuntimeError: no env today "
                                     f"(at {__file__}:")
    agent = make_config("dqn", "CartPole-v1", None, ["network=math:sqrt"]).agent
    with pytest.raises(HetrlError) as info:  # a builtin named as the network: no line of the user's to show
        make_algorithm("dqn", env_spec("CartPole-v1"), agent).make_networks()
    assert one_line(info).startswith("network factory math:sqrt raised TypeError") and "(at " not in str(info.value)


# --- tabular ---------------------------------------------------------------------------------
@pytest.mark.parametrize("make, message", [
    (lambda t: t.TabularConfig(units=0), r"units must be >= 1 \(got 0\)"),
    (lambda t: t.TabularConfig(epochs="3"), r"epochs must be an integer \(got str '3'\)"),
    (lambda t: t.TabularConfig(scale=0), "fixed-point scale must be an integer"),  # refused with fp32 too
    (lambda t: t.TabularConfig(order=Order(seed=-1)), "seed must be between 0 and"),
    (lambda t: t.train_tabular(None), "train_tabular takes a TabularDataset"),
    (lambda t: t.collect("FrozenLake-v1", "many"), "transitions must be a whole number"),
    (lambda t: t.collect("FrozenLake-v1", 10, seed=-1), "seed must be between 0 and"),
    (lambda t: t.collect("FrozenLake-v1", 10, env_kwargs=5), "env_kwargs must be a dict"),
])
def test_tabular_arguments_are_checked(make, message):
    import hetrl.tabular as tabular

    with pytest.raises(HetrlError, match=message) as info:
        make(tabular)
    one_line(info)


def test_check_int_takes_numpy_integers_and_refuses_bools():
    assert check_int("n", np.int64(3), 1) == 3
    with pytest.raises(HetrlError, match="n must be a whole number, not bool True"):
        check_int("n", True)
    json.dumps(check_int("n", np.int32(2)))  # a plain int comes back


@pytest.mark.parametrize("overrides, message", [
    (["steps=-5"], r"invalid run config: steps must be > 0 \(got -5\)$"),  # not also "num_envs must not exceed steps"
    (["buffer_size=-5"], r"invalid dqn config: buffer_size must be > 0 \(got -5\)$"),  # nor "batch_size must not exceed"
])
def test_a_bad_value_is_one_problem_not_also_every_rule_it_takes_part_in(overrides, message):
    cfg = make_config("dqn", "CartPole-v1", None, overrides)
    with pytest.raises(HetrlError, match=message):
        cfg.validate()
        make_algorithm("dqn", env_spec("CartPole-v1"), cfg.agent)


def test_hetrl_plan_checks_the_settings_before_reading_a_profile(tmp_path, capsys):
    from hetrl.cli import main

    (tmp_path / "p.json").write_text("{}")
    assert main(["plan", "dqn", "CartPole-v1", "--set", "lr=nan", "--profile", str(tmp_path / "p.json")]) == 2
    assert capsys.readouterr().err.strip() == "hetrl: error: invalid dqn config: lr must be a finite number (got nan)"


def test_a_toml_config_is_refused_with_the_formats_read(tmp_path):
    (tmp_path / "c.toml").write_text("steps = 200\n")
    with pytest.raises(HetrlError, match=r"c.toml: TOML is not read; write the settings as YAML \(.yaml\) or JSON"):
        make_config("dqn", "CartPole-v1", tmp_path / "c.toml")


def test_paths_that_are_not_what_they_should_be_say_what_they_are(run, tmp_path, monkeypatch):
    (tmp_path / "f.txt").write_text("x")
    with pytest.raises(HetrlError, match="f.txt is a file, not a run directory$"):
        hetrl.evaluate(tmp_path / "f.txt")
    with pytest.raises(HetrlError, match="is a directory; pass a checkpoint file"):
        hetrl.evaluate(run, 2, checkpoint=tmp_path)
    monkeypatch.chdir(tmp_path)  # a bare name is not looked up in the run, but the run's own file is named
    step = next((run / "checkpoints").glob("step_*.pt"))
    with pytest.raises(HetrlError, match=f"checkpoint {step.name} does not exist \\(the run's own is {step}\\)$"):
        hetrl.evaluate(run, 2, checkpoint=step.name)
