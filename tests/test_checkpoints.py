"""Run directory hygiene: keep_checkpoints prunes old periodic checkpoints (never best.pt, never the
one just written), the replay lives in replay_step_N.pt beside step_N.pt and, by default, only the
newest checkpoint keeps it; resume from it is bit-exact, from an older one it is refused with the
fix; a crash between write and prune leaves extra files, never fewer."""

import json
import shutil
from pathlib import Path

import pytest
import torch
from test_resume import OLD, SMALL, _assert_identical, _env_state, _state

import hetrl
from hetrl.config import make_config, save_config
from hetrl.errors import HetrlError
from hetrl.run import safe_state
from hetrl.run.metrics import read_metrics
from hetrl.run.rundir import RunDir

RUN = dict(seed=3, progress=False, plan="rule", eval_episodes=2, log_every=100, **SMALL["dqn"])


def _names(run: Path, best: bool = False) -> list[str]:
    """The files in checkpoints/ (best.pt, which every run with an evaluation has, only if ``best``)."""
    return sorted(p.name for p in (run / "checkpoints").iterdir() if best or p.name != "best.pt")


def _steps(*steps: int, replay: tuple[int, ...] = ()) -> list[str]:
    return sorted([f"step_{s:010d}.pt" for s in steps] + [f"replay_step_{s:010d}.pt" for s in replay])


def _raw(path: Path) -> dict:
    """A checkpoint file as saved (its records not decoded), read as hetrl reads it: weights_only."""
    return safe_state.read(path)


@pytest.fixture(scope="module")
def pruned(tmp_path_factory):
    """700 env steps, a checkpoint every 100 and an evaluation every 100, the defaults otherwise."""
    path = tmp_path_factory.mktemp("runs") / "pruned"
    hetrl.train("dqn", "CartPole-v1", steps=700, run_dir=path, checkpoint_every=100, eval_every=100, **RUN)
    return path


def test_the_defaults_keep_three_checkpoints_and_the_newest_replay():
    cfg = make_config("dqn", "CartPole-v1")
    assert (cfg.keep_checkpoints, cfg.checkpoint_replay) == (3, "newest")


def test_pruning_keeps_the_newest_n_and_best(pruned):
    assert _names(pruned, best=True) == sorted(["best.pt", *_steps(500, 600, 700, replay=(700,))])
    assert [p.name for p in RunDir.open(pruned).checkpoints()] == _steps(500, 600, 700)


def test_only_the_newest_holds_the_replay(pruned):
    for step in (500, 600, 700):
        saved = _raw(pruned / "checkpoints" / f"step_{step:010d}.pt")
        assert "replay" not in saved["executor"] and saved["format"] == "hetrl-checkpoint-v3"
    newest = _raw(pruned / "checkpoints" / "step_0000000700.pt")
    replay = _raw(pruned / "checkpoints" / "replay_step_0000000700.pt")
    assert newest["replay_file"] == "replay_step_0000000700.pt" and replay["token"] == newest["replay_token"]
    _, state = RunDir.open(pruned).load_checkpoint()
    assert "replay" in state["executor"] and "replay_missing" not in state


def test_resume_from_the_newest_is_bit_exact_after_pruning(tmp_path):
    common = dict(checkpoint_every=100, keep_checkpoints=2, eval_every=0, **RUN)
    hetrl.train("dqn", "CartPole-v1", steps=900, run_dir=tmp_path / "straight", **common)
    hetrl.train("dqn", "CartPole-v1", steps=500, run_dir=tmp_path / "split", **common)
    assert _names(tmp_path / "split") == _steps(400, 500, replay=(500,))
    resumed = hetrl.resume(tmp_path / "split", steps=900, progress=False)
    assert resumed.env_steps == 900
    a, b = _state(tmp_path / "straight"), _state(tmp_path / "split")
    _assert_identical(_env_state(a.pop("envs")), _env_state(b.pop("envs")))
    _assert_identical(a, b)  # the replay included: read back from replay_step_0000000900.pt
    assert _names(tmp_path / "split") == _steps(800, 900, replay=(900,))


def _snapshot(path: Path) -> dict[str, bytes]:
    return {str(p.relative_to(path)): p.read_bytes() for p in sorted(path.rglob("*")) if p.is_file()}


def test_resume_from_an_older_checkpoint_without_its_replay_is_refused_with_the_fix(tmp_path, pruned):
    run = tmp_path / "copy"
    shutil.copytree(pruned, run)
    before = _snapshot(run)
    older = run / "checkpoints" / "step_0000000500.pt"
    with pytest.raises(HetrlError) as refused:
        hetrl.resume(run, steps=900, checkpoint=older, progress=False)
    message = str(refused.value)
    assert "step_0000000500.pt cannot be resumed" in message and "checkpoint_replay=newest" in message
    assert f"`hetrl resume {run}` resumes from the newest, step_0000000700.pt" in message
    assert "\n" not in message
    assert _snapshot(run) == before  # nothing written
    # still evaluated (no replay needed) and exported
    result = hetrl.evaluate(run, episodes=2, checkpoint=older)
    assert result.env_steps == 500 and result.which == "given"
    assert hetrl.load(older).source == older
    # a replay file that belongs to another checkpoint of the step is never used
    newest, replay = run / "checkpoints" / "step_0000000700.pt", run / "checkpoints" / "replay_step_0000000700.pt"
    saved = _raw(replay)
    torch.save({**saved, "token": "another"}, replay)
    with pytest.raises(HetrlError, match="holds the replay of another checkpoint of that step; no checkpoint of this run"):
        hetrl.resume(run, steps=900, progress=False)
    with pytest.raises(HetrlError, match="holds only the replay of step_0000000700.pt; pass step_0000000700.pt instead"):
        hetrl.resume(run, steps=900, checkpoint=replay, progress=False)
    assert hetrl.evaluate(run, episodes=2, checkpoint=newest).env_steps == 700


def test_keep_all_with_every_replay_resumes_from_any(tmp_path):
    run = tmp_path / "all"
    hetrl.train("dqn", "CartPole-v1", steps=400, run_dir=run, checkpoint_every=100, eval_every=0,
                keep_checkpoints=0, checkpoint_replay="all", **RUN)
    assert _names(run) == _steps(100, 200, 300, 400, replay=(100, 200, 300, 400))
    resumed = hetrl.resume(run, steps=500, checkpoint=run / "checkpoints" / "step_0000000200.pt", progress=False)
    assert resumed.env_steps == 500


def test_no_replay_saved_means_no_resume(tmp_path):
    run = tmp_path / "none"
    hetrl.train("dqn", "CartPole-v1", steps=300, run_dir=run, checkpoint_every=100, eval_every=0,
                keep_checkpoints=None, checkpoint_replay="none", **RUN)
    assert _names(run) == _steps(100, 200, 300)
    with pytest.raises(HetrlError, match=r"saved without the replay \(checkpoint_replay=none\); no checkpoint of this run has"):
        hetrl.resume(run, steps=400, progress=False)
    assert hetrl.evaluate(run, episodes=2, checkpoint="final").env_steps == 300


def test_a_crash_between_write_and_prune_leaves_extra_files_never_fewer(tmp_path, monkeypatch):
    real_prune = RunDir.prune

    def crash(self, newest, keep, policy):
        if newest == 300:
            raise RuntimeError("injected crash before pruning")
        return real_prune(self, newest, keep, policy)

    monkeypatch.setattr(RunDir, "prune", crash)
    run = tmp_path / "r"
    with pytest.raises(RuntimeError, match="injected crash"):
        hetrl.train("dqn", "CartPole-v1", steps=500, run_dir=run, checkpoint_every=100, eval_every=0,
                    keep_checkpoints=1, **RUN)
    assert _names(run) == _steps(200, 300, replay=(200, 300))  # 300 whole, 200 not yet pruned
    monkeypatch.setattr(RunDir, "prune", real_prune)
    assert hetrl.resume(run, steps=400, progress=False).env_steps == 400
    assert _names(run) == _steps(400, replay=(400,))


def test_a_crash_between_the_replay_file_and_the_step_file_keeps_the_previous_checkpoint(tmp_path, monkeypatch):
    real_write = RunDir._write

    def crash(self, path, state, *args):
        if path.name == "step_0000000300.pt":
            raise RuntimeError("injected crash before the step file")
        return real_write(self, path, state, *args)

    monkeypatch.setattr(RunDir, "_write", crash)
    run = tmp_path / "r"
    with pytest.raises(RuntimeError, match="injected crash"):
        hetrl.train("dqn", "CartPole-v1", steps=500, run_dir=run, checkpoint_every=100, eval_every=0,
                    keep_checkpoints=1, **RUN)
    assert _names(run) == _steps(200, replay=(200, 300))  # an orphan replay file, the last checkpoint whole
    monkeypatch.setattr(RunDir, "_write", real_write)
    assert hetrl.resume(run, steps=400, progress=False).env_steps == 400
    assert _names(run) == _steps(400, replay=(400,))


def test_a_run_resumed_from_an_earlier_checkpoint_moves_the_later_timeline_aside(tmp_path, capsys):
    run = tmp_path / "r"
    hetrl.train("dqn", "CartPole-v1", steps=400, run_dir=run, checkpoint_every=100, eval_every=100,
                keep_checkpoints=2, checkpoint_replay="all", **RUN)
    assert _names(run) == _steps(300, 400, replay=(300, 400))
    later = {name: (run / "checkpoints" / name).read_bytes() for name in _steps(400, replay=(400,))}
    _, best = RunDir.open(run).load_checkpoint(run / "checkpoints" / "best.pt", replay=False)
    cfg = RunDir.open(run).load_config()
    cfg.checkpoint_every = 50  # the new timeline writes step 350, between the two
    save_config(cfg, run / "config.json")
    capsys.readouterr()
    hetrl.resume(run, steps=350, checkpoint=run / "checkpoints" / "step_0000000300.pt", progress=False)
    [branch] = (run / "branches").iterdir()
    note = [line for line in capsys.readouterr().err.splitlines() if "moved" in line]
    assert len(note) == 1 and f"into {branch}" in note[0] and "a plain `hetrl resume` continues this timeline" in note[0]
    assert _names(run) == _steps(300, 350, replay=(300, 350))  # one timeline: 400 is not in it
    moved = {name: (branch / "checkpoints" / name).read_bytes() for name in _names(branch)}
    assert moved == later  # the other timeline whole, in a run directory of its own
    assert (best["env_steps"] > 300) == (branch / "checkpoints" / "best.pt").exists()
    old = [row["env_steps"] for row in read_metrics(branch / "metrics.csv")]
    assert old == [400.0] and [row["env_steps"] for row in read_metrics(run / "metrics.csv")] == [100, 200, 300, 350]
    assert hetrl.evaluate(branch, episodes=1, checkpoint="final").env_steps == 400
    # a plain resume continues the new timeline (350), not the one moved aside
    assert hetrl.resume(run, steps=450, progress=False).env_steps == 450
    assert _names(run) == _steps(400, 450, replay=(400, 450)) and len(list((run / "branches").iterdir())) == 1


@pytest.mark.parametrize("key, value, message", [
    ("keep_checkpoints", -1, "keep_checkpoints must be >= 0"),
    ("checkpoint_replay", "newset", "checkpoint_replay 'newset' is unknown (did you mean 'newest'?); use one of newest, all, none"),
])
def test_bad_settings_are_refused(tmp_path, key, value, message):
    with pytest.raises(HetrlError, match=message.replace("(", r"\(").replace(")", r"\)").replace("?", r"\?")):
        hetrl.train("dqn", "CartPole-v1", steps=100, run_dir=tmp_path / "r", **{key: value}, **RUN)
    assert not (tmp_path / "r").exists()


def test_old_runs_keep_every_checkpoint_with_its_replay(tmp_path):
    """A config.json written before these settings existed keeps its behaviour: nothing pruned, every
    new checkpoint with its replay; its old checkpoints (replay inline) still resume."""
    run = tmp_path / "old"
    shutil.copytree(OLD / "dqn_inline", run)
    cfg = RunDir.open(run).load_config()
    assert (cfg.keep_checkpoints, cfg.checkpoint_replay) == (None, "all")
    hetrl.resume(run, steps=700, progress=False)
    assert _names(run) == _steps(500, 700, replay=(700,))
    assert "replay" in _raw(run / "checkpoints" / "step_0000000500.pt")["executor"]  # the old file as it was


def test_a_corrupt_checkpoint_points_to_the_others_that_load(tmp_path, pruned):
    """Issue 24 item 10: the hint listed bare names, which --checkpoint cannot resolve, and listed
    checkpoints that were corrupt too."""
    run = tmp_path / "copy"
    shutil.copytree(pruned, run)
    ckpts = run / "checkpoints"
    (ckpts / "step_0000000700.pt").write_bytes((ckpts / "step_0000000700.pt").read_bytes()[:200])
    (ckpts / "step_0000000600.pt").write_bytes(b"junk")
    with pytest.raises(HetrlError) as refused:
        hetrl.resume(run, steps=900, progress=False)
    message = str(refused.value)
    assert message.startswith(f"checkpoint {ckpts / 'step_0000000700.pt'} is corrupt or truncated")
    assert message.endswith(f"pass another with --checkpoint: {ckpts / 'step_0000000500.pt'}") and "\n" not in message
    assert hetrl.evaluate(run, episodes=2, checkpoint=ckpts / "step_0000000500.pt").env_steps == 500  # the path it names works
    (ckpts / "step_0000000500.pt").write_bytes(b"")
    with pytest.raises(HetrlError, match="no other checkpoint of this run reads whole$"):
        hetrl.evaluate(run, episodes=2, checkpoint="final")


@pytest.mark.parametrize("change, named", [
    ({"hidden": [32, 32]}, "hidden: [16, 16] -> [32, 32]"),
    ({"dueling": True}, "dueling: false -> true"),
    ({"buffer_size": 400}, "buffer_size: 500 -> 400"),
])
def test_a_checkpoint_written_with_other_settings_names_them(tmp_path, pruned, change, named):
    """A config.json edited since (its networks or replay no longer fit) is refused naming the
    settings, on resume, evaluate and load alike, not with torch's size mismatch."""
    run = tmp_path / "copy"
    shutil.copytree(pruned, run)
    config = json.loads((run / "config.json").read_text())
    config["agent"].update(change)
    (run / "config.json").write_text(json.dumps(config))
    calls = [lambda: hetrl.resume(run, steps=900, progress=False)]
    if "buffer_size" not in change:  # the policy alone does not depend on the replay
        calls += [lambda: hetrl.evaluate(run, episodes=2, checkpoint="final"), lambda: hetrl.load(run)]
    for call in calls:
        with pytest.raises(HetrlError) as refused:
            call()
        message = str(refused.value)
        assert f"was written with other settings than {run / 'config.json'} now has ({named})" in message, message
        assert "put the checkpoint's values back" in message and "\n" not in message


def test_another_algorithms_checkpoint_is_refused_by_name(tmp_path, pruned):
    other = tmp_path / "ddpg"
    hetrl.train("ddpg", "Pendulum-v1", steps=100, run_dir=other, eval_every=0, progress=False, plan="rule",
                eval_episodes=1, **SMALL["ddpg"])
    run = tmp_path / "copy"
    shutil.copytree(pruned, run)
    for call in (lambda ckpt: hetrl.resume(run, steps=900, checkpoint=ckpt, progress=False),
                 lambda ckpt: hetrl.evaluate(run, episodes=2, checkpoint=ckpt)):
        with pytest.raises(HetrlError, match=r'was written with other settings .*\(algo: "ddpg" -> "dqn"; env: '
                                             r'"Pendulum-v1" -> "CartPole-v1"\)'):
            call(other / "checkpoints" / "step_0000000100.pt")
