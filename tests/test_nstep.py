import numpy as np

from hetrl.runtime.nstep import NStepAssembler


def step(asm, obs, act, rew, final, term, trunc):
    return asm(np.array([[obs]], np.float32), np.array([act]), np.array([rew], np.float32),
               np.array([[final]], np.float32), np.array([term]), np.array([trunc]))


def test_one_step_discounts_zero_only_on_termination():
    asm = NStepAssembler(3, 1, 0.9)
    out = asm(np.zeros((3, 1), np.float32), np.arange(3), np.ones(3, np.float32), np.ones((3, 1), np.float32),
              np.array([False, True, False]), np.array([False, False, True]))
    np.testing.assert_allclose(out["discounts"], [0.9, 0.0, 0.9])  # truncation still bootstraps


def test_three_step_returns_by_hand():
    g = 0.5
    asm = NStepAssembler(1, 3, g)
    assert step(asm, 0, 0, 1.0, 1, False, False) is None
    assert step(asm, 1, 1, 2.0, 2, False, False) is None
    out = step(asm, 2, 0, 4.0, 3, False, False)
    np.testing.assert_allclose(out["rewards"], [1 + g * 2 + g * g * 4])
    np.testing.assert_allclose(out["discounts"], [g**3])
    np.testing.assert_allclose(out["obs"][:, 0], [0])
    np.testing.assert_allclose(out["next_obs"][:, 0], [3])
    # the episode terminates: the two pending transitions flush with discount 0
    out = step(asm, 3, 1, 8.0, 4, True, False)
    np.testing.assert_allclose(out["obs"][:, 0], [1, 2, 3])
    np.testing.assert_allclose(out["rewards"], [2 + g * 4 + g * g * 8, 4 + g * 8, 8])
    np.testing.assert_allclose(out["discounts"], [0, 0, 0])
    np.testing.assert_allclose(out["next_obs"][:, 0], [4, 4, 4])


def test_truncation_flushes_with_bootstrap():
    g = 0.5
    asm = NStepAssembler(1, 3, g)
    step(asm, 0, 0, 1.0, 1, False, False)
    out = step(asm, 1, 0, 1.0, 2, False, True)
    np.testing.assert_allclose(out["rewards"], [1 + g, 1])
    np.testing.assert_allclose(out["discounts"], [g**2, g])
    np.testing.assert_allclose(out["next_obs"][:, 0], [2, 2])
