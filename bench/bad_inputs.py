"""Bad inputs, tried as a demanding user would (issue 24): the CLI, the Python API, config files,
plan files, checkpoints and tabular datasets, each case in a subprocess of its own.

    python bench/bad_inputs.py                     # every case, 2 at a time; a markdown table
    python bench/bad_inputs.py --only seed lr      # the cases whose id contains one of these
    python bench/bad_inputs.py --list              # the cases, without running them

Each case is classified from its exit status and stderr:

- ``clean``: exit 2 with one ``hetrl...: error:`` line that names the problem: it contains one of
  the words the case lists (the setting's key, the file, the flag);
- ``unclear``: exit 2, but the error line names none of them, or there are several (hand-check
  these: a message may name the fix in other words);
- ``traceback``: a Python traceback, or an exit status other than 0 and 2;
- ``accepted``: exit 0: the bad input ran (or returned) without an error;
- ``timeout``: still running after ``--timeout`` seconds.

An API case runs its code in a subprocess too (``--api CODE``), where a :class:`HetrlError` is
printed as the CLI prints it (``hetrl: error: ...``, exit 2) and any other exception as a
traceback (exit 1). Every CLI run is cheap (200 env steps, ``--plan rule``, 16x16 networks, no
progress bar). Fixtures (a DQN and a DDPG run, a tabular dataset) are made once, first; a case
that damages one works on its own copy. Cases of source ``fs`` (run directories and outputs on
files, directories and missing folders) are reported like the rest.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import traceback
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
OUTCOMES = ("clean", "unclear", "traceback", "accepted", "timeout")
FAST = ("--set", "hidden=16,16", "--set", "learning_starts=100", "--set", "batch_size=16", "--set", "eval_episodes=2",
        "--set", "log_every=100", "--set", "eval_every=0")
API_PRELUDE = """
import math, pathlib, numpy as np, hetrl
FAST = dict(progress=False, plan="rule", hidden=(16, 16), learning_starts=100, batch_size=16, eval_episodes=2,
            log_every=100, eval_every=0)
RUN = "{dir}/run"
"""

Setup = Callable[[Path, "Fixtures"], None]
PWNED = Path(tempfile.gettempdir()) / "hetrl_bad_inputs_pwned"  # what the malicious checkpoint would write if loaded


@dataclass(frozen=True)
class Fixtures:
    dqn: Path  # a finished DQN run on CartPole-v1 (300 steps: step_100, 200 and 300.pt, the newest's replay, best.pt)
    ddpg: Path  # a finished DDPG run on Pendulum-v1 (200 steps)
    data: Path  # a FrozenLake-v1 tabular dataset (2,000 transitions)


@dataclass(frozen=True)
class Case:
    id: str
    source: str  # cli, api, config, plan, checkpoint, dataset, fs
    names: tuple[str, ...]  # words a clear message contains (any one): the key, the flag, the file
    argv: tuple[str, ...] = ()  # hetrl's arguments; placeholders {dir}, {dqn}, {ddpg}, {data}
    code: str = ""  # or Python run against the API (API_PRELUDE first)
    setup: Setup | None = None  # makes the case's files in its directory, before it runs

    def command(self, fixtures: Fixtures, where: Path) -> list[str]:
        if self.code:
            return [sys.executable, __file__, "--api", _fill(API_PRELUDE + self.code, fixtures, where)]
        return [sys.executable, "-m", "hetrl", *(_fill(a, fixtures, where) for a in self.argv)]


def _fill(text: str, fixtures: Fixtures, where: Path | str) -> str:
    for key, value in (("{dir}", where), ("{dqn}", fixtures.dqn), ("{ddpg}", fixtures.ddpg), ("{data}", fixtures.data)):
        text = text.replace(key, str(value))
    return text


# --- case builders -----------------------------------------------------------------------------
def train(*extra: str, algo: str = "dqn", env: str = "", steps: str = "200") -> tuple[str, ...]:
    """A cheap `hetrl train` with the case's arguments last (a later --set wins)."""
    env = env or ("CartPole-v1" if algo in ("dqn", "exit-dqn") else "Pendulum-v1")
    return ("train", algo, env, "--steps", steps, "--no-progress", "--plan", "rule", "--run-dir", "{dir}/run", *FAST, *extra)


def sets(*items: str) -> tuple[str, ...]:
    return tuple(x for item in items for x in ("--set", item))


def copy_run(which: str = "dqn") -> Setup:
    def setup(where: Path, fixtures: Fixtures) -> None:
        shutil.copytree(getattr(fixtures, which), where / "run")
    return setup


def then(*steps: Setup) -> Setup:
    def setup(where: Path, fixtures: Fixtures) -> None:
        for step in steps:
            step(where, fixtures)
    return setup


def write(name: str, content: str | bytes) -> Setup:
    def setup(where: Path, fixtures: Fixtures) -> None:
        path = where / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content if isinstance(content, bytes) else content.encode())
    return setup


def edit_config(change: Callable[[dict], None]) -> Setup:
    """Edit the copied run's config.json."""
    def setup(where: Path, fixtures: Fixtures) -> None:
        path = where / "run" / "config.json"
        data = json.loads(path.read_text())
        change(data)
        path.write_text(json.dumps(data))
    return setup


def newest(where: Path) -> Path:
    return sorted((where / "run" / "checkpoints").glob("step_*.pt"))[-1]


def damage_newest(how: Callable[[bytes], bytes]) -> Setup:
    def setup(where: Path, fixtures: Fixtures) -> None:
        path = newest(where)
        path.write_bytes(how(path.read_bytes()))
    return setup


def torch_file(name: str, make: Callable[[], object]) -> Setup:
    def setup(where: Path, fixtures: Fixtures) -> None:
        import torch

        torch.save(make(), where / name)
    return setup


class Boom:
    """A pickle that would run a command when loaded without weights_only."""

    def __reduce__(self):
        return (os.system, (f"echo pwned > {PWNED}",))


def plan_file(change: Callable[[dict], None] | None = None, text: str | None = None) -> Setup:
    """plan.json: a valid rule plan for dqn on CartPole-v1 (``change`` edits it), or ``text``."""
    def setup(where: Path, fixtures: Fixtures) -> None:
        if text is not None:
            (where / "plan.json").write_text(text)
            return
        data = json.loads((fixtures.dqn / "plan.json").read_text())
        if change:
            change(data)
        (where / "plan.json").write_text(json.dumps(data))
    return setup


def dataset_file(**changes: object) -> Setup:
    """The fixture dataset with arrays replaced (None: removed)."""
    def setup(where: Path, fixtures: Fixtures) -> None:
        import numpy as np

        with np.load(fixtures.data, allow_pickle=False) as raw:
            arrays = {k: raw[k] for k in raw.files}
        for key, value in changes.items():
            if value is None:
                arrays.pop(key, None)
            else:
                arrays[key] = value(arrays) if callable(value) else value
        np.savez(where / "d.npz", **arrays)
    return setup


def tabular(*extra: str, env: str = "FrozenLake-v1", data: str = "{data}") -> tuple[str, ...]:
    return ("tabular", "train", env, "--dataset", data, "--epochs", "1", "--eval-episodes", "10", *extra)


# --- the cases ---------------------------------------------------------------------------------
def cases() -> list[Case]:
    import numpy as np

    c: list[Case] = []

    def cli(id: str, argv: tuple[str, ...], *names: str, setup: Setup | None = None, source: str = "cli") -> None:
        c.append(Case(id, source, names, argv=argv, setup=setup))

    def api(id: str, code: str, *names: str, setup: Setup | None = None) -> None:
        c.append(Case(id, "api", names, code=code, setup=setup))

    def setting(id: str, item: str, *names: str, algo: str = "dqn", extra: tuple[str, ...] = ()) -> None:
        cli(id, train(*sets(item), *extra, algo=algo), *(names or (item.partition("=")[0],)))

    # settings through the CLI (--set and flags)
    for item in ("lr=nan", "lr=inf", "lr=-1", "lr=0", "lr=abc", "gamma=0", "gamma=1.5", "gamma=nan", "buffer_size=1e12",
                 "buffer_size=0", "buffer_size=-5", "buffer_size=1.5", "batch_size=0", "hidden=0,64", "hidden=-4",
                 "hidden=abc", "max_grad_norm=0", "max_grad_norm=-1", "max_grad_norm=nan", "replay_ratio=nan",
                 "replay_ratio=-1", "replay_ratio=inf", "alpha=-1", "beta0=-3", "beta0=2", "train_every=0", "n_step=0",
                 "target_update_every=0", "tau=0", "tau=2", "eps_decay_steps=-1", "learning_starts=-5", "priority_eps=0",
                 "beta_anneal_steps=-1", "steps=0", "steps=1.5", "log_every=0", "eval_episodes=0", "checkpoint_every=0",
                 "eval_every=-1", "keep_checkpoints=-1", "executor=foo", "inference=centre", "checkpoint_replay=some",
                 "wandb_mode=bad", "actors=-1", "threads=-1", "weight_sync_every=0", "prefetch=maybe",
                 "stop_at_return=nan", "network=resnet", "num_envs=-1", "frame_skip=0", "repeat_action_probability=1.5",
                 "double=2", "dueling=yes please", "seed=-1", "seed=abc", "device=gpu0", "device=cuda:7"):
        setting(f"set {item}", item)
    setting("set hidden= (empty)", "hidden=", "hidden")
    setting("set buffer_size<batch_size", "buffer_size=8", "batch_size", "buffer_size")
    setting("set eps_end>eps_start", "eps_end=0.5", "eps_end", "eps_start", extra=sets("eps_start=0.1"))
    setting("set eps_start=5", "eps_start=5", "eps_start")
    setting("set eps_end=-2", "eps_end=-2", "eps_end")
    setting("set num_envs>steps", "num_envs=100000", "num_envs", extra=("--steps", "2000"))
    setting("set network=nomodule:f", "network=nomodule_hetrl:f", "network", "nomodule_hetrl")
    setting("set network=math:sqrt", "network=math:sqrt", "network", "math:sqrt")
    setting("set env_kwargs={bad", "env_kwargs={bad", "env_kwargs")
    setting("set env_kwargs=[1,2]", "env_kwargs=[1,2]", "env_kwargs")
    setting("set env_kwargs unknown kw", 'env_kwargs={"no_such_kw": 1}', "env_kwargs", "no_such_kw")
    setting("set wrappers=nomodule:W", "wrappers=nomodule_hetrl:W", "wrappers", "nomodule_hetrl")
    setting("set wrappers=math:pi", "wrappers=math:pi", "wrappers", "math:pi")
    setting("set unknown key", "no_such_key=1", "no_such_key")
    setting("set agent.unknown", "agent.no_such_key=1", "no_such_key")
    setting("set without =", "lr", "key=value")
    setting("set algo=", "algo=ddpg", "algo")
    setting("set actors=1000 local", "actors=1000", "actors", extra=("--executor", "local"))
    setting("set threads=1000", "threads=1000", "threads")
    for item in ("action_noise=-1", "target_noise=-1", "policy_delay=0", "tau=0", "target_noise_clip=-1", "lr=nan",
                 "gamma=nan", "max_grad_norm=-1"):
        setting(f"td3 {item}", item, algo="td3")
    for item in ("action_noise=nan", "policy_delay=-1"):
        setting(f"ddpg {item}", item, algo="ddpg")
    for item in ("ent_coef=abc", "ent_coef=-1", "ent_coef=auto_0", "ent_coef=nan", "n_step=3", "target_entropy=nan",
                 "policy_delay=0", "tau=nan"):
        setting(f"sac {item}", item, algo="sac")
    for item in ("exit_schedule=later", "exit_threshold=2", "exits=-1", "exit_loss_weight=nan", "dueling=true"):
        setting(f"exit-dqn {item}", item, algo="exit-dqn")
    cli("flag --seed -1", train("--seed", "-1"), "seed")
    cli("flag --seed 2**70", train("--seed", str(2**70)), "seed")
    cli("flag --seed abc", train("--seed", "abc"), "seed")
    cli("flag --steps -5", train(steps="-5"), "steps")
    cli("flag --steps abc", train(steps="abc"), "steps")
    cli("flag --steps 0", train(steps="0"), "steps")
    cli("flag --actors -2", train("--executor", "local", "--actors", "-2"), "actors")
    cli("flag --stop-at-return nan", train("--stop-at-return", "nan"), "stop_at_return", "stop-at-return")
    cli("flag --executor bogus", train("--executor", "bogus"), "executor")
    cli("flag --device cuda:7", train("--device", "cuda:7"), "cuda:7")
    cli("unknown algo", ("train", "dqnn", "CartPole-v1", "--no-progress"), "dqnn")
    cli("unknown env", ("train", "dqn", "CartPol-v1", "--no-progress"), "CartPol-v1")
    cli("dqn on Box actions", train(env="Pendulum-v1"), "Pendulum-v1", "discrete")
    cli("ddpg on Discrete actions", train(algo="ddpg", env="CartPole-v1"), "CartPole-v1", "continuous")
    cli("sac on pixels", train(algo="sac", env="hetrl/Bytes-v0"), "image", "hetrl/Bytes-v0")
    cli("env module:factory missing", train(env="nomodule_hetrl:make"), "nomodule_hetrl")
    cli("--plan missing", train("--plan", "{dir}/nope.json"), "nope.json")
    cli("--config missing", train("--config", "{dir}/nope.json"), "nope.json")

    # other commands
    cli("eval --episodes 0", ("eval", "{dqn}", "--episodes", "0"), "episodes")
    cli("eval --episodes -1", ("eval", "{dqn}", "--episodes", "-1"), "episodes")
    cli("eval --episodes abc", ("eval", "{dqn}", "--episodes", "abc"), "episodes")
    cli("eval --seed -1", ("eval", "{dqn}", "--episodes", "2", "--seed", "-1"), "seed")
    cli("eval --seed 2**70", ("eval", "{dqn}", "--episodes", "2", "--seed", str(2**70)), "seed")
    cli("eval --checkpoint nonsense", ("eval", "{dqn}", "--checkpoint", "nonsense"), "nonsense")
    cli("eval no run", ("eval", "{dir}/nope"), "nope")
    cli("eval a file", ("eval", "{dir}/f.txt"), "f.txt", setup=write("f.txt", "x"))
    cli("eval best without best.pt", ("eval", "{dir}/run", "--checkpoint", "best"), "best",
        setup=then(copy_run("ddpg"), lambda w, f: (w / "run/checkpoints/best.pt").unlink()))
    cli("resume --steps below", ("resume", "{dqn}", "--steps", "100", "--no-progress"), "steps")
    cli("resume --steps -1", ("resume", "{dqn}", "--steps", "-1", "--no-progress"), "steps")
    cli("resume finished run", ("resume", "{dqn}", "--no-progress"), "steps")
    cli("resume no run", ("resume", "{dir}/nope"), "nope")
    cli("resume not a run", ("resume", "{dir}"), "config.json")
    cli("export --format tflite", ("export", "{dqn}", "--format", "tflite"), "format")
    cli("export no run", ("export", "{dir}/nope"), "nope")
    cli("plan --profile missing", ("plan", "dqn", "CartPole-v1", "--profile", "{dir}/p.json", "--out", "{dir}/plan.json"),
        "p.json")
    cli("plan --profile garbage", ("plan", "dqn", "CartPole-v1", "--profile", "{dir}/p.json", "--out", "{dir}/plan.json"),
        "p.json", setup=write("p.json", "{oops"))
    cli("plan --profile a plan", ("plan", "dqn", "CartPole-v1", "--profile", "{dqn}/plan.json", "--out", "{dir}/plan.json"),
        "plan.json", "profile")
    cli("plan --set lr=nan", ("plan", "dqn", "CartPole-v1", "--set", "lr=nan", "--profile", "{dir}/p.json"), "lr",
        setup=write("p.json", "{}"))
    cli("plan --objective speed", ("plan", "dqn", "CartPole-v1", "--objective", "speed"), "objective")
    cli("plan --actors -1", ("plan", "dqn", "CartPole-v1", "--actors", "-1", "--profile", "{dir}/p.json"), "actors",
        setup=write("p.json", "{}"))
    cli("profile --set batch_size=0", ("profile", "dqn", "CartPole-v1", "--set", "batch_size=0", "--no-progress"),
        "batch_size")
    cli("profile --device tpu", ("profile", "dqn", "CartPole-v1", "--device", "tpu", "--no-progress"), "tpu")
    cli("sweep --actors a..b", ("sweep", "dqn", "CartPole-v1", "--actors", "a..b", "--out", "{dir}/s"), "actors")
    cli("sweep --actors 3..1", ("sweep", "dqn", "CartPole-v1", "--actors", "3..1", "--out", "{dir}/s"), "actors")
    cli("sweep --actors 0", ("sweep", "dqn", "CartPole-v1", "--actors", "0", "--out", "{dir}/s"), "actors")
    cli("exits sweep on dqn", ("exits", "sweep", "{dqn}", "--episodes", "2", "--no-timing", "--no-store"), "exit")
    cli("exits sweep --thresholds abc", ("exits", "sweep", "{dqn}", "--thresholds", "abc"), "thresholds")
    cli("tabular collect CartPole", ("tabular", "collect", "CartPole-v1", "--transitions", "100", "--out", "{dir}/d.npz"),
        "CartPole-v1")
    cli("tabular collect --transitions 0", ("tabular", "collect", "FrozenLake-v1", "--transitions", "0"), "transitions")
    cli("tabular collect --epsilon 2", ("tabular", "collect", "FrozenLake-v1", "--transitions", "100", "--epsilon", "2",
                                        "--policy", "epsilon-greedy", "--out", "{dir}/d.npz"), "epsilon")
    cli("tabular collect --env-arg x", ("tabular", "collect", "FrozenLake-v1", "--transitions", "100", "--env-arg", "x",
                                        "--out", "{dir}/d.npz"), "env-arg")
    cli("tabular collect --env-arg unknown", ("tabular", "collect", "FrozenLake-v1", "--transitions", "100", "--env-arg",
                                              "no_such_kw=1", "--out", "{dir}/d.npz"), "no_such_kw")
    cli("tabular collect --seed -1", ("tabular", "collect", "FrozenLake-v1", "--transitions", "100", "--seed", "-1",
                                      "--out", "{dir}/d.npz"), "seed")
    for flag, value in (("--units", "0"), ("--epochs", "0"), ("--alpha", "-1"), ("--alpha", "nan"), ("--gamma", "2"),
                        ("--gamma", "nan"), ("--stride", "0"), ("--scale", "0"), ("--backend", "nope"),
                        ("--eval-episodes", "-1"), ("--merge-every", "0"), ("--seed", "-1"), ("--units", "100000")):
        cli(f"tabular train {flag} {value}", tabular(flag, value), flag.lstrip("-").replace("-", "_"), flag.lstrip("-"))
    cli("tabular train --device cuda:7", tabular("--backend", "torch", "--device", "cuda:7"), "cuda:7")
    cli("tabular train env mismatch", tabular(env="Taxi-v4"), "Taxi-v4")

    # the Python API
    api("api train algo=123", 'hetrl.train(123, "CartPole-v1", 200, run_dir=RUN, **FAST)', "algo", "123")
    api("api train env=None", 'hetrl.train("dqn", None, 200, run_dir=RUN, **FAST)', "env", "None")
    api("api train env=42", 'hetrl.train("dqn", 42, 200, run_dir=RUN, **FAST)', "env", "42")
    api("api train config=42", 'hetrl.train("dqn", "CartPole-v1", 200, config=42, run_dir=RUN, **FAST)', "config")
    api("api train config=[list]", 'hetrl.train("dqn", "CartPole-v1", 200, config=["lr"], run_dir=RUN, **FAST)', "config")
    api("api train config dict null", 'hetrl.train("dqn", "CartPole-v1", 200, config={"steps": None}, run_dir=RUN, **FAST)',
        "steps")
    api("api train config dict agent=5", 'hetrl.train("dqn", "CartPole-v1", 200, config={"agent": 5}, run_dir=RUN, **FAST)',
        "agent")
    api("api train run_dir=123", 'hetrl.train("dqn", "CartPole-v1", 200, run_dir=123, **FAST)', "run_dir")
    api("api train steps=many", 'hetrl.train("dqn", "CartPole-v1", "many", run_dir=RUN, **FAST)', "steps")
    api("api train steps=-1", 'hetrl.train("dqn", "CartPole-v1", -1, run_dir=RUN, **FAST)', "steps")
    api("api train steps=1.5", 'hetrl.train("dqn", "CartPole-v1", 1.5, run_dir=RUN, **FAST)', "steps")
    api("api train steps=True", 'hetrl.train("dqn", "CartPole-v1", True, run_dir=RUN, **FAST)', "steps")
    api("api train seed=-1", 'hetrl.train("dqn", "CartPole-v1", 200, seed=-1, run_dir=RUN, **FAST)', "seed")
    api("api train seed=2**70", 'hetrl.train("dqn", "CartPole-v1", 200, seed=2**70, run_dir=RUN, **FAST)', "seed")
    api("api train seed=1.5", 'hetrl.train("dqn", "CartPole-v1", 200, seed=1.5, run_dir=RUN, **FAST)', "seed")
    api("api train lr=nan", 'hetrl.train("dqn", "CartPole-v1", 200, run_dir=RUN, **{**FAST, "lr": math.nan})', "lr")
    api("api train lr='fast'", 'hetrl.train("dqn", "CartPole-v1", 200, run_dir=RUN, **{**FAST, "lr": "fast"})', "lr")
    api("api train hidden=64", 'hetrl.train("dqn", "CartPole-v1", 200, run_dir=RUN, **{**FAST, "hidden": 64})', "hidden")
    api("api train hidden=[0]", 'hetrl.train("dqn", "CartPole-v1", 200, run_dir=RUN, **{**FAST, "hidden": [0]})', "hidden")
    api("api train hidden=(16.5,)", 'hetrl.train("dqn", "CartPole-v1", 200, run_dir=RUN, **{**FAST, "hidden": (16.5,)})',
        "hidden")
    api("api train buffer_size=1e12", 'hetrl.train("dqn", "CartPole-v1", 200, run_dir=RUN, **{**FAST, "buffer_size": 10**12})',
        "buffer_size")
    api("api train prioritized=2", 'hetrl.train("dqn", "CartPole-v1", 200, run_dir=RUN, **{**FAST, "prioritized": 2})',
        "prioritized")
    api("api train batch_size=np.int64(0)", 'hetrl.train("dqn", "CartPole-v1", 200, run_dir=RUN, **{**FAST, "batch_size": '
        'np.int64(0)})', "batch_size")
    api("api train device=5", 'hetrl.train("dqn", "CartPole-v1", 200, device=5, run_dir=RUN, **FAST)', "device")
    api("api train callbacks=[object()]", 'hetrl.train("dqn", "CartPole-v1", 200, callbacks=[object()], run_dir=RUN, **FAST)',
        "callback")
    api("api train callbacks=5", 'hetrl.train("dqn", "CartPole-v1", 200, callbacks=5, run_dir=RUN, **FAST)', "callback")
    api("api train env_kwargs=5", 'hetrl.train("dqn", "CartPole-v1", 200, env_kwargs=5, run_dir=RUN, **FAST)', "env_kwargs")
    api("api train env_kwargs unknown", 'hetrl.train("dqn", "CartPole-v1", 200, env_kwargs={"no_such_kw": 1}, run_dir=RUN, '
        '**FAST)', "no_such_kw", "env_kwargs")
    api("api train wrappers=[5]", 'hetrl.train("dqn", "CartPole-v1", 200, wrappers=[5], run_dir=RUN, **FAST)', "wrapper")
    api("api train wrappers=5", 'hetrl.train("dqn", "CartPole-v1", 200, wrappers=5, run_dir=RUN, **FAST)', "wrapper")
    api("api train env factory raises", 'def make():\n    raise RuntimeError("no env")\n'
        'hetrl.train("dqn", make, 200, run_dir=RUN, **FAST)', "make", "factory")
    api("api train env factory not env", 'hetrl.train("dqn", lambda: 5, 200, run_dir=RUN, **FAST)', "env", "factory")
    api("api train unknown setting", 'hetrl.train("dqn", "CartPole-v1", 200, run_dir=RUN, learning_rat=1e-3, **FAST)',
        "learning_rat")
    api("api train eps_end>eps_start", 'hetrl.train("dqn", "CartPole-v1", 200, run_dir=RUN, eps_start=0.1, eps_end=0.5, '
        '**FAST)', "eps_end", "eps_start")
    api("api train replay_ratio=nan", 'hetrl.train("dqn", "CartPole-v1", 200, run_dir=RUN, replay_ratio=math.nan, **FAST)',
        "replay_ratio")
    api("api train num_envs>steps", 'hetrl.train("dqn", "CartPole-v1", 2000, run_dir=RUN, num_envs=100000, **FAST)',
        "num_envs")
    api("api evaluate episodes=0", 'hetrl.evaluate("{dqn}", episodes=0)', "episodes")
    api("api evaluate episodes=-3", 'hetrl.evaluate("{dqn}", episodes=-3)', "episodes")
    api("api evaluate episodes='5'", 'hetrl.evaluate("{dqn}", episodes="5")', "episodes")
    api("api evaluate episodes=2.5", 'hetrl.evaluate("{dqn}", episodes=2.5)', "episodes")
    api("api evaluate run_dir=123", 'hetrl.evaluate(123)', "run_dir", "123")
    api("api evaluate checkpoint=5", 'hetrl.evaluate("{dqn}", 2, checkpoint=5)', "checkpoint")
    api("api evaluate seed=-1", 'hetrl.evaluate("{dqn}", 2, seed=-1)', "seed")
    api("api evaluate seed='x'", 'hetrl.evaluate("{dqn}", 2, seed="x")', "seed")
    api("api resume steps=-1", 'hetrl.resume("{dqn}", -1, progress=False)', "steps")
    api("api resume steps='x'", 'hetrl.resume("{dqn}", "x", progress=False)', "steps")
    api("api resume run_dir=None", 'hetrl.resume(None)', "run_dir", "None")
    api("api resume callbacks=[1]", 'hetrl.resume("{dqn}", 400, callbacks=[1], progress=False)', "callback")
    api("api load run=123", 'hetrl.load(123)', "run", "123")
    api("api load checkpoint=nope", 'hetrl.load("{dqn}", "nope")', "nope")
    api("api load seed=-1", 'hetrl.load("{dqn}", seed=-1)', "seed")
    api("api predict wrong shape", 'hetrl.load("{dqn}").predict(np.zeros(3))', "shape")
    api("api predict text", 'hetrl.load("{dqn}").predict("left")', "predict", "obs")
    api("api predict nan", 'hetrl.load("{dqn}").predict(np.full(4, np.nan))', "nan", "finite")
    api("api export format=tflite", 'hetrl.load("{dqn}").export("{dir}/p.tflite", format="tflite")', "tflite")
    api("api export suffix .h5", 'hetrl.load("{dqn}").export("{dir}/p.h5")', ".h5")
    api("api tabular collect CartPole", 'import hetrl.tabular as t\nt.collect("CartPole-v1", 100)', "CartPole-v1")
    api("api tabular collect 0", 'import hetrl.tabular as t\nt.collect("FrozenLake-v1", 0)', "transitions")
    api("api tabular collect 'many'", 'import hetrl.tabular as t\nt.collect("FrozenLake-v1", "many")', "transitions")
    api("api tabular collect policy", 'import hetrl.tabular as t\nt.collect("FrozenLake-v1", 10, "greedy")', "greedy")
    api("api tabular collect env_kwargs=5", 'import hetrl.tabular as t\nt.collect("FrozenLake-v1", 10, env_kwargs=5)',
        "env_kwargs")
    api("api TabularConfig units=0", 'import hetrl.tabular as t\nt.TabularConfig(units=0)', "units")
    api("api TabularConfig alpha=nan", 'import hetrl.tabular as t\nt.TabularConfig(alpha=math.nan)', "alpha")
    api("api TabularConfig epochs='3'", 'import hetrl.tabular as t\nt.TabularConfig(epochs="3")', "epochs")
    api("api train_tabular dataset=None", 'import hetrl.tabular as t\nt.train_tabular(None)', "dataset")
    api("api make_env unknown", 'import hetrl.envs as e\ne.make_env("CartPol-v1")', "CartPol-v1")
    api("api env_spec 42", 'import hetrl.envs as e\ne.env_spec(42)', "env", "42")

    # config files (--config)
    def config(id: str, name: str, text: str, *names: str, algo: str = "dqn") -> None:
        cli(id, train("--config", f"{{dir}}/{name}", algo=algo), *(names or (name,)), setup=write(name, text),
            source="config")

    config("config null steps", "c.json", '{"steps": null}', "steps")
    config("config null lr", "c.json", '{"agent": {"lr": null}}', "lr")
    config("config null hidden", "c.json", '{"agent": {"hidden": null}}', "hidden")
    config("config null seed", "c.json", '{"seed": null}', "seed")
    config("config null executor", "c.json", '{"executor": null}', "executor")
    config("config null agent", "c.json", '{"agent": null}', "agent")
    config("config steps abc", "c.json", '{"steps": "abc"}', "steps")
    config("config steps 1.5", "c.json", '{"steps": 1.5}', "steps")
    config("config lr true", "c.json", '{"agent": {"lr": true}}', "lr")
    config("config lr NaN", "c.json", '{"agent": {"lr": NaN}}', "lr")
    config("config hidden wide", "c.json", '{"agent": {"hidden": "wide"}}', "hidden")
    config("config hidden [64, x]", "c.json", '{"agent": {"hidden": [64, "x"]}}', "hidden")
    config("config hidden {}", "c.json", '{"agent": {"hidden": {"a": 1}}}', "hidden")
    config("config prioritized maybe", "c.json", '{"agent": {"prioritized": "maybe"}}', "prioritized")
    config("config agent list", "c.json", '{"agent": [1, 2]}', "agent")
    config("config atari list", "c.json", '{"atari": [1]}', "atari")
    config("config top-level list", "c.json", '[1, 2]', "c.json")
    config("config unknown key", "c.json", '{"stepz": 5}', "stepz")
    config("config unknown agent key", "c.json", '{"agent": {"lrr": 5}}', "lrr")
    config("config algo mismatch", "c.json", '{"algo": "ddpg"}', "ddpg")
    config("config algo 5", "c.json", '{"algo": 5}', "algo")
    config("config env_kwargs 5", "c.json", '{"env_kwargs": 5}', "env_kwargs")
    config("config wrappers 5", "c.json", '{"wrappers": 5}', "wrappers")
    config("config seed 2**70", "c.json", json.dumps({"seed": 2**70}), "seed")
    config("config seed -1", "c.json", '{"seed": -1}', "seed")
    config("config eps inverted", "c.json", '{"agent": {"eps_start": 0.1, "eps_end": 0.5}}', "eps_end", "eps_start")
    config("config broken json", "c.json", '{"agent": ', "c.json")
    config("config empty json", "c.json", '', "c.json")
    config("config binary", "c.json", '\x00\xff\xfe', "c.json")
    config("config yaml broken", "c.yaml", 'agent: [unclosed\n', "c.yaml")
    config("config yaml null lr", "c.yaml", 'agent:\n  lr:\n', "lr")
    config("config yaml scalar", "c.yaml", 'just text\n', "c.yaml")
    config("config yaml steps abc", "c.yaml", 'steps: abc\n', "steps")
    config("config yaml lr .nan", "c.yaml", 'agent:\n  lr: .nan\n', "lr")
    config("config yaml tuple tag", "c.yaml", 'agent:\n  hidden: !!python/tuple [16, 16]\n', "c.yaml", "hidden")
    config("config yaml empty", "c.yaml", '', "c.yaml")
    config("config toml", "c.toml", 'steps = 200\n[agent]\nlr = 0.001\n', "c.toml")
    config("config sac ent_coef true", "c.json", '{"agent": {"ent_coef": true}}', "ent_coef", algo="sac")
    config("config td3 policy_delay 1.5", "c.json", '{"agent": {"policy_delay": 1.5}}', "policy_delay", algo="td3")

    # plan files (--plan)
    def plan(id: str, setup: Setup, *names: str, extra: tuple[str, ...] = ()) -> None:
        argv = tuple("{dir}/plan.json" if a == "rule" else a for a in train(*extra))  # --plan FILE, not rule
        cli(id, argv, *(names or ("plan",)), setup=setup, source="plan")

    def drop(*keys: str) -> Callable[[dict], None]:
        return lambda d: [d.pop(k) for k in keys]

    def put(path: str, value: object) -> Callable[[dict], None]:
        def change(d: dict) -> None:
            *parents, last = path.split(".")
            for p in parents:
                d = d[p]
            d[last] = value
        return change

    plan("plan garbage", plan_file(text="{not json"), "plan.json")
    plan("plan empty", plan_file(text=""), "plan.json")
    plan("plan a list", plan_file(text="[]"), "plan.json")
    plan("plan wrong format", plan_file(put("format", "v0")), "format")
    plan("plan no placement", plan_file(drop("placement")), "placement")
    plan("plan placement list", plan_file(put("placement", [1])), "placement")
    plan("plan placement group missing", plan_file(lambda d: d["placement"].pop("learn")), "learn", "placement")
    plan("plan unknown backend", plan_file(put("placement.learn.backend", "tpu-magic")), "tpu-magic")
    plan("plan unknown device", plan_file(put("placement.learn.device", "cuda:7")), "cuda:7")
    plan("plan device nonsense", plan_file(put("placement.learn.device", "gpu0")), "gpu0")
    plan("plan threads 0", plan_file(put("placement.learn.threads", 0)), "threads")
    plan("plan threads 'two'", plan_file(put("placement.learn.threads", "two")), "threads")
    plan("plan executor foo", plan_file(put("executor", "foo")), "executor")
    plan("plan actors -1", plan_file(lambda d: d.update(executor="local", actors=-1)), "actors")
    plan("plan actors 1.5", plan_file(lambda d: d.update(executor="local", actors=1.5)), "actors")
    plan("plan central inline", plan_file(put("inference", "central")), "inference", "central")
    plan("plan num_envs 0", plan_file(put("num_envs", 0)), "num_envs")
    plan("plan num_envs abc", plan_file(put("num_envs", "abc")), "num_envs")
    plan("plan other algo", plan_file(put("algo", "ddpg")), "ddpg")
    plan("plan other env", plan_file(put("env", "Acrobot-v1")), "Acrobot-v1")
    plan("plan device vs --device", plan_file(), "device", extra=("--device", "meta"))
    plan("plan backend for ddpg", plan_file(put("placement.act.backend", "no-such")), "no-such")
    plan("plan algo 5", plan_file(put("algo", 5)), "algo", "5")

    # checkpoints
    def ckpt(id: str, argv: tuple[str, ...], setup: Setup, *names: str) -> None:
        cli(id, argv, *names, setup=then(copy_run(), setup), source="checkpoint")

    resume = ("resume", "{dir}/run", "--steps", "400", "--no-progress")
    evalf = ("eval", "{dir}/run", "--episodes", "2", "--checkpoint", "final")
    ckpt("resume truncated", resume, damage_newest(lambda b: b[: len(b) // 2]), "step_0000000300.pt", "corrupt")
    ckpt("eval truncated", evalf, damage_newest(lambda b: b[: len(b) // 2]), "step_0000000300.pt", "corrupt")
    ckpt("export truncated", ("export", "{dir}/run", "--out", "{dir}/p.pt", "--checkpoint", "{dir}/run/checkpoints/step_0000000300.pt"),
         damage_newest(lambda b: b[: len(b) // 2]), "step_0000000300.pt", "corrupt")
    ckpt("resume truncated: the hint", resume, damage_newest(lambda b: b[:100]), "{dir}/run/checkpoints/step_0000000200.pt")
    ckpt("resume two corrupt: the hint", resume,
         lambda w, f: [p.write_bytes(b"junk") for p in sorted((w / "run/checkpoints").glob("step_*.pt"))[-2:]],
         "{dir}/run/checkpoints/step_0000000100.pt")
    ckpt("resume executor changed", resume, edit_config(lambda d: d.update(executor="local", actors=1)), "config.json")
    ckpt("resume garbage", resume, damage_newest(lambda b: os.urandom(len(b))), "step_0000000300.pt", "corrupt")
    ckpt("resume empty", resume, damage_newest(lambda b: b""), "step_0000000300.pt", "corrupt")
    ckpt("eval --checkpoint json", (*evalf[:-1], "{dir}/c.pt"), write("c.pt", '{"format": 3}'), "c.pt")
    ckpt("eval --checkpoint tensor", (*evalf[:-1], "{dir}/c.pt"), torch_file("c.pt", lambda: __import__("torch").zeros(3)),
         "c.pt")
    ckpt("resume format 99", (*resume, "--checkpoint", "{dir}/c.pt"), torch_file("c.pt", lambda: {"format": 99}), "c.pt")
    ckpt("resume format 3 no executor", (*resume, "--checkpoint", "{dir}/c.pt"), torch_file("c.pt", lambda: {"format": 3}),
         "c.pt")
    ckpt("resume other algo's checkpoint", (*resume, "--checkpoint", "{ddpg}/checkpoints/step_0000000200.pt"), lambda w, f: None,
         "step_0000000200.pt", "ddpg")
    ckpt("eval other algo's checkpoint", (*evalf[:-1], "{ddpg}/checkpoints/step_0000000200.pt"), lambda w, f: None,
         "step_0000000200.pt", "ddpg")
    ckpt("resume --checkpoint replay file", (*resume, "--checkpoint", "{dir}/run/checkpoints/replay_step_0000000300.pt"),
         lambda w, f: None, "replay_step_0000000300.pt")
    ckpt("resume --checkpoint best.pt", (*resume, "--checkpoint", "{dir}/run/checkpoints/best.pt"), lambda w, f: None,
         "best.pt")
    ckpt("eval malicious pickle", (*evalf[:-1], "{dir}/c.pt"), torch_file("c.pt", lambda: {"format": 3, "x": Boom()}),
         "c.pt")
    ckpt("eval --checkpoint npz", (*evalf[:-1], "{data}"), lambda w, f: None, "frozenlake.npz")
    ckpt("eval --checkpoint a directory", (*evalf[:-1], "{dir}"), lambda w, f: None, "checkpoint")
    ckpt("eval --checkpoint missing", (*evalf[:-1], "{dir}/nope.pt"), lambda w, f: None, "nope.pt")
    ckpt("eval --checkpoint bare name", (*evalf[:-1], "step_0000000300.pt"), lambda w, f: None, "step_0000000300.pt")
    ckpt("resume hidden changed", resume, edit_config(lambda d: d["agent"].update(hidden=[32, 32])), "hidden")
    ckpt("eval hidden changed", evalf, edit_config(lambda d: d["agent"].update(hidden=[32, 32])), "hidden")
    ckpt("export hidden changed", ("export", "{dir}/run", "--out", "{dir}/p.pt"),
         edit_config(lambda d: d["agent"].update(hidden=[32])), "hidden")
    ckpt("resume dueling changed", resume, edit_config(lambda d: d["agent"].update(dueling=True)), "dueling")
    ckpt("resume algo changed", resume, edit_config(lambda d: d.update(algo="ddpg")), "ddpg")
    ckpt("resume env changed", resume, edit_config(lambda d: d.update(env="Acrobot-v1")), "Acrobot-v1")
    ckpt("resume config null lr", resume, edit_config(lambda d: d["agent"].update(lr=None)), "lr")
    ckpt("resume config steps abc", resume, edit_config(lambda d: d.update(steps="abc")), "steps")
    ckpt("resume config lr nan", resume, edit_config(lambda d: d["agent"].update(lr=float("nan"))), "lr")
    ckpt("resume config garbage", resume, write("run/config.json", "{oops"), "config.json")
    ckpt("resume config unknown key", resume, edit_config(lambda d: d.update(stepz=3)), "stepz")
    ckpt("resume replay deleted", resume,
         lambda w, f: (w / "run/checkpoints/replay_step_0000000300.pt").unlink(), "replay")
    ckpt("resume replay truncated", resume,
         lambda w, f: (w / "run/checkpoints/replay_step_0000000300.pt").write_bytes(b"PK\x03\x04"), "replay")
    ckpt("eval best.pt corrupt", ("eval", "{dir}/run", "--episodes", "2"),
         lambda w, f: (w / "run/checkpoints/best.pt").write_bytes(b"junk"), "best.pt")
    ckpt("resume plan.json corrupt", resume, write("run/plan.json", "{oops"), "plan.json")
    ckpt("resume plan.json other device", resume,
         lambda w, f: (w / "run/plan.json").write_text((w / "run/plan.json").read_text().replace('"cpu"', '"cuda:7"')),
         "cuda:7")

    # tabular datasets
    def dataset(id: str, setup: Setup | None, *names: str, path: str = "{dir}/d.npz") -> None:
        cli(id, tabular(data=path), *(names or ("d.npz",)), setup=setup, source="dataset")

    dataset("dataset missing", None, "d.npz")
    dataset("dataset garbage", write("d.npz", b"not a zip" * 20), "d.npz")
    dataset("dataset truncated", lambda w, f: (w / "d.npz").write_bytes(f.data.read_bytes()[:500]), "d.npz")
    dataset("dataset .npy", lambda w, f: np.save(w / "d.npy", np.zeros(3)), "d.npy", path="{dir}/d.npy")
    dataset("dataset a json", write("d.npz", "{}"), "d.npz")
    dataset("dataset a directory", lambda w, f: (w / "d.npz").mkdir(), "d.npz")
    dataset("dataset no meta", dataset_file(meta=None), "meta")
    dataset("dataset obs out of range", dataset_file(obs=lambda a: np.full_like(a["obs"], 99)), "obs")
    dataset("dataset negative action", dataset_file(action=lambda a: np.full_like(a["action"], -1)), "action")
    dataset("dataset length mismatch", dataset_file(reward=np.zeros(10, np.float32)), "reward")
    dataset("dataset float obs", dataset_file(obs=lambda a: a["obs"].astype(np.float32)), "obs")
    dataset("dataset nan reward", dataset_file(reward=lambda a: np.full_like(a["reward"], np.nan)), "reward")
    dataset("dataset object meta", dataset_file(meta=np.array([{"x": 1}], dtype=object)), "d.npz")
    dataset("dataset empty", dataset_file(**{k: (lambda k: lambda a: a[k][:0])(k) for k in
                                             ("obs", "action", "reward", "next_obs", "done", "next_action")}), "d.npz")

    # file system (the run directory's writes: another engineer's part of issue 24)
    def fs(id: str, argv: tuple[str, ...], *names: str, setup: Setup | None = None) -> None:
        cli(id, argv, *names, setup=setup, source="fs")

    fs("--run-dir is a file", tuple("{dir}/f" if a == "{dir}/run" else a for a in train()), "run-dir", "not a directory",
       setup=write("f", "x"))
    fs("--run-dir under a file", tuple("{dir}/f/run" if a == "{dir}/run" else a for a in train()), "f/run",
       setup=write("f", "x"))
    fs("--run-dir config.json is a dir", train(), "config.json", setup=lambda w, f: (w / "run/config.json").mkdir(parents=True))
    fs("export --out a dir", ("export", "{dqn}", "--out", "{dir}"), "out", "{dir}")
    fs("tabular --save-q missing dir", tabular("--save-q", "{dir}/no/such/q.npy"), "no/such")
    fs("tabular collect --out a dir", ("tabular", "collect", "FrozenLake-v1", "--transitions", "100", "--out", "{dir}"),
       "out")
    fs("resume checkpoints is a file", ("resume", "{dir}/run", "--steps", "400", "--no-progress"), "checkpoints",
       setup=then(copy_run(), lambda w, f: (shutil.rmtree(w / "run/checkpoints"), (w / "run/checkpoints").write_text("x"))))
    fs("sweep --out a file", ("sweep", "dqn", "CartPole-v1", "--actors", "1", "--steps", "300", "--out", "{dir}/f"), "f",
       setup=write("f", "x"))
    return c


# --- running -----------------------------------------------------------------------------------
@dataclass
class Outcome:
    case: Case
    outcome: str
    message: str
    seconds: float


_ERROR_LINE = re.compile(r"^hetrl(?: [\w-]+)*: error: ")


def classify(returncode: int | None, stderr: str, names: tuple[str, ...], where: str = "") -> tuple[str, str]:
    """The outcome and the line that shows it (see the module docstring). ``where``: the case's
    directory, which the names are not looked for in (its name repeats the case's id)."""
    lines = [line for line in stderr.splitlines() if line.strip()]
    last = lines[-1] if lines else ""
    if returncode is None:
        return "timeout", last
    if "Traceback (most recent call last)" in stderr or returncode not in (0, 2):
        return "traceback", last or f"exit {returncode}"
    if returncode == 0:
        return "accepted", ""
    errors = [line for line in lines if _ERROR_LINE.match(line)]
    if len(errors) != 1:
        return "unclear", (errors or lines or [""])[-1]
    line = errors[0].replace(where, "{dir}") if where else errors[0]
    named = any(name.lower() in line.lower() for name in names)
    return ("clean" if named else "unclear"), errors[0]


def run_case(case: Case, fixtures: Fixtures, root: Path, timeout: float) -> Outcome:
    where = root / re.sub(r"[^A-Za-z0-9_.-]+", "_", case.id)
    where.mkdir(parents=True)
    start = time.perf_counter()
    if case.setup is not None:
        case.setup(where, fixtures)
    names = tuple(_fill(name, fixtures, "{dir}") for name in case.names)  # {dir} stays: classify puts it in the line
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": f"{REPO / 'src'}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
           "COLUMNS": "200"}
    try:
        proc = subprocess.run(case.command(fixtures, where), capture_output=True, text=True, cwd=where, env=env,
                              timeout=timeout)
        outcome, message = classify(proc.returncode, proc.stderr, names, str(where))
    except subprocess.TimeoutExpired as exc:
        stderr = exc.stderr.decode(errors="replace") if isinstance(exc.stderr, bytes) else ""
        outcome, message = classify(None, stderr, names, str(where))
    return Outcome(case, outcome, message, time.perf_counter() - start)


def make_fixtures(root: Path) -> Fixtures:
    """A DQN and a DDPG run and a tabular dataset, made with the CLI."""
    fixtures = Fixtures(root / "dqn", root / "ddpg", root / "frozenlake.npz")
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO / "src")}
    commands = [
        ["train", "dqn", "CartPole-v1", "--steps", "300", "--no-progress", "--plan", "rule", "--run-dir", str(fixtures.dqn),
         *FAST, "--set", "eval_every=200", "--set", "checkpoint_every=100"],
        ["train", "ddpg", "Pendulum-v1", "--steps", "200", "--no-progress", "--plan", "rule", "--run-dir", str(fixtures.ddpg),
         *FAST],
        ["tabular", "collect", "FrozenLake-v1", "--transitions", "2000", "--out", str(fixtures.data)],
    ]
    for argv in commands:
        proc = subprocess.run([sys.executable, "-m", "hetrl", *argv], capture_output=True, text=True, cwd=root, env=env)
        if proc.returncode != 0:
            raise SystemExit(f"fixture `hetrl {' '.join(argv)}` failed:\n{proc.stderr}")
    return fixtures


def markdown(outcomes: list[Outcome], seconds: float) -> str:
    sources = sorted({o.case.source for o in outcomes})
    totals = Counter(o.outcome for o in outcomes)
    lines = [f"# Bad inputs ({len(outcomes)} cases, {seconds:.0f} s)", "",
             "| source | " + " | ".join(OUTCOMES) + " | total |", "|---|" + "---:|" * (len(OUTCOMES) + 1)]
    for source in sources:
        counts = Counter(o.outcome for o in outcomes if o.case.source == source)
        lines.append(f"| {source} | " + " | ".join(str(counts[k]) for k in OUTCOMES) + f" | {sum(counts.values())} |")
    lines.append("| **all** | " + " | ".join(f"**{totals[k]}**" for k in OUTCOMES) + f" | **{len(outcomes)}** |")
    lines += ["", "| case | source | outcome | s | message |", "|---|---|---|---:|---|"]
    order = {k: i for i, k in enumerate(OUTCOMES[::-1])}  # the worst first
    for o in sorted(outcomes, key=lambda o: (order[o.outcome], o.case.source, o.case.id)):
        message = o.message.replace("|", "\\|")[:300]
        lines.append(f"| `{o.case.id}` | {o.case.source} | {o.outcome} | {o.seconds:.1f} | {message} |")
    return "\n".join(lines) + "\n"


def run_api(code: str) -> int:
    """Run an API case in this process: a HetrlError as the CLI prints it (exit 2), anything else
    as a traceback (exit 1)."""
    from hetrl.errors import HetrlError

    try:
        exec(compile(code, "<case>", "exec"), {"__name__": "__case__"})
    except HetrlError as exc:
        print(f"hetrl: error: {exc}", file=sys.stderr)
        return 2
    except BaseException:  # noqa: BLE001 (what the harness counts)
        traceback.print_exc()
        return 1
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", nargs="+", help="run the cases whose id contains one of these")
    parser.add_argument("--jobs", type=int, default=2, help="cases run at once (default 2)")
    parser.add_argument("--timeout", type=float, default=180.0, help="seconds a case may take (default 180)")
    parser.add_argument("--out", default="bad_inputs.md", help="the markdown report (default ./bad_inputs.md)")
    parser.add_argument("--list", action="store_true", help="list the cases and exit")
    parser.add_argument("--keep", action="store_true", help="keep the scratch directory (printed)")
    parser.add_argument("--api", help=argparse.SUPPRESS)  # run one API case's code (in the case's subprocess)
    args = parser.parse_args()
    if args.api is not None:
        return run_api(args.api)
    chosen = [c for c in cases() if not args.only or any(word in c.id for word in args.only)]
    if args.list:
        for case in chosen:
            print(f"{case.source:10} {case.id}")
        print(f"{len(chosen)} cases")
        return 0
    assert len({c.id for c in cases()}) == len(cases()), "case ids must be unique"
    start = time.perf_counter()
    root = Path(tempfile.mkdtemp(prefix="hetrl_bad_inputs_"))
    try:
        fixtures = make_fixtures(root)
        print(f"fixtures made in {time.perf_counter() - start:.0f} s; {len(chosen)} cases, {args.jobs} at a time", flush=True)
        cases_root = root / "cases"
        outcomes: list[Outcome] = []
        with ThreadPoolExecutor(args.jobs) as pool:
            for outcome in pool.map(lambda c: run_case(c, fixtures, cases_root, args.timeout), chosen):
                outcomes.append(outcome)
                print(f"{outcome.outcome:9} {outcome.seconds:5.1f}s  {outcome.case.source:10} {outcome.case.id}"
                      + (f"\n          {outcome.message[:200]}" if outcome.outcome != "clean" else ""), flush=True)
    finally:
        if args.keep:
            print(f"scratch: {root}")
        else:
            shutil.rmtree(root, ignore_errors=True)
    seconds = time.perf_counter() - start
    if PWNED.exists():
        print(f"a malicious checkpoint ran its code: {PWNED} was written")
    report = markdown(outcomes, seconds)
    Path(args.out).write_text(report)
    print("\n".join(report.splitlines()[:len({o.case.source for o in outcomes}) + 5]))
    print(f"report: {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
