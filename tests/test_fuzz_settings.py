"""Fuzzing the settings (issue 24): random settings of dqn, ddpg, td3 and sac (any type, any value,
for the real keys of their configs), written as dicts, JSON or YAML files (some cut short), and
random plan files. Each either is refused with one clean line (a HetrlError; exit 2 through the
CLI) or builds a config that passes every check a run makes before it writes anything, never
another exception. A config of plausible values that passes must mean the same on every learner
backend it can be given to: one update from the same weights and batch agrees with Learn/torch,
and the prioritized replays agree on what they sample. In-process, apart from one CLI sample."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
import yaml
from hypothesis import HealthCheck, assume, event, given, settings
from hypothesis import strategies as st

from hetrl.algos import ALGORITHMS, Algorithm
from hetrl.config import (CHECKPOINT_REPLAY, EXECUTORS, INFERENCE, RAY_SPREADS, WANDB_MODES, TrainConfig, check_machine,
                          check_replay_memory, config_from_dict, make_config)
from hetrl.envs.pixels import AtariOptions
from hetrl.errors import HetrlError, field_types
from hetrl.planner.choice import plan_for_run, resolve
from hetrl.planner.plan_file import Plan
from hetrl.primitives import build, implementations
from hetrl.protocol import Slot
from hetrl.training import checked_algorithm

ENVS = {"dqn": "CartPole-v1", "ddpg": "Pendulum-v1", "td3": "Pendulum-v1", "sac": "Pendulum-v1"}
FREE = 2**33  # the memory the replay check is given: the same on every machine
EXAMPLES = int(os.environ.get("HETRL_FUZZ_EXAMPLES", "60"))  # more for a longer search by hand (CI: 60, a few seconds)
FUZZ = settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# Values a key's own choices, where the type alone says little; keys whose values reach outside
# the process (imports, gym.make's keywords, a plan file's path, a cluster) draw only safe ones.
CHOICES: dict[str, list[Any]] = {
    "executor": [*EXECUTORS, "inlin", ""], "inference": [*INFERENCE, "centre"], "checkpoint_replay": [*CHECKPOINT_REPLAY, "some"],
    "wandb_mode": [*WANDB_MODES, None, "bad"], "device": ["auto", "cpu", "cuda:7", "gpu0", ""],
    "network": ["auto", "mlp", "nature", "resnet", "nomodule_hetrl:f"], "ent_coef": ["auto", "auto_0.5", "0.2", "-1", "abc", "auto_"],
    "env_kwargs": [{}, {"no_such_kw": 1}, [1]], "wrappers": [[], ["nomodule_hetrl:W"], 5], "wandb_project": [None, "", " "],
    "wandb_entity": [None, "me"], "ray_address": [None], "ray_spread": [*RAY_SPREADS, "spred"], "plan": ["rule"], "force": [False, True],
}
RUN_KEYS = sorted(set(field_types(TrainConfig)) - {"algo", "env", "agent", "atari"})
ATARI_KEYS = sorted(field_types(AtariOptions))


@pytest.fixture(scope="module")
def scratch(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Where the examples write their files (Hypothesis reruns a test in one function-scoped fixture)."""
    return tmp_path_factory.mktemp("fuzz")


def anything() -> st.SearchStrategy[Any]:
    """Any JSON value."""
    scalar = (st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats() | st.text(max_size=6))
    return scalar | st.lists(st.integers(-3, 70), max_size=3) | st.dictionaries(st.text(max_size=3), scalar, max_size=2)


def typed(kind: Any) -> st.SearchStrategy[Any]:
    """Values of the annotated type ``kind``, edge values weighted, and their text forms."""
    text = st.sampled_from(["20k", "1e3", "-1", "0", "nan", "inf", "none", "true", "abc", "64,64", ""])
    if kind is bool or kind == bool | None:
        return st.booleans() | text
    if kind in (int, int | None):
        return st.integers(-3, 300) | st.sampled_from([0, 1, 2**31 - 1, 2**31, 10**12, -(2**70)]) | text
    if kind in (float, float | None):
        return st.floats(-2, 2) | st.sampled_from([0.0, 1.0, -1.0, 1e-9, 1e30, float("nan"), float("inf")]) | text
    if "tuple" in str(kind):
        return st.lists(st.integers(-2, 80), max_size=4) | text
    return st.text(max_size=8) | text


@st.composite
def wild_settings(draw: st.DrawFn, algo: str | None = None) -> dict[str, Any]:
    """A config dict of ``algo`` (drawn when None): some run, agent and Atari keys, each with a value
    of its own type, a text form, one of its choices, or any JSON value."""
    algo = algo or draw(st.sampled_from(sorted(ENVS)))
    agent_kinds = field_types(ALGORITHMS[algo].Config)

    def value(key: str, kind: Any) -> Any:
        if key in CHOICES:
            return draw(st.sampled_from(CHOICES[key]))
        return draw(st.one_of(typed(kind), typed(kind), anything()))

    run_keys = draw(st.lists(st.sampled_from(RUN_KEYS), max_size=4, unique=True))
    agent_keys = draw(st.lists(st.sampled_from(sorted(agent_kinds)), max_size=5, unique=True))
    data: dict[str, Any] = {"algo": algo, "env": ENVS[algo], "plan": "rule"}
    data.update({key: value(key, field_types(TrainConfig)[key]) for key in run_keys})
    data["agent"] = {key: value(key, agent_kinds[key]) for key in agent_keys}
    if draw(st.booleans()):
        data["atari"] = {key: value(key, field_types(AtariOptions)[key]) for key in draw(st.lists(st.sampled_from(ATARI_KEYS), max_size=2))}
    return data


def checked(config: TrainConfig) -> Algorithm:
    """Every check a run makes before it writes anything (Session.create), without building it."""
    algorithm = checked_algorithm(config)
    check_machine(config)
    check_replay_memory(config, algorithm.spec, resolve(config, algorithm).placement.replay, free=FREE)
    return algorithm


def outcome(make: Any) -> Algorithm | None:
    """``make()`` checked: its algorithm, or None for a clean refusal; anything else fails the test."""
    try:
        algorithm = checked(make())
    except HetrlError as exc:
        message = str(exc)
        assert len(message.splitlines()) == 1 and "Traceback" not in message, message  # no line break of any kind
        event("refused")
        return None
    event("passed every check")
    return algorithm


@FUZZ
@given(wild_settings())
def test_random_settings_are_refused_in_one_line_or_pass_every_check(data):
    built = outcome(lambda: config_from_dict(data, "fuzz.json", tuned=True))
    if built is not None:  # what passed holds values of its types, in its ranges
        assert not built.config.validate() and built.config.batch_size <= built.config.buffer_size


@FUZZ
@given(wild_settings(), st.sampled_from(["json", "yaml"]), st.integers(0, 8))
def test_random_config_files_are_refused_in_one_line_or_pass_every_check(scratch, data, kind, cut):
    path = scratch / f"c.{kind}"
    text = json.dumps(data) if kind == "json" else yaml.safe_dump(data)
    path.write_text(text[: len(text) - cut] if cut < 8 else text)  # some cut short, as a crash mid-write leaves them
    outcome(lambda: make_config(data["algo"], ENVS[data["algo"]], path, ["plan=rule"]))


def _rule_plan(algo: str) -> dict[str, Any]:
    config = make_config(algo, ENVS[algo], None, ["plan=rule"])
    return plan_for_run(config, checked_algorithm(config)).to_dict()


PLANS = {algo: _rule_plan(algo) for algo in ("dqn", "ddpg")}
BACKENDS = ["torch", "numpy", "numba", "blas", "gymnasium", "frames-numpy", "tpu", ""]
DEVICES = ["cpu", "cuda:7", "gpu0", "meta", ""]


@st.composite
def plan_files(draw: st.DrawFn) -> tuple[str, dict[str, Any]]:
    algo = draw(st.sampled_from(sorted(PLANS)))
    plan = json.loads(json.dumps(PLANS[algo]))
    for _ in range(draw(st.integers(1, 3))):
        where = draw(st.sampled_from(["executor", "actors", "inference", "num_envs", "format", "algo", "placement",
                                      "group", "backend", "device", "threads", "predicted"]))
        group = draw(st.sampled_from(["env", "act", "replay", "learn"]))
        if where == "placement":
            plan["placement"] = draw(anything())
        elif where == "group" and isinstance(plan["placement"], dict):
            plan["placement"].pop(group, None) if draw(st.booleans()) else plan["placement"].update({group: draw(anything())})
        elif where in ("backend", "device", "threads") and isinstance(plan["placement"], dict) and isinstance(plan["placement"].get(group), dict):
            values = {"backend": st.sampled_from(BACKENDS), "device": st.sampled_from(DEVICES), "threads": anything()}[where]
            plan["placement"][group][where] = draw(values | anything())
        elif where not in ("group", "backend", "device", "threads"):
            choices = {"executor": ["inline", "local", "ray", "auto", "foo"], "inference": ["actor", "central", "x"],
                       "algo": ["dqn", "ddpg", "td3"], "format": ["hetrl-plan-v1", "v0"]}.get(where, [0, 1, 4, -1, 2**40])
            plan[where] = draw(st.sampled_from(choices) | anything())
    return algo, plan


@FUZZ
@given(plan_files())
def test_random_plan_files_are_refused_in_one_line_or_place_the_run(scratch, drawn):
    algo, plan = drawn
    (scratch / "plan.json").write_text(json.dumps(plan))
    config = make_config(algo, ENVS[algo], None, [f"plan={scratch / 'plan.json'}"])
    outcome(lambda: config)


# --- one meaning on every backend ------------------------------------------------------------
@st.composite
def plausible_agents(draw: st.DrawFn, algo: str) -> dict[str, Any]:
    """``algo``'s settings in the ranges people use, edges included (no clipping, hard targets,
    every update), mostly on the networks every host backend serves (dueling: torch only)."""
    norm = st.none() | st.floats(1e-3, 20)
    agent = {"hidden": [8, 8], "lr": draw(st.floats(1e-5, 1e-2)), "max_grad_norm": draw(norm),
             "tau": draw(st.just(1.0) | st.floats(0.001, 1)), "prioritized": draw(st.booleans()),
             "alpha": draw(st.floats(0, 1.5)), "beta0": draw(st.floats(0, 1)), "priority_eps": draw(st.floats(1e-8, 1e-2)),
             "batch_size": 16, "buffer_size": 64}
    if algo == "dqn":
        agent.update(double=draw(st.booleans()), dueling=draw(st.sampled_from([False] * 4 + [True])),
                     target_update_every=draw(st.integers(1, 3)))
    elif algo in ("ddpg", "td3"):
        agent.update(policy_delay=draw(st.integers(1, 3)), target_noise=draw(st.floats(0, 0.5)),
                     target_noise_clip=draw(st.floats(0, 1)), twin_critics=draw(st.booleans()))
    else:
        agent.update(policy_delay=draw(st.integers(1, 3)), ent_coef=draw(st.sampled_from(["auto", "auto_0.5", "0.2"])),
                     target_entropy=draw(st.none() | st.floats(-3, 0)))
    return agent


def _batch(algorithm: Algorithm, seed: int, b: int = 16) -> dict[str, torch.Tensor]:
    rng, spec = np.random.default_rng(seed), algorithm.spec
    return {k: torch.as_tensor(v) for k, v in {
        "obs": rng.standard_normal((b, *spec.obs_shape)).astype(np.float32),
        "actions": algorithm.random_actions(rng, b),
        "rewards": rng.standard_normal(b).astype(np.float32),
        "next_obs": rng.standard_normal((b, *spec.obs_shape)).astype(np.float32),
        "discounts": rng.choice([0.0, 0.99], b).astype(np.float32),
        "weights": rng.uniform(0.2, 1.0, b).astype(np.float32),
    }.items()}


def _updates(algorithm: Algorithm, backend: str) -> tuple[list[dict[str, np.ndarray]], dict[str, np.ndarray]]:
    """Three updates of ``backend``'s learner (seed 0) on fixed batches: their outputs, then the weights."""
    learn = build("Learn", Slot(backend, "cpu"), algorithm, 0)
    outs = [{k: v.detach().numpy().copy() for k, v in learn.learn(**_batch(algorithm, i)).items()} for i in range(3)]
    return outs, {k: v.detach().numpy().copy() for k, v in learn.learner.policy_network.state_dict().items()}


@pytest.mark.parametrize("algo", sorted(ENVS))
@settings(max_examples=max(6, EXAMPLES // 10), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_plausible_settings_mean_the_same_on_every_learner_backend(algo, data):
    agent = data.draw(plausible_agents(algo))
    algorithm = outcome(lambda: config_from_dict({"algo": algo, "env": ENVS[algo], "plan": "rule", "agent": agent}))
    assume(algorithm is not None)  # a plausible draw may still break a cross-field rule
    reference = _updates(algorithm, "torch")
    others = [b for b, impl in implementations("Learn").items()
              if b != "torch" and impl.runs_on("cpu") and impl.unsupported(algorithm) is None]
    for backend in others:
        event(f"{algo}: {backend} against torch")
        outs, weights = _updates(algorithm, backend)
        for mine, theirs in zip(outs, reference[0]):
            for key in theirs:
                np.testing.assert_allclose(mine[key], theirs[key], rtol=2e-3, atol=2e-4, err_msg=f"{backend} {key} {agent}")
        for key in reference[1]:
            np.testing.assert_allclose(weights[key], reference[1][key], rtol=2e-3, atol=2e-4, err_msg=f"{backend} {key}")
    if agent["prioritized"]:  # alpha, beta0 and priority_eps read alike by both replays
        draws = np.linspace(0.01, 0.99, 16), np.random.default_rng(1).random(16)
        td = np.abs(np.random.default_rng(2).standard_normal(16)).astype(np.float32)
        drawn = []
        for backend in ("numpy", "torch"):
            replay = build("ReplayAdd", Slot(backend, "cpu"), algorithm, 0)
            replay.add(**{k: v.numpy() for k, v in _batch(algorithm, 7, 40).items() if k != "weights"})
            first = replay.sample(draws[0], algorithm.config.beta(500))
            replay.update_priorities(first["indices"], td if backend == "numpy" else torch.as_tensor(td))
            second = replay.sample(draws[1], algorithm.config.beta(500))
            drawn.append((np.asarray(second["indices"]), np.asarray(second["weights"])))
        np.testing.assert_array_equal(drawn[0][0], drawn[1][0])
        np.testing.assert_allclose(drawn[0][1], drawn[1][1], rtol=1e-5)


# --- through the command line ----------------------------------------------------------------
@settings(max_examples=1, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(wild_settings("dqn"))
def test_a_refused_config_file_is_one_line_and_exit_2_through_the_cli(scratch, data):
    path = scratch / "cli.json"
    path.write_text(json.dumps(data))
    try:
        checked(make_config("dqn", "CartPole-v1", path, ["plan=rule", "steps=200"]))
        refused = None
    except HetrlError as exc:
        refused = str(exc)
    assume(refused is not None)  # a config that passes would train: other tests run those
    proc = subprocess.run([sys.executable, "-m", "hetrl", "train", "dqn", "CartPole-v1", "--config", str(path), "--steps", "200",
                           "--plan", "rule", "--no-progress", "--run-dir", str(scratch / "cli_run")],
                          capture_output=True, text=True, env={**os.environ, "OMP_NUM_THREADS": "1"}, timeout=120)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and lines[-1] == f"hetrl: error: {refused}", proc.stderr
    assert not any(line.startswith("Traceback") for line in lines) and not (scratch / "cli_run").exists()
