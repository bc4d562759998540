"""Pixel observations stay uint8 from EnvStep to the learner's device (issue 17 item 2): the replays
store them as uint8, a sampled batch is uint8, Transfer moves bytes, the network converts them on
its device; vector envs keep float32. Then MinAtar and the synthetic image env through every
executor with the fixed rule."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import torch

import hetrl
from hetrl.algos import make_algorithm
from hetrl.config import make_config
from hetrl.envs import env_spec
from hetrl.envs.synthetic import BYTES_ID
from hetrl.planner.rule import default_placement
from hetrl.primitives import build, implementations
from hetrl.protocol import PRIMITIVES, Slot, contract_dims
from hetrl.run.rundir import RunDir
from hetrl.runtime.inference import inference_layout
from hetrl.runtime.learner_role import LearnerRole
from hetrl.runtime.shared import ring_layout
from hetrl.runtime.timers import Timers

pytest.importorskip("minatar")
MINATAR = "MinAtar/Breakout-v1"


def algorithm(env_id, **agent):
    cfg = make_config("dqn", env_id, overrides=["batch_size=16", "buffer_size=512", *(f"{k}={v}" for k, v in agent.items())])
    return make_algorithm("dqn", env_spec(env_id), cfg.agent)


def transitions(algo, n, rng):
    spec = algo.spec
    obs = rng.integers(0, 256 if spec.pixel_scale > 1 else 2, (n + 1, *spec.obs_shape), dtype=np.uint8)
    return {"obs": obs[:-1], "actions": algo.random_actions(rng, n), "rewards": rng.standard_normal(n).astype(np.float32),
            "next_obs": obs[1:], "discounts": np.full(n, 0.99, np.float32)}


def replay_backends(algo):
    return [name for name, impl in implementations("ReplayAdd").items() if not impl.unsupported(algo)]


@pytest.mark.parametrize("env_id", [MINATAR, BYTES_ID])
def test_replays_store_and_sample_uint8(env_id):
    algo = algorithm(env_id)
    backends = replay_backends(algo)
    assert {"numpy", "torch", "frames-numpy", "frames-torch"} <= set(backends)
    batches = {}
    for backend in backends:
        replay = build("ReplayAdd", Slot(backend, "cpu"), algo, 0)
        stored = [a for name, a in replay._data.items() if name in ("obs", "next_obs")] or [replay.frames]
        assert all(str(a.dtype).replace("torch.", "") == "uint8" for a in stored), backend
        replay.add(**transitions(algo, 100, np.random.default_rng(1)))
        out = replay.sample(np.random.default_rng(5).random(16))
        PRIMITIVES["ReplaySample"].check("outputs", out, contract_dims(algo.spec, B=16))
        assert str(out["obs"].dtype).replace("torch.", "") == "uint8" == str(out["next_obs"].dtype).replace("torch.", "")
        batches[backend] = {k: np.asarray(v) for k, v in out.items()}
    first = batches[backends[0]]
    for backend, batch in batches.items():  # the same draws give the same batch in every replay
        for key in ("obs", "next_obs", "actions", "indices"):
            assert np.array_equal(batch[key], first[key]), (backend, key)


def test_vector_envs_keep_float32():
    algo = make_algorithm("dqn", env_spec("CartPole-v1"), make_config("dqn", "CartPole-v1").agent)
    assert replay_backends(algo) == ["numpy", "torch"]  # the frame replays refuse vectors
    for backend in ("numpy", "torch"):
        replay = build("ReplayAdd", Slot(backend, "cpu"), algo, 0)
        assert str(replay._data["obs"].dtype).replace("torch.", "") == "float32"
    assert ring_layout(4, 2, (4,), (), "int64")["obs"] == ((4, 4), "float32")


def test_a_batch_reaches_the_learner_as_uint8():
    """LearnerRole's ReplaySample and Transfer: no float copy on the host; Learn's contract holds."""
    algo = algorithm(MINATAR, learning_starts=16)
    placement = default_placement(torch.device("cpu"), (1, 1), threads=1, mlp_policy=False)
    role = LearnerRole(algo, placement, 0, np.random.default_rng(0), Timers())
    role.add(transitions(algo, 64, np.random.default_rng(2)))
    batch, on_device = role.sample(0)
    assert batch["obs"].dtype == np.uint8 and on_device["obs"].dtype == torch.uint8 == on_device["next_obs"].dtype
    PRIMITIVES["Learn"].check("inputs", on_device, contract_dims(algo.spec, B=16))
    with pytest.raises(TypeError, match="obs has dtype float32, contract says uint8"):
        PRIMITIVES["Learn"].check("inputs", {**on_device, "obs": on_device["obs"].float()}, contract_dims(algo.spec, B=16))


@pytest.mark.parametrize("env_id", [MINATAR, BYTES_ID])
def test_learn_on_uint8_equals_learn_on_the_same_values_as_float32(env_id):
    algo = algorithm(env_id)
    batch = transitions(algo, 16, np.random.default_rng(3))
    batch["weights"] = np.ones(16, np.float32)
    as_bytes = {k: torch.as_tensor(v) for k, v in batch.items()}
    as_floats = {**as_bytes, "obs": as_bytes["obs"].float(), "next_obs": as_bytes["next_obs"].float()}
    learners = [build("Learn", Slot("torch", "cpu", 1), algo, 7) for _ in range(2)]
    for _ in range(3):
        outs = [learner.learn(**b) for learner, b in zip(learners, (as_bytes, as_floats))]
        assert torch.equal(outs[0]["td_errors"], outs[1]["td_errors"])
    for (name, a), b in zip(learners[0].learner.q.state_dict().items(), learners[1].learner.q.state_dict().values()):
        assert torch.equal(a, b), name


def test_the_local_executors_blocks_carry_the_obs_dtype():
    ring = ring_layout(8, 2, (4, 10, 10), (), "int64", "uint8")
    assert ring["obs"] == ((8, 4, 10, 10), "uint8") and ring["next_obs"] == ((8, 4, 10, 10), "uint8")
    block = inference_layout(2, 3, (4, 10, 10), (), "int64", np.zeros(3, np.float32), np.zeros(3, np.int64), "uint8")
    assert block["obs"] == ((2, 3, 4, 10, 10), "uint8")


def test_the_frame_replay_refuses_another_obs_dtype():
    for backend in ("frames-numpy", "frames-torch"):
        cls = implementations("ReplayAdd")[backend].cls
        with pytest.raises(ValueError, match="use replay backend numpy or torch"):
            cls(16, (4, 6, 6), (), "int64", obs_dtype="float32")
        assert cls.unsupported(SimpleNamespace(spec=env_spec("CartPole-v1")))


def stored_obs_dtype(result):
    """The obs dtype of the replay a finished run checkpointed."""
    _, state = RunDir.open(result.run_dir).load_checkpoint()  # the newest, its replay file read back (as numpy)
    replay = state["executor"]["replay"]
    return (replay["obs"] if "obs" in replay else replay["frames"]).dtype


RUNS = [("inline", "actor"), ("local", "actor"), ("local", "central"), ("ray", "actor")]


# Under Ray, MinAtar only (a Ray run costs CI most of a minute): Bytes-v0 runs under the ray executor
# in test_ray_cluster.py (its pixel chunks across two nodes), and test_ray.py checks a Ray pixel run's
# replay against the env's stacks.
EXECUTOR_RUNS = [(env_id, *run) for env_id in (MINATAR, BYTES_ID) for run in RUNS
                 if not (env_id == BYTES_ID and run[0] == "ray")]


@pytest.mark.parametrize("env_id, executor, inference", EXECUTOR_RUNS, ids=["-".join(r) for r in EXECUTOR_RUNS])
def test_pixel_envs_run_under_every_executor(tmp_path, env_id, executor, inference):
    """A few thousand steps with the fixed rule; the replay the run keeps holds uint8."""
    if executor == "ray":
        pytest.importorskip("ray")
    settings = dict(plan="rule", executor=executor, device="cpu", learning_starts=500, batch_size=16, buffer_size=4000,
                    replay_ratio=0.25, train_every=1, eval_every=0, eval_episodes=1, threads=1)
    if executor != "inline":
        settings.update(actors=1, inference=inference)
    result = hetrl.train("dqn", env_id, steps=2_500, seed=0, run_dir=tmp_path / "run", progress=False, **settings)
    assert result.env_steps >= 2_500 and result.updates > 0 and result.executor == executor
    # the rule's conv policy: Act/numba where it serves the network (MinAtar's), else torch; both take uint8
    assert result.placement["Act"].split()[0] == ("numba" if env_id == MINATAR else "torch"), result.placement
    assert "numpy" in result.placement["ReplayAdd"]
    assert stored_obs_dtype(result) == np.uint8
    # the summary's replay memory: bytes, not floats (obs and next_obs, int64 action, float32 reward and discount)
    obs_bytes = int(np.prod(env_spec(env_id).obs_shape))
    assert result.replay_capacity == 4000 and result.replay_bytes == 4000 * (2 * obs_bytes + 16)


def test_a_float32_pixel_checkpoint_loads_into_the_uint8_replay():
    """Checkpoints of pixel runs saved before observations stayed uint8 hold float32 byte values."""
    from hetrl.primitives.replay_numpy import ReplayNumpy

    old = ReplayNumpy(8, (4, 10, 10), (), "int64")  # float32, as pixel runs stored them
    rng = np.random.default_rng(0)
    old.add(rng.integers(0, 2, (5, 4, 10, 10)), np.arange(5), np.ones(5, np.float32), rng.integers(0, 2, (5, 4, 10, 10)), np.ones(5, np.float32))
    new = ReplayNumpy(8, (4, 10, 10), (), "int64", obs_dtype="uint8")
    new.load_state_dict(old.state_dict())
    assert new._data["obs"].dtype == np.uint8 and np.array_equal(new._data["obs"], old._data["obs"])
    state = old.state_dict()
    state["obs"] = state["obs"] + 0.5
    with pytest.raises(ValueError, match="replay state mismatch: obs"):
        new.load_state_dict(state)


def test_minatar_ids_start_from_the_reference_agents_settings():
    from hetrl.algos import DQNConfig
    from hetrl.tuned import DQN_MINATAR, lookup

    config = make_config("dqn", MINATAR)
    cfg = config.agent
    assert {key: getattr(cfg, key) for key in DQN_MINATAR if key != "steps"} == {k: v for k, v in DQN_MINATAR.items() if k != "steps"}
    assert config.steps == DQN_MINATAR["steps"]
    assert (cfg.batch_size, cfg.target_update_every, cfg.double, cfg.eps_end) == (32, 1_000, False, 0.1)
    assert make_config("dqn", MINATAR, overrides=["batch_size=64"]).agent.batch_size == 64  # a setting still wins
    assert lookup("dqn", MINATAR)[1] == "tuned for MinAtar/Breakout-v1, from the MinAtar reference agent (Young and Tian 2019)"
    assert make_config("dqn", "CartPole-v0").agent == DQNConfig()  # an env without a row keeps DQN's defaults
