"""The CLI end to end: run files, eval, video, and one-line errors with exit code 2."""

import csv
import json
import re
import os
import subprocess
import sys
from pathlib import Path

import pytest

from hetrl.cli import main

FAST = ["--set", "hidden=16,16", "--set", "learning_starts=100", "--set", "batch_size=16", "--set", "eval_episodes=3",
        "--set", "log_every=100", "--set", "eval_every=200", "--no-progress"]


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    path = tmp_path_factory.mktemp("runs") / "dqn"
    assert main(["train", "dqn", "CartPole-v1", "--steps", "400", "--seed", "1", "--run-dir", str(path), *FAST]) == 0
    return path


def test_train_writes_a_complete_run_directory(run_dir):
    config = json.loads((run_dir / "config.json").read_text())
    assert config["algo"] == "dqn" and config["steps"] == 400 and config["agent"]["hidden"] == [16, 16]
    rows = list(csv.DictReader((run_dir / "metrics.csv").open()))
    assert [int(r["env_steps"]) for r in rows][:4] == [100, 200, 300, 400]
    assert any(r["eval_return_mean"] for r in rows) and any(r["loss"] for r in rows)
    agent = config["agent"]  # epsilon as the config's schedule gives it, at each logged step
    for r in rows:
        frac = min(1.0, int(r["env_steps"]) / agent["eps_decay_steps"])
        assert float(r["exploration"]) == pytest.approx(agent["eps_start"] + frac * (agent["eps_end"] - agent["eps_start"]),
                                                        abs=1e-3)
    assert any(p.name.startswith("events.out.tfevents") for p in (run_dir / "tb").iterdir())
    assert (run_dir / "checkpoints" / "step_0000000400.pt").exists()
    assert (run_dir / "returns.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["env_steps"] == 400 and summary["env_steps_per_s"] == pytest.approx(400 / summary["wall_s"])
    calls = {name: n for name, n, *_ in summary["timers"]}  # the counts agree wherever they are written
    assert summary["updates"] == int(rows[-1]["updates"]) == calls["Learn"] == calls["ReplaySample"] > 0
    assert calls["EnvStep"] == 400
    if summary["executor"] == "inline":
        assert calls["Act"] == 400 - 100  # random actions before learning_starts
    assert re.fullmatch(r"(torch|numba|blas) on cpu \(\d+ threads?\)", summary["placement"]["Learn"])  # the planner's pick
    plan = json.loads((run_dir / "plan.json").read_text())  # planned from a profile measured for this config
    predicted = plan["predicted"]
    assert predicted["env_steps_per_s"] == pytest.approx(1e6 / sum(predicted["us_per_env_step"].values()), rel=1e-3)
    # the summary's prediction is the model's at the share of a core measured at the start (1 on a quiet machine)
    assert 0 < summary["predicted_cpu_share"] <= 1
    assert summary["predicted_env_steps_per_s"] == pytest.approx(predicted["env_steps_per_s"] * summary["predicted_cpu_share"],
                                                                 rel=1e-4)
    assert plan["placement"]["learn"]["device"] == "cpu"


def test_summary_is_printed(tmp_path, capfd):
    assert main(["train", "dqn", "CartPole-v1", "--steps", "200", "--run-dir", str(tmp_path / "r"), *FAST]) == 0
    out = capfd.readouterr().out  # results on stdout
    for text in ("env steps/s", "updates/s", "final evaluation return", "where each primitive ran", "Learn", "on cpu"):
        assert text in out


def test_metrics_rows_merge_per_step(run_dir):
    from hetrl.run.metrics import read_metrics

    rows = read_metrics(run_dir / "metrics.csv")
    assert [r["env_steps"] for r in rows] == sorted({r["env_steps"] for r in rows})
    last = rows[-1]  # the last training row and the final evaluation share step 400
    summary = json.loads((run_dir / "summary.json").read_text())
    assert last["env_steps"] == 400 and last["updates"] == summary["updates"]
    assert last["eval_return_mean"] == pytest.approx(summary["eval_return_mean"])  # the final evaluation


def test_resume_of_a_finished_run_says_how_to_extend(run_dir):
    proc = cli("resume", str(run_dir))
    assert proc.returncode == 2 and "already reached its 400 env steps" in proc.stderr and "--steps" in proc.stderr


def test_eval_and_video(run_dir, capsys):
    """An MP4 where an encoder is installed (imageio-ffmpeg, in the test extra)."""
    assert main(["eval", str(run_dir), "--episodes", "3", "--render-video"]) == 0
    out = capsys.readouterr().out
    assert "over 3 episodes" in out and out.startswith("best policy (")
    video = run_dir / "eval_best.mp4"
    assert f"video: {video} (MP4)" in out
    assert video.read_bytes()[4:8] == b"ftyp"  # an ISO media file
    assert not list(run_dir.glob("*.partial.*"))


def test_video_is_a_gif_without_an_mp4_encoder(run_dir, capsys, monkeypatch):
    from hetrl import evaluation

    monkeypatch.setattr(evaluation, "mp4_encoder", lambda: None)
    assert main(["eval", str(run_dir), "--episodes", "2", "--render-video", "--checkpoint", "final"]) == 0
    gif = run_dir / "eval_step_0000000400.gif"
    assert f"video: {gif} (GIF; no MP4 encoder is installed: pip install 'hetrl[video]' for MP4)" in capsys.readouterr().out
    assert gif.read_bytes()[:6] in (b"GIF89a", b"GIF87a")


def test_mp4_of_frames_of_odd_size(tmp_path):
    import numpy as np

    from hetrl.evaluation import _write_mp4

    def frames():
        for i in range(5):
            yield np.full((7, 11, 3), 40 * i, np.uint8)
        return 3.0

    assert _write_mp4(frames(), tmp_path / "v.mp4", 10) == 3.0
    assert (tmp_path / "v.mp4").read_bytes()[4:8] == b"ftyp"


def test_render_video_prints_no_sdl_noise(run_dir):
    """Without a desktop session (no XDG_RUNTIME_DIR), SDL, which CartPole draws with, would print
    'error: XDG_RUNTIME_DIR is invalid or not set in the environment.'"""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SDL_", "XDG_RUNTIME_DIR", "PYGAME_"))}
    proc = subprocess.run([sys.executable, "-m", "hetrl", "eval", str(run_dir), "--episodes", "2", "--render-video"],
                          capture_output=True, text=True, env={**env, "OMP_NUM_THREADS": "1"}, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr
    assert "XDG_RUNTIME_DIR" not in proc.stderr and "error" not in proc.stderr.lower(), proc.stderr
    assert "video:" in proc.stdout and (run_dir / "eval_best.mp4").exists()


def cli(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "hetrl", *args], capture_output=True, text=True, cwd=cwd,
                          env={**os.environ, "OMP_NUM_THREADS": "1"})


@pytest.mark.parametrize("args, message", [
    (["train", "dqnn", "CartPole-v1"], "unknown algorithm 'dqnn' (did you mean 'dqn'?)"),
    (["train", "dqn", "CartPol-v1"], "unknown environment 'CartPol-v1'"),
    (["train", "dqn", "Pendulum-v1"], "dqn needs a discrete action space"),
    (["train", "ddpg", "CartPole-v1"], "ddpg needs a continuous (Box) action space"),
    (["train", "dqn", "CartPole-v1", "--device", "cuda:7"], "device 'cuda:7' is not available"),
    (["train", "dqn", "CartPole-v1", "--device", "gpu0"], "not a torch device name"),
    (["train", "dqn", "CartPole-v1", "--set", "lr"], "--set expects key=value"),
    (["train", "dqn", "CartPole-v1", "--set", "learning_rate=1"], "no such setting"),
    (["train", "dqn", "CartPole-v1", "--set", "gamma=2"], "gamma must be in (0, 1]"),
    (["train", "dqn", "CartPole-v1", "--config", "nope.json"], "config file nope.json does not exist"),
    (["resume", "no/such/run"], "run directory no/such/run does not exist"),
    (["eval", "no/such/run"], "run directory no/such/run does not exist"),
])
def test_bad_input_is_one_line_and_exit_code_2(tmp_path, args, message):
    proc = cli(*args, cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("hetrl: error: "), proc.stderr
    assert message in lines[0]
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())  # no half-made run left


def _snapshot(path: Path) -> dict[str, bytes]:
    return {str(p.relative_to(path)): p.read_bytes() for p in sorted(path.rglob("*")) if p.is_file()}


def test_existing_run_is_never_overwritten(run_dir):
    before = _snapshot(run_dir)
    proc = cli("train", "dqn", "CartPole-v1", "--steps", "200", "--run-dir", str(run_dir), *FAST)
    assert proc.returncode == 2 and "already holds a run" in proc.stderr and "hetrl resume" in proc.stderr
    assert _snapshot(run_dir) == before


def test_a_run_directory_holding_a_run_is_refused_before_the_plan_profiles(run_dir, monkeypatch, capsys):
    """An automatic plan may profile for tens of seconds: the refusal comes first."""
    from hetrl import training

    def no_plan(*args, **kwargs):
        raise AssertionError("planned before the run directory was checked")

    monkeypatch.setattr(training, "resolve", no_plan)
    before = _snapshot(run_dir)
    assert main(["train", "dqn", "CartPole-v1", "--steps", "200", "--run-dir", str(run_dir), "--plan", "auto", *FAST]) == 2
    assert "already holds a run with checkpoints" in capsys.readouterr().err
    assert _snapshot(run_dir) == before


def test_overwrite_never_removes_a_run_with_checkpoints(run_dir, capsys):
    before = _snapshot(run_dir)
    assert main(["train", "dqn", "CartPole-v1", "--steps", "200", "--run-dir", str(run_dir), "--overwrite", *FAST]) == 2
    err = capsys.readouterr().err
    assert "already holds a run with checkpoints; --overwrite replaces only a run stopped before its first checkpoint" in err
    assert f"`hetrl resume {run_dir}`" in err
    assert _snapshot(run_dir) == before


def test_a_run_killed_before_its_first_checkpoint_starts_again_with_one_command(tmp_path, monkeypatch, capsys):
    import shlex

    import hetrl
    from hetrl.run.rundir import RunDir
    from hetrl.runtime.inline import InlineExecutor

    run, real = tmp_path / "killed", InlineExecutor.iteration

    def killed(self):
        if self.env_steps >= 150:
            raise RuntimeError("killed")
        real(self)

    with monkeypatch.context() as patch:
        patch.setattr(InlineExecutor, "iteration", killed)
        with pytest.raises(RuntimeError, match="killed"):
            hetrl.train("dqn", "CartPole-v1", steps=300, run_dir=run, progress=False, plan="rule", hidden=(16, 16),
                        learning_starts=100, batch_size=16, eval_every=0, eval_episodes=2, log_every=100)
    assert (run / "config.json").exists() and (run / "metrics.csv").exists() and not RunDir.open(run).checkpoints()
    (run / "notes.txt").write_text("mine")
    capsys.readouterr()
    # the same `hetrl train` again is refused, naming the flag
    assert main(["train", "dqn", "CartPole-v1", "--steps", "200", "--run-dir", str(run), *FAST]) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err == (f"hetrl: error: {run} holds a run stopped before its first checkpoint (nothing to resume); start afresh "
                   f"there by adding --overwrite (hetrl.train: overwrite=True), or choose another --run-dir")
    # `hetrl resume` is refused with the one command that starts it again, as it was configured
    assert main(["resume", str(run)]) == 2
    err = capsys.readouterr().err
    assert "has no checkpoint (the run stopped before its first one), so there is nothing to resume" in err
    command = re.search(r"`(hetrl train [^`]+)`", err).group(1)
    assert command == f"hetrl train dqn CartPole-v1 --config {run / 'config.json'} --run-dir {run} --overwrite"
    assert main([*shlex.split(command)[1:], "--no-progress"]) == 0
    assert f"run directory: {run} (replacing the run that stopped there before its first checkpoint)" in capsys.readouterr().err
    assert [p.name for p in RunDir.open(run).checkpoints()] == ["step_0000000300.pt"]
    assert (run / "notes.txt").read_text() == "mine"  # only a run's own files are removed


def test_missing_and_corrupt_checkpoints(tmp_path, run_dir):
    import shutil

    copy = tmp_path / "copy"
    shutil.copytree(run_dir, copy)
    ckpt = copy / "checkpoints" / "step_0000000400.pt"
    data = ckpt.read_bytes()
    ckpt.write_bytes(data[: len(data) // 2])  # truncated, as after a crash mid-write on another tool
    before = _snapshot(copy)
    proc = cli("resume", str(copy), "--no-progress")
    assert proc.returncode == 2 and "is corrupt or truncated" in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
    proc = cli("eval", str(copy), "--checkpoint", "final")
    assert proc.returncode == 2 and "is corrupt or truncated" in proc.stderr
    assert _snapshot(copy) == before  # nothing touched
    ckpt.unlink()
    proc = cli("resume", str(copy))
    assert proc.returncode == 2 and "has no checkpoint" in proc.stderr
    proc = cli("resume", str(run_dir), "--checkpoint", str(copy / "missing.pt"))
    assert proc.returncode == 2 and "does not exist" in proc.stderr
    (copy / "checkpoints" / "step_0000000100.pt").write_text("not a checkpoint")
    proc = cli("eval", str(copy), "--checkpoint", "final")
    assert proc.returncode == 2 and "corrupt" in proc.stderr
    (copy / "checkpoints" / "best.pt").write_bytes(b"")
    proc = cli("eval", str(copy))
    assert proc.returncode == 2 and "best.pt is corrupt" in proc.stderr


def test_video_needs_rgb_array(tmp_path, monkeypatch):
    from hetrl import api
    from hetrl.errors import HetrlError

    run = tmp_path / "r"
    assert main(["train", "dqn", "CartPole-v1", "--steps", "200", "--run-dir", str(run), *FAST]) == 0
    real = api.env_spec
    monkeypatch.setattr(api, "env_spec", lambda env, atari=None: type(real(env))(**{**real(env).__dict__, "supports_rgb_array": False}))
    for checkpoint in ("best", "final"):
        with pytest.raises(HetrlError, match="cannot render rgb_array"):
            api.evaluate(run, 2, render_video=True, checkpoint=checkpoint)


def test_python_api_is_as_short_as_the_cli(tmp_path):
    import hetrl

    result = hetrl.train("dqn", "CartPole-v1", steps=300, run_dir=tmp_path / "api", progress=False, hidden=(16, 16),
                         learning_starts=100, batch_size=16, eval_episodes=2, log_every=100)
    assert result.run_dir == tmp_path / "api" and result.env_steps == 300
    assert [row["env_steps"] for row in result.metrics] == [100, 200, 300]
    assert result.updates == result.metrics[-1]["updates"] > 0
    assert result.eval_return_mean == pytest.approx(result.metrics[-1]["eval_return_mean"])
    returns = hetrl.evaluate(result.run_dir, episodes=2).returns
    assert returns.shape == (2,) and all(1 <= r <= 500 and r == int(r) for r in returns)  # CartPole: 1 a step, 500 at most


def test_devices_lists_this_machine(capsys):
    assert main(["devices", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["cpu"]["logical_cores"] == os.cpu_count()
    assert {m["kind"] for m in data["meters"]} >= {"rapl", "nvml"}
    for meter in data["meters"]:  # a meter either works or says why not; never a silent blank
        assert meter["available"] or meter["reason"]
    assert main(["devices"]) == 0
    assert "energy meters" in capsys.readouterr().out


def test_help_imports_no_torch():
    """`hetrl --help` builds every parser without importing torch (the train epilog, which needs the
    algorithms, is built only for `train --help`)."""
    code = ("import sys, contextlib, io\nfrom hetrl.cli import main\n"
            "with contextlib.redirect_stdout(io.StringIO()):\n"
            "    try:\n        main(['--help'])\n    except SystemExit:\n        pass\n"
            "print('torch' in sys.modules)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.stdout.strip() == "False", proc.stderr
    code_train = code.replace("main(['--help'])", "main(['train', '--help'])")
    train_help = subprocess.run([sys.executable, "-c", code_train], capture_output=True, text=True, timeout=120)
    assert train_help.stdout.strip() == "False", train_help.stderr  # its settings list is read from a file
    shown = subprocess.run([sys.executable, "-m", "hetrl", "train", "--help"], capture_output=True, text=True, timeout=120)
    assert "tuned defaults" in shown.stdout and "lr" in shown.stdout


def test_the_settings_list_train_help_shows_is_current():
    from hetrl.cli import SETTINGS_HELP, settings_help_text

    assert SETTINGS_HELP.read_text() == settings_help_text(), (
        'run: python -c "from hetrl.cli import write_settings_help as w; w()"')


def test_results_on_stdout_progress_lines_on_stderr_without_a_terminal(tmp_path):
    """Without a terminal (a log file, CI): the summary goes to stdout; stderr gets the defaults line
    and plain progress lines with the step count, not a live bar."""
    run = tmp_path / "r"
    proc = cli("train", "dqn", "CartPole-v1", "--steps", "1500", "--run-dir", str(run), "--plan", "rule",
               "--set", "log_every=500", "--set", "eval_every=0", "--set", "eval_episodes=2", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "hetrl dqn on CartPole-v1" in proc.stdout and "env steps/s" in proc.stdout
    assert "hetrl dqn on CartPole-v1" not in proc.stderr
    assert proc.stderr.startswith("defaults: ")
    assert "1,500/1,500 env steps (100%)" in proc.stderr and "\r" not in proc.stderr


def test_the_command_lines_exit_writes_no_teardown_noise_and_keeps_its_errors():
    """The command line freezes its objects before exiting (no collections at exit), so nanobind
    would report Triton's bindings as leaked (some 30 lines on stderr) wherever torch imported
    Triton; the teardown writes nothing, and the command's own error still reaches stderr."""
    pytest.importorskip("triton", reason="the leak report comes from Triton's bindings")
    run = "import sys, torch._dynamo; from hetrl.cli import main; sys.argv = ['hetrl', *sys.argv[1:]]; raise SystemExit(main())"
    done = subprocess.run([sys.executable, "-c", run, "devices"], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and "machine" in done.stdout and "leaked" not in done.stderr, done.stderr[-2000:]
    bad = subprocess.run([sys.executable, "-c", run, "train", "dqn", "CartPole-v1", "--steps", "-5"],
                         capture_output=True, text=True, timeout=300)
    assert bad.returncode != 0 and "steps must be > 0" in bad.stderr and "leaked" not in bad.stderr
