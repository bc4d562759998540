"""checkpoints/best.pt: written on improvement only, atomically, never resumed from; `hetrl eval`
evaluates the best by default and the final policy when told."""

import errno
import json
from pathlib import Path

import numpy as np
import pytest
import torch

import hetrl
from hetrl.cli import main
from hetrl.errors import HetrlError
from hetrl.run import safe_state
from hetrl.run.rundir import RunDir
from hetrl.training import Session

SMALL = dict(hidden=(8, 8), learning_starts=100, batch_size=16, eval_episodes=2, eval_every=100, log_every=100,
             plan="rule", progress=False)


def scripted_evaluations(monkeypatch, means):
    """Session.evaluate returns these means in turn (the real one after they run out)."""
    means, real = list(means), Session.evaluate

    def evaluate(self, episodes):
        return np.full(episodes, float(means.pop(0))) if means else real(self, episodes)

    monkeypatch.setattr(Session, "evaluate", evaluate)


def count_best_writes(monkeypatch):
    writes, real = [], RunDir.save_best

    def save_best(self, state):
        writes.append((state["env_steps"], state["eval_return_mean"]))
        return real(self, state)

    monkeypatch.setattr(RunDir, "save_best", save_best)
    return writes


def test_best_is_written_only_on_improvement(tmp_path, monkeypatch):
    scripted_evaluations(monkeypatch, [10, 30, 20, 50, 40, 45])  # evaluations at 100..500, then the final at 600
    writes = count_best_writes(monkeypatch)
    result = hetrl.train("dqn", "CartPole-v1", steps=600, run_dir=tmp_path / "r", **SMALL)
    assert writes == [(100, 10.0), (200, 30.0), (400, 50.0)]
    assert (result.best_eval_return_mean, result.best_eval_step) == (50.0, 400)
    assert result.eval_return_mean == 45.0  # the final evaluation is reported beside the best
    summary = json.loads((result.run_dir / "summary.json").read_text())
    assert summary["best_eval_return_mean"] == 50.0 and summary["best_eval_step"] == 400 and summary["eval_return_mean"] == 45.0
    _, state = RunDir.open(result.run_dir).load_checkpoint(result.run_dir / "checkpoints" / "best.pt")
    assert state["kind"] == "best" and state["env_steps"] == 400 and state["eval_return_mean"] == 50.0
    run = RunDir.open(result.run_dir)
    assert [p.name for p in run.checkpoints()] == ["step_0000000600.pt"]  # resume's newest never is best.pt


def test_best_survives_a_crash_after_it(tmp_path, monkeypatch):
    from hetrl.runtime.inline import InlineExecutor

    scripted_evaluations(monkeypatch, [5, 7])
    real = InlineExecutor.iteration

    def iteration(self):
        if self.env_steps >= 250:
            raise RuntimeError("injected crash after the best evaluation")
        real(self)

    monkeypatch.setattr(InlineExecutor, "iteration", iteration)
    with pytest.raises(RuntimeError, match="injected crash"):
        hetrl.train("dqn", "CartPole-v1", steps=600, run_dir=tmp_path / "r", **SMALL)
    monkeypatch.setattr(InlineExecutor, "iteration", real)
    _, state = RunDir.open(tmp_path / "r").load_checkpoint(tmp_path / "r" / "checkpoints" / "best.pt")
    assert state["env_steps"] == 200 and state["eval_return_mean"] == 7.0
    result = hetrl.evaluate(tmp_path / "r", episodes=2)
    assert result.which == "best" and result.env_steps == 200 and result.returns.shape == (2,)


def test_a_failed_write_leaves_the_previous_best_whole(tmp_path, monkeypatch):
    scripted_evaluations(monkeypatch, [5, 7])
    real_save, calls = torch.save, []

    def save(obj, f, *a, **k):  # RunDir writes through a temp file of its own (hetrl.files.write_file)
        calls.append(Path(getattr(f, "name", f)).name)
        if obj.get("kind") == "best" and obj["env_steps"] == 200:
            f.write(b"half a file")  # a write cut short, then the failure
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_save(obj, f, *a, **k)

    monkeypatch.setattr(safe_state.torch, "save", save)  # what RunDir writes through
    with pytest.raises(HetrlError, match="no space left on device writing .*best.pt"):
        hetrl.train("dqn", "CartPole-v1", steps=600, run_dir=tmp_path / "r", **SMALL)
    monkeypatch.setattr(safe_state.torch, "save", real_save)
    _, state = RunDir.open(tmp_path / "r").load_checkpoint(tmp_path / "r" / "checkpoints" / "best.pt")
    assert state["env_steps"] == 100 and state["eval_return_mean"] == 5.0


def test_eval_picks_best_or_final_as_told(tmp_path, monkeypatch, capsys):
    scripted_evaluations(monkeypatch, [10, 90, 20])  # the best at 200; the final (600) evaluates for real
    result = hetrl.train("dqn", "CartPole-v1", steps=600, run_dir=tmp_path / "r", **SMALL)
    monkeypatch.undo()
    run = result.run_dir
    best, final = hetrl.evaluate(run, 3), hetrl.evaluate(run, 3, checkpoint="final")
    assert (best.which, best.env_steps, best.checkpoint.name) == ("best", 200, "best.pt")
    assert (final.which, final.env_steps, final.checkpoint.name) == ("final", 600, "step_0000000600.pt")
    given = hetrl.evaluate(run, 3, checkpoint=run / "checkpoints" / "best.pt")
    assert given.which == "best" and np.array_equal(given.returns, best.returns)
    assert main(["eval", str(run), "--episodes", "3"]) == 0
    assert capsys.readouterr().out.startswith(f"best policy ({run / 'checkpoints' / 'best.pt'}, env step 200): return")
    assert main(["eval", str(run), "--episodes", "3", "--checkpoint", "final"]) == 0
    assert capsys.readouterr().out.startswith("final policy (")
    # best.pt holds a policy, not the training state: resume refuses it with the fix
    assert main(["resume", str(run), "--steps", "700", "--checkpoint", str(run / "checkpoints" / "best.pt"), "--no-progress"]) == 2
    assert "resume from a periodic checkpoint" in capsys.readouterr().err
    # a run without best.pt (older runs) is evaluated at its final policy, and says so; asking for best is an error
    (run / "checkpoints" / "best.pt").unlink()
    fallback = hetrl.evaluate(run, 3)
    assert fallback.which == "final" and "no best.pt" in fallback.note
    with pytest.raises(HetrlError, match="--checkpoint final"):
        hetrl.evaluate(run, 3, checkpoint="best")


def test_resume_keeps_the_best_so_far(tmp_path, monkeypatch):
    scripted_evaluations(monkeypatch, [10, 90, 20])
    hetrl.train("dqn", "CartPole-v1", steps=300, run_dir=tmp_path / "r", **SMALL)
    scripted_evaluations(monkeypatch, [50, 95, 60])  # 400, 500, 600: only 95 beats 90
    writes = count_best_writes(monkeypatch)
    result = hetrl.resume(tmp_path / "r", steps=600, progress=False)
    assert writes == [(500, 95.0)] and result.best_eval_step == 500
