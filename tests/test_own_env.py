"""A user's own env (issue 21): one whose constructor has no render_mode, ``module:Id``, a factory
with env_kwargs and a wrapper, and one registered inside the script being run, each trained under
the default plan (plan auto: the profiler runs, its fresh-interpreter start-up probe included);
config.json keeps them by name, so a run is made again from it; and the one-line errors."""

import json
import os
import subprocess
import sys
from pathlib import Path

import envs_custom
import gymnasium as gym
import pytest

import hetrl
from hetrl.config import make_config
from hetrl.envs import env_source, env_spec, make_env
from hetrl.errors import HetrlError

SMALL = {"steps": 600, "learning_starts": 200, "hidden": (16, 16), "batch_size": 16, "train_every": 4,
         "buffer_size": 1_000, "log_every": 200, "eval_every": 0, "eval_episodes": 2, "progress": False}
MODULE_ID = f"envs_custom:{envs_custom.ID}"


def _profile_of(env_name: str) -> dict:
    """The profile the default plan measured for ``env_name`` in this session's cache."""
    cache = Path(os.environ["XDG_CACHE_HOME"]) / "hetrl" / "profiles"
    (path,) = cache.glob(f"*/dqn_{env_name.replace(':', '-')}_*.json")
    return json.loads(path.read_text())


def test_an_env_whose_constructor_takes_no_render_mode_is_made():
    env = make_env(envs_custom.ID)
    assert env.reset(seed=0)[0].shape == (5,)
    assert env_spec(envs_custom.ID).obs_shape == (5,)


def test_module_id_trains_under_the_default_plan_and_is_made_again_from_its_name(tmp_path):
    result = hetrl.train("dqn", MODULE_ID, run_dir=tmp_path / "run", **SMALL)
    assert result.env_steps == 600 and result.updates > 0 and result.executor == "inline"
    assert json.loads((tmp_path / "run" / "config.json").read_text())["env"] == MODULE_ID
    # the profiler's start-up probe (a fresh interpreter) imported the module and made the env
    assert any(t["primitive"] == "ActorStart" for t in _profile_of(MODULE_ID)["timings"])
    assert len(hetrl.evaluate(tmp_path / "run", episodes=2).returns) == 2


def test_a_factory_with_env_kwargs_and_a_wrapper_trains_under_the_default_plan(tmp_path):
    result = hetrl.train("dqn", envs_custom.make_corridor, env_kwargs={"length": 7}, wrappers=[envs_custom.WithBias],
                         run_dir=tmp_path / "run", **SMALL)
    assert result.env_steps == 600 and result.updates > 0 and result.executor == "inline"
    saved = json.loads((tmp_path / "run" / "config.json").read_text())
    assert (saved["env"], saved["env_kwargs"], saved["wrappers"]) == (
        "envs_custom:make_corridor", {"length": 7}, ["envs_custom:WithBias"])
    # found again by those names: 7 cells (the kwargs arrived) and the wrapper's bias input
    assert hetrl.load(tmp_path / "run").spec.obs_shape == (8,)
    assert any(t["primitive"] == "ActorStart" for t in _profile_of("envs_custom:make_corridor")["timings"])


IN_SCRIPT = '''
import gymnasium as gym
import numpy as np
import hetrl

class Line(gym.Env):  # defined in the script being run, with no render_mode
    metadata = {"render_modes": []}
    def __init__(self, length=4):
        self.length = length
        self.observation_space = gym.spaces.Box(0.0, 1.0, (length,), np.float32)
        self.action_space = gym.spaces.Discrete(2)
    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.cell = 0
        return np.eye(self.length, dtype=np.float32)[0], {}
    def step(self, action):
        self.cell = max(0, min(self.length - 1, self.cell + (1 if action else -1)))
        return np.eye(self.length, dtype=np.float32)[self.cell], -1.0, self.cell == self.length - 1, False, {}

gym.register("ScriptLine-v0", entry_point=Line, max_episode_steps=30)
small = dict(steps=600, learning_starts=200, hidden=(16, 16), batch_size=16, train_every=4, buffer_size=1000,
             log_every=200, eval_every=0, eval_episodes=2, progress=False)
first = hetrl.train("dqn", "ScriptLine-v0", executor="auto", run_dir="a", **small)
print("registered", first.env_steps, first.executor, flush=True)
second = hetrl.train("dqn", lambda: Line(5), run_dir="b", **small)
print("lambda", second.env_steps, second.executor, flush=True)
print("reload", hetrl.load("a").spec.obs_shape, flush=True)  # the id is still registered in this process
try:
    hetrl.load("b")
except hetrl.HetrlError as exc:
    print("gone", exc, flush=True)
try:
    hetrl.train("dqn", "ScriptLine-v0", executor="local", run_dir="c", **small)
except hetrl.HetrlError as exc:
    print("refused", exc, flush=True)
'''


def test_an_env_registered_in_an_unguarded_script_trains_under_the_default_plan_in_this_process(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(IN_SCRIPT)
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "cache")}
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=600, env=env,
                          cwd=tmp_path, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = {line.split()[0]: line for line in proc.stdout.splitlines()}
    assert lines["registered"].split()[1:] == ["600", "inline"], proc.stdout
    assert lines["lambda"].split()[1:] == ["600", "inline"], proc.stdout
    assert lines["reload"] == "reload (4,)"
    assert "env '__main__:<lambda>' was a lambda or a nested function, which only the process of that run could make" in lines["gone"]
    assert "executor=local makes the envs in other processes" in lines["refused"]
    assert "'ScriptLine-v0' was registered in this process" in lines["refused"]
    assert proc.stderr.count("only this process can make it") == 2  # said once a run
    assert not (tmp_path / "c").exists()


def test_a_module_that_is_not_there_is_one_line(tmp_path):
    with pytest.raises(HetrlError, match=r"^env 'no_such_module_hetrl:Thing-v0': no module named 'no_such_module_hetrl' here; "
                                         r"install the package that holds it, or run from the folder that holds it"):
        hetrl.train("dqn", "no_such_module_hetrl:Thing-v0", run_dir=tmp_path / "run", **SMALL)
    assert not (tmp_path / "run").exists()
    with pytest.raises(HetrlError, match="importing envs_custom registered no Gymnasium id 'Nothing-v0'"):
        env_source("envs_custom:Nothing-v0")


def test_a_module_in_the_working_directory_is_found_as_python_m_finds_it(tmp_path, monkeypatch):
    (tmp_path / "hetrl_cwd_envs.py").write_text(
        "import gymnasium as gym\nimport envs_custom\n"
        "gym.register('HetrlCwd-v0', entry_point=envs_custom.Corridor, max_episode_steps=10)\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", str(tmp_path))])  # as the hetrl command has it
    assert env_spec("hetrl_cwd_envs:HetrlCwd-v0").obs_shape == (5,)


def test_what_only_this_process_can_make_is_named_with_the_fix(tmp_path):
    assert env_source("CartPole-v1").in_process == ""
    assert env_source(MODULE_ID).in_process == ""
    assert env_source(envs_custom.make_corridor, wrappers=[envs_custom.WithBias]).in_process == ""
    assert "the env factory" in env_source(lambda: envs_custom.Corridor()).in_process

    def nested(env):
        return env

    assert "is a nested function" in env_source(envs_custom.make_corridor, wrappers=[nested]).in_process
    if "HetrlOnlyHere-v0" not in gym.registry:
        gym.register("HetrlOnlyHere-v0", entry_point="envs_custom:Corridor")
    why = env_source("HetrlOnlyHere-v0").in_process  # a fresh interpreter is asked
    assert "a fresh interpreter does not know it" in why and "'envs_custom:HetrlOnlyHere-v0'" in why
    with pytest.raises(HetrlError, match="^executor=local makes the envs in other processes, which cannot make .* is a lambda"):
        hetrl.train("dqn", lambda: envs_custom.Corridor(), executor="local", run_dir=tmp_path / "run", **SMALL)
    assert not (tmp_path / "run").exists()


def test_env_kwargs_and_wrappers_are_settings():
    cfg = make_config("dqn", "envs_custom:make_corridor", None,
                      ['env_kwargs={"length": 4}', "wrappers=envs_custom:WithBias"])
    assert cfg.env_kwargs == {"length": 4} and cfg.wrappers == ("envs_custom:WithBias",)
    assert env_spec(cfg.env_source()).obs_shape == (5,)
    with pytest.raises(HetrlError, match="expected a JSON object"):
        make_config("dqn", "CartPole-v1", None, ["env_kwargs=length"])
    with pytest.raises(HetrlError, match=r"env factory envs_custom:make_corridor cannot take \['lenght'\]"):
        make_env(env_source(envs_custom.make_corridor, {"lenght": 4}))
    with pytest.raises(HetrlError, match="env_kwargs must be JSON values"):
        env_source(MODULE_ID, {"length": object()})

