"""A training session: an executor driven to a step count, with metrics, evaluation, checkpoints,
a progress bar and a summary. ``hetrl.train`` and ``hetrl.resume`` are thin wrappers over it."""

from __future__ import annotations

import copy
import json
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from rich.console import Console

from hetrl.algos import Algorithm, make_algorithm
from hetrl.config import TrainConfig, check_machine, check_replay_memory, checkpoint_misfit, shaping_changes
from hetrl.devices import resolve_device
from hetrl.envs import EnvSource, env_spec
from hetrl.errors import ActorsFailed, HetrlError, LearnerLost, StopRequested
from hetrl.evaluation import evaluate_policy
from hetrl.files import write_text
from hetrl.nets import numpy_params
from hetrl.run.callbacks import Callback, CallbackInfo, Callbacks
from hetrl.run.metrics import STAGES, MetricsWriter, read_metrics
from hetrl.run.plots import plot_returns
from hetrl.run.report import placement_table, progress_bar, summary_table
from hetrl.run.result import TrainResult
from hetrl.run.rundir import RunDir
from hetrl.run.saved_network import load_teacher
from hetrl.run.signals import StopSignals
from hetrl.run.wandb_sink import WandbSink, require_wandb
from hetrl.runtime.denormals import flush_denormals
from hetrl.runtime.executors import make_executor
from hetrl.runtime.frozen_objects import objects_frozen
from hetrl.runtime.host_blas import one_blas_thread
from hetrl.runtime.shared import sweep_stale_segments
from hetrl.planner.plan_file import Plan
from hetrl.planner.choice import resolve
from hetrl.runtime.timers import timer_table


def host_forward(network: Any):
    """A host snapshot of ``network`` as a function of host arrays (independent of where the learner
    runs): its numpy forward where it has one (the MLPs), else a torch copy on the host (conv networks)."""
    if hasattr(network, "forward_numpy"):
        params, forward = numpy_params(network), network.forward_numpy
        return lambda obs: forward(params, obs)
    host = copy.deepcopy(network).to("cpu").requires_grad_(False).eval()

    def forward_host(obs: np.ndarray) -> np.ndarray:
        with torch.no_grad():
            return host(torch.as_tensor(obs)).numpy()
    return forward_host


def greedy_policy(algo: Algorithm, network: Any):
    """``network``'s greedy actions on host arrays (:func:`host_forward`, then the greedy rule)."""
    forward = host_forward(network)
    return lambda obs: algo.greedy_rule(forward(obs))


def checked_algorithm(config: TrainConfig, source: EnvSource | None = None) -> Algorithm:
    """The algorithm of ``config`` on its env, once every check that needs no plan passed: the run's
    settings, the extras they name, the env, the algorithm's settings on it, the device. Each
    problem is a one-line HetrlError. ``source``: the envs as hetrl.train was given them, else
    found again by config.json's names."""
    config.validate()
    if config.wandb_project:
        require_wandb()  # a missing extra stops the run before anything is written
    algo = make_algorithm(config.algo, env_spec(source or config.env_source(), config.atari), config.agent)
    if getattr(algo, "distils", False):
        load_teacher(config.agent.teacher, algo.spec)  # a teacher that does not fit is refused here, not in a learner process
    resolve_device(config.device)  # a missing device is refused before anything is printed
    return algo


def edited_since_checkpoint(run: RunDir, config: TrainConfig, refused: HetrlError) -> HetrlError | None:
    """Where ``config`` (the run's config.json) changed a setting that shapes the networks or the
    replay since the newest checkpoint was written, the error restoring it would give, with
    ``refused`` as the cause; else None. For a resume whose kept plan refuses the edited settings
    (a learner backend without a dueling head, say): the edit is the problem to name."""
    try:
        path, state = run.load_checkpoint(replay=False, env_state="never")
    except HetrlError:
        return None
    if not shaping_changes(state.get("config"), config):
        return None
    return checkpoint_misfit(path, state.get("config"), config, run.config, refused)


class Session:
    """Build with :meth:`create` (a new run) or :meth:`open` (an existing one). Everything is
    validated before anything is written, so a bad config leaves no half-made run directory."""

    run: RunDir

    def __init__(self, config: TrainConfig, console: Console | None = None, plan: Plan | None = None,
                 defaults: str = "", source: EnvSource | None = None, progress: bool = True) -> None:
        self.algo = checked_algorithm(config, source)
        self.spec = self.algo.spec
        self.config = config
        self.console = console or Console(stderr=True)
        self.defaults = defaults
        if defaults:  # the first line a run prints (once the env and settings are known good): where its settings came from
            self.console.print(f"defaults: {defaults}", highlight=False, soft_wrap=True)
        # in the mode the run computes in, from before the profile starts the learner's thread pools (runtime/denormals.py)
        with flush_denormals(config.flush_denormals):
            with progress_bar(self.console, progress) as bar:  # shown only while a profile is measured
                shown: list[int] = []

                def profiling(label: str, done: int, total: int) -> None:
                    if not shown:
                        shown.append(bar.add_task(f"profiling {config.algo} {config.env}", total=total, stats="", unit="measurements"))
                    bar.update(shown[0], completed=done + 1, total=total, stats=label)
                self.run_plan = resolve(config, self.algo, self.console.print, plan, profiling)
            self.plan, self.placement = self.run_plan.plan, self.run_plan.placement
            check_replay_memory(config, self.spec, self.placement.replay)  # before the executor allocates it
            self.executor_kind, self.actors = self.run_plan.executor, self.run_plan.actors
            self.inference, self.num_envs = self.run_plan.inference, self.run_plan.num_envs
            if self.placement.learn.threads:
                torch.set_num_threads(self.placement.learn.threads)
            self.stop = StopSignals()  # Ctrl-C and SIGTERM while it trains (hetrl.run.signals)
            self.executor = make_executor(self.run_plan, config, self.algo, self.console.print, should_stop=self.stop.requested)
        self.resumed_from: int | None = None
        self._metrics: MetricsWriter | None = None  # open while a train() call runs
        self.saved_at: int | None = None  # env steps of the newest checkpoint of this run's timeline (None: none yet)
        self.best: tuple[float, float, int] | None = None  # (mean, std, env step) of the best evaluation

    @classmethod
    def create(cls, config: TrainConfig, run_dir: str | Path | None, console: Console | None = None,
               defaults: str = "", source: EnvSource | None = None, progress: bool = True,
               overwrite: bool = False) -> "Session":
        """A new run; ``overwrite`` replaces a run in ``run_dir`` that stopped before its first checkpoint."""
        check_machine(config)  # before planning: a plan measures the start of the actors it is asked for
        RunDir.check_target(run_dir, overwrite=overwrite)  # and a run directory that cannot be written or holds a run, before a profile is measured
        if config.ray_address:  # and a cluster address where nothing listens, before a profile is measured
            from hetrl.runtime.ray_executor import CONNECT_TIMEOUT_S
            from hetrl.runtime.ray_address import check_reachable

            check_reachable(config.ray_address, CONNECT_TIMEOUT_S)
        session = cls(config, console, defaults=defaults, source=source, progress=progress)
        session.check_machine()
        session.run = RunDir.create(run_dir, config, overwrite=overwrite)
        session.print_notes()
        return session

    @classmethod
    def open(cls, run: RunDir, config: TrainConfig | None = None, keep_plan: bool = True) -> "Session":
        """A session on an existing run; ``keep_plan`` reuses the run's plan.json, so a resumed run
        places every primitive where it was."""
        plan = Plan.load(run.plan) if keep_plan and run.plan.exists() else None
        config = config or run.load_config()
        try:
            session = cls(config, plan=plan)
        except HetrlError as refused:  # the kept plan no longer serves the settings: edited since?
            raise (plan and edited_since_checkpoint(run, config, refused)) or refused from None
        session.run = run
        session.print_notes()
        return session

    def note(self, text: str) -> None:
        self.console.print(f"note: {text}", highlight=False, soft_wrap=True)

    def print_notes(self) -> None:
        """What the run directory noted (a stale lock taken over, partial files removed)."""
        while self.run.notes:
            self.note(self.run.notes.pop(0))

    def check_machine(self) -> None:
        """Refuse actors or learner threads far beyond this machine's cores, as planned (a plan file
        made elsewhere, say), unless the config says force (``hetrl.config.check_machine``)."""
        check_machine(self.config, self.executor_kind, self.actors, self.placement.learn.threads)

    def restore(self, checkpoint: str | Path | None = None, replay: bool = True, env_state: str = "signed") -> Path:
        """Load the newest checkpoint (or ``checkpoint``). ``replay``: the whole training state, to
        resume; a checkpoint without its replay is refused, since the run could not go on as it
        would have. Without ``replay`` (evaluation) the replay is left empty. ``env_state``: when
        the inline executor's env state is unpickled (hetrl.run.safe_state: ``"signed"`` by this
        user's key, ``"any"``, ``"never"``); where it is not, the envs restart from a seeded reset,
        which a resume says in one line."""
        path, state = self.run.load_checkpoint(checkpoint, replay=replay, env_state=env_state)
        if state.get("kind") == "best":
            raise HetrlError(f"{path} holds only the best evaluation's policy, not the training state; "
                             f"resume from a periodic checkpoint (checkpoints/step_*.pt) instead")
        if replay and "replay_missing" in state:
            raise HetrlError(f"{path.name} cannot be resumed: {state['replay_missing']}; {self._resume_fix(path)}; "
                             f"{path.name} itself can be evaluated (`hetrl eval {self.run.path} --checkpoint {path}`); "
                             f"checkpoint_replay=all keeps every checkpoint resumable")
        try:
            self.executor.load_state_dict(state["executor"])
        except HetrlError:
            raise
        except (RuntimeError, KeyError, ValueError, TypeError, IndexError) as exc:  # shapes or layout of another config
            raise checkpoint_misfit(path, state.get("config"), self.config, self.run.config, exc) from None
        self.resumed_from = self.saved_at = self.executor.env_steps
        if replay and env_state != "never" and "env_state_dropped" in state:
            self.console.print(f"note: the env state in {path.name} is not restored ({state['env_state_dropped']}): the envs "
                               f"restart from a seeded reset, so the run is not bit-identical to one never stopped; if you "
                               f"trust the file, resume with --trust-env-state (hetrl.resume(..., trust_env_state=True))",
                               highlight=False, soft_wrap=True)
        self.load_best()
        return path

    def load_best(self) -> None:
        """The best evaluation so far, from best.pt (a resumed run keeps improving on it); none without one."""
        self.best = None
        if self.run.best.exists():
            try:
                _, best = self.run.load_checkpoint(self.run.best, env_state="never")
                self.best = (best["eval_return_mean"], best["eval_return_std"], best["env_steps"])
            except HetrlError as exc:
                self.console.print(f"warning: {exc}; the next evaluation writes a new best.pt", highlight=False)

    def _resume_fix(self, path: Path) -> str:
        """Where a run can resume from instead of ``path`` (which has no replay)."""
        others = [p for p in self.run.resumable() if p.resolve() != path.resolve()]
        if not others:
            return "no checkpoint of this run has its replay"
        if others[-1] == self.run.checkpoints()[-1]:
            return f"`hetrl resume {self.run.path}` resumes from the newest, {others[-1].name}, which has it"
        return f"resume from one that has it with --checkpoint ({', '.join(p.name for p in others)})"

    def evaluate(self, episodes: int) -> np.ndarray | None:
        """The greedy policy's returns over ``episodes`` evaluation episodes; None where a stop
        signal cut the evaluation short (the episodes that had ended would favour the short ones,
        so none is kept), said in one line."""
        policy = greedy_policy(self.algo, self.executor.policy_network)
        returns = evaluate_policy(policy, self.spec.origin, episodes, self.config.seed, self.spec.atari,
                                  should_stop=self.stop.requested)
        if len(returns) < episodes:
            self.note(f"{self.stop.name or 'a stop'} during the evaluation at env step {self.executor.env_steps:,}: "
                      f"it was cut short after {len(returns)} of {episodes} episodes and is not reported")
            return None
        return returns

    def save_checkpoint(self) -> Path:
        """``step_N.pt`` with the training state, the replay in a file beside it, and the older
        checkpoints pruned, as ``checkpoint_replay`` and ``keep_checkpoints`` say (hetrl.run.rundir)."""
        cfg, executor = self.config, self.executor.state_dict()
        replay = executor.pop("replay", None)
        return self.run.save_checkpoint({"config": cfg.to_dict(), "executor": executor}, self.executor.env_steps, replay,
                                        replay_policy=cfg.checkpoint_replay, keep=cfg.keep_checkpoints)

    def _keep_if_best(self, returns: np.ndarray) -> None:
        """Write checkpoints/best.pt when this evaluation's mean beats every earlier one of the run."""
        mean, std = float(returns.mean()), float(returns.std())
        if self.best is not None and mean <= self.best[0]:
            return
        self.best = (mean, std, self.executor.env_steps)
        network = self.executor.policy_network
        self.run.save_best({
            "config": self.config.to_dict(), "env_steps": self.executor.env_steps, "policy_key": self.algo.policy_key,
            "policy": {k: v.detach().cpu().clone() for k, v in network.state_dict().items()},
            "eval_return_mean": mean, "eval_return_std": std, "eval_episodes": len(returns),
        })

    def train(self, progress: bool = True, callbacks: Sequence[Callback] | Callbacks = (),
              final_eval: bool = True) -> TrainResult:
        """Run to ``config.steps`` (or the target return, or Ctrl-C or SIGTERM, or a callback's
        stop); the executor is closed at the end whatever happens, so no actor process or shared
        memory outlives the call. ``final_eval`` False skips the final policy's evaluation (a run
        measured for speed alone, as ``hetrl sweep``'s: a greedy Atari game can last 27k steps). A
        signal stops the run cleanly, with its checkpoint (``hetrl.run.signals``); so does an abort,
        its actors failing over and over. The loop's energy is measured on every meter there is
        (RAPL, NVML), or reported unavailable, and so is the learner's GPU's busy share over the
        learning phase. The run directory's lock is released at the end."""
        from hetrl.energy.busy import BusyMeasurement
        from hetrl.energy.discovery import discover_meters
        from hetrl.energy.measurement import EnergyMeasurement

        self._callbacks = callbacks if isinstance(callbacks, Callbacks) else Callbacks(callbacks)
        self.check_machine()  # a resumed run, on this machine
        try:
            # objects_frozen: no full garbage collection rewalks the heap that existed before the run
            with self.stop, one_blas_thread(), flush_denormals(self.config.flush_denormals), objects_frozen():
                try:
                    swept = sweep_stale_segments()
                    if swept:
                        self.console.print(f"removed {len(swept)} shared-memory segment(s) that killed hetrl processes left "
                                           f"in /dev/shm: {', '.join(swept)}", highlight=False, soft_wrap=True)
                    # a Ray learner is a Ray actor: its cuda:0 is whichever GPU Ray gave it, not this process's
                    skip = "the learner is a Ray actor, whose GPU this process cannot name" if self.executor_kind == "ray" else ""
                    with discover_meters() as meters, BusyMeasurement(self.placement.learn.device, skip=skip) as busy:
                        self._energy, self._busy = EnergyMeasurement(meters), busy
                        return self._train(progress, final_eval)
                except ActorsFailed as exc:
                    raise HetrlError(f"{exc}; {self._save_on_abort()}") from None
                except LearnerLost as exc:  # nothing left to save: the newest checkpoint stays as it is
                    raise LearnerLost(f"{exc}; {self._kept_on_loss()}") from None
                except StopRequested as exc:  # stopped at once (a third signal, or while connecting): say which signal
                    exc.signum = self.stop.signum or exc.signum
                    raise
                finally:
                    self.executor.close()
        except BaseException:
            if self._metrics is not None:  # the W&B run is marked failed, the files closed
                self._metrics.close(failed=True)
            raise
        finally:
            self.run.unlock()

    def _save_on_abort(self) -> str:
        """Save the learner's state when the run cannot go on (its actors keep failing), unless
        the newest checkpoint holds it already or no env step was taken; says which."""
        ex, run = self.executor, self.run.path
        if ex.env_steps == 0:
            return "no env step was taken, so there was nothing to save"
        if self.saved_at == ex.env_steps:
            return f"the newest checkpoint holds the learner's state (env step {ex.env_steps:,}); `hetrl resume {run}` continues once fixed"
        path, self.saved_at = self.save_checkpoint(), ex.env_steps
        return f"the learner's state was saved first, in {path} (env step {ex.env_steps:,}); `hetrl resume {run}` continues from it once fixed"

    def _kept_on_loss(self) -> str:
        """What is left when the learner's state is gone: the newest checkpoint, untouched."""
        if self.saved_at is None:
            return "no checkpoint was written before it, so the run starts again from the beginning"
        return (f"the newest checkpoint (env step {self.saved_at:,}) is kept as it was; `hetrl resume {self.run.path}` "
                f"continues from it")

    def _train(self, progress: bool, final_eval: bool = True) -> TrainResult:
        cfg, ex, run = self.config, self.executor, self.run
        if not run.plan.exists():
            self.plan.save(run.plan)
        sinks = []
        if cfg.wandb_project:
            sinks.append(WandbSink(cfg.wandb_project, cfg.to_dict(), run.path, entity=cfg.wandb_entity, mode=cfg.wandb_mode,
                                   resumed=self.resumed_from is not None))
        metrics = self._metrics = MetricsWriter(run.metrics, run.tensorboard, resume_step=self.resumed_from, sinks=sinks,
                                                note=self.note)
        interrupted = self.stop
        next_log = _next_multiple(ex.env_steps, cfg.log_every)
        next_eval = _next_multiple(ex.env_steps, cfg.eval_every) if cfg.eval_every else None
        next_ckpt = _next_multiple(ex.env_steps, cfg.checkpoint_every)
        start, start_steps, start_updates = time.perf_counter(), ex.env_steps, ex.updates
        last_t, last_steps, last_updates = start, ex.env_steps, ex.updates
        last_timers = ex.timer_totals()
        last_eval: np.ndarray | None = None
        last_eval_step: int | None = None
        solved_at: int | None = None
        stopped_at: int | None = None  # the env step at which a callback stopped the run
        hooks, pending, episodes_seen = self._callbacks, [], 0  # pending: episodes on_step saw, for the next metrics row
        learning_from: tuple[float, int] | None = None  # (time, env steps) when learning started
        eval_seconds = 0.0  # spent evaluating since learning started
        final_eval_seconds = 0.0  # the final policy's evaluation, in the loop's last row
        bar = progress_bar(self.console, progress)
        self._energy.start()
        with bar:
            task = bar.add_task(f"{cfg.algo} {cfg.env}", total=cfg.steps, completed=ex.env_steps, stats="")
            while ex.env_steps < cfg.steps and not interrupted.set:
                ex.iteration()
                if hooks.stepping:
                    finished = ex.drain_episodes()
                    pending += finished
                    episodes_seen += len(finished)
                    if hooks.call("on_step", self._info(episodes_seen, tuple(r for r, _ in finished))):
                        stopped_at = ex.env_steps
                if learning_from is None and ex.env_steps >= cfg.agent.learning_starts:
                    learning_from = (time.perf_counter(), ex.env_steps)
                    self._busy.start()  # over the learning phase, as its rate
                if ex.env_steps >= next_log or ex.env_steps >= cfg.steps:
                    now = time.perf_counter()
                    drained = ex.drain_episodes()
                    episodes_seen += len(drained)
                    episodes, pending = pending + drained, []
                    row: dict[str, Any] = {
                        "env_steps": ex.env_steps,
                        "updates": ex.updates,
                        "wall_s": round(now - start, 3),
                        "episodes": len(episodes),
                        "return_mean": float(np.mean([r for r, _ in episodes])) if episodes else None,
                        "length_mean": float(np.mean([n for _, n in episodes])) if episodes else None,
                        "loss": ex.drain_losses(),
                        "actor_loss": ex.drain_actor_losses(),
                        "exploration": self.algo.exploration(ex.env_steps),
                        "env_steps_per_s": (ex.env_steps - last_steps) / (now - last_t),
                        "updates_per_s": (ex.updates - last_updates) / (now - last_t),
                        "actor_restarts": ex.restarts,
                        "actors_lost": ex.actors_lost,
                    }
                    row["staleness_mean"], row["staleness_max"] = ex.drain_staleness()
                    timers = ex.timer_totals()
                    row.update(_shares(timers, last_timers, now - last_t))
                    last_timers = timers
                    final = ex.env_steps >= cfg.steps or stopped_at is not None  # the final policy is evaluated in this row (one row per step)
                    if (final and final_eval) or (next_eval is not None and ex.env_steps >= next_eval):
                        eval_start = time.perf_counter()
                        with self._busy.paused(), self._energy.paused():  # evaluation is not learning (nor in its rate or joules)
                            evaluated = self.evaluate(cfg.eval_episodes)
                        spent = time.perf_counter() - eval_start
                        eval_seconds += spent if learning_from else 0.0
                        final_eval_seconds = spent if final else 0.0
                        next_eval = _next_multiple(ex.env_steps, cfg.eval_every) if cfg.eval_every else None
                        if evaluated is not None:  # None: a stop signal cut it short
                            last_eval, last_eval_step = evaluated, ex.env_steps
                            self._keep_if_best(last_eval)
                            row["eval_return_mean"], row["eval_return_std"] = float(last_eval.mean()), float(last_eval.std())
                            # a stop: the target reached before the budget ran out (at its end it is no stop)
                            if cfg.stop_at_return is not None and last_eval.mean() >= cfg.stop_at_return and not final:
                                solved_at = ex.env_steps
                            if hooks.call("on_eval", self._info(episodes_seen, evaluation=last_eval)):
                                stopped_at = ex.env_steps
                    metrics.write(row)
                    stats = f"{row['env_steps_per_s']:,.0f} steps/s {row['updates_per_s']:,.0f} upd/s"
                    if row["return_mean"] is not None:
                        stats += f" return {row['return_mean']:.1f}"
                    if last_eval is not None:
                        stats += f" eval {last_eval.mean():.1f}"
                    bar.update(task, completed=ex.env_steps, stats=stats)
                    next_log = _next_multiple(ex.env_steps, cfg.log_every)
                    last_t, last_steps, last_updates = time.perf_counter(), ex.env_steps, ex.updates
                    if solved_at is not None:
                        break
                if ex.env_steps >= next_ckpt:
                    path, self.saved_at = self.save_checkpoint(), ex.env_steps
                    next_ckpt = _next_multiple(ex.env_steps, cfg.checkpoint_every)
                    if hooks.call("on_checkpoint", self._info(episodes_seen, checkpoint=path)):
                        stopped_at = ex.env_steps
                if stopped_at is not None:
                    break
        end = time.perf_counter() - final_eval_seconds  # the final evaluation is not training time
        if interrupted.set:
            self.console.print(f"{interrupted.name}: stopping at env step {ex.env_steps:,}; writing the checkpoint",
                               highlight=False)
        wall = end - start
        busy = self._busy.stop()
        energy = (self._energy.stop().with_host_power(cfg.cpu_watts)  # the user's figures where no meter covers the CPU,
                  .with_gpu_power(cfg.gpu_watts, self.placement.devices()))  # or a GPU the run used
        ex.drain_staleness()  # folds the last interval into the run's figures
        staleness_mean, staleness_max = ex.run_staleness()
        learning_rate = None
        if learning_from is not None and ex.env_steps > learning_from[1]:
            # ``end`` already leaves out the final evaluation, which ``eval_seconds`` counts too
            learning_rate = (ex.env_steps - learning_from[1]) / (end - learning_from[0] - (eval_seconds - final_eval_seconds))
        if self.saved_at != ex.env_steps:  # the loop's last iteration (or the checkpoint resumed from) may hold this very state
            path, self.saved_at = self.save_checkpoint(), ex.env_steps
            hooks.call("on_checkpoint", self._info(episodes_seen, checkpoint=path))  # the run ends here: a stop asked for changes nothing
        # a prediction is shown only for the executor and actor count it was made for
        same = ((self.plan.executor, self.plan.actors, self.plan.inference, self.plan.num_envs)
                == (self.executor_kind, self.actors, self.inference, self.num_envs))
        prediction = self.plan.prediction if same else None
        learning_updates = ex.updates - start_updates
        learning_steps = ex.env_steps - max(start_steps, cfg.agent.learning_starts)
        # the final policy's evaluation
        if final_eval and solved_at is None and not interrupted.set and last_eval_step != ex.env_steps:
            evaluated = self.evaluate(cfg.eval_episodes)
            if evaluated is not None:  # None: a stop signal cut it short
                last_eval = evaluated
                self._keep_if_best(last_eval)
                hooks.call("on_eval", self._info(episodes_seen, evaluation=last_eval))
                metrics.write({"env_steps": ex.env_steps, "updates": ex.updates, "wall_s": round(wall, 3),
                               "eval_return_mean": float(last_eval.mean()), "eval_return_std": float(last_eval.std())})
        metrics.close()
        plot_returns(run.metrics, run.plot, f"{cfg.algo} on {cfg.env} (seed {cfg.seed})")
        result = TrainResult(
            run_dir=run.path, algo=cfg.algo, env=cfg.env, env_steps=ex.env_steps, updates=ex.updates, wall_s=wall,
            env_steps_per_s=(ex.env_steps - start_steps) / wall, updates_per_s=(ex.updates - start_updates) / wall,
            eval_return_mean=None if last_eval is None else float(last_eval.mean()),
            eval_return_std=None if last_eval is None else float(last_eval.std()),
            eval_episodes=cfg.eval_episodes, solved_at=solved_at, interrupted=interrupted.set, stopped_at=stopped_at,
            stop_signal=interrupted.name or None,
            placement=self._where(), timers=timer_table(ex.timer_totals(), wall), metrics=read_metrics(run.metrics),
            learning_env_steps_per_s=learning_rate,
            predicted_env_steps_per_s=prediction.env_steps_per_s * self.plan.cpu_share if prediction else None,
            predicted_cpu_share=self.plan.cpu_share if prediction else None,
            predicted_us_per_call={k: 1e6 * v for k, v in prediction.per_call_s.items()} if prediction else None,
            executor=self.executor_kind, actors=self.actors,
            actor_restarts=ex.restarts, actors_lost=ex.actors_lost,
            staleness_mean=staleness_mean, staleness_max=staleness_max,
            replay_ratio=cfg.agent.replay_ratio,
            replay_ratio_measured=learning_updates / learning_steps if learning_steps > 0 else None,
            replay_ratio_window_error=ex.ratio_error(),
            energy=energy.describe(),
            joules_per_env_step=energy.joules_per_step(ex.env_steps - start_steps) if ex.env_steps > start_steps else None,
            joules_per_update=energy.joules_per_step(ex.updates - start_updates) if ex.updates > start_updates else None,
            energy_status=energy.status, energy_methods=energy.methods,
            predicted_joules_per_env_step=prediction.joules_per_env_step if prediction else None,
            accelerator_utilisation=busy.share, accelerator_utilisation_p10=busy.p10, accelerator_utilisation_p90=busy.p90,
            accelerator_busy=busy.describe(), accelerator_busy_method=busy.method,
            defaults=self.defaults,
            best_eval_return_mean=self.best[0] if self.best else None,
            best_eval_return_std=self.best[1] if self.best else None,
            best_eval_step=self.best[2] if self.best else None,
            profile_check=self.plan.profile_check or None,
            replay_bytes=ex.replay_bytes() or None, replay_capacity=cfg.agent.buffer_size,
        )
        write_text(run.summary, json.dumps({k: v for k, v in result.__dict__.items() if k != "metrics"}, indent=2, default=str) + "\n")
        return result

    def _info(self, episodes: int, episode_returns: tuple[float, ...] = (), evaluation: np.ndarray | None = None,
              checkpoint: Path | None = None) -> CallbackInfo:
        """What a callback is told (see hetrl.run.callbacks)."""
        ex = self.executor
        return CallbackInfo(
            run_dir=self.run.path, env_steps=ex.env_steps, updates=ex.updates, episodes=episodes,
            episode_returns=episode_returns, checkpoint=checkpoint,
            eval_return_mean=None if evaluation is None else float(evaluation.mean()),
            eval_return_std=None if evaluation is None else float(evaluation.std()),
        )

    def _where(self) -> dict[str, str]:
        """Where each timed stage ran, for the summary: what the executor's built implementations
        report (the actors' included), the plan's placement for anything that did not run."""
        where = self.placement.by_primitive()
        where.update(self.executor.ran())
        if self.executor_kind != "inline":
            n = self.actors
            actors = f"{n} actor{'s' if n != 1 else ''}"
            channel = "shared memory" if self.executor_kind == "local" else "Ray object store"
            if self.inference == "central":
                where["InferenceServe"] = "learner, answering the actors (Act excluded)"
                where["InferenceWait"] = f"{actors}, waiting for actions"
            else:
                where["WeightSync"] = f"{self.placement.learn.device} -> {channel} -> acting copies"
                where["WeightFetch"] = f"{channel} -> {actors}"
            where["ActorWait"] = "actors, held by the limiter"
            where["LearnerWait"] = "learner, waiting for data"
            if self.executor_kind == "ray":
                where["CoordinatorWait"] = "this process, waiting on Ray"
        where["Transfer"] = "replay -> learner"
        return where

    def print_summary(self, result: TrainResult, out: Console | None = None) -> None:
        """The results, on stdout (``out``): progress and diagnostics went to the session's console
        (stderr), so `hetrl train ... > log.txt` keeps the results and the terminal the rest."""
        out = out or Console()
        out.print(summary_table(result))
        out.print(placement_table(result))
        if result.interrupted:
            how = "interrupted" if result.stop_signal in (None, "SIGINT") else f"stopped by {result.stop_signal}"
            out.print(f"{how}: checkpoint saved; continue with `hetrl resume {result.run_dir}`")


def _shares(now: dict[str, tuple[float, int, int]], before: dict[str, tuple[float, int, int]], wall: float) -> dict[str, float]:
    """Each stage's share of its processes' wall time over an interval (metrics columns share_*)."""
    out = {}
    for name in STAGES:
        if name in now and wall > 0:
            seconds, _, processes = now[name]
            out[f"share_{name}"] = round((seconds - before.get(name, (0.0, 0, 1))[0]) / (wall * processes), 4)
    return out


def _next_multiple(value: int, every: int) -> int:
    return (value // every + 1) * every
