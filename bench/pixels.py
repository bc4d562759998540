"""DQN on pixels: hetrl against Stable-Baselines3 and a CleanRL-style script on identical settings.

Workloads (one settings object per workload, the same for every library; ``SETTINGS`` below):
- MinAtar Breakout-v1 and SpaceInvaders-v1: the MinAtar reference agent (Young and Tian 2019): the
  MinAtar network, batch 32, replay 100k, 1 update per env step, target copied every 1,000 env steps,
  epsilon 1 -> 0.1, Adam 1e-4 (hetrl's documented equivalent of the reference's RMSProp), Huber
  loss, no clipping, not double. Learning: curves of training-episode returns and the final greedy
  return (``--eval-episodes``, 10 by default; one shared evaluator), beside env steps/s and wall time.
- Atari Breakout-v5 (speed only; learning is not expected in 100k steps): the Nature CNN, 1 update
  per 4 env steps, the DQN preprocessing of ``hetrl.envs.AtariOptions``.

Every library plays the env ``hetrl.envs.make_env`` builds (the same preprocessing, uint8, channels
first): the comparison is of the agents' machinery, not of wrappers. SB3 runs ``DQN("CnnPolicy")``
with the MinAtar network as its features extractor on MinAtar (``normalize_images=False``, no
hidden layer after it, so the Q-network is the same) and its own Nature CNN on Atari. hetrl runs
``hetrl.train``'s session with its defaults for placement (``plan=auto``: profiled once, untimed,
before the first timed run, as a user's second run finds it cached). Every (library, workload, seed)
is a fresh subprocess, the library order rotating from seed to seed; ``--threads 1`` (the default)
pins every library's thread pools to one thread, ``--threads default`` leaves each library as a
user's run finds it (hetrl's plan picks its learner's threads from its profile, the peers take torch's
default: every core), and ``--threads 1 default`` runs both and names each library's best. Only the
training call is timed (hetrl: its training loop; the end-of-run checkpoint and evaluation episode
its call adds are reported beside). Replay bytes per transition: each library's replay arrays as allocated.

    pip install "torch==2.13.0" -e ".[bench,pixels]"
    python bench/pixels.py                                   # 3 seeds, 1M MinAtar / 100k Atari steps (long)
    python bench/pixels.py --minatar-steps 100000 --atari-steps 20000 --out /tmp/pixels.md
    python bench/pixels.py --quick --out /tmp/pixels.md      # smoke test
    python bench/pixels.py --jobs 2 --stop-after 120         # two runs at a time; start none after 2 h
    python bench/pixels.py --jobs 2 --resume                 # go on from the raw JSON (another day)

A run takes minutes to an hour at 1M MinAtar steps on two cores, and the whole default benchmark
longer than one sitting: ``--resume`` keeps the finished runs of the raw JSON (same step counts,
evaluation episodes and device) and runs the rest; every run records its date, machine and how many
runs shared the machine with it (``--jobs``), and the report says so beside the rates.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import statistics
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from workers import run_worker

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
LIBS = ("hetrl", "sb3", "cleanrl")
LIB_NAMES = {"hetrl": "hetrl", "sb3": "Stable-Baselines3", "cleanrl": "CleanRL-style script"}
THREAD_MODES = {"1": "1 thread", "default": "default threads"}
BEGIN, END = "<!-- pixels:begin (written by bench/pixels.py) -->", "<!-- pixels:end -->"


def threads_of(mode: str) -> int | None:
    """A thread mode's thread count: None for "default" (each library's own)."""
    return None if mode == "default" else int(mode)


def markers(device: str) -> tuple[str, str]:
    """The report's section markers: one section per device, so a GPU run keeps the CPU table."""
    if device == "cpu":
        return BEGIN, END
    return f"<!-- pixels-{device}:begin (written by bench/pixels.py --device {device}) -->", f"<!-- pixels-{device}:end -->"
EVAL_SEED = 10_000
EVAL_MAX_STEPS = 27_000  # a greedy policy that never ends an episode is cut here


@dataclass(frozen=True)
class PixelSettings:
    env_id: str
    network: str  # minatar | nature
    learning: bool  # False: speed only (no curves, no evaluation)
    lr: float = 1e-4
    batch_size: int = 32
    buffer_size: int = 100_000
    learning_starts: int = 5_000
    train_every: int = 1  # env steps per gradient update
    target_every: int = 1_000  # env steps between hard target copies
    gamma: float = 0.99
    eps_start: float = 1.0
    eps_end: float = 0.1
    eps_steps: int = 105_000  # env steps over which epsilon decays (the reference: 100k after a 5k start)
    max_grad_norm: float | None = None

    def eps_decay_steps(self, steps: int) -> int:
        """The reference's schedule, or half the run when the run is shorter than twice it."""
        return min(self.eps_steps, max(1, steps // 2))


MINATAR = PixelSettings("MinAtar/Breakout-v1", "minatar", learning=True)
SETTINGS = {
    "minatar-breakout": MINATAR,
    "minatar-spaceinvaders": replace(MINATAR, env_id="MinAtar/SpaceInvaders-v1"),
    "atari-breakout": PixelSettings("ALE/Breakout-v5", "nature", learning=False, train_every=4, eps_end=0.01,
                                    eps_steps=100_000, max_grad_norm=10.0),
}


# --- worker side ---------------------------------------------------------------------------------
def run_hetrl(s: PixelSettings, steps: int, seed: int, options: dict[str, Any] | None = None,
              threads: int | None = 1) -> dict[str, Any]:
    """``options``: further run settings (executor, actors, device, ...) over the ones made from ``s``;
    ``threads``: the learner's torch threads, or None for the plan's choice (hetrl's default)."""
    import hetrl
    from hetrl.config import make_config
    from hetrl.training import Session, greedy_policy
    from peer_runners import dqn_update_flops, learn_seconds, no_checkpoint_in_loop

    values = {
        "steps": steps, "seed": seed, "threads": threads or 0, "eval_every": 0, "eval_episodes": 1, "checkpoint_every": no_checkpoint_in_loop(steps),
        "network": s.network, "batch_size": s.batch_size, "buffer_size": s.buffer_size, "lr": s.lr, "gamma": s.gamma,
        "learning_starts": s.learning_starts, "train_every": s.train_every, "replay_ratio": 1 / s.train_every,
        "target_update_every": max(1, s.target_every // s.train_every), "tau": 1.0, "double": False, "dueling": False,
        "eps_start": s.eps_start, "eps_end": s.eps_end, "eps_decay_steps": s.eps_decay_steps(steps),
        "max_grad_norm": s.max_grad_norm, "log_every": max(1000, steps // 200), **(options or {}),
    }
    overrides = [f"{k}={v}" for k, v in values.items()]
    with tempfile.TemporaryDirectory(prefix="hetrl_pixels_") as tmp:
        session = Session.create(make_config("dqn", s.env_id, None, overrides), f"{tmp}/run")  # plans (and profiles) here
        import torch

        if threads:
            torch.set_num_threads(threads)
        start = time.perf_counter()
        result = session.train(progress=False)
        call_seconds = time.perf_counter() - start
    policy = greedy_policy(session.algo, session.executor.policy_network)
    curve = [(int(r["env_steps"]), float(r["return_mean"])) for r in result.metrics
             if r.get("return_mean") not in (None, "") and r.get("episodes")]
    # timed: the training loop (result.wall_s), as the peers' learn calls; the call also writes a checkpoint
    # (replay included) and plays one evaluation episode (a full game on Atari), reported as call_seconds
    return {"version": hetrl.__version__, "env_steps": result.env_steps, "updates": result.updates,
            "seconds": result.wall_s, "call_seconds": call_seconds, "learn_seconds": learn_seconds(result),
            "flops_per_update": dqn_update_flops(session.executor.policy_network, session.algo.spec.obs_shape, s.batch_size),
            "policy": policy, "curve": curve, "replay_bytes": result.replay_bytes, "replay_capacity": result.replay_capacity,
            "placement": result.placement, "executor": result.executor, "actors": result.actors,
            "num_envs": session.num_envs, "inference": session.inference,
            "predicted_env_steps_per_s": result.predicted_env_steps_per_s,
            "joules_per_env_step": result.joules_per_env_step, "energy": result.energy, "energy_methods": result.energy_methods}


def _minatar_extractor():
    import torch
    from stable_baselines3.common.torch_layers import BaseFeaturesExtractor
    from torch import nn

    class MinAtarExtractor(BaseFeaturesExtractor):
        """The MinAtar network up to its 128-unit layer (SB3 adds the Q-value layer)."""

        def __init__(self, space: Any) -> None:
            super().__init__(space, features_dim=128)
            c, h, w = space.shape
            self.net = nn.Sequential(nn.Conv2d(c, 16, 3, 1), nn.ReLU(), nn.Flatten(),
                                     nn.Linear(16 * (h - 2) * (w - 2), 128), nn.ReLU())

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.net(x)

    return MinAtarExtractor


def sb3_train_freq(train_every: int, n_envs: int) -> tuple[int, int]:
    """SB3's (train_freq in vector steps, gradient_steps) giving one update per ``train_every`` env
    steps with ``n_envs`` envs per vector step (the zoo's convention: fewer vector steps between
    bursts, or more updates per burst)."""
    if n_envs >= train_every:
        if n_envs % train_every:
            raise ValueError(f"n_envs {n_envs} is not a multiple of train_every {train_every}; pick n_envs that is")
        return 1, n_envs // train_every
    if train_every % n_envs:
        raise ValueError(f"train_every {train_every} is not a multiple of n_envs {n_envs}; pick n_envs that divides it")
    return train_every // n_envs, 1


def run_sb3(s: PixelSettings, steps: int, seed: int, n_envs: int = 1, vec_env: str = "dummy",
            device: str = "cpu") -> dict[str, Any]:
    """``n_envs`` envs in a DummyVecEnv (``vec_env="dummy"``, as make_atari_env and the zoo default to)
    or a SubprocVecEnv; updates per env step stay those of ``s`` (:func:`sb3_train_freq`)."""
    import numpy as np
    import stable_baselines3 as sb3
    from stable_baselines3.common.monitor import Monitor
    from stable_baselines3.common.vec_env import DummyVecEnv, SubprocVecEnv

    from hetrl.energy.discovery import discover_meters
    from hetrl.energy.measurement import EnergyMeasurement
    from hetrl.envs import make_env

    def one() -> Any:
        return Monitor(make_env(s.env_id, training=True))

    env = one() if n_envs == 1 and vec_env == "dummy" else (DummyVecEnv if vec_env == "dummy" else SubprocVecEnv)([one] * n_envs)
    train_freq, gradient_steps = sb3_train_freq(s.train_every, n_envs)
    kwargs: dict[str, Any] = {"net_arch": []}
    if s.network == "minatar":
        kwargs.update(features_extractor_class=_minatar_extractor(), normalize_images=False)
    model = sb3.DQN(
        "CnnPolicy", env, learning_rate=s.lr, buffer_size=s.buffer_size, learning_starts=s.learning_starts,
        batch_size=s.batch_size, tau=1.0, gamma=s.gamma, train_freq=(train_freq, "step"), gradient_steps=gradient_steps,
        target_update_interval=s.target_every, exploration_fraction=s.eps_decay_steps(steps) / steps,
        exploration_initial_eps=s.eps_start, exploration_final_eps=s.eps_end,
        max_grad_norm=s.max_grad_norm if s.max_grad_norm is not None else float("inf"),
        policy_kwargs=kwargs, seed=seed, device=device, verbose=0,
    )
    with discover_meters() as meters:  # the meters hetrl's session reads over its training loop
        energy = EnergyMeasurement(meters)
        start = time.perf_counter()
        energy.start()
        model.learn(total_timesteps=steps)
        seconds = time.perf_counter() - start
        joules = energy.stop()
    rb = model.replay_buffer
    stored = [rb.observations, rb.actions, rb.rewards, rb.dones, rb.timeouts]
    if not rb.optimize_memory_usage:
        stored.append(rb.next_observations)
    # each env's episodes, placed at the global step they ended (about n_envs x that env's own steps)
    venv = model.get_env()
    curve = sorted((int(t) * n_envs, float(r)) for lengths, rewards in zip(venv.env_method("get_episode_lengths"),
                                                                         venv.env_method("get_episode_rewards"))
                   for t, r in zip(np.cumsum(lengths), rewards))
    if n_envs > 1:
        venv.close()  # SubprocVecEnv's workers
    return {"version": sb3.__version__, "env_steps": model.num_timesteps, "updates": model._n_updates, "seconds": seconds,
            "policy": lambda obs: model.predict(obs, deterministic=True)[0], "curve": curve,
            "replay_bytes": sum(a.nbytes for a in stored), "replay_capacity": rb.buffer_size,
            "joules_per_env_step": joules.joules_per_step(model.num_timesteps) if model.num_timesteps else None,
            "energy": joules.describe(), "energy_methods": joules.methods, "n_envs": n_envs, "vec_env": vec_env,
            "train_freq": train_freq, "gradient_steps": gradient_steps}


def run_cleanrl(s: PixelSettings, steps: int, seed: int, device: str = "cpu") -> dict[str, Any]:
    import cleanrl_dqn_pixels as script
    import torch

    args = script.Args(
        env_id=s.env_id, seed=seed, total_timesteps=steps, network=s.network, learning_rate=s.lr,
        buffer_size=s.buffer_size, gamma=s.gamma, target_network_frequency=s.target_every, batch_size=s.batch_size,
        start_e=s.eps_start, end_e=s.eps_end, exploration_steps=s.eps_decay_steps(steps),
        learning_starts=s.learning_starts, train_frequency=s.train_every, max_grad_norm=s.max_grad_norm or 0.0,
        device=device,
    )
    start = time.perf_counter()
    net, stats = script.train(args)
    seconds = time.perf_counter() - start

    def policy(obs: Any) -> Any:
        with torch.no_grad():
            return net(torch.as_tensor(obs, device=device).float() / stats["scale"]).argmax(dim=1).cpu().numpy()

    return {"version": "bench/cleanrl_dqn_pixels.py", "env_steps": stats["env_steps"], "updates": stats["updates"],
            "seconds": seconds, "policy": policy, "curve": stats["episodes"], "replay_bytes": stats["replay_bytes"],
            "replay_capacity": stats["replay_capacity"]}


def run_on(lib: str, s: PixelSettings, steps: int, seed: int, device: str, threads: int | None = 1) -> dict[str, Any]:
    """One library's run with its networks on ``device`` (hetrl: the learner pinned there, the rest
    placed by its plan; SB3: ``device=``; the CleanRL-style script: networks and batches there).
    ``threads``: 1, or None for each library's own default (hetrl: the plan's; the peers: torch's)."""
    if lib == "hetrl":
        return run_hetrl(s, steps, seed, {"device": device} if device != "cpu" else None, threads)
    return run_sb3(s, steps, seed, device=device) if lib == "sb3" else run_cleanrl(s, steps, seed, device)


def evaluate(policy: Any, env_id: str, episodes: int) -> list[float]:
    """Raw-score returns of greedy episodes on the evaluation env (full games for Atari); episode i
    starts from EVAL_SEED + i."""
    import numpy as np

    from hetrl.envs import make_env

    env = make_env(env_id, training=False)
    returns = []
    for i in range(episodes):
        obs, _ = env.reset(seed=EVAL_SEED + i)
        total, done, t = 0.0, False, 0
        while not done and t < EVAL_MAX_STEPS:
            action = int(np.asarray(policy(np.asarray(obs)[None]))[0])
            obs, reward, terminated, truncated, _ = env.step(action)
            total, done, t = total + float(reward), terminated or truncated, t + 1
        returns.append(total)
    env.close()
    return returns


def worker(args: argparse.Namespace) -> dict[str, Any]:
    import torch

    threads = threads_of(args.thread_mode)
    if threads:
        torch.set_num_threads(threads)
    lib, workload = args.worker
    s = SETTINGS[workload]
    out = run_on(lib, s, args.steps, args.seed, args.device, threads)
    torch_threads = torch.get_num_threads()  # after the run: hetrl's session sets its learner's
    if out["env_steps"] < args.steps:  # hetrl's session ends early and returns on SIGTERM: not a finished run
        raise RuntimeError(f"{lib} stopped at {out['env_steps']:,} of {args.steps:,} env steps (stopped by a signal?)")
    policy = out.pop("policy")
    returns = evaluate(policy, s.env_id, args.eval_episodes) if s.learning else []
    return {"lib": lib, "workload": workload, "seed": args.seed, "threads": args.thread_mode,
            "torch_threads": torch_threads, **out, "eval_returns": returns,
            "eval_mean": statistics.fmean(returns) if returns else None}


# --- parent side ---------------------------------------------------------------------------------
def run_job(job: list[str], args: argparse.Namespace, script: Path | None = None, thread_mode: str = "1") -> dict[str, Any]:
    """Run ``SCRIPT --worker JOB...`` (this file unless named) in a fresh interpreter; returns its
    JSON, or raises RuntimeError with the tail of its stderr. ``thread_mode``: "1" pins every thread
    pool to one thread; "default" leaves them as a user's run finds them."""
    return run_worker(script or Path(__file__).resolve(), worker_argv(job, args, thread_mode), threads_of(thread_mode))


def worker_argv(job: list[str], args: argparse.Namespace, thread_mode: str = "1") -> list[str]:
    """What a worker is asked after ``--worker``: the job, then the options every bench script's
    worker parses (this file's and bench/pixels_scale.py's)."""
    return [*job, "--eval-episodes", str(args.eval_episodes), "--device", args.device, "--thread-mode", thread_mode]


Job = tuple[str, str, int, str]  # library, workload, seed, thread mode ("1" or "default")


def job_list(args: argparse.Namespace) -> list[Job]:
    """Every run in the order they run: seed by seed, the library order rotating from seed to seed,
    each thread mode of a (library, workload, seed) one after the other."""
    jobs = []
    for k, seed in enumerate(args.seeds):
        order = args.libs[k % len(args.libs):] + args.libs[:k % len(args.libs)]
        jobs += [(lib, workload, seed, mode) for workload in args.workloads for lib in order for mode in args.threads]
    return jobs


def saved_seconds(saved: dict[str, Any]) -> float:
    """The time a saved benchmark took (older JSONs kept none: the sum of their runs' calls)."""
    return saved.get("seconds", sum(r.get("call_seconds", r["seconds"]) for r in saved["runs"]))


def mode_of(run: dict[str, Any]) -> str:
    return run.get("threads", "1")  # runs saved before thread modes were pinned to one thread


def mode_label(run: dict[str, Any]) -> str:
    """A run's thread mode in words, with the torch threads a default-threads run found."""
    mode = mode_of(run)
    return THREAD_MODES[mode] + (f" (torch {run['torch_threads']})" if mode == "default" and "torch_threads" in run else "")


def pending(jobs: list[Job], runs: list[dict[str, Any]]) -> list[Job]:
    """The jobs no kept run has done."""
    done = {(r["lib"], r["workload"], r["seed"], mode_of(r)) for r in runs}
    return [job for job in jobs if job not in done]


def resume_mismatch(saved: argparse.Namespace, now: argparse.Namespace, saved_device: str) -> str:
    """What differs between a saved benchmark's settings and this one's, in words ('' when nothing
    that changes a run's result does)."""
    if saved.quick:
        saved.minatar_steps, saved.atari_steps, saved.eval_episodes = 6_000, 6_000, 2
    differ = [f"{flag} {getattr(saved, key)}" for key, flag in (("minatar_steps", "--minatar-steps"),
                                                               ("atari_steps", "--atari-steps"),
                                                               ("eval_episodes", "--eval-episodes"))
              if getattr(saved, key) != getattr(now, key)]
    if saved_device != now.device:
        differ.append(f"--device {saved_device}")
    return ", ".join(differ)


def _cpu_model() -> str:
    from hetrl.hardware import read_cpu

    return read_cpu().model


def steps_of(workload: str, args: argparse.Namespace) -> int:
    return args.atari_steps if workload.startswith("atari") else args.minatar_steps


def prepare(args: argparse.Namespace) -> None:
    """hetrl's plan=auto profiles a workload once and caches it: do that here, untimed, so that every
    timed hetrl run finds what a user's second run finds."""
    for workload in args.workloads:
        s = SETTINGS[workload]
        print(f"profiling hetrl on {s.env_id} (untimed, cached for the runs) ...", flush=True)
        run_job(["hetrl", workload, "--steps", str(s.learning_starts + 2 * s.batch_size), "--seed", "0"], args)


def _spread(values: list[float], digits: int = 0) -> str:
    fmt = f"{{:,.{digits}f}}"
    if len(values) == 1:
        return fmt.format(values[0])
    return f"{fmt.format(statistics.median(values))} [{fmt.format(min(values))}–{fmt.format(max(values))}]"


def table(runs: list[dict[str, Any]], workload: str, libs: list[str], episodes: int) -> list[str]:
    """One workload's table: a row per library and thread mode, hetrl's rate over each library's at
    the same thread mode; with both modes, each library at its best mode below it."""
    s = SETTINGS[workload]
    head = ["library", "env steps/s median [min–max]", "updates/s", "hetrl ÷ library (env steps/s)", "wall time (s)",
            "replay bytes per transition"]
    if s.learning:
        head += [f"final greedy return per seed ({episodes} episodes)", "mean ± std over seeds"]
    lines = [f"### {s.env_id}" + ("" if s.learning else " (speed only)"), "",
             "| " + " | ".join(head) + " |", "|---|" + "---:|" * (len(head) - 1)]
    here = [r for r in runs if r["workload"] == workload]
    modes = [m for m in THREAD_MODES if any(mode_of(r) == m for r in here)]
    group = {(lib, mode): mine for mode in modes for lib in libs
             if (mine := [r for r in here if r["lib"] == lib and mode_of(r) == mode])}
    rate = {key: [r["env_steps"] / r["seconds"] for r in mine] for key, mine in group.items()}
    for (lib, mode), mine in group.items():
        hetrl = rate.get(("hetrl", mode))
        ratio = f"{statistics.median(hetrl) / statistics.median(rate[lib, mode]):.2f}×" if hetrl else "–"
        name = LIB_NAMES[lib]
        if len(modes) > 1 or mode != "1":
            name += f", {mode_label(mine[0])}"
        row = [name, _spread(rate[lib, mode]), _spread([r["updates"] / r["seconds"] for r in mine]), ratio,
               _spread([r["seconds"] for r in mine]), f"{mine[0]['replay_bytes'] / mine[0]['replay_capacity']:,.0f}"]
        if s.learning:
            means = [r["eval_mean"] for r in mine]
            row += [", ".join(f"{m:.1f}" for m in means),
                    f"{statistics.fmean(means):.1f} ± {statistics.pstdev(means):.1f}"]
        lines.append("| " + " | ".join(row) + " |")
    best = {lib: max(((statistics.median(v), m) for (l, m), v in rate.items() if l == lib)) for lib in libs
            if any(l == lib for l, _ in rate)}
    peers = [lib for lib in best if lib != "hetrl"]
    if len(modes) > 1 and "hetrl" in best and peers:
        top = max(peers, key=lambda lib: best[lib][0])
        lines += ["", f"Each library at its best thread mode: hetrl {best['hetrl'][0]:,.0f} env steps/s "
                      f"({THREAD_MODES[best['hetrl'][1]]}) ÷ the fastest peer, {LIB_NAMES[top]}, {best[top][0]:,.0f} "
                      f"({THREAD_MODES[best[top][1]]}): **{best['hetrl'][0] / best[top][0]:.2f}×**."]
    for mode in modes:
        hetrl_runs = [r for r in here if r["lib"] == "hetrl" and mode_of(r) == mode]
        if hetrl_runs:
            p = hetrl_runs[0]["placement"]
            extra = statistics.median(r["call_seconds"] - r["seconds"] for r in hetrl_runs)
            at = f" at {THREAD_MODES[mode]}" if len(modes) > 1 else ""
            lines += ["", f"hetrl's plan{at}: executor {hetrl_runs[0]['executor']}; "
                          + ", ".join(f"{k} {p[k]}" for k in ("EnvStep", "Act", "ReplaySample", "Learn") if k in p)
                          + f". hetrl's rates are over its training loop; its call also wrote the final checkpoint "
                          f"(replay included) and played one evaluation episode: {extra:,.1f} s more (median)."]
    return lines + [""]


def plot_curves(runs: list[dict[str, Any]], workloads: list[str], libs: list[str], path: Path) -> None:
    """Training-episode returns (exploring, smoothed over 5% of the run) per library, one panel per game."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    games = [w for w in workloads if SETTINGS[w].learning and any(r["workload"] == w for r in runs)]
    if not games:
        return
    fig, axes = plt.subplots(1, len(games), figsize=(5.2 * len(games), 4), squeeze=False)
    colors = {"hetrl": "#d62728", "sb3": "#1f77b4", "cleanrl": "#2ca02c"}
    for ax, w in zip(axes[0], games):
        for lib in libs:
            for i, r in enumerate(r for r in runs if r["lib"] == lib and r["workload"] == w):
                if not r["curve"]:
                    continue
                t, ret = (np.array(v, dtype=float) for v in zip(*r["curve"]))
                width = max(1.0, 0.05 * t[-1])
                grid = np.linspace(t[0], t[-1], 100)
                smooth = [ret[(t > g - width) & (t <= g)].mean() if ((t > g - width) & (t <= g)).any() else np.nan for g in grid]
                ax.plot(grid, smooth, color=colors[lib], alpha=0.8, lw=1.2, label=LIB_NAMES[lib] if i == 0 else None)
        ax.set_title(SETTINGS[w].env_id, fontsize=10)
        ax.set_xlabel("env steps")
        ax.set_ylabel("training episode return (exploring)")
        ax.legend(fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def measured_note(runs: list[dict[str, Any]]) -> str:
    """Where and when the runs were measured, from what each run recorded (a resumed benchmark's runs
    may span days, machines and ``--jobs`` settings); runs saved before runs recorded it say nothing."""
    stamped = [r["measured"] for r in runs if r.get("measured")]
    if not stamped:
        return ""
    dates = sorted({m["date"] for m in stamped})
    machines = sorted({f"{m['machine']}, {m['cores']} cores" for m in stamped})
    when = dates[0] if len(dates) == 1 else f"{dates[0]} to {dates[-1]}"
    note = f"Runs measured {when} on {'; '.join(machines)}."
    shared = sorted({m["jobs"] for m in stamped})
    if shared != [1]:
        counts = ", ".join(f"{sum(m['jobs'] == j for m in stamped)} with {j} at a time" for j in shared)
        note += (f" Runs side by side ({counts}): each rate was measured beside other runs on the same cores, so "
                 "the rates compare libraries run alike, not a quiet machine's speed.")
    return note


def report(runs: list[dict[str, Any]], failures: list[str], args: argparse.Namespace, out: Path, seconds: float) -> str:
    png = out.with_name(out.stem + "_pixels.png")
    plot_curves(runs, args.workloads, args.libs, png)
    quick = " (--quick: a smoke test, not a measurement)" if args.quick else ""
    begin, end = markers(args.device)
    where = "" if args.device == "cpu" else f", every library's networks on {args.device} ({gpu_name()})"
    first = next((r["measured"] for r in runs if r.get("measured")), None)
    date, machine, cores = ((first["date"], first["machine"], first["cores"]) if first
                            else (str(datetime.date.today()), _cpu_model(), os.cpu_count()))
    lines = [begin, f"## DQN on pixels: hetrl, Stable-Baselines3 and a CleanRL-style script"
                    f"{'' if args.device == 'cpu' else ' on ' + args.device}{quick}", "",
             f"`python bench/pixels.py {' '.join(args.argv)}` on {date}, {machine}, "
             f"{cores} cores{where}, {' and '.join(THREAD_MODES[m] for m in args.threads)} per library, Python {platform.python_version()}; seeds "
             f"{', '.join(map(str, args.seeds))}; {args.minatar_steps:,} MinAtar and {args.atari_steps:,} Atari env steps "
             f"per run; {seconds / 60:.0f} min in all. Settings: `SETTINGS` in bench/pixels.py (the same for every "
             "library); every library plays the env `hetrl.envs.make_env` builds.", ""]
    note = measured_note(runs)
    if note:
        lines += [note, ""]
    if any(SETTINGS[w].learning for w in args.workloads):
        lines += [f"![training returns]({os.path.relpath(png, out.parent)})", ""]
    for w in args.workloads:
        lines += table(runs, w, args.libs, args.eval_episodes)
    if failures:
        lines += ["**Not measured:**", ""] + [f"- {f}" for f in failures] + [""]
    lines.append(end)
    return "\n".join(lines) + "\n"


def gpu_name() -> str:
    import torch

    return torch.cuda.get_device_name(0) if torch.cuda.is_available() else "no CUDA device seen"


def write_report(text: str, out: Path, device: str = "cpu") -> None:
    begin, end = markers(device)
    old = out.read_text() if out.exists() else ""
    if begin in old and end in old:
        text = old[:old.index(begin)] + text.rstrip("\n") + old[old.index(end) + len(end):]
    elif old:
        text = old.rstrip("\n") + "\n\n" + text
    out.write_text(text)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--libs", nargs="+", default=list(LIBS), choices=LIBS)
    parser.add_argument("--workloads", nargs="+", default=list(SETTINGS), choices=list(SETTINGS))
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--minatar-steps", type=int, default=1_000_000)
    parser.add_argument("--atari-steps", type=int, default=100_000)
    parser.add_argument("--eval-episodes", type=int, default=10)
    parser.add_argument("--quick", action="store_true", help="smoke test: 6k MinAtar / 6k Atari steps, one seed")
    parser.add_argument("--device", default="cpu", help="where every library's networks run: cpu (default) or cuda "
                        "(a lent GPU machine; its own section of the report)")
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "benchmarks.md")
    parser.add_argument("--from-json", type=Path, help="write the report from the runs a (possibly cut short) "
                        "benchmark saved in its _pixels.json, measuring nothing")
    parser.add_argument("--threads", nargs="+", default=["1"], choices=list(THREAD_MODES),
                        help="thread modes to run each library in: 1 (every thread pool pinned to one thread; the "
                        "default) and/or default (each library as a user's run finds it: hetrl's plan picks its "
                        "learner's threads, the peers take torch's default, every core)")
    parser.add_argument("--jobs", type=int, default=1, help="runs at a time (default 1: each run alone on the machine; "
                        "more finish sooner, and the report says the rates were measured side by side)")
    parser.add_argument("--resume", action="store_true", help="keep the finished runs of the raw JSON (same step counts, "
                        "evaluation episodes and device) and run the rest")
    parser.add_argument("--stop-after", type=float, metavar="MINUTES", help="start no run after this many minutes; "
                        "finish those running, then write the report of what is done (go on later with --resume)")
    parser.add_argument("--worker", nargs=2, metavar=("LIB", "WORKLOAD"), help=argparse.SUPPRESS)
    parser.add_argument("--steps", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--seed", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--thread-mode", default="1", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        print(json.dumps(worker(args)))
        return 0
    args.argv = sys.argv[1:]
    if args.from_json:
        saved = json.loads(args.from_json.read_text())
        runs, failures = saved["runs"], saved["failures"]
        out = args.out
        args = parser.parse_args(saved["args"])
        args.out, args.argv = out, saved["args"] + ([] if saved.get("complete") else ["(cut short: the runs it finished)"])
        args.seeds = sorted({r["seed"] for r in runs})
        args.workloads = [w for w in args.workloads if any(r["workload"] == w for r in runs)]
        args.device = saved.get("device", args.device)
        write_report(report(runs, failures, args, args.out, saved_seconds(saved)), args.out, args.device)
        print(f"wrote {args.out}")
        return 0
    if args.quick:
        args.minatar_steps, args.atari_steps, args.seeds, args.eval_episodes = 6_000, 6_000, args.seeds[:1], 2
    if args.jobs < 1:
        parser.error(f"--jobs takes a count of runs at a time, 1 or more (got {args.jobs})")
    if args.device != "cpu":
        import torch

        if not torch.cuda.is_available():
            print(f"pixels.py: --device {args.device} needs CUDA, and torch.cuda.is_available() is False here; "
                  "leave --device out for the CPU table", file=sys.stderr)
            return 2
    raw = args.out.with_name(args.out.stem + ("_pixels.json" if args.device == "cpu" else f"_pixels_{args.device}.json"))
    runs: list[dict[str, Any]] = []
    earlier_s = 0.0
    if args.resume and raw.exists():
        saved = json.loads(raw.read_text())
        mismatch = resume_mismatch(parser.parse_args(saved["args"]), args, saved.get("device", "cpu"))
        if mismatch:
            print(f"pixels.py: --resume: {raw} was measured with {mismatch}; run with the same settings, or move "
                  "that file away to start afresh", file=sys.stderr)
            return 2
        runs = saved["runs"]
        earlier_s = saved_seconds(saved)
        print(f"resuming: {len(runs)} runs kept from {raw}", flush=True)
    jobs = pending(job_list(args), runs)
    start = time.perf_counter()
    if any(job[0] == "hetrl" for job in jobs):
        prepare(args)
    failures: list[str] = []
    skipped: list[str] = []
    lock = threading.Lock()
    stamp = {"date": str(datetime.date.today()), "machine": _cpu_model(), "cores": os.cpu_count(), "jobs": args.jobs}

    def save(complete: bool) -> None:
        raw.write_text(json.dumps({"complete": complete, "args": args.argv, "device": args.device, "runs": runs,
                                   "failures": failures, "seconds": earlier_s + time.perf_counter() - start}))

    def one(job: Job) -> None:
        lib, workload, seed, mode = job
        steps = steps_of(workload, args)
        name = f"{LIB_NAMES[lib]} {workload} seed {seed}" + (f", {THREAD_MODES[mode]}" if len(args.threads) > 1 else "")
        if args.stop_after is not None and time.perf_counter() - start > 60 * args.stop_after:
            with lock:
                skipped.append(name)
            return
        print(f"{name} ({steps:,} env steps) started", flush=True)
        try:
            r = run_job([lib, workload, "--steps", str(steps), "--seed", str(seed)], args, thread_mode=mode)
        except RuntimeError as exc:
            print(f"{name} FAILED:\n{exc}", flush=True)
            with lock:
                failures.append(f"{name}: {str(exc).strip().splitlines()[-1]}")
            return
        r["measured"] = stamp
        with lock:
            runs.append(r)
            save(False)
        ev = f", greedy {r['eval_mean']:.1f}" if r["eval_mean"] is not None else ""
        print(f"{name}: {r['env_steps'] / r['seconds']:,.0f} env steps/s, {r['updates'] / r['seconds']:,.0f} updates/s{ev}",
              flush=True)

    with ThreadPoolExecutor(max_workers=args.jobs) as pool:
        list(pool.map(one, jobs))
    runs.sort(key=lambda r: (r["workload"], r["seed"], LIBS.index(r["lib"])))
    complete = not failures and not skipped
    save(complete)
    if skipped:
        print(f"not started (--stop-after {args.stop_after:g} min): {len(skipped)} runs; go on with --resume", flush=True)
        args.argv = [*args.argv, "(cut short: the runs it finished)"]
    write_report(report(runs, failures, args, args.out, earlier_s + time.perf_counter() - start), args.out, args.device)
    print(f"wrote {args.out}")
    return 2 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
