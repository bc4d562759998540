"""The local executor: actor processes and shared memory, the replay-ratio limiter, lifecycle
(kill an actor, Ctrl-C, exceptions, no leftovers) and checkpoints."""

import copy
import glob
import json
import os
import signal
import subprocess
import sys
import threading
import time
from contextlib import contextmanager
from dataclasses import replace

import numpy as np
import pytest
import torch

from hetrl.algos import make_algorithm
from hetrl.config import make_config
from hetrl.envs import env_spec
from hetrl.errors import HetrlError
from hetrl.runtime.inference import InferenceClient, InferenceServer, InferenceStopped, inference_layout
from hetrl.runtime.local import LocalExecutor
from hetrl.planner.rule import default_placement
from hetrl.protocol import Slot
from hetrl.runtime.schedule import ReplaySchedule, default_lead, worst_window_error
from hetrl.runtime.shared import SHM_PREFIX, SharedArrays, SharedWeights, TransitionRing, ring_layout
from hetrl.training import Session


def segments(pid=None):
    return glob.glob(f"/dev/shm/{SHM_PREFIX}{pid or ''}*")


def alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie has exited; only its parent has not reaped it yet
    with open(f"/proc/{pid}/stat") as f:
        return f.read().split(")")[-1].split()[0] != "Z"


def executor(ratio=1.0, actors=2, prefetch=False, inference="actor", act="numpy", num_envs=1, **agent):
    cfg = make_config("dqn", "CartPole-v1", overrides=["hidden=32,32", "batch_size=32", "learning_starts=500",
                                                         f"replay_ratio={ratio}", "train_every=1"])
    for key, value in agent.items():
        setattr(cfg.agent, key, value)
    algo = make_algorithm("dqn", env_spec("CartPole-v1"), cfg.agent)
    placement = replace(default_placement(torch.device("cpu"), (1, 1), threads=1), act=Slot(act, "cpu"))
    return LocalExecutor(algo, placement, num_envs, seed=0, actors=actors, prefetch=prefetch, log=lambda m: None,
                         inference=inference)


@contextmanager
def closed_cleanly(ex):
    """Run the body, then close ``ex``: none of its actor processes and no segment may be left."""
    try:
        yield ex
    finally:
        pids = ex.actor_pids()
        ex.close()
    time.sleep(0.2)
    assert not any(alive(p) for p in pids)
    assert segments(os.getpid()) == []


def run_to(ex, steps, timeout=120):
    start = time.perf_counter()
    while ex.env_steps < steps:
        ex.iteration()
        assert time.perf_counter() - start < timeout, "no progress"


# --- the limiter, alone --------------------------------------------------------------------------
@pytest.mark.parametrize("ratio", [1.0, 0.25, 2.0])
def test_limiter_holds_the_ratio_under_any_interleaving(ratio):
    """Actors of 1 env and a learner scheduled at random, each blocked only by the limiter."""
    rng = np.random.default_rng(0)
    actors, ls = 2, 300
    limiter = ReplaySchedule(ratio, ls, lead=default_lead(actors, 1))
    steps = updates = 0
    trace = []
    while steps < 20_000:
        if rng.random() < 0.5:  # an actor's turn (two may step on one stale view of the cap)
            allowed = limiter.allowed_env_steps(updates)
            for _ in range(rng.integers(1, actors + 1)):
                if steps + 1 <= allowed:
                    steps += 1
        else:
            updates += min(limiter.updates_owed(steps, updates), int(rng.integers(1, 8)))
        trace.append((steps, updates))
    error = worst_window_error(trace, ratio, ls)
    assert error is not None and error <= 0.05, error


def test_window_error_sees_a_wrong_ratio():
    trace = [(s, s // 2) for s in range(0, 5000, 10)]  # 0.5 updates per step
    assert worst_window_error(trace, 0.5, 0) == pytest.approx(0, abs=0.01)
    assert worst_window_error(trace, 1.0, 0) == pytest.approx(0.5, abs=0.01)
    bursty = [(s, (s // 768) * 384) for s in range(0, 8000, 8)]  # 384 updates every 768 steps
    assert worst_window_error(bursty, 0.5, 0) > 0.2


# --- shared memory ------------------------------------------------------------------------------
def test_ring_wraps_and_frees_space():
    block = SharedArrays(ring_layout(8, 4, (3,), (), "int64"))
    ring = TransitionRing(block)
    got = []
    for start in range(0, 30, 5):
        rows = np.arange(start, start + 5)
        ring.push({"obs": np.stack([rows] * 3, 1).astype(np.float32), "actions": rows, "rewards": rows.astype(np.float32),
                   "next_obs": np.zeros((5, 3), np.float32), "discounts": np.ones(5, np.float32)})
        assert ring.free() == 3
        out = ring.pop()
        got.extend(out["actions"].tolist())
        assert (out["obs"][:, 0] == out["actions"]).all()
    assert got == list(range(30)) and ring.pop() is None
    ring.push_episodes([(float(i), i) for i in range(6)])  # more than the episode capacity: the oldest go
    assert ring.pop_episodes() == [(2.0, 2), (3.0, 3), (4.0, 4), (5.0, 5)]
    name = block.handle.name
    block.close()
    assert not os.path.exists(f"/dev/shm/{name}")


def test_weights_are_read_whole():
    params = {"w": np.arange(6, dtype=np.float32).reshape(2, 3), "b": np.ones(2, np.float32)}
    owner = SharedWeights(SharedArrays(SharedWeights.layout(params)))
    reader = SharedWeights(SharedArrays(handle=owner.block.handle))
    owner.publish(params, version=7)
    copy = {k: np.zeros_like(v) for k, v in params.items()}
    assert reader.read_into(copy) == 7
    assert all((copy[k] == params[k]).all() for k in params)
    reader.block.close()
    owner.block.close()


# --- the executor -------------------------------------------------------------------------------
@pytest.mark.parametrize("ratio, prefetch", [(1.0, False), (0.25, False), (1.0, True)])
def test_local_executor_learns_at_the_configured_ratio(ratio, prefetch):
    with closed_cleanly(executor(ratio, prefetch=prefetch, prioritized=prefetch)) as ex:  # prefetching beside priority updates
        run_to(ex, 4_000)
        pids = ex.actor_pids()
        assert len(pids) == 2 and all(alive(p) for p in pids)
        error = ex.ratio_error()
        assert error is not None and error <= 0.05, error
        assert abs(ex.updates - ratio * (ex.env_steps - 500)) <= ratio * default_lead(2, 1) + 2
        ex.drain_staleness()
        assert 0 <= ex.staleness_max <= 1 + ratio * (default_lead(2, 1) + 2)  # sync every update
        totals = ex.timer_totals()
        for name in ("EnvStep", "Act", "WeightFetch", "ReplayAdd", "ReplaySample", "Learn", "WeightSync"):
            assert totals[name][1] > 0, name
        assert totals["EnvStep"][2] == 2  # two actor processes did it
        assert len(ex.drain_episodes()) > 0


def test_learning_starts_below_the_batch_size_does_not_stall():
    """Updates wait for a full batch; the actors must be let run until the replay holds one (the
    limiter once let them stop at learning_starts + lead, short of it, and both sides waited)."""
    with closed_cleanly(executor(1.0, actors=1, learning_starts=10, batch_size=100)) as ex:
        run_to(ex, 600, timeout=60)
        assert ex.updates > 0 and abs(ex.updates - (ex.env_steps - 100)) <= default_lead(1, 1) + 2


# --- central inference ---------------------------------------------------------------------------
@pytest.mark.parametrize("act, num_envs", [("numpy", 1), ("numba", 3)])
def test_central_inference_acts_for_every_actor_in_the_learner(act, num_envs):
    with closed_cleanly(executor(1.0, inference="central", act=act, num_envs=num_envs)) as ex:
        run_to(ex, 3_000)
        error = ex.ratio_error()
        assert error is not None and error <= 0.05, error
        ex.drain_staleness()
        assert 0 <= ex.staleness_max <= 1 + default_lead(2, num_envs) + 2 * num_envs
        totals = ex.timer_totals()
        assert totals["Act"][2] == 1 and totals["Act"][1] > 0  # acted in the learner's process...
        assert totals["InferenceWait"][2] == 2 and totals["InferenceWait"][1] >= totals["Act"][1]  # ...for both actors
        assert totals["InferenceServe"][1] == totals["Act"][1] and totals["WeightSync"][1] > 0
        assert totals.get("WeightFetch", (0, 0, 0))[1] == 0  # no weights copied to the actors
        assert len(ex.drain_episodes()) > 0


def test_central_inference_answers_with_the_policys_actions():
    """The transport alone, an actor on a thread: every answer is the act function's output for
    that actor's observations and draws, batched over whoever asked."""
    import multiprocessing as mp

    ctx = mp.get_context("fork")
    layout = inference_layout(2, 3, (4,), (), "int64", np.zeros(3, np.float32), np.zeros(3, np.int64))
    server = InferenceServer(layout, lambda: ctx.Pipe(duplex=False))
    batches = []

    def act(obs, explore, random_actions):  # a rule the test can recompute: argmax of obs, or the random action
        batches.append(len(obs))
        return np.where(explore < 0.5, random_actions, obs.argmax(axis=1))

    clients = [InferenceClient(*server.client_args(i), should_stop=lambda: False) for i in range(2)]
    rng = np.random.default_rng(0)
    asks = [(rng.standard_normal((3, 4)).astype(np.float32), rng.random(3).astype(np.float32), rng.integers(0, 9, 3))
            for _ in range(2)]
    answers = [None, None]

    def ask(i):
        answers[i] = clients[i].act(*asks[i])

    threads = [threading.Thread(target=ask, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    deadline = time.perf_counter() + 10
    while any(a is None for a in answers) and time.perf_counter() < deadline:
        server.wait(0.01)
        server.serve(act, version=7)
    for t in threads:
        t.join(5)
    for (obs, explore, random_actions), answer in zip(asks, answers):
        np.testing.assert_array_equal(answer, np.where(explore < 0.5, random_actions, obs.argmax(axis=1)))
    assert sum(batches) == 6 and clients[0].version == 7 and not server.pending()
    # an actor told to stop while it waits gives up instead of hanging
    stopping = InferenceClient(*server.client_args(0), should_stop=lambda: True)
    with pytest.raises(InferenceStopped):
        stopping.act(*asks[0])
    assert server.pending()
    server.forget(0)  # as a restart does: the dead actor's question is dropped
    assert not server.pending()
    for c in [*clients, stopping]:
        c.close()
    server.close()


def test_central_inference_is_checked():
    with pytest.raises(HetrlError, match="inference must be one of actor, central"):
        executor(inference="centre")


@pytest.mark.parametrize("inference", ["actor", "central"])  # central: the dead actor's unanswered request is dropped
def test_a_killed_actor_is_restarted_and_the_run_goes_on(inference):
    with closed_cleanly(executor(0.25, inference=inference)) as ex:
        run_to(ex, 1_500)
        victim = ex.actor_pids()[0]
        os.kill(victim, signal.SIGKILL)
        run_to(ex, 4_000)
        assert ex.restarts == 1
        assert victim not in ex.actor_pids() and all(alive(p) for p in ex.actor_pids())


def test_an_exception_in_the_learner_stops_every_actor(tmp_path, monkeypatch):
    cfg = make_config("dqn", "CartPole-v1", overrides=["hidden=32,32", "learning_starts=300", "train_every=1",
                                                         "executor=local", "actors=2", "plan=rule", "steps=5000"])
    session = Session.create(cfg, tmp_path / "run")
    learner = session.executor.learner
    original = learner.update

    def failing(batch):
        if learner.updates >= 50:
            raise RuntimeError("boom")
        return original(batch)

    monkeypatch.setattr(learner, "update", failing)
    with pytest.raises(RuntimeError, match="boom"):
        session.train(progress=False)
    pids = session.executor.actor_pids()
    time.sleep(0.2)
    assert pids and not any(alive(p) for p in pids)
    assert segments(os.getpid()) == []


def test_checkpoint_keeps_the_whole_state(tmp_path):
    """Everything saved comes back: counters, the learner's generator (replay sampling), the replay
    with its priorities, networks, targets, optimiser; compared whole, as test_resume does."""
    from test_resume import _assert_identical

    ex = executor(0.5, prioritized=True)
    try:
        run_to(ex, 2_000)
        state = copy.deepcopy(ex.state_dict())
    finally:
        ex.close()
    fresh = executor(0.5, prioritized=True)
    assert fresh.rng.bit_generator.state != state["rng"] and state["finished"]  # restoring them is seen
    fresh.load_state_dict(state)
    assert set(state) == {"executor", "env_steps", "rng", "finished", "restarts", "replay", "learner"}
    _assert_identical(fresh.state_dict(), state)
    assert fresh.updates == state["learner"]["updates"] > 0
    try:
        run_to(fresh, state["env_steps"] + 500)  # and it goes on from there
        assert fresh.updates > state["learner"]["updates"]
    finally:
        fresh.close()


def test_an_inline_checkpoint_is_refused_with_the_fix(tmp_path):
    from hetrl.errors import HetrlError

    ex = executor()
    with pytest.raises(HetrlError, match="written by the inline executor, not the local one; resume it with "
                                         "\"executor\": \"inline\" in the run's config.json$"):  # resume takes no --set
        ex.load_state_dict({"executor": "inline"})
    ex.close()


def _dying_actor(exitcode, traceback=""):
    """What LocalExecutor._watch_actors reads, for one actor on its third quick death."""
    from types import SimpleNamespace

    logged = []
    fake = SimpleNamespace(should_stop=lambda: False, _messages=lambda: ({0: traceback} if traceback else {}),
                           _procs=[SimpleNamespace(exitcode=exitcode, join=lambda: None)], _started_at=[time.perf_counter()],
                           _quick_deaths=[2], log=logged.append, restarts=0, _incarnations=[0], _spawn=lambda i: None)
    return fake, logged


def test_a_third_quick_death_points_to_a_traceback_only_when_there_is_one():
    """Issue 24 item 10: "see its traceback above" after a SIGKILL that left none."""
    from hetrl.errors import ActorsFailed

    fake, logged = _dying_actor(-signal.SIGKILL)
    with pytest.raises(ActorsFailed) as failed:
        LocalExecutor._watch_actors(fake)
    assert "failed three times right after starting (killed by SIGKILL); it left no traceback" in str(failed.value)
    assert "traceback above" not in str(failed.value) and logged == []
    fake, logged = _dying_actor(1, "Traceback (most recent call last):\n  ...\nValueError: no such env")
    with pytest.raises(ActorsFailed, match=r"\(ValueError: no such env\); see its traceback above"):
        LocalExecutor._watch_actors(fake)
    assert logged == ["actor 0 crashed:\nTraceback (most recent call last):\n  ...\nValueError: no such env"]  # above it


@pytest.mark.parametrize("machine, refused", [("x86_64", False), ("AMD64", False), ("aarch64", True), ("arm64", True),
                                              ("ppc64le", True), ("riscv64", True)])
def test_the_rings_are_refused_where_stores_may_be_reordered(monkeypatch, machine, refused):
    """The rings publish data with plain stores, then a counter: safe under x86's total store order
    only. Elsewhere the local executor is refused before anything is built (and the plan never
    picks it), naming the executors that need no shared memory."""
    import platform

    from hetrl.planner.choice import search_space

    monkeypatch.setattr(platform, "machine", lambda: machine)
    auto = make_config("dqn", "CartPole-v1", None, ["executor=auto"])
    assert search_space(auto)[0] == (("inline",) if refused else ("inline", "local"))
    if not refused:
        SharedArrays({"x": ((2,), "int64")}).close()
        return
    message = (f"the local executor shares memory between processes through rings that rely on x86's store ordering, "
               f"which this {machine} machine does not give; use executor=inline (one process) or executor=ray")
    with pytest.raises(HetrlError) as info:
        executor()
    assert str(info.value) == message
    with pytest.raises(HetrlError, match="store ordering"):
        SharedArrays({"x": ((2,), "int64")})
    with pytest.raises(HetrlError, match="store ordering"):
        Session(make_config("dqn", "CartPole-v1", None, ["executor=local", "actors=1", "plan=rule", "hidden=8,8"]))


# --- the command line ---------------------------------------------------------------------------
def children(pid):
    out = []
    for task in glob.glob(f"/proc/{pid}/task/*/children"):
        with open(task) as f:
            out += [int(p) for p in f.read().split()]
    return out


def test_ctrl_c_stops_everything_within_5_seconds_and_keeps_a_checkpoint(tmp_path):
    run = tmp_path / "run"
    proc = subprocess.Popen(
        [sys.executable, "-m", "hetrl", "train", "dqn", "CartPole-v1", "--executor", "local", "--actors", "2",
         "--steps", "1000000", "--plan", "rule", "--run-dir", str(run), "--no-progress", "--set", "hidden=32,32",
         "--set", "log_every=500", "--set", "eval_every=0"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
    )
    try:
        deadline = time.time() + 120
        while time.time() < deadline and (not (run / "metrics.csv").exists() or len((run / "metrics.csv").read_text().splitlines()) < 4):
            time.sleep(0.2)
        family = [p for c in children(proc.pid) for p in [c, *children(c)]]  # actors are the fork server's children
        assert len(family) >= 3, family  # fork server, resource tracker, actors
        os.killpg(proc.pid, signal.SIGINT)  # what a terminal's Ctrl-C does: the whole process group
        start = time.time()
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 130, err[-2000:]
    assert time.time() - start < 5 + 5  # stopping (< 5 s) plus the final checkpoint and summary
    time.sleep(0.3)
    assert not [p for p in family if alive(p)]
    assert segments(proc.pid) == []
    assert list((run / "checkpoints").glob("step_*.pt"))
    summary = json.loads((run / "summary.json").read_text())
    assert summary["interrupted"] and summary["executor"] == "local" and summary["actors"] == 2


def test_hetrl_resume_continues_a_local_run(tmp_path):
    import hetrl

    first = hetrl.train("dqn", "CartPole-v1", steps=1_500, run_dir=tmp_path / "run", progress=False, plan="rule",
                        executor="local", actors=1, hidden=(32, 32), learning_starts=500, train_every=1, eval_every=0,
                        eval_episodes=2)
    assert first.executor == "local" and first.env_steps >= 1_500
    second = hetrl.resume(tmp_path / "run", steps=2_500, progress=False)
    assert second.env_steps >= 2_500 and second.updates > first.updates
    assert segments(os.getpid()) == []


@pytest.mark.parametrize("act", ["numba", "torch"])
def test_actors_run_the_placements_act_backend(act):
    """A placement that moves Act changes what the actor processes run, and ran() reports it from them."""
    with closed_cleanly(executor(act=act, actors=1)) as ex:
        run_to(ex, 1_500)
        deadline = time.perf_counter() + 10
        while "Act" not in ex.ran() and time.perf_counter() < deadline:
            ex.iteration()
        ran = ex.ran()
        assert ran["Act"] == f"{act} on cpu, 1 actor", ran
        assert ran["EnvStep"] == "gymnasium on cpu, 1 actor", ran
        assert ran["Learn"].startswith("torch on cpu"), ran
        assert ex.timer_totals()["Act"][1] > 0  # the actors acted (after learning_starts) with that copy


def test_the_run_summary_reports_what_the_actors_ran(tmp_path):
    """A plan file that moves Act (hand-edited, as a user would) changes the actors' Act, and the
    summary says so from what they report."""
    import json
    from pathlib import Path

    import hetrl

    raw = json.loads((Path(__file__).parent / "data/checkpoints_0.1.0/dqn_local/plan.json").read_text())
    raw["placement"]["act"]["backend"] = "numba"
    raw.update(executor="local", actors=1, inference="actor")
    plan_file = tmp_path / "plan.json"
    plan_file.write_text(json.dumps(raw))
    result = hetrl.train("dqn", "CartPole-v1", steps=1_500, plan=str(plan_file), executor="auto", progress=False,
                         eval_every=0, learning_starts=500, hidden=(16, 16), batch_size=16, run_dir=tmp_path / "run")
    summary = json.loads((Path(result.run_dir) / "summary.json").read_text())
    assert summary["placement"]["Act"] == "numba on cpu, 1 actor", summary["placement"]


def test_the_limiter_lets_the_actors_on_after_every_update_of_a_burst():
    """Raised only after a whole burst, the limit held the actors still while the learner worked
    through what they owed, and then the learner waited for them: the two took turns."""
    from hetrl.runtime.shared import ALLOWED_ENV_STEPS

    with closed_cleanly(executor(1.0, actors=1)) as ex:
        run_to(ex, 600)
        flags, seen = ex.control["flags"], []
        learn_on = ex.learning.learn_on

        def recording(batch):
            seen.append(int(flags[ALLOWED_ENV_STEPS]))
            return learn_on(batch)

        ex.learning.learn_on = recording
        ex._learn(4)
        assert len(seen) == 4 and all(b == a + 1 for a, b in zip(seen, seen[1:])), seen
