"""numpy forwards mirror the torch forwards exactly (within float32 rounding)."""

import numpy as np
import pytest
import torch

from hetrl.nets import Actor, QNetwork, numpy_params


@pytest.mark.parametrize("dueling", [False, True])
def test_qnetwork_numpy_forward_matches_torch(dueling):
    torch.manual_seed(0)
    net = QNetwork(6, 3, (32, 16), dueling=dueling)
    obs = np.random.default_rng(0).standard_normal((10, 6)).astype(np.float32)
    with torch.no_grad():
        want = net(torch.as_tensor(obs)).numpy()
    got = net.forward_numpy(numpy_params(net), obs)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    if dueling:  # the dueling combination keeps mean advantage out of Q: mean_a Q == V
        h = net.trunk(torch.as_tensor(obs))
        np.testing.assert_allclose(got.mean(axis=1), net.value(h).squeeze(1).detach().numpy(), rtol=1e-5, atol=1e-5)


def test_actor_respects_action_bounds():
    torch.manual_seed(0)
    actor = Actor(3, 2, (16,), low=(-2.0, 0.0), high=(2.0, 1.0))
    obs = 100 * np.random.default_rng(0).standard_normal((50, 3)).astype(np.float32)  # saturate tanh
    got = actor.forward_numpy(numpy_params(actor), obs)
    with torch.no_grad():
        np.testing.assert_allclose(got, actor(torch.as_tensor(obs)).numpy(), rtol=1e-5, atol=1e-6)
    assert got[:, 0].min() >= -2 and got[:, 0].max() <= 2 and got[:, 1].min() >= 0 and got[:, 1].max() <= 1
    assert got[:, 0].max() > 1.9 and got[:, 0].min() < -1.9  # the whole range is reachable
