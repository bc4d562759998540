"""INT32 fixed point: bit-exact against a plain-Python reference written here, from the rules in
the docs (round half up, 16-bit coefficients, saturation of stored values, rounded-mean merge)."""

import math

import numpy as np
import pytest

from hetrl.errors import HetrlError
from hetrl.tabular.fixed_point import FixedPoint, coefficient
from hetrl.tabular.merge import merge_tables
from hetrl.tabular.schedule import Order
from hetrl.tabular.train import TabularConfig, train_tabular

LO, HI = -(2**31), 2**31 - 1


def clamp(x: int) -> int:
    return min(max(x, LO), HI)


def round_half_up(x: float) -> int:
    return math.floor(x + 0.5)


def mul_coef(c: int, x: int) -> int:
    """c * x / 2**16, rounded half up (Python's >> floors, like an arithmetic shift)."""
    return (c * x + 2**15) >> 16


def reference_int32(dataset, *, algo, units, epochs, order, merge_every, alpha, gamma, scale):
    """Plain-Python data-parallel INT32 Q-learning/SARSA.

    Returns the final table (lists) and how many stored values saturated along the way.
    """
    S, A, n = dataset.n_states, dataset.n_actions, len(dataset)
    a_c, g_c = round_half_up(alpha * 65536), round_half_up(gamma * 65536)
    rewards = [clamp(round_half_up(r * scale)) for r in dataset.reward.tolist()]
    obs, act = dataset.obs.tolist(), dataset.action.tolist()
    nobs, nact, done = dataset.next_obs.tolist(), dataset.next_action.tolist(), dataset.done.tolist()
    bounds = [u * n // units for u in range(units + 1)]
    streams = []
    for u in range(units):
        length = bounds[u + 1] - bounds[u]
        stream = []
        for epoch in range(epochs):
            stream += [bounds[u] + int(k) for k in order.indices(length, u, epoch)]
        streams.append(stream)
    tables = [[[0] * A for _ in range(S)] for _ in range(units)]
    longest = max(len(s) for s in streams)
    step = merge_every or longest
    saturated = 0
    for p0 in range(0, longest, step):
        for q, stream in zip(tables, streams):
            for i in stream[p0 : p0 + step]:
                s, a = obs[i], act[i]
                if done[i]:
                    target = rewards[i]
                else:
                    best = q[nobs[i]][nact[i]] if algo == "sarsa" else max(q[nobs[i]])
                    target = rewards[i] + mul_coef(g_c, best)
                value = q[s][a] + mul_coef(a_c, target - q[s][a])
                q[s][a] = clamp(value)
                saturated += q[s][a] != value
        if units > 1:
            merged = [[(2 * sum(t[s][a] for t in tables) + units) // (2 * units) for a in range(A)] for s in range(S)]
            tables = [[row[:] for row in merged] for _ in range(units)]
    return tables[0], saturated


@pytest.mark.parametrize("algo", ["q", "sarsa"])
@pytest.mark.parametrize(
    "units, order, merge_every",
    [(1, Order("sequential"), None), (2, Order("random", seed=3), None), (3, Order("strided", stride=7), 500)],
)
def test_int32_bit_exact_on_frozenlake(frozenlake_small, algo, units, order, merge_every):
    kwargs = dict(algo=algo, units=units, epochs=2, order=order, merge_every=merge_every, alpha=0.3, gamma=0.95, scale=2**16)
    result = train_tabular(frozenlake_small, TabularConfig(number_format="int32", backend="numba-threads", **kwargs))
    expected = np.array(reference_int32(frozenlake_small, **kwargs)[0], dtype=np.int64)
    assert result.table.dtype == np.int32
    np.testing.assert_array_equal(result.table, expected)
    assert np.abs(expected).max() > 1000  # the table learned something: the comparison is not of zeros


@pytest.mark.parametrize("algo", ["q", "sarsa"])
def test_int32_bit_exact_with_saturation(make_synthetic, algo):
    # Rewards up to +-40000 at scale 2**16 exceed int32 (40000 * 65536 > 2**31): encoding and
    # the stored values saturate, and the kernel must clamp exactly like the reference.
    data = make_synthetic(2000, n_states=6, n_actions=3, reward_scale=40000.0, seed=5)
    kwargs = dict(algo=algo, units=2, epochs=3, order=Order("random", seed=1), merge_every=700, alpha=0.9, gamma=0.999, scale=2**16)
    result = train_tabular(data, TabularConfig(number_format="int32", backend="numba-threads", **kwargs))
    expected, saturated = reference_int32(data, **kwargs)
    np.testing.assert_array_equal(result.table, np.array(expected))
    assert saturated > 100, "the case was meant to saturate"


def test_int32_small_scale_rounds_like_reference(make_synthetic):
    # scale 10: Q-values are multiples of 0.1, so nearly every product is rounded.
    data = make_synthetic(1500, n_states=4, n_actions=2, reward_scale=3.0, seed=9)
    kwargs = dict(algo="q", units=1, epochs=4, order=Order("sequential"), merge_every=None, alpha=0.37, gamma=0.9, scale=10)
    result = train_tabular(data, TabularConfig(number_format="int32", backend="numba-threads", **kwargs))
    np.testing.assert_array_equal(result.table, np.array(reference_int32(data, **kwargs)[0]))
    np.testing.assert_array_equal(result.q, (result.table / 10).astype(np.float32))


def test_encode_rounds_half_up_and_saturates():
    fp = FixedPoint(scale=4)
    values = np.array([0.125, -0.125, 0.375, -0.375, 1.0, -1.1, 1e10, -1e10])
    # x * 4 = 0.5, -0.5, 1.5, -1.5, 4, -4.4: ties go toward +infinity.
    np.testing.assert_array_equal(fp.encode(values), [1, 0, 2, -1, 4, -4, HI, LO])
    np.testing.assert_array_equal(fp.decode(np.array([1, -4])), np.array([0.25, -1.0], dtype=np.float32))


def test_coefficients_and_scale_validation():
    assert coefficient(0.5, "alpha") == 32768
    assert coefficient(1.0, "gamma") == 65536
    assert coefficient(0.99, "gamma") == round_half_up(0.99 * 65536)
    with pytest.raises(HetrlError, match="alpha must be in"):
        coefficient(1.5, "alpha")
    with pytest.raises(HetrlError, match="scale"):
        FixedPoint(scale=0)
    with pytest.raises(HetrlError, match="rounds to 0"):
        TabularConfig(number_format="int32", alpha=1e-6)


def test_int32_merge_is_the_rounded_half_up_mean():
    tables = np.array([[[-3, 1, 7, HI, LO]], [[-2, 2, 7, HI, LO]]], dtype=np.int32)
    # means -2.5, 1.5, 7, HI, LO: ties toward +infinity, extremes stay exact (no overflow)
    np.testing.assert_array_equal(merge_tables(tables), [[-2, 2, 7, HI, LO]])
    three = np.array([[1], [1], [2]], dtype=np.int32)  # 4/3 -> 1
    np.testing.assert_array_equal(merge_tables(three), [1])
