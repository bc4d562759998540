"""Learn/blas for DQN: the written-out Q-network update (hetrl.nets.flat_q) computes what the torch
learner computes, for conv networks on byte images and for MLPs."""

import numpy as np
import pytest
import torch

from hetrl.algos import make_algorithm
from hetrl.algos.dqn import DQNConfig
from hetrl.envs.spec import EnvSpec
from hetrl.errors import HetrlError
from hetrl.nets.conv import ConvShape
from hetrl.nets.flat_q import FlatQ, supports
from hetrl.primitives.learn_blas import LearnBlas
from hetrl.primitives.learn_torch import LearnTorch


def _image_spec(env_id: str, shape: tuple[int, int, int], n_actions: int = 5) -> EnvSpec:
    return EnvSpec(env_id, shape, True, n_actions, (), (), (), None, False, obs_dtype="uint8")


VECTOR = EnvSpec("Vector-v0", (7,), True, 3, (), (), (), None, False)
FOUR_INPUTS = EnvSpec("Four-v0", (4,), True, 2, (), (), (), None, False)
WIDE = EnvSpec("Wide-v0", (20,), True, 18, (), (), (), None, False)
MINATAR = _image_spec("MinAtar/Breakout-v1", (4, 10, 10), 3)  # 0/1 channels, taken as they are
ODD = _image_spec("Odd-v0", (3, 12, 9))  # bytes / 255, a non-square image
NATURE = _image_spec("Nature-v0", (4, 36, 36), 4)  # the smallest image the Nature CNN's three convolutions fit

CASES = {
    "minatar net, 0/1 bytes": (MINATAR, DQNConfig(network="minatar", double=False, max_grad_norm=None, lr=1e-3)),
    "minatar net, 12x9 bytes, double, clipped, Polyak": (
        ODD, DQNConfig(network="minatar", double=True, max_grad_norm=0.5, tau=0.1, lr=1e-3)),
    "mlp, hard target copies": (VECTOR, DQNConfig(hidden=(32, 16), target_update_every=3, lr=1e-3)),
    # the thin layers' kernels (hetrl.nets.flat_q) and the BLAS products each on both sides of NARROW
    "mlp, 4 inputs, one hidden layer, double": (FOUR_INPUTS, DQNConfig(hidden=(24,), double=True, lr=1e-3)),
    "mlp, wide input, 18 actions, three hidden layers": (WIDE, DQNConfig(hidden=(40, 24, 20), max_grad_norm=0.5, lr=1e-3)),
    "mlp, wide input, 18 actions, one hidden layer": (WIDE, DQNConfig(hidden=(20,), lr=1e-3)),
    "minatar net, 18 actions (the Q layer by BLAS)": (
        _image_spec("MinAtar/Many-v0", (4, 10, 10), 18), DQNConfig(network="minatar", double=False, lr=1e-3)),
}


def _batch(rng, spec: EnvSpec, b: int = 24) -> dict[str, np.ndarray]:
    if spec.obs_dtype == "uint8":
        high = 2 if spec.env_id.startswith("MinAtar") else 256
        obs, next_obs = (rng.integers(0, high, (b, *spec.obs_shape), dtype=np.uint8) for _ in range(2))
    else:
        obs, next_obs = (rng.standard_normal((b, *spec.obs_shape)).astype(np.float32) for _ in range(2))
    return {
        "obs": obs, "next_obs": next_obs,
        "actions": rng.integers(0, spec.n_actions, b),
        "rewards": rng.standard_normal(b).astype(np.float32),
        "discounts": rng.choice([0.0, 0.99], b).astype(np.float32),
        "weights": rng.uniform(0.2, 1.0, b).astype(np.float32),
    }


def _torch(batch):
    return {k: torch.as_tensor(v) for k, v in batch.items()}


@pytest.mark.parametrize("case", CASES)
def test_blas_dqn_matches_torch_update_by_update(case):
    spec, cfg = CASES[case]
    algo = make_algorithm("dqn", spec, cfg)
    blas, plain = LearnBlas(algo, "cpu", seed=3), LearnTorch(algo, "cpu", seed=3)
    start = {k: v.clone() for k, v in plain.learner.q.state_dict().items()}
    rng = np.random.default_rng(0)
    for _ in range(8):
        batch = _batch(rng, spec)
        a, b = blas.learn(**batch), plain.learn(**_torch(batch))
        np.testing.assert_allclose(a["loss"].item(), b["loss"].item(), rtol=1e-4, atol=1e-6)
        np.testing.assert_allclose(a["td_errors"].numpy(), b["td_errors"].numpy(), rtol=1e-4, atol=1e-5)
    assert blas.learner.updates == plain.learner.updates == 8
    mine, theirs = blas.learner.state_dict(), plain.learner.state_dict()
    for net in ("q", "q_target"):
        for name in theirs[net]:
            np.testing.assert_allclose(mine[net][name].numpy(), theirs[net][name].numpy(), rtol=1e-4, atol=2e-5,
                                       err_msg=f"{net}.{name}")
    moved = [name for name in start if not torch.allclose(mine["q"][name], start[name])]
    assert len(moved) == len(start)  # every parameter learned


def test_nature_cnn_gradients_match_autograd():
    """Three convolutions (strides 4, 2, 1): the col2im between them, checked on one update's gradients
    (Adam's first step divides by |gradient|, which makes parameters a poor check on near-zero ones)."""
    algo = make_algorithm("dqn", NATURE, DQNConfig(network="nature", double=True, max_grad_norm=None))
    blas, plain = LearnBlas(algo, "cpu", seed=5), LearnTorch(algo, "cpu", seed=5)
    batch = _batch(np.random.default_rng(1), NATURE, b=6)
    a, b = blas.learn(**batch), plain.learn(**_torch(batch))
    np.testing.assert_allclose(a["td_errors"].numpy(), b["td_errors"].numpy(), rtol=1e-4, atol=1e-5)
    layout = blas.learner.layout
    assert [c.stride for c in layout.convs] == [4, 2, 1]
    for (name, param), grad in zip(plain.learner.q.named_parameters(), layout.views(blas.learner.grads)):
        scale = float(param.grad.abs().max())
        assert scale > 0, name
        np.testing.assert_allclose(grad, param.grad.numpy(), rtol=1e-3, atol=1e-4 * scale, err_msg=name)


def test_patch_index_is_im2col():
    """The gather index reproduces torch's unfold (patches of a strided convolution), position-major."""
    conv = ConvShape(channels=3, height=11, width=8, filters=2, kernel=3, stride=2)
    x = torch.randn(2, 3, 11, 8)
    patches = torch.index_select(x.reshape(2, -1), 1, torch.from_numpy(conv.patch_index())).view(2, conv.positions, conv.patch)
    expected = torch.nn.functional.unfold(x, 3, stride=2).transpose(1, 2)
    torch.testing.assert_close(patches, expected)


def test_checkpoints_move_between_backends():
    algo = make_algorithm("dqn", MINATAR, DQNConfig(network="minatar", lr=1e-3))
    rng = np.random.default_rng(2)
    batches = [_batch(rng, MINATAR) for _ in range(6)]
    blas = LearnBlas(algo, "cpu", seed=0)
    for batch in batches[:3]:
        blas.learn(**batch)
    plain = LearnTorch(algo, "cpu", seed=1)  # other initial weights, overwritten by the checkpoint
    plain.learner.load_state_dict(blas.learner.state_dict())
    again = LearnBlas(algo, "cpu", seed=1)
    again.learner.load_state_dict(plain.learner.state_dict())
    for batch in batches[3:]:
        a, b, c = blas.learn(**batch), plain.learn(**_torch(batch)), again.learn(**batch)
        np.testing.assert_allclose(a["td_errors"].numpy(), b["td_errors"].numpy(), rtol=1e-4, atol=1e-5)
        np.testing.assert_array_equal(a["td_errors"].numpy(), c["td_errors"].numpy())
    assert blas.learner.updates == plain.learner.updates == again.learner.updates == 6


def test_policy_network_shares_the_learners_parameters():
    learn = LearnBlas(make_algorithm("dqn", MINATAR, DQNConfig(network="minatar", lr=1e-2)), "cpu", seed=0)
    obs = torch.ones(1, *MINATAR.obs_shape, dtype=torch.uint8)
    before = learn.learner.policy_network(obs).clone()
    learn.learn(**_batch(np.random.default_rng(3), MINATAR))
    assert not torch.equal(before, learn.learner.policy_network(obs))


def test_what_cannot_be_written_out_is_refused_with_the_fix():
    dueling = make_algorithm("dqn", MINATAR, DQNConfig(network="minatar", dueling=True))
    assert "dueling" in LearnBlas.unsupported(dueling)
    with pytest.raises(HetrlError, match="dueling=false or use the torch learner"):
        LearnBlas(dueling, "cpu", seed=0)
    assert "not one of hetrl's Q-networks" in supports(torch.nn.Linear(2, 2))
    padded = make_algorithm("dqn", MINATAR, DQNConfig(network="minatar")).make_networks()["q"]
    padded.features[0].padding = (1, 1)
    with pytest.raises(ValueError, match="unpadded"):
        FlatQ(padded)


def test_double_q_target_takes_the_first_of_equal_online_maxima():
    """The TD kernel picks the next action itself (no torch argmax): the online network's argmax,
    the first of equal maxima as torch.argmax takes it; without online values, the target's max."""
    from hetrl.primitives.learn_blas import dqn_td_loss

    next_online = np.array([[1.0, 0.0, 2.0], [1.0, 3.0, 2.0], [0.5, 3.0, 1.0]], np.float32)  # (actions, batch)
    next_target = np.array([[10.0, 20.0, 30.0], [40.0, 50.0, 60.0], [70.0, 80.0, 90.0]], np.float32)
    q = np.zeros((3, 3), np.float32)
    actions = np.zeros(3, np.int64)
    zeros, ones = np.zeros(3, np.float32), np.ones(3, np.float32)
    td, grad = np.empty(3, np.float32), np.empty((3, 3), np.float32)
    dqn_td_loss(q, actions, zeros, ones, next_target, next_online, ones, grad, td)
    picked = torch.from_numpy(next_online).argmax(dim=0).numpy()
    np.testing.assert_array_equal(td, next_target[picked, np.arange(3)])
    np.testing.assert_array_equal(td, [10.0, 50.0, 30.0])
    dqn_td_loss(q, actions, zeros, ones, next_target, next_online[:0], ones, grad, td)
    np.testing.assert_array_equal(td, next_target.max(axis=0))
