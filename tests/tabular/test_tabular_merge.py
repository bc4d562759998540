"""Merging: the average of the units' tables, at the end or every K updates of each unit."""

import numpy as np
import pytest
import torch

from hetrl.tabular.merge import merge_tables
from hetrl.tabular.schedule import Order, segments, shard_bounds
from hetrl.tabular.train import TabularConfig, train_tabular


def reference_fp32(dataset, *, algo, units, epochs, order, merge_every, alpha, gamma):
    """Plain float32 data-parallel Q-learning/SARSA, one transition at a time, numpy scalars."""
    S, A, n = dataset.n_states, dataset.n_actions, len(dataset)
    alpha, gamma = np.float32(alpha), np.float32(gamma)
    bounds = [u * n // units for u in range(units + 1)]
    streams = [
        [bounds[u] + int(k) for e in range(epochs) for k in order.indices(bounds[u + 1] - bounds[u], u, e)]
        for u in range(units)
    ]
    tables = np.zeros((units, S, A), dtype=np.float32)
    longest = max(map(len, streams))
    step = merge_every or longest
    for p0 in range(0, longest, step):
        for q, stream in zip(tables, streams):
            for i in stream[p0 : p0 + step]:
                s, a, s2 = dataset.obs[i], dataset.action[i], dataset.next_obs[i]
                if dataset.done[i]:
                    target = dataset.reward[i]
                else:
                    best = q[s2, dataset.next_action[i]] if algo == "sarsa" else q[s2].max()
                    target = dataset.reward[i] + gamma * best
                q[s, a] = q[s, a] + alpha * (target - q[s, a])
        if units > 1:
            tables[:] = (sum(t.astype(np.float64) for t in tables) / units).astype(np.float32)
    return tables[0]


@pytest.mark.parametrize("algo", ["q", "sarsa"])
@pytest.mark.parametrize("units, merge_every", [(2, None), (2, 1), (3, 250), (4, 1000)])
def test_data_parallel_training_matches_the_reference(frozenlake_small, algo, units, merge_every):
    kwargs = dict(algo=algo, units=units, epochs=2, order=Order("random", seed=7), merge_every=merge_every, alpha=0.25, gamma=0.97)
    result = train_tabular(frozenlake_small, TabularConfig(backend="numba-threads", **kwargs))
    expected = reference_fp32(frozenlake_small, **kwargs)
    np.testing.assert_allclose(result.q, expected, rtol=1e-6, atol=1e-7)
    assert np.abs(expected).max() > 0.01


def test_merge_frequency_matters_and_is_counted(frozenlake_small):
    base = dict(units=2, epochs=2, alpha=0.5)
    at_end = train_tabular(frozenlake_small, TabularConfig(**base))
    often = train_tabular(frozenlake_small, TabularConfig(merge_every=100, **base))
    assert at_end.merges == 1 and often.merges == 30  # 2 epochs * 1500 updates per unit / 100
    assert not np.allclose(at_end.q, often.q)
    assert train_tabular(frozenlake_small, TabularConfig(units=1, merge_every=100)).merges == 0


def test_merge_float_tables_numpy_and_torch():
    tables = np.array([[[1.0, -2.0]], [[2.0, 3.0]], [[0.5, 0.25]]], dtype=np.float32)
    expected = np.array([[3.5 / 3, 1.25 / 3]], dtype=np.float32)
    np.testing.assert_array_equal(merge_tables(tables), expected)
    np.testing.assert_array_equal(merge_tables(torch.from_numpy(tables)).numpy(), expected)
    assert merge_tables(tables).dtype == np.float32


def test_merge_int_tables_torch_equals_numpy():
    tables = np.random.default_rng(0).integers(-(2**31), 2**31, size=(5, 7, 3)).astype(np.int32)
    np.testing.assert_array_equal(merge_tables(torch.from_numpy(tables)).numpy(), merge_tables(tables))


def test_shards_and_streams():
    np.testing.assert_array_equal(shard_bounds(10, 3), [0, 3, 6, 10])
    assert list(segments(4, 3, 2, 9)) == [(0, 2, 4), (1, 0, 4), (2, 0, 1)]
    assert list(segments(4, 2, 6, 100)) == [(1, 2, 4)]  # clipped at the end of the stream


def test_orders():
    np.testing.assert_array_equal(Order("strided", stride=3).indices(8, 0, 0), [0, 3, 6, 1, 4, 7, 2, 5])
    np.testing.assert_array_equal(Order().indices(4, 0, 5), [0, 1, 2, 3])
    random = Order("random", seed=1)
    first = random.indices(1000, 0, 0)
    assert sorted(first.tolist()) == list(range(1000))
    assert not np.array_equal(first, random.indices(1000, 0, 1))  # a new permutation each epoch
    assert not np.array_equal(first, random.indices(1000, 1, 0))  # and unit
    np.testing.assert_array_equal(first, Order("random", seed=1).indices(1000, 0, 0))
