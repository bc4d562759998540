"""The ray executor and the tabular Ray backend on a real multi-node Ray cluster made on this
machine (``ray.cluster_utils.Cluster``: a head node and a worker node per test, each a raylet of its
own): actors spread over the nodes, a node removed mid-run (its actors restarted elsewhere or the
run going on with fewer, the replay kept), a lost learner as a clear error, and pixel chunks of the
size the settings give."""

import re
import time
from dataclasses import dataclass

import numpy as np
import pytest
import torch

ray = pytest.importorskip("ray")
from ray.cluster_utils import Cluster  # noqa: E402

from hetrl.algos import make_algorithm  # noqa: E402
from hetrl.config import make_config  # noqa: E402
from hetrl.envs import env_spec  # noqa: E402
from hetrl.errors import HetrlError, LearnerLost  # noqa: E402
from hetrl.planner.choice import frame_replay_wanted  # noqa: E402
from hetrl.planner.rule import default_placement  # noqa: E402
from hetrl.runtime.ray_executor import RayExecutor  # noqa: E402

MB = 2**20
# A removed node is seen dead within about a second (Ray's default is tens of seconds).
FAST_FAILURE = {"health_check_initial_delay_ms": 0, "health_check_period_ms": 200, "health_check_failure_threshold": 3}
HANG_S = 240  # a loop that runs this long has hung (no timing is asserted; a run at load 5-6 took over 90 s to start its actors)


@pytest.fixture(scope="module")
def head():
    """A head node of 3 CPUs this process is the driver of; torn down whatever happens."""
    cluster = Cluster(initialize_head=True, head_node_args={
        "num_cpus": 3, "object_store_memory": 100 * MB, "include_dashboard": False, "_system_config": FAST_FAILURE})
    try:
        ray.init(address=cluster.address, include_dashboard=False, logging_level="ERROR", log_to_driver=False)
        yield cluster
    finally:
        ray.shutdown()
        cluster.shutdown()


@pytest.fixture
def worker(head):
    """A second node (1 CPU unless the test asks for more), removed at the end if the test left it."""
    nodes = []

    def add(cpus=1):
        node = head.add_node(num_cpus=cpus, object_store_memory=100 * MB)
        head.wait_for_nodes()
        nodes.append(node)
        return node

    try:
        yield add
    finally:
        for node in nodes:
            if node in head.worker_nodes:
                head.remove_node(node)


def executor(actors, env="CartPole-v1", frames=None, **kw):
    """``frames``: whether the replay is a frame replay, so that chunks carry frames (None: as the planner decides)."""
    network = ["hidden=32,32"] if env == "CartPole-v1" else []
    cfg = make_config("dqn", env, overrides=[*network, "batch_size=32", "learning_starts=300", "replay_ratio=0.25",
                                             "buffer_size=20000"])
    algo = make_algorithm("dqn", env_spec(env), cfg.agent)
    placement = default_placement(torch.device("cpu"), (1, 1), threads=1, mlp_policy=algo.mlp_networks(),
                                  frames=frame_replay_wanted(algo) if frames is None else frames)
    return RayExecutor(algo, placement, 1, 0, actors, log=kw.pop("log", lambda m: None), **kw)


def run_until(ex, steps, check=lambda: None, reported=False):
    """Iterate until ``steps`` env steps (and, with ``reported``, until every actor reported)."""
    start = time.monotonic()
    while ex.env_steps < steps or reported and None in ex.nodes()["actors"]:
        ex.iteration()
        check()
        assert time.monotonic() - start < HANG_S, f"hung at {ex.env_steps} env steps"


def test_actors_spread_over_the_nodes_and_the_learner_stays_on_the_head(head, worker):
    second = worker()
    ex = executor(actors=2)
    try:
        run_until(ex, 600, reported=True)
        nodes = ex.nodes()
        assert set(nodes["actors"]) == {head.head_node.node_id, second.node_id}, nodes
        assert nodes["learner"] == ray.get_runtime_context().get_node_id() == head.head_node.node_id
    finally:
        ex.close()


@dataclass
class NodeLoss:
    """A run that lost the node one of its actors was on (:func:`lose_a_node`)."""

    ex: RayExecutor
    said: list[str]  # what the executor logged
    node_id: str  # the node removed
    before: int  # the replay's size when it was removed
    sizes: list[int]  # the replay's size after each iteration since


@pytest.fixture
def lose_a_node(head, worker):
    """``lose(actors)``: a 1-CPU worker node and an executor of ``actors`` actors (exactly one of
    them on that node), run until every actor reported, the node removed, then run on to 2,000 env
    steps. The executor is closed at the end whatever happens."""
    made = []

    def lose(actors: int) -> NodeLoss:
        second = worker()
        said: list[str] = []
        ex = executor(actors=actors, log=said.append)
        made.append(ex)
        run_until(ex, 600, reported=True)
        assert ex.nodes()["actors"].count(second.node_id) == 1, ex.nodes()
        before, sizes = ex.replay_size, []
        head.remove_node(second)
        run_until(ex, 2_000, lambda: sizes.append(ex.replay_size))
        return NodeLoss(ex, said, second.node_id, before, sizes)

    try:
        yield lose
    finally:
        for ex in made:
            ex.close()


def test_a_lost_node_s_actor_is_restarted_on_a_node_with_room(lose_a_node):
    """Head: learner + 1 actor + 1 free CPU; the second node's actor comes back on the head."""
    run = lose_a_node(actors=2)
    ex, said = run.ex, run.said
    assert ex.restarts == 1 and ex.actors_lost == 0, said
    assert any("left the cluster; restarted it" in line for line in said), said
    learned = ex.state_dict()["env_steps"]  # the env steps the learner was sent
    assert ex.replay_size >= run.before and run.sizes == sorted(run.sizes)  # nothing the replay held is lost
    assert ex.replay_size == learned, (ex.replay_size, learned, ex.lost_steps)  # nor anything sent to it


def test_without_room_the_run_goes_on_with_fewer_actors_and_says_so(lose_a_node):
    """Head: learner + 2 actors fill it; the second node's actor has nowhere to go."""
    run = lose_a_node(actors=3)
    ex, said = run.ex, run.said
    assert ex.actors_lost == 1 and ex.restarts == 0 and ex.live_actors() == 2, said
    lost = [line for line in said if "goes on with 2 actors (1 lost)" in line]
    assert len(lost) == 1, said
    assert ex.nodes()["actors"].count(None) == 1 and run.node_id not in ex.nodes()["actors"]
    state = ex.state_dict()
    assert ex.replay_size >= run.before and run.sizes == sorted(run.sizes)
    assert ex.replay_size == state["env_steps"] and state["actors_lost"] == 1


def test_a_lost_learner_is_a_clear_error_not_a_hang(head, worker):
    second = worker(cpus=1)
    ex = executor(actors=1, learner_node=second.node_id)
    try:
        run_until(ex, 500, reported=True)
        assert ex.nodes()["learner"] == second.node_id
        head.remove_node(second)
        with pytest.raises(LearnerLost, match=rf"the learner was lost with its node {second.node_id[:8]} .*run stops at env step"):
            run_until(ex, 10**9)
    finally:
        ex.close()


def test_pixel_chunks_have_the_size_the_settings_give(head, worker):
    """hetrl/Bytes-v0 (uint8 images) with 2 actors over 2 nodes, chunks of 24 steps: every chunk
    arrives whole, and the replay holds bytes."""
    second = worker()
    ex = executor(actors=2, env="hetrl/Bytes-v0", chunk_steps=24)
    assert ex.chunk_steps == 24 and ex.limiter.lead >= 2 * 2 * 24
    try:
        run_until(ex, 700, lambda: (ex.env_steps % 24 == 0) or pytest.fail(f"{ex.env_steps} is not whole chunks"), reported=True)
        assert set(ex.nodes()["actors"]) == {head.head_node.node_id, second.node_id}
        assert ex.updates > 0
        replay = ex.state_dict()["replay"]
        obs = next(v for k, v in replay.items() if "obs" in k and isinstance(v, np.ndarray))
        assert obs.dtype == np.uint8
    finally:
        ex.close()


@pytest.mark.parametrize("frames, size", [(False, 24), (True, 48)], ids=["stacks", "frames"])
def test_a_chunk_lost_with_its_node_is_dropped_and_the_replay_keeps_the_rest(head, worker, frames, size):
    """A pixel chunk (over Ray's 100 KB inline limit, so its only copy is in the second node's object
    store: a frame chunk of 48 steps of Bytes-v0's two new 36x36 frames is) whose node goes before the
    learner fetched it: the learner adds the rest, the steps are taken back and said; with frames, the
    restarted actor's fresh stream leaves no transition referring to the lost frames."""
    second = worker()
    said = []
    ex = executor(actors=2, env="hetrl/Bytes-v0", chunk_steps=size, log=said.append, frames=frames)
    assert ex.frames == frames
    try:
        run_until(ex, 400, reported=True)
        ex._settle()
        far = ex.nodes()["actors"].index(second.node_id)
        meta, chunk = ex._handles[far].collect.options(num_returns=2).remote(size, ex._issued, None, -1)
        steps = ray.get(meta)["steps"]
        head.remove_node(second)
        before, sent = ex.replay_size, ex.env_steps
        ex._queued.append(chunk)  # as _receive_chunks queues it
        ex._queued_steps.append(steps)
        ex.env_steps += steps
        ex._issued += steps
        run_until(ex, sent + 200)
        # this chunk, and any the actor had returned meanwhile that were not fetched yet
        assert steps == size and ex.lost_steps >= size and ex.lost_steps % size == 0, said
        assert any(re.search(r"\d chunk\(s\) of \d+ env steps were lost with their node", line) for line in said), said
        state = ex.state_dict()
        assert ex.replay_size >= before and ex.replay_size == state["env_steps"] and ex.dropped == 0
    finally:
        ex.close()


@pytest.mark.parametrize("chunk, match", [(-1, "ray_chunk_steps must be between 0"), (30_000, "exceeds the replay's capacity")])
def test_a_bad_chunk_size_is_a_one_line_error(chunk, match):
    with pytest.raises(HetrlError, match=match):
        executor(actors=1, chunk_steps=chunk)


def test_tabular_ray_units_spread_over_the_nodes(head, worker, monkeypatch):
    """Two units on two nodes learn the tables the numba threads learn."""
    from hetrl.primitives.tabular_learn_ray import TabularLearnRay
    from hetrl.tabular.dataset import collect
    from hetrl.tabular.train import TabularConfig, train_tabular

    second = worker(cpus=2)
    seen = []
    build = TabularLearnRay.__init__

    def recording(self, *args, **kwargs):
        build(self, *args, **kwargs)
        seen.append(self.nodes())

    monkeypatch.setattr(TabularLearnRay, "__init__", recording)
    data = collect("FrozenLake-v1", 2000, seed=1)
    settings = {"algo": "q", "units": 2, "epochs": 2, "merge_every": 500}
    spread = train_tabular(data, TabularConfig(backend="ray", **settings))
    assert len(seen) == 1 and set(seen[0]) == {head.head_node.node_id, second.node_id}, seen
    np.testing.assert_array_equal(spread.table, train_tabular(data, TabularConfig(backend="numba-threads", **settings)).table)


def test_a_run_whose_learner_is_lost_stops_with_its_newest_checkpoint_kept(head, tmp_path):
    """The session's side: a one-line LearnerLost naming the checkpoint it keeps, which loads."""
    from hetrl.run.callbacks import Callback
    from hetrl.run.rundir import RunDir
    from hetrl.training import Session

    cfg = make_config("dqn", "CartPole-v1", overrides=[
        "hidden=32,32", "batch_size=32", "learning_starts=300", "executor=ray", "actors=1", "plan=rule", "threads=1",
        "steps=20000", "checkpoint_every=500", "eval_every=0", "eval_episodes=1"])
    session = Session.create(cfg, tmp_path / "run", progress=False)

    class LoseTheLearner(Callback):
        def on_checkpoint(self, info):
            if info.env_steps >= 500:
                ray.kill(session.executor.learner)  # what its node leaving the cluster does to it

    with pytest.raises(LearnerLost) as caught:
        session.train(progress=False, callbacks=[LoseTheLearner()])
    message = str(caught.value)
    assert len(message.splitlines()) == 1, message
    saved = session.saved_at
    assert f"the newest checkpoint (env step {saved:,}) is kept as it was; `hetrl resume" in message, message
    path, state = RunDir.open(tmp_path / "run").load_checkpoint()
    assert path.name == f"step_{saved:010d}.pt" and state["executor"]["learner"]["updates"] > 0, path


def test_the_profiler_measures_a_pixel_chunk_crossing_to_the_second_node(head, worker):
    """ChunkTransfer rows, one per chunk size, measured across the two nodes."""
    from hetrl.profile import CHUNK_SIZES, _jobs

    worker()
    cfg = make_config("dqn", "hetrl/Bytes-v0", overrides=["batch_size=32"])
    algo = make_algorithm("dqn", env_spec("hetrl/Bytes-v0"), cfg.agent)
    jobs = dict(_jobs(algo, ["cpu"], [1]))
    rows = jobs["ChunkTransfer ray"]()
    assert [(r.primitive, r.backend, r.size) for r in rows] == [("ChunkTransfer", "ray:nodes", n) for n in CHUNK_SIZES]
    assert all(0 < r.p10_s <= r.median_s <= r.p90_s for r in rows), rows
