"""Replay storage: the ring, the sum tree, sampling, priorities, checkpoints, backend agreement."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch

from hetrl.primitives import implementations
from hetrl.protocol import PRIMITIVES
from hetrl.primitives.replay_numpy import ReplayNumpy
from hetrl.primitives.replay_torch import ReplayTorch
from hetrl.replay import SumTree
from hetrl.replay.sum_tree import NumpyOps, TorchOps

BACKENDS = [pytest.param(ReplayNumpy, id="numpy"), pytest.param(ReplayTorch, id="torch")]
BELOW_ONE = np.nextafter(1.0, 0.0)  # the largest U[0,1) draw


def make(cls: type, capacity: int, *, obs_shape=(2,), action_shape=(), action_dtype="int64", **kwargs: Any):
    return cls(capacity, obs_shape, action_shape, action_dtype, **kwargs)


def items(start: int, n: int, obs_shape=(2,), action_shape=(), action_dtype="int64") -> dict[str, np.ndarray]:
    """``n`` transitions numbered ``start``...; every field of item k encodes k."""
    ids = np.arange(start, start + n)
    return {
        "obs": np.broadcast_to(ids.reshape(-1, *[1] * len(obs_shape)), (n, *obs_shape)).astype(np.float32),
        "actions": np.broadcast_to(ids.reshape(-1, *[1] * len(action_shape)), (n, *action_shape)).astype(action_dtype),
        "rewards": ids.astype(np.float32),
        "next_obs": np.broadcast_to(ids.reshape(-1, *[1] * len(obs_shape)) + 0.5, (n, *obs_shape)).astype(np.float32),
        "discounts": (ids / 1000).astype(np.float32),
    }


def to_numpy(x: Any) -> np.ndarray:
    return x.cpu().numpy() if isinstance(x, torch.Tensor) else np.asarray(x)


def ids_of(arrays: dict[str, Any]) -> np.ndarray:
    """The item numbers of a batch (or of the stored slots), checking every field agrees."""
    ids = to_numpy(arrays["rewards"]).astype(np.int64)
    n = len(ids)
    assert np.array_equal(to_numpy(arrays["obs"]).reshape(n, -1)[:, 0], ids)
    assert np.array_equal(to_numpy(arrays["actions"]).reshape(n, -1)[:, 0], ids)
    assert np.array_equal(to_numpy(arrays["next_obs"]).reshape(n, -1)[:, 0], ids + 0.5)
    assert np.allclose(to_numpy(arrays["discounts"]), ids / 1000)
    return ids


def priority(td: float, alpha: float, eps: float) -> float:
    return (abs(td) + eps) ** alpha


# ---------------------------------------------------------------------------------------------
# Sampling distribution


# Chi-square critical value for 7 degrees of freedom (8 items) at p = 0.001 (from tables).
CHI2_CRITICAL_DF7_P001 = 24.322


def chi_square(counts: np.ndarray, probabilities: np.ndarray) -> float:
    expected = probabilities * counts.sum()
    return float(((counts - expected) ** 2 / expected).sum())


def sample_counts(replay, rng: np.random.Generator, batches: int = 800, batch_size: int = 256) -> np.ndarray:
    counts = np.zeros(len(replay), dtype=np.int64)
    for _ in range(batches):
        counts += np.bincount(to_numpy(replay.sample(rng.random(batch_size))["indices"]), minlength=len(replay))
    return counts


@pytest.mark.parametrize("cls", BACKENDS)
def test_sampling_frequency_matches_priorities(cls):
    td = np.array([1.0, 5.0, 2.0, 8.0, 3.0, 0.5, 6.0, 4.0], dtype=np.float32)
    probabilities = td / td.sum()  # alpha = 1, eps = 0: priority = |td|
    prioritized = make(cls, 8, prioritized=True, alpha=1.0, eps=0.0)
    uniform = make(cls, 8)
    for replay in (prioritized, uniform):
        replay.add(**items(0, 8))
        replay.update_priorities(np.arange(8), td)

    statistic = chi_square(sample_counts(prioritized, np.random.default_rng(0)), probabilities)
    assert statistic < CHI2_CRITICAL_DF7_P001
    # The same test rejects a sampler that ignores priorities, so it cannot pass by accident.
    wrong = chi_square(sample_counts(uniform, np.random.default_rng(0)), probabilities)
    assert wrong > CHI2_CRITICAL_DF7_P001


# ---------------------------------------------------------------------------------------------
# The ring


@pytest.mark.parametrize("cls", BACKENDS)
def test_wrap_around(cls):
    replay = make(cls, 5, prioritized=True)
    replay.add(**items(0, 3))
    assert len(replay) == 3
    replay.add(**items(3, 4))  # 2 fit at the end, 2 wrap to the start
    assert len(replay) == 5
    state = replay.state_dict()
    assert ids_of(state).tolist() == [5, 6, 2, 3, 4]
    assert state["position"] == 2

    replay.add(**items(7, 12))  # more than the capacity: the last 5 (14..18) are kept
    state = replay.state_dict()
    assert ids_of(state).tolist() == [15, 16, 17, 18, 14]  # where one-by-one adds would put them
    assert (state["position"], state["size"]) == (4, 5)

    one_by_one = make(cls, 5, prioritized=True)
    for k in range(19):
        one_by_one.add(**items(k, 1))
    for key, value in one_by_one.state_dict().items():
        assert np.array_equal(value, state[key]), key


@pytest.mark.parametrize("cls", BACKENDS)
def test_add_rejects_wrong_shapes(cls):
    replay = make(cls, 5)
    batch = items(0, 3)
    batch["next_obs"] = batch["next_obs"][:2]
    with pytest.raises(ValueError, match="next_obs"):
        replay.add(**batch)


# ---------------------------------------------------------------------------------------------
# Priorities and the sum tree


@pytest.mark.parametrize("cls", BACKENDS)
def test_priority_updates(cls):
    alpha, eps = 0.7, 1e-3
    replay = make(cls, 6, prioritized=True, alpha=alpha, eps=eps)
    replay.add(**items(0, 6))
    assert to_numpy(replay.tree.leaves).tolist() == [1.0] * 6  # the initial max priority

    # Slot 2 appears twice: the last value (2.0) wins, and the overridden 3.0 is not a max.
    replay.update_priorities(np.array([0, 2, 5, 2]), np.array([0.5, -3.0, 1.5, 2.0], dtype=np.float32))
    expected = [priority(0.5, alpha, eps), 1.0, priority(2.0, alpha, eps), 1.0, 1.0, priority(1.5, alpha, eps)]
    assert to_numpy(replay.tree.leaves) == pytest.approx(expected, rel=1e-12)
    assert float(replay.tree.total) == pytest.approx(sum(expected), rel=1e-12)
    assert replay.state_dict()["max_priority"] == pytest.approx(priority(2.0, alpha, eps), rel=1e-12)

    replay.add(**items(6, 2))  # overwrites slots 0 and 1 at the max priority
    expected[0] = expected[1] = priority(2.0, alpha, eps)
    replay.update_priorities(np.array([5]), np.array([0.0], dtype=np.float32))
    expected[5] = priority(0.0, alpha, eps)
    assert to_numpy(replay.tree.leaves) == pytest.approx(expected, rel=1e-12)
    assert float(replay.tree.total) == pytest.approx(sum(expected), rel=1e-12)
    assert replay.state_dict()["max_priority"] == pytest.approx(priority(2.0, alpha, eps), rel=1e-12)


@pytest.mark.parametrize("ops", [NumpyOps(), TorchOps("cpu")], ids=["numpy", "torch"])
@pytest.mark.parametrize("capacity", [1, 7, 64])
def test_sum_tree_updates_stay_exact(ops, capacity):
    rng = np.random.default_rng(capacity)
    tree = SumTree(capacity, ops)
    reference = np.zeros(capacity)
    for _ in range(300):
        indices = rng.integers(0, capacity, size=int(rng.integers(1, 2 * capacity + 1)))
        values = rng.random(len(indices)) * 10
        tree.update(ops.asarray(indices, "int64"), ops.asarray(values, "float64"))
        for i, v in zip(indices, values):  # last wins
            reference[i] = v
    nodes = to_numpy(tree.tree)
    assert np.array_equal(to_numpy(tree.leaves), reference)
    # Every node is exactly the sum of its children (recomputed, no drift), as after a rebuild.
    assert np.array_equal(nodes[1 : len(nodes) // 2], nodes[2::2] + nodes[3::2])
    rebuilt = SumTree(capacity, ops)
    rebuilt.set_leaves(ops.asarray(reference, "float64"))
    assert np.array_equal(to_numpy(rebuilt.tree), nodes)


@pytest.mark.parametrize("ops", [NumpyOps(), TorchOps("cpu")], ids=["numpy", "torch"])
def test_sum_tree_find_boundaries(ops):
    tree = SumTree(4, ops)
    tree.update(ops.arange(4), ops.asarray([1.0, 2.0, 3.0, 2.0], "float64"))
    # Prefix intervals [0,1) [1,3) [3,6) [6,8); a target on a boundary belongs to the right.
    targets = ops.asarray([0.0, 0.999, 1.0, 2.999, 3.0, 5.5, 6.0, 7.999], "float64")
    assert to_numpy(tree.find(targets)).tolist() == [0, 0, 1, 1, 2, 2, 3, 3]


@pytest.mark.parametrize("cls", BACKENDS)
def test_importance_weights_by_hand(cls):
    replay = make(cls, 4, prioritized=True, alpha=1.0, eps=0.0)
    replay.add(**items(0, 4))
    replay.update_priorities(np.arange(4), np.array([1.0, 2.0, 3.0, 4.0], dtype=np.float32))
    # total 10; targets (i + 0.5) / 4 * 10 = 1.25, 3.75, 6.25, 8.75 -> items 1, 2, 3, 3
    out = replay.sample(np.full(4, 0.5), beta=0.5)
    assert to_numpy(out["indices"]).tolist() == [1, 2, 3, 3]
    assert ids_of(out).tolist() == [1, 2, 3, 3]
    # w = (len * P) ** -beta = (4 * [.2, .3, .4, .4]) ** -0.5, divided by the batch max (item 1's)
    raw = (4 * np.array([0.2, 0.3, 0.4, 0.4])) ** -0.5
    assert to_numpy(out["weights"]) == pytest.approx(raw / raw.max(), rel=1e-6)
    assert to_numpy(out["weights"]).dtype == np.float32


@pytest.mark.parametrize("cls", BACKENDS)
def test_prioritized_sampling_never_returns_an_empty_slot(cls):
    replay = make(cls, 8, prioritized=True)  # 5 items in 8 slots: leaves 5..7 are empty
    replay.add(**items(0, 5))
    for batch_size in (1, 3, 7):
        indices = to_numpy(replay.sample(np.full(batch_size, BELOW_ONE))["indices"])
        assert indices.max() == 4


@pytest.mark.parametrize("cls", BACKENDS)
def test_uniform_sampling(cls):
    replay = make(cls, 10)
    replay.add(**items(100, 7))
    u = np.random.default_rng(0).random(1000)
    out = replay.sample(u, beta=0.4)
    assert np.array_equal(to_numpy(out["indices"]), np.floor(u * 7).astype(np.int64))
    assert np.array_equal(ids_of(out), 100 + np.floor(u * 7))
    assert np.array_equal(to_numpy(out["weights"]), np.ones(1000, dtype=np.float32))
    assert to_numpy(out["weights"]).dtype == np.float32
    # the largest draw gives the last item
    assert to_numpy(replay.sample(np.array([BELOW_ONE]))["indices"]).tolist() == [6]
    replay.update_priorities(np.array([0]), np.array([5.0], dtype=np.float32))  # a no-op
    assert replay.tree is None


@pytest.mark.parametrize("cls", BACKENDS)
@pytest.mark.parametrize("prioritized", [False, True])
def test_sampling_an_empty_replay_raises(cls, prioritized):
    with pytest.raises(ValueError, match="empty"):
        make(cls, 4, prioritized=prioritized).sample(np.array([0.5]))


# ---------------------------------------------------------------------------------------------
# Agreement between backends


def workload(replay, *, tensors: bool, action_shape=(), action_dtype="int64") -> list[dict[str, np.ndarray]]:
    """Random adds, samples and updates (seeded); ``tensors`` feeds torch tensors on the replay's device."""
    rng = np.random.default_rng(7)
    convert = (lambda x: torch.as_tensor(x, device=replay.device)) if tensors else (lambda x: x)
    outputs = []
    next_id = 0
    for _ in range(40):
        n = int(rng.integers(1, 2 * replay.capacity))
        batch = items(next_id, n, action_shape=action_shape, action_dtype=action_dtype)
        replay.add(**{key: convert(value) for key, value in batch.items()})
        next_id += n
        out = replay.sample(convert(rng.random(32)), beta=0.4)
        td = rng.standard_normal(32).astype(np.float32) * rng.choice([0.01, 1.0, 100.0])
        replay.update_priorities(out["indices"], convert(td))
        outputs.append({key: to_numpy(value) for key, value in out.items()})
    outputs.append(replay.state_dict())
    return outputs


def assert_same_outputs(expected: list[dict], got: list[dict]) -> None:
    """Batches, indices and weights identical; priorities within a few float64 ulps.

    ``x ** alpha`` is not bitwise portable: torch's vectorised CPU pow and CUDA's pow may differ
    from numpy's (libm) in the last bit. Those ulps do not reach the float32 weights, and would
    move an index only if a target fell within an ulp of an interval boundary.
    """
    for step, (a, b) in enumerate(zip(expected, got, strict=True)):
        assert a.keys() == b.keys()
        for key in a:
            if key in ("priorities", "max_priority"):
                assert np.allclose(a[key], b[key], rtol=1e-14, atol=0), f"step {step}: {key}"
            else:
                assert np.array_equal(a[key], b[key]), f"step {step}: {key}"
            if isinstance(a[key], np.ndarray):
                assert a[key].dtype == b[key].dtype, f"step {step}: {key}"


@pytest.mark.parametrize("prioritized", [False, True])
@pytest.mark.parametrize("tensors", [False, True], ids=["numpy-inputs", "tensor-inputs"])
def test_numpy_and_torch_agree(prioritized, tensors):
    expected = workload(make(ReplayNumpy, 50, prioritized=prioritized), tensors=False)
    assert_same_outputs(expected, workload(make(ReplayTorch, 50, prioritized=prioritized), tensors=tensors))


@pytest.mark.gpu
@pytest.mark.parametrize("prioritized", [False, True])
def test_numpy_and_cuda_agree(prioritized):
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    expected = workload(make(ReplayNumpy, 50, prioritized=prioritized), tensors=False)
    assert_same_outputs(expected, workload(make(ReplayTorch, 50, prioritized=prioritized, device="cuda"), tensors=True))


@pytest.mark.gpu
def test_cuda_replay_does_not_synchronise():
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    replay = make(ReplayTorch, 64, prioritized=True, device="cuda")
    batch = {key: torch.as_tensor(value, device="cuda") for key, value in items(0, 80).items()}
    uniform = torch.rand(32, dtype=torch.float64, device="cuda")
    td = torch.rand(32, device="cuda")
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        replay.add(**batch)
        out = replay.sample(uniform)
        replay.update_priorities(out["indices"], td)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    assert out["obs"].device.type == "cuda"


# ---------------------------------------------------------------------------------------------
# Checkpoints


@pytest.mark.parametrize("source", BACKENDS)
@pytest.mark.parametrize("target", BACKENDS)
def test_state_dict_round_trip(source, target):
    original = make(source, 16, prioritized=True)
    original.add(**items(0, 21))
    original.update_priorities(np.array([3, 7, 11]), np.array([4.0, 0.1, 9.0], dtype=np.float32))
    state = original.state_dict()
    assert all(isinstance(state[key], np.ndarray) for key in ("obs", "actions", "priorities"))

    restored = make(target, 16, prioritized=True)
    restored.load_state_dict(state)
    assert len(restored) == len(original)
    for key, value in restored.state_dict().items():
        assert np.array_equal(value, state[key]), key  # exact, priorities included
    rng = np.random.default_rng(3)
    for _ in range(3):
        u = rng.random(64)
        a, b = original.sample(u), restored.sample(u)
        for key in a:
            assert np.array_equal(to_numpy(a[key]), to_numpy(b[key])), key
        td = rng.standard_normal(64).astype(np.float32)
        original.update_priorities(a["indices"], td)
        restored.update_priorities(b["indices"], td)
    original.add(**items(21, 5))  # the position was restored: the next adds land alike
    restored.add(**items(21, 5))
    assert_same_outputs([original.state_dict()], [restored.state_dict()])
    # The state holds copies, not views of the storage.
    assert ids_of(state).tolist() == [16, 17, 18, 19, 20] + list(range(5, 16))


@pytest.mark.parametrize(
    "field, kwargs",
    [
        ("capacity", {"capacity": 17}),
        ("obs_shape", {"obs_shape": (3,)}),
        ("action_shape", {"action_shape": (1,)}),
        ("action_dtype", {"action_dtype": "float32"}),
        ("prioritized", {"prioritized": False}),
    ],
)
@pytest.mark.parametrize("cls", BACKENDS)
def test_load_state_dict_mismatch_raises(cls, field, kwargs):
    source = make(ReplayNumpy, 16, prioritized=True)
    source.add(**items(0, 4))
    settings = {"capacity": 16, "prioritized": True, **kwargs}
    target = make(cls, settings.pop("capacity"), **settings)
    with pytest.raises(ValueError, match=field):
        target.load_state_dict(source.state_dict())


@pytest.mark.parametrize("cls", BACKENDS)
def test_load_state_dict_rejects_bad_arrays(cls):
    state = make(ReplayNumpy, 4).state_dict()
    state["rewards"] = state["rewards"][:3]
    with pytest.raises(ValueError, match="rewards"):
        make(cls, 4).load_state_dict(state)
    del state["capacity"]
    with pytest.raises(ValueError, match="capacity"):
        make(cls, 4).load_state_dict(state)


# ---------------------------------------------------------------------------------------------
# The protocol


@pytest.mark.parametrize("cls", BACKENDS)
@pytest.mark.parametrize("prioritized", [False, True])
@pytest.mark.parametrize("action_shape, action_dtype", [((), "int64"), ((2,), "float32")], ids=["discrete", "continuous"])
def test_sample_conforms_to_the_contract(cls, prioritized, action_shape, action_dtype):
    obs_shape = (3, 2)
    replay = cls(10, obs_shape, action_shape, action_dtype, prioritized=prioritized)
    replay.add(**items(0, 6, obs_shape=obs_shape, action_shape=action_shape, action_dtype=action_dtype))
    out = replay.sample(np.random.default_rng(0).random(5))
    out_as_numpy = {key: to_numpy(value) for key, value in out.items()}
    dims = {"B": 5, "obs": obs_shape, "act": action_shape, "action_dtype": action_dtype}
    PRIMITIVES["ReplaySample"].check("outputs", out_as_numpy, dims)
    if cls is ReplayTorch:
        assert all(isinstance(value, torch.Tensor) for value in out.values())


def test_backends_are_registered():
    for primitive, method in (("ReplayAdd", "add"), ("ReplaySample", "sample"), ("PriorityUpdate", "update_priorities")):
        impls = implementations(primitive)
        assert (impls["numpy"].cls, impls["numpy"].method, impls["numpy"].device_types) == (ReplayNumpy, method, ("cpu",))
        assert (impls["torch"].cls, impls["torch"].method, impls["torch"].device_types) == (ReplayTorch, method, None)


def test_devices():
    assert ReplayNumpy(4, (2,), (), "int64", device=torch.device("cpu")).device.type == "cpu"
    with pytest.raises(ValueError, match="cpu"):
        ReplayNumpy(4, (2,), (), "int64", device="cuda")
    with pytest.raises(ValueError, match="device"):
        ReplayTorch(4, (2,), (), "int64", device="not-a-device")
    assert ReplayTorch(4, (2,), (), "int64", device=torch.device("cpu")).device == torch.device("cpu")


def test_a_field_of_the_wrong_shape_is_named():
    """A scalar where a batch is due gets the field and the shape expected, not a bare TypeError."""
    replay = ReplayNumpy(10, (4,), (), "int64")
    with pytest.raises(ValueError, match=r"rewards has shape \(\), expected \(1,\)"):
        replay.add(np.zeros((1, 4)), np.zeros(1), 0.0, np.zeros((1, 4)), np.ones(1))


@pytest.mark.parametrize("cls", BACKENDS)
@pytest.mark.parametrize("prioritized", [False, True])
def test_nbytes_counts_every_field_for_the_whole_capacity(cls, prioritized):
    """What the run summary reports: uint8 (4, 10, 10) observations stored twice (obs and next_obs),
    an int64 action, float32 reward and discount per transition, and the sum tree's float64 nodes."""
    replay = make(cls, 1000, obs_shape=(4, 10, 10), obs_dtype="uint8", prioritized=prioritized)
    per_transition = 2 * 400 + 8 + 4 + 4
    tree = to_numpy(replay.tree.tree).nbytes if prioritized else 0
    assert replay.nbytes == 1000 * per_transition + tree
    if prioritized:
        assert tree >= 1000 * 8
