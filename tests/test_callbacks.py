"""Callbacks (issue 21): a callback stops a run cleanly (a checkpoint written, the summary says so),
with the inline and the local executor; on_step, on_eval and on_checkpoint get what happened."""

import csv
import json

import pytest
from rich.console import Console

import hetrl
from hetrl.run.report import summary_table

SMALL = {"learning_starts": 200, "hidden": (16, 16), "batch_size": 16, "train_every": 4, "buffer_size": 2_000,
         "plan": "rule", "device": "cpu", "log_every": 100, "eval_episodes": 2, "progress": False}


class StopAt(hetrl.Callback):
    def __init__(self, step):
        self.step = step

    def on_step(self, info):
        return info.env_steps >= self.step


class Recorder(hetrl.Callback):
    def __init__(self):
        self.steps, self.evals, self.checkpoints, self.returns = [], [], [], []

    def on_step(self, info):
        self.steps.append(info.env_steps)
        self.returns.extend(info.episode_returns)
        assert info.episodes >= len(self.returns)

    def on_eval(self, info):
        self.evals.append((info.env_steps, info.eval_return_mean, info.eval_return_std))

    def on_checkpoint(self, info):
        assert info.checkpoint.exists()
        self.checkpoints.append((info.env_steps, info.checkpoint.name))


def test_a_callback_stops_the_run_at_its_step_and_a_checkpoint_is_written(tmp_path):
    result = hetrl.train("dqn", "CartPole-v1", steps=5_000, eval_every=0, checkpoint_every=10_000, run_dir=tmp_path / "run",
                         callbacks=[StopAt(700)], **SMALL)
    assert result.env_steps == 700 and result.stopped_at == 700 and not result.interrupted
    assert (tmp_path / "run" / "checkpoints" / "step_0000000700.pt").exists()
    assert result.eval_return_mean is not None  # the stopped policy is evaluated, as at the end of a run
    assert json.loads((tmp_path / "run" / "summary.json").read_text())["stopped_at"] == 700
    console = Console(record=True, width=200)
    console.print(summary_table(result))
    assert "stopped by a callback at 700" in console.export_text()
    hetrl.resume(tmp_path / "run", steps=800, progress=False)  # a stopped run continues like an interrupted one


def test_on_step_on_eval_and_on_checkpoint_are_told_what_happened(tmp_path):
    recorder = Recorder()
    hetrl.train("dqn", "CartPole-v1", steps=800, eval_every=300, checkpoint_every=400, run_dir=tmp_path / "run",
                callbacks=[recorder], **SMALL)
    assert recorder.steps == list(range(1, 801))  # once per iteration: one env, one step each
    with open(tmp_path / "run" / "metrics.csv") as f:
        rows = list(csv.DictReader(f))
    evals = [(int(r["env_steps"]), float(r["eval_return_mean"]), float(r["eval_return_std"]))
             for r in rows if r["eval_return_mean"]]
    assert [e[0] for e in recorder.evals] == [300, 600, 800]  # the periodic ones, then the final one
    assert all(mine == pytest.approx(theirs) for mine, theirs in zip(recorder.evals, evals, strict=True))
    assert recorder.checkpoints == [(400, "step_0000000400.pt"), (800, "step_0000000800.pt")]
    # on_step saw every training episode, and the metrics still count each of them
    assert len(recorder.returns) == sum(int(r["episodes"]) for r in rows if r["episodes"])
    assert all(r > 0 for r in recorder.returns)  # CartPole: +1 a step


def test_a_callback_stops_a_local_run(tmp_path):
    result = hetrl.train("dqn", "CartPole-v1", steps=20_000, eval_every=0, checkpoint_every=50_000, executor="local",
                         actors=1, run_dir=tmp_path / "run", callbacks=[StopAt(1_000)], **SMALL)
    assert 1_000 <= result.env_steps < 3_000 and result.stopped_at == result.env_steps
    assert (tmp_path / "run" / "checkpoints" / f"step_{result.env_steps:010d}.pt").exists()


def test_a_callback_without_hooks_is_refused(tmp_path):
    with pytest.raises(hetrl.HetrlError, match="has none of on_step, on_eval, on_checkpoint"):
        hetrl.train("dqn", "CartPole-v1", steps=300, run_dir=tmp_path / "run", callbacks=[object()], **SMALL)


def test_numpys_blas_runs_on_one_thread_while_a_run_trains(tmp_path):
    """runtime/host_blas.py: OpenBLAS threads waiting on busy cores made Atari's Act/numpy many times
    slower; inside a run numpy's BLAS has one thread, and the caller's setting comes back after."""
    from threadpoolctl import threadpool_info

    def blas_threads() -> set[int]:
        return {p["num_threads"] for p in threadpool_info() if p["user_api"] == "blas"}

    seen: list[set[int]] = []

    class Probe(hetrl.Callback):
        def on_checkpoint(self, info):
            seen.append(blas_threads())

    before = blas_threads()
    hetrl.train("dqn", "CartPole-v1", steps=300, run_dir=tmp_path / "run", progress=False, plan="rule",
                learning_starts=100, eval_episodes=1, callbacks=[Probe()])
    assert seen and all(threads == {1} for threads in seen if threads)
    assert blas_threads() == before
