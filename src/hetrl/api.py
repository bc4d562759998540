"""The high-level Python API: as short as the CLI.

>>> import hetrl
>>> result = hetrl.train("dqn", "CartPole-v1", steps=50_000, stop_at_return=475)
>>> result.eval_return_mean, result.run_dir
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from hetrl.config import TrainConfig, apply_values, make_config, save_config
from hetrl.errors import HetrlError
from hetrl.evaluation import record_gif
from hetrl.run.rundir import RunDir
from hetrl.training import Session, TrainResult, greedy_policy


def train(
    algo: str,
    env: str,
    steps: int | None = None,
    *,
    seed: int | None = None,
    device: str | None = None,
    config: str | Path | dict[str, Any] | TrainConfig | None = None,
    run_dir: str | Path | None = None,
    progress: bool = True,
    summary: bool = False,
    **settings: Any,
) -> TrainResult:
    """Train ``algo`` on the Gymnasium env ``env``; returns measured rates, evaluation and the run dir.

    ``config`` is a base config (a JSON file, a dict or a TrainConfig); ``settings`` override any run
    or agent field by name (``lr=1e-3``, ``hidden=(64, 64)``, ``stop_at_return=475``), or Atari
    preprocessing field (``repeat_action_probability=0.0``; or ``atari=AtariOptions(...)``). DQN's
    ``network`` also takes a Q-network factory ``(obs_shape, n_actions) -> nn.Module``, defined at the
    top level of a module (the run keeps it as ``"module:function"``).
    """
    given = {k: v for k, v in {"steps": steps, "seed": seed, "device": device}.items() if v is not None}
    cfg = apply_values(make_config(algo, env, config), {**given, **settings})
    session = Session.create(cfg, run_dir)
    result = session.train(progress=progress)
    if summary:
        session.print_summary(result)
    return result


def resume(run_dir: str | Path, steps: int | None = None, *, checkpoint: str | Path | None = None,
           progress: bool = True, summary: bool = False) -> TrainResult:
    """Continue a run from its newest checkpoint (or ``checkpoint``) up to ``steps`` total env steps."""
    run = RunDir.open(run_dir)
    session = Session.open(run)
    cfg = session.config
    session.restore(checkpoint)
    if steps is None and session.executor.env_steps >= cfg.steps:
        raise HetrlError(f"{run.path} already reached its {cfg.steps} env steps; pass --steps N (a larger total) to continue")
    if steps is not None:
        if steps <= session.executor.env_steps:
            raise HetrlError(f"--steps {steps} is not beyond the checkpoint's {session.executor.env_steps} env steps")
        cfg.steps = steps
        save_config(cfg, run.config)
    result = session.train(progress=progress)
    if summary:
        session.print_summary(result)
    return result


@dataclass
class EvalResult:
    returns: np.ndarray
    checkpoint: Path
    video: Path | None

    @property
    def mean(self) -> float:
        return float(self.returns.mean())

    @property
    def std(self) -> float:
        return float(self.returns.std())


def evaluate(run_dir: str | Path, episodes: int = 20, *, checkpoint: str | Path | None = None,
             render_video: bool = False, seed: int | None = None) -> EvalResult:
    """Greedy returns of a run's newest (or given) checkpoint; optionally a GIF of one episode."""
    run = RunDir.open(run_dir)
    cfg = run.load_config()
    if seed is not None:
        cfg.seed = seed
    cfg.device, cfg.plan = "cpu", "rule"  # evaluation acts on the host whatever device trained the run
    session = Session.open(run, cfg, keep_plan=False)
    path = session.restore(checkpoint)
    returns = session.evaluate(episodes)
    video = None
    if render_video:
        if not session.spec.supports_rgb_array:
            raise HetrlError(f"{cfg.env} cannot render rgb_array frames, so no video can be recorded; drop --render-video")
        video = run.path / f"eval_{path.stem}.gif"
        record_gif(greedy_policy(session.algo, session.executor.policy_network), cfg.env, video, cfg.seed,
                   atari=session.spec.atari)
    session.executor.close()
    return EvalResult(returns=returns, checkpoint=path, video=video)
