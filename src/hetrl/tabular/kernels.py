"""Compiled (numba) kernels: Q-learning and SARSA updates over one shard, in a given order.

Kernel input layout, built once per training by :func:`pack`: one int32 row of four columns per
transition, so a transition is one 16-byte load wherever the order jumps::

    0  s * A + a        flat index of Q(s, a)
    1  s' * A           flat offset of the row of s'; S * A (the terminal row) where done
    2  a'               the next action (SARSA)
    3  r                float32 bits (fp32) or the fixed-point int32 reward (int32)

A Q-table is flat, ``(S + 1) * A`` entries: row ``S`` is the *terminal row*, all zeros and never
updated, so ``r + gamma * max Q(terminal)`` equals ``r`` exactly and the kernels need no branch
on ``done``. ``max`` is branch-free (``max()``), which keeps random orders fast.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from hetrl.tabular.fixed_point import COEF_BITS, COEF_HALF, INT32_MAX, INT32_MIN


def pack(
    obs: np.ndarray,
    actions: np.ndarray,
    next_obs: np.ndarray,
    next_actions: np.ndarray,
    done: np.ndarray,
    rewards: np.ndarray,
    n_states: int,
    n_actions: int,
) -> np.ndarray:
    """The ``[n, 4]`` int32 kernel layout; ``rewards`` is float32 (fp32) or int32 (fixed point)."""
    packed = np.empty((len(obs), 4), dtype=np.int32)
    packed[:, 0] = obs.astype(np.int64) * n_actions + actions
    packed[:, 1] = np.where(done, n_states, next_obs).astype(np.int64) * n_actions
    packed[:, 2] = next_actions
    packed[:, 3] = rewards.view(np.int32)
    return packed


# Transitions copied per block when gathering (4 KiB of rows: stays in L1).
BLOCK = 256


@njit(cache=True, nogil=True)
def _gather(packed, order, k0, k1, block):
    """Copy the rows ``order[k0:k1]`` of ``packed`` into ``block`` (loads that never stall)."""
    for j in range(k1 - k0):
        i = order[k0 + j]
        for c in range(4):
            block[j, c] = packed[i, c]


@njit(cache=True, nogil=True)
def _steps_fp32(q, packed, order, start, stop, alpha, gamma, n_actions, sarsa):
    rewards = packed.view(np.float32)
    for k in range(start, stop):
        i = order[k]
        sa = packed[i, 0]
        row = packed[i, 1]
        if sarsa:
            best = q[row + packed[i, 2]]
        else:
            best = q[row]
            for b in range(1, n_actions):
                best = max(best, q[row + b])
        target = rewards[i, 3] + gamma * best
        q[sa] += alpha * (target - q[sa])


@njit(cache=True, nogil=True)
def _steps_int32(q, packed, order, start, stop, alpha, gamma, n_actions, sarsa):
    for k in range(start, stop):
        i = order[k]
        sa = packed[i, 0]
        row = packed[i, 1]
        if sarsa:
            best = np.int64(q[row + packed[i, 2]])
        else:
            best = np.int64(q[row])
            for b in range(1, n_actions):
                best = max(best, np.int64(q[row + b]))
        target = np.int64(packed[i, 3]) + ((gamma * best + COEF_HALF) >> COEF_BITS)
        current = np.int64(q[sa])
        value = current + ((alpha * (target - current) + COEF_HALF) >> COEF_BITS)
        q[sa] = min(max(value, INT32_MIN), INT32_MAX)


@njit(cache=True, nogil=True)
def learn_fp32(q, packed, order, start, stop, alpha, gamma, n_actions, sarsa, gather):
    """Updates ``order[start:stop]`` of a shard into the flat float32 table ``q``, in place.

    ``alpha`` and ``gamma`` must be float32 so that all arithmetic stays in float32. ``gather``
    (for random orders) first copies each block of rows: an update then never waits on a cache
    miss whose address a later load of the table might alias, which stalls the pipeline.
    """
    if not gather:
        _steps_fp32(q, packed, order, start, stop, alpha, gamma, n_actions, sarsa)
        return
    block = np.empty((BLOCK, 4), dtype=np.int32)
    identity = np.arange(BLOCK, dtype=np.int32)
    for k0 in range(start, stop, BLOCK):
        k1 = min(k0 + BLOCK, stop)
        _gather(packed, order, k0, k1, block)
        _steps_fp32(q, block, identity, 0, k1 - k0, alpha, gamma, n_actions, sarsa)


@njit(cache=True, nogil=True)
def learn_int32(q, packed, order, start, stop, alpha, gamma, n_actions, sarsa, gather):
    """The INT32 fixed-point update (see :mod:`hetrl.tabular.fixed_point`) into int32 ``q``.

    ``alpha`` and ``gamma`` are 16-fractional-bit int64 coefficients; ``gather`` as for fp32.
    """
    if not gather:
        _steps_int32(q, packed, order, start, stop, alpha, gamma, n_actions, sarsa)
        return
    block = np.empty((BLOCK, 4), dtype=np.int32)
    identity = np.arange(BLOCK, dtype=np.int32)
    for k0 in range(start, stop, BLOCK):
        k1 = min(k0 + BLOCK, stop)
        _gather(packed, order, k0, k1, block)
        _steps_int32(q, block, identity, 0, k1 - k0, alpha, gamma, n_actions, sarsa)


@njit(cache=True, nogil=True)
def permutation(out, key):
    """Fill int32 ``out`` with a permutation of ``0..n-1``: Fisher-Yates driven by splitmix64(key)."""
    n = out.shape[0]
    for i in range(n):
        out[i] = i
    state = np.uint64(key)
    for i in range(n - 1, 0, -1):
        state += np.uint64(0x9E3779B97F4A7C15)
        z = state
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        z = z ^ (z >> np.uint64(31))
        j = np.int64(((z >> np.uint64(32)) * np.uint64(i + 1)) >> np.uint64(32))
        tmp = out[i]
        out[i] = out[j]
        out[j] = tmp
