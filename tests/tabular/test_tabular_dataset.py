"""Collecting, saving and loading experience datasets, and the errors for bad inputs."""

import json

import numpy as np
import pytest

from hetrl.errors import HetrlError
from hetrl.tabular.dataset import collect, load
from hetrl.tabular.evaluate import TabularModel


@pytest.mark.parametrize(
    "env_id, env_kwargs, states, actions",
    [
        ("FrozenLake-v1", {}, 16, 4),
        ("FrozenLake-v1", {"map_name": "8x8"}, 64, 4),
        ("FrozenLake8x8-v1", {}, 64, 4),
        ("Taxi-v4", {}, 500, 6),
        ("CliffWalking-v1", {}, 48, 4),
    ],
)
def test_collected_transitions_are_possible_under_the_model(env_id, env_kwargs, states, actions):
    data = collect(env_id, 3000, env_kwargs=env_kwargs, seed=2)
    assert (data.n_states, data.n_actions, len(data)) == (states, actions, 3000)
    assert data.obs.dtype == data.action.dtype == data.next_obs.dtype == data.next_action.dtype == np.int32
    assert data.reward.dtype == np.float32 and data.done.dtype == bool
    model = TabularModel.from_env(data.make_env())
    possible = {(int(sa), int(s2), float(r), bool(d)) for sa, s2, r, d in zip(model.sa, model.next_state, model.reward, model.terminated)}
    sa = data.obs.astype(np.int64) * actions + data.action
    seen = set(zip(sa.tolist(), data.next_obs.tolist(), data.reward.tolist(), data.done.tolist()))
    assert seen <= possible
    # the dataset is a trajectory: the next transition starts from s' with a', unless the episode ended
    continues = (data.obs[1:] == data.next_obs[:-1]) & (data.action[1:] == data.next_action[:-1])
    assert continues[~data.done[:-1]].mean() > 0.9


def test_epsilon_greedy_prefers_learned_actions():
    random = collect("FrozenLake-v1", 20_000, "random", seed=0)
    greedy = collect("FrozenLake-v1", 20_000, "epsilon-greedy", epsilon=0.1, seed=0)
    assert greedy.policy == "epsilon-greedy" and greedy.epsilon == 0.1
    # a greedy learner on FrozenLake reaches the goal (reward 1) more often than a random walk
    assert greedy.reward.sum() > 2 * random.reward.sum()


def test_save_load_round_trip(tmp_path, frozenlake_small):
    path = frozenlake_small.save(tmp_path / "fl.npz")
    loaded = load(path)
    assert (loaded.env_id, loaded.n_states, loaded.n_actions, loaded.seed) == ("FrozenLake-v1", 16, 4, 1)
    for name in ("obs", "action", "reward", "next_obs", "done", "next_action"):
        np.testing.assert_array_equal(getattr(loaded, name), getattr(frozenlake_small, name))
    with np.load(path, allow_pickle=False) as raw:  # the documented format, read without hetrl
        assert json.loads(str(raw["meta"]))["format"] == "hetrl-tabular"


def test_env_kwargs_are_kept(tmp_path):
    data = collect("FrozenLake-v1", 500, env_kwargs={"is_slippery": False})
    loaded = load(data.save(tmp_path / "d.npz"))
    assert loaded.env_kwargs == {"is_slippery": False}
    assert loaded.make_env().unwrapped.P[0][2][0][0] == 1.0  # deterministic moves


def _garbage(path, out):
    out.write_bytes(b"not a zip at all" * 10)
    return out


def _truncated(path, out):
    out.write_bytes(path.read_bytes()[:500])
    return out


def _npy(path, out):
    np.save(out.with_suffix(".npy"), np.zeros(3))
    return out.with_suffix(".npy")


def _rewrite(path, out, **changes):
    with np.load(path, allow_pickle=False) as raw:
        arrays = {k: raw[k] for k in raw.files}
    arrays.update(changes)
    for key in [k for k, v in changes.items() if v is None]:
        del arrays[key]
    np.savez(out, **arrays)
    return out


@pytest.fixture
def saved(tmp_path, frozenlake_small):
    return frozenlake_small.save(tmp_path / "good.npz")


def test_missing_dataset(tmp_path):
    with pytest.raises(HetrlError, match="does not exist; create it with `hetrl tabular collect"):
        load(tmp_path / "nope.npz")


@pytest.mark.parametrize(
    "damage, message",
    [
        (_garbage, r"not a .npz \(zip\) archive"),
        (_truncated, "not a readable .npz"),
        (_npy, "single .npy array"),
        (lambda p, out: _rewrite(p, out, done=None), "missing arrays done"),
        (lambda p, out: _rewrite(p, out, meta=np.array("{broken")), "not a readable"),
        (lambda p, out: _rewrite(p, out, meta=np.array(json.dumps({"format": "other"}))), "not a 'hetrl-tabular' header"),
        (lambda p, out: _rewrite(p, out, obs=np.full(3000, 99, dtype=np.int32)), r"obs has values outside \[0, 16\)"),
        (lambda p, out: _rewrite(p, out, reward=np.zeros(10, dtype=np.float32)), "reward has shape"),
        (lambda p, out: _rewrite(p, out, action=np.zeros(3000, dtype=np.float32)), "action has dtype float32"),
        (lambda p, out: _rewrite(p, out, reward=np.full(3000, np.nan, dtype=np.float32)), "non-finite"),
    ],
)
def test_malformed_datasets(saved, tmp_path, damage, message):
    bad = damage(saved, tmp_path / "bad.npz")
    with pytest.raises(HetrlError, match=message) as info:
        load(bad)
    assert "re-create it with" in str(info.value) and "\n" not in str(info.value)


@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # gymnasium warns about Taxi-v3 before refusing it
def test_non_discrete_and_unknown_envs():
    with pytest.raises(HetrlError, match="CartPole-v1 has observation space Box.*needs Discrete"):
        collect("CartPole-v1", 10)
    with pytest.raises(HetrlError, match="Taxi-v4"):  # gymnasium 1.4 renamed Taxi-v3
        collect("Taxi-v3", 10)
    with pytest.raises(HetrlError, match="unknown policy 'greedy'"):
        collect("FrozenLake-v1", 10, "greedy")


@pytest.mark.slow
def test_one_million_transitions(tmp_path):
    data = collect("Taxi-v4", 1_000_000, seed=3)
    loaded = load(data.save(tmp_path / "taxi_1m.npz"))
    assert len(loaded) == 1_000_000
    np.testing.assert_array_equal(loaded.next_obs, data.next_obs)


def test_a_dataset_built_in_python_is_checked_too(frozenlake_small):
    # the kernels index tables without bounds checks: a bad state must never reach them
    from dataclasses import replace

    with pytest.raises(HetrlError, match=r"next_obs has values outside \[0, 16\)"):
        replace(frozenlake_small, next_obs=np.full(len(frozenlake_small), 16, dtype=np.int32))


def test_a_directory_given_as_the_dataset_is_named_so(tmp_path):
    with pytest.raises(HetrlError, match="dataset .* is a directory, not a file; create it with"):
        load(tmp_path)
