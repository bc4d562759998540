"""The high-level Python API: as short as the CLI.

>>> import hetrl
>>> result = hetrl.train("dqn", "CartPole-v1", steps=50_000, stop_at_return=475)
>>> result.eval_return_mean, result.run_dir
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from hetrl.algos import make_algorithm
from hetrl.config import TrainConfig, apply_values, defaults_origin, make_config, save_config
from hetrl.envs import env_source, env_spec
from hetrl.envs.source import EnvFactory, Wrapper
from hetrl.errors import HetrlError, check_int, check_path, check_seed
from hetrl.evaluation import evaluate_policy, record_video
from hetrl.importable import name_of
from hetrl.run.callbacks import Callback, Callbacks
from hetrl.exits import ExitCounter, ExitStats, adopt_stored_width
from hetrl.nets.exits import ExitQNetwork
from hetrl.run.rundir import RunDir
from hetrl.run.saved_network import load_policy_network
from hetrl.training import Session, TrainResult, greedy_policy


def train(
    algo: str,
    env: str | EnvFactory,
    steps: int | None = None,
    *,
    env_kwargs: dict[str, Any] | None = None,
    wrappers: Sequence[str | Wrapper] | None = None,
    callbacks: Sequence[Callback] = (),
    seed: int | None = None,
    device: str | None = None,
    config: str | Path | dict[str, Any] | TrainConfig | None = None,
    run_dir: str | Path | None = None,
    progress: bool = True,
    summary: bool = False,
    overwrite: bool = False,
    **settings: Any,
) -> TrainResult:
    """Train ``algo`` on ``env``; returns measured rates, evaluation and the run dir.

    ``env``: a Gymnasium id, ``"module:Id"`` (importing the module registers the id), or a factory
    (a callable returning a ``gym.Env``, or its ``"module:name"``). ``env_kwargs`` go to
    ``gym.make`` or the factory; ``wrappers`` (callables ``env -> env``, such as ``gym.Wrapper``
    classes) wrap each env in order. config.json keeps them by name, so other processes (actors,
    ``resume``, ``evaluate``) make the envs again; a factory or wrapper they cannot import (a lambda,
    a nested function, one defined in the script being run) or an id registered only here keeps the
    run in this process (the inline executor). ``callbacks``: :class:`hetrl.Callback` objects,
    called as the run steps, evaluates and checkpoints; one returning True stops the run.

    Settings are layered: the algorithm's generic defaults < the tuned row for ``env``
    (``hetrl.tuned``) < ``config`` (a YAML or JSON file, a dict or a TrainConfig) < ``settings``,
    which override any run or agent field by name (``lr=1e-3``, ``hidden=(64, 64)``,
    ``stop_at_return=475``), or Atari preprocessing field (``repeat_action_probability=0.0``; or
    ``atari=AtariOptions(...)``). DQN's ``network`` also takes a Q-network factory
    ``(obs_shape, n_actions) -> nn.Module``, defined at the top level of a module (the run keeps it
    as ``"module:function"``). ``overwrite``: replace a run in ``run_dir`` that stopped before its
    first checkpoint (one with checkpoints is refused: resume it).
    """
    hooks = Callbacks(callbacks)  # checked before anything is written
    if run_dir is not None:
        check_path("run_dir", run_dir)
    name = env if isinstance(env, str) else name_of(env)
    given = {k: v for k, v in {"steps": steps, "seed": seed, "device": device}.items() if v is not None}
    cfg = apply_values(make_config(algo, name, config), {**given, **settings})
    source = env_source(env, cfg.env_kwargs if env_kwargs is None else env_kwargs,
                        cfg.wrappers if wrappers is None else wrappers)
    cfg.env, cfg.env_kwargs, cfg.wrappers = source.name, dict(source.kwargs), source.wrappers
    session = Session.create(cfg, run_dir, defaults=defaults_origin(algo, name, config, [*given, *settings]), source=source,
                             progress=progress, overwrite=overwrite)
    result = session.train(progress=progress, callbacks=hooks)
    if summary:
        session.print_summary(result)
    return result


def resume(run_dir: str | Path, steps: int | None = None, *, checkpoint: str | Path | None = None,
           callbacks: Sequence[Callback] = (), progress: bool = True, summary: bool = False,
           trust_env_state: bool = False) -> TrainResult:
    """Continue a run from its newest checkpoint (or ``checkpoint``) up to ``steps`` total env steps
    (``callbacks`` as :func:`train` takes them). The envs continue where they were when this user's
    hetrl wrote the checkpoint (its env state is signed with the user's key); from a checkpoint made
    elsewhere they restart from a seeded reset, unless ``trust_env_state`` (the env state is a
    pickle, which can run code: only for a file whose origin you trust). hetrl.run.safe_state.

    The run directory is locked while it runs (a second resume, or a train into it, is refused);
    from a checkpoint older than the newest, what lies past it moves into ``RUN/branches/<time>/``
    first (:meth:`hetrl.run.rundir.RunDir.branch_off`)."""
    hooks = Callbacks(callbacks)
    if steps is not None:
        check_int("steps", steps, 1)
    if checkpoint is not None:
        check_path("checkpoint", checkpoint)
    run = RunDir.open(check_path("run_dir", run_dir), lock=True)
    try:
        if checkpoint is None and not run.checkpoints():
            cfg = run.load_config()
            raise HetrlError(f"{run.path} has no checkpoint (the run stopped before its first one), so there is nothing to "
                             f"resume; start it again with `hetrl train {cfg.algo} {cfg.env} --config {run.config} "
                             f"--run-dir {run.path} --overwrite`")
        session = Session.open(run)
        cfg = session.config
        session.restore(checkpoint, env_state="any" if trust_env_state else "signed")
        session.defaults = resumed_origin(run)
        session.console.print(f"defaults: {session.defaults}", highlight=False, soft_wrap=True)
        at = session.executor.env_steps
        if steps is None and at >= cfg.steps:
            raise HetrlError(f"{run.path} already reached its {cfg.steps} env steps; pass --steps N (a larger total) to continue")
        if steps is not None and steps <= at:
            raise HetrlError(f"--steps {steps} is not beyond the checkpoint's {at} env steps")
        branched = run.branch_off(at)
        if branched:
            session.note(branched)
            session.load_best()  # the best of this timeline (a later one's moved aside)
        if steps is not None:
            cfg.steps = steps
            save_config(cfg, run.config)
        result = session.train(progress=progress, callbacks=hooks)
    finally:
        run.unlock()
    if summary:
        session.print_summary(result)
    return result


def resumed_origin(run: RunDir) -> str:
    """A resumed run's settings are its saved config.json, whatever the tuned table says today."""
    import json

    text = f"the run's saved {run.config}"
    try:
        first = json.loads(run.summary.read_text()).get("defaults")
    except (OSError, ValueError):
        first = None
    return text + (f" (made from: {first})" if first else "")


@dataclass
class EvalResult:
    returns: np.ndarray
    checkpoint: Path
    video: Path | None  # RUN/eval_<checkpoint>.mp4, or .gif where no MP4 encoder is installed
    which: str = "final"  # "best" (checkpoints/best.pt), "final" (the newest periodic checkpoint) or "given"
    env_steps: int | None = None  # the env step of the evaluated policy
    note: str = ""  # e.g. why the final policy was evaluated when the best was asked for
    video_note: str = ""  # why the video is a GIF
    exits: ExitStats | None = None  # an exit network's: where its decisions left it, and their operations

    @property
    def mean(self) -> float:
        return float(self.returns.mean())

    @property
    def std(self) -> float:
        return float(self.returns.std())


def evaluate(run_dir: str | Path, episodes: int = 20, *, checkpoint: str | Path | None = None,
             render_video: bool = False, seed: int | None = None) -> EvalResult:
    """Greedy returns of one of a run's policies; optionally a video of one episode
    (``RUN/eval_<checkpoint>.mp4`` where an MP4 encoder is installed, else ``.gif``).

    ``checkpoint``: ``"best"`` (checkpoints/best.pt, the best evaluation during training),
    ``"final"`` (the newest periodic checkpoint), or a checkpoint file. By default the best, or
    the final where the run has no best.pt (it was never evaluated, or predates best.pt).
    Episodes are seeded from the run's seed (``seed`` to change it) apart from training's envs.
    """
    check_int("episodes", episodes, 1)
    run = RunDir.open(check_path("run_dir", run_dir))
    cfg = run.load_config()
    if seed is not None:
        cfg.seed = check_seed("seed", seed)
    which, note = "given", ""
    if checkpoint is None or checkpoint == "best":
        which = "best"
        if not run.best.exists():
            if checkpoint == "best":
                raise HetrlError(f"{run.path} has no {run.best.relative_to(run.path)} (no evaluation was written); "
                                 "evaluate the final policy with --checkpoint final")
            which, note = "final", "the run has no best.pt, so its final policy is evaluated"
    elif checkpoint == "final":
        which = "final"
    else:
        check_path("checkpoint", checkpoint)
    path, state = run.load_checkpoint(run.best if which == "best" else None if which == "final" else checkpoint, replay=False,
                                      env_state="never")
    spec = env_spec(cfg.env_source(), cfg.atari)
    if state.get("kind") == "best":  # the policy only: no executor to build
        which = "best" if path.resolve() == run.best.resolve() else which
        algo = make_algorithm(cfg.algo, spec, cfg.agent)
        network = load_policy_network(algo, state, path, cfg, run.config)
        policy, env_steps = _greedy(algo, network), int(state["env_steps"])
    else:
        cfg.device, cfg.plan = "cpu", "rule"  # evaluation acts on the host whatever device trained the run
        cfg.wandb_project = None  # and logs no metrics (nor needs the wandb extra)
        adopt_stored_width(cfg, state)  # an exit-dqn checkpoint's branches as `hetrl exits sweep` stored them
        session = Session.open(run, cfg, keep_plan=False)
        try:
            session.restore(path, replay=False, env_state="never")
            policy, env_steps = _greedy(session.algo, session.executor.policy_network), session.executor.env_steps
        finally:
            session.executor.close()
    returns = evaluate_policy(policy, spec.origin, episodes, cfg.seed, spec.atari)
    exits = policy.stats() if isinstance(policy, ExitCounter) else None
    video, video_note = None, ""
    if render_video:
        if not spec.supports_rgb_array:
            raise HetrlError(f"{cfg.env} cannot render rgb_array frames, so no video can be recorded; drop --render-video")
        recorded = record_video(policy, spec.origin, run.path / f"eval_{path.stem}", cfg.seed, atari=spec.atari)
        video, video_note = recorded.path, recorded.note
    return EvalResult(returns=returns, checkpoint=path, video=video, which=which, env_steps=env_steps, note=note,
                      video_note=video_note, exits=exits)


def _greedy(algo: Any, network: Any):
    """The greedy policy evaluated; an exit network's counts where each decision left it."""
    if isinstance(network, ExitQNetwork):
        return ExitCounter(algo, network)
    return greedy_policy(algo, network)
