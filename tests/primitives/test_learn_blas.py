"""Learn/blas: DDPG's and TD3's hand-written update computes what the torch learner computes
(SAC's: test_learn_blas_sac.py; DQN's: test_learn_blas_dqn.py)."""

from types import SimpleNamespace

import numpy as np
import pytest
import torch

from hetrl.algos import DDPGConfig, TD3Config, make_algorithm
from hetrl.algos.ddpg import DDPG
from hetrl.algos.sac import SACConfig
from hetrl.primitives.learn_torch import LearnTorch
from hetrl.primitives import learn_blas as blas_module
from hetrl.primitives.learn_blas import LearnBlas
from hetrl.envs import env_spec
from hetrl.envs.spec import EnvSpec
from hetrl.errors import HetrlError
from hetrl.nets import narrow
from hetrl.nets.fused_mlp import CACHE_LINE, aligned_zeros
from hetrl.primitives import get

# A wide observation (a BLAS first layer) and three action dimensions, beside Pendulum's narrow one.
WIDE = EnvSpec("Wide-v0", (24,), False, 0, (3,), (-1.0, -2.0, 0.0), (1.0, 2.0, 0.5), None, False)


def _batch(rng, spec, b=40):
    obs_dim, act_dim = spec.obs_shape[0], spec.action_shape[0]
    low, high = np.array(spec.action_low), np.array(spec.action_high)
    return {
        "obs": rng.standard_normal((b, obs_dim)).astype(np.float32),
        "actions": rng.uniform(low, high, (b, act_dim)).astype(np.float32),
        "rewards": rng.standard_normal(b).astype(np.float32),
        "next_obs": rng.standard_normal((b, obs_dim)).astype(np.float32),
        "discounts": rng.choice([0.0, 0.98], b).astype(np.float32),
        "weights": rng.uniform(0.2, 1.0, b).astype(np.float32),
    }


def _torch(batch):
    return {k: torch.as_tensor(v) for k, v in batch.items()}


def _assert_same(a, b, atol=3e-5):
    for name in a:
        np.testing.assert_allclose(a[name].numpy(), b[name].numpy(), rtol=1e-4, atol=atol, err_msg=name)


CASES = {
    "ddpg, Pendulum": ("ddpg", "Pendulum-v1", DDPGConfig(hidden=(64, 64), lr=3e-3)),
    "td3, clipped, narrow hidden layer": ("td3", "Pendulum-v1", TD3Config(hidden=(8, 48, 16), lr=3e-3, max_grad_norm=0.5)),
    "ddpg, wide obs, 3 actions, Polyak 1": ("ddpg", WIDE, DDPGConfig(hidden=(32,), lr=3e-3, tau=1.0)),
    "td3, wide obs, 3 actions": ("td3", WIDE, TD3Config(hidden=(32, 32), lr=3e-3, target_noise=0.3, target_noise_clip=0.2)),
}


@pytest.mark.parametrize("case", CASES)
def test_blas_learner_matches_torch_update_by_update(case):
    name, env, cfg = CASES[case]
    spec = env_spec(env) if isinstance(env, str) else env
    algo = make_algorithm(name, spec, cfg)
    blas, plain = LearnBlas(algo, "cpu", seed=3), LearnTorch(algo, "cpu", seed=3)
    rng = np.random.default_rng(0)
    actor_steps = 0
    for _ in range(12):
        batch = _batch(rng, spec)
        a, b = blas.learn(**batch), plain.learn(**_torch(batch))
        np.testing.assert_allclose(a["loss"].item(), b["loss"].item(), rtol=1e-4, atol=1e-6)
        np.testing.assert_allclose(a["td_errors"].numpy(), b["td_errors"].numpy(), rtol=1e-4, atol=1e-5)
        assert a.keys() == b.keys()  # the actor's loss on the same updates (TD3: every policy_delay)
        if "actor_loss" in b:
            np.testing.assert_allclose(a["actor_loss"].item(), b["actor_loss"].item(), rtol=1e-4, atol=1e-6)
            assert a["actor_loss"].shape == () and a["actor_loss"].dtype == torch.float32
            actor_steps += 1
    assert actor_steps == 12 // cfg.policy_delay
    assert blas.learner.updates == plain.learner.updates == 12
    mine, theirs = blas.learner.state_dict(), plain.learner.state_dict()
    for net in ("actor", "critic", "actor_target", "critic_target"):
        _assert_same(mine[net], theirs[net])
    start = {k: v.clone() for k, v in LearnBlas(algo, "cpu", seed=3).learner.actor.state_dict().items()}
    assert not torch.allclose(mine["actor"]["net.0.weight"], start["net.0.weight"])  # the actor did move


def test_gradient_clipping_is_exercised():
    """A tiny max_grad_norm must change the result: the clip path is really taken."""
    spec = env_spec("Pendulum-v1")
    batch = _batch(np.random.default_rng(1), spec)
    params = []
    for norm in (1e-3, None):
        learn = LearnBlas(make_algorithm("ddpg", spec, DDPGConfig(hidden=(16,), max_grad_norm=norm)), "cpu", seed=0)
        learn.learn(**batch)
        params.append(learn.learner.critic_flat.params.copy())
    assert not np.allclose(params[0], params[1])


@pytest.mark.parametrize("name, cfg", [("td3", TD3Config(hidden=(32, 32))), ("sac", SACConfig(hidden=(32, 32)))])
def test_checkpoints_move_between_backends(name, cfg):
    """The blas learner's state dict is DDPGLearner's (SACLearner's): either resumes the other's run."""
    spec = env_spec("Pendulum-v1")
    algo = make_algorithm(name, spec, cfg)
    rng = np.random.default_rng(2)
    batches = [_batch(rng, spec) for _ in range(10)]
    blas = LearnBlas(algo, "cpu", seed=0)
    for batch in batches[:5]:
        blas.learn(**batch)
    plain = LearnTorch(algo, "cpu", seed=1)  # other initial weights, overwritten by the checkpoint
    plain.learner.load_state_dict(blas.learner.state_dict())
    again = LearnBlas(algo, "cpu", seed=1)
    again.learner.load_state_dict(plain.learner.state_dict())
    for batch in batches[5:]:
        a, b, c = blas.learn(**batch), plain.learn(**_torch(batch)), again.learn(**batch)
        np.testing.assert_allclose(a["td_errors"].numpy(), b["td_errors"].numpy(), rtol=1e-4, atol=1e-5)
        np.testing.assert_array_equal(a["td_errors"].numpy(), c["td_errors"].numpy())
    _assert_same(blas.learner.actor.state_dict(), plain.learner.actor.state_dict())
    if name == "sac":
        np.testing.assert_allclose(blas.learner.log_alpha.numpy(), plain.learner.log_alpha.detach().numpy(), rtol=1e-4, atol=1e-6)
    assert blas.learner.updates == plain.learner.updates == again.learner.updates == 10


def test_policy_network_shares_the_learners_parameters():
    """Acting and evaluation read the torch actor; it must see every update the learner makes."""
    spec = env_spec("Pendulum-v1")
    learn = LearnBlas(make_algorithm("ddpg", spec, DDPGConfig(hidden=(16, 16))), "cpu", seed=0)
    obs = torch.ones(1, 3)
    before = learn.learner.policy_network(obs).detach().clone()
    learn.learn(**_batch(np.random.default_rng(3), spec))
    assert not torch.equal(before, learn.learner.policy_network(obs).detach())


def test_losses_are_new_tensors_each_update():
    """The executor keeps every update's loss until it reports their mean: none may be overwritten."""
    spec = env_spec("Pendulum-v1")
    learn = LearnBlas(make_algorithm("ddpg", spec, DDPGConfig(hidden=(16,))), "cpu", seed=0)
    rng = np.random.default_rng(4)
    first = learn.learn(**_batch(rng, spec))
    kept = first["loss"].item(), first["td_errors"].clone(), first["actor_loss"].item()
    learn.learn(**_batch(rng, spec))
    assert first["loss"].item() == kept[0] and torch.equal(first["td_errors"], kept[1]) and first["actor_loss"].item() == kept[2]


class _UserNetworks(DDPG):
    """An actor-critic whose networks are not hetrl's MLPs (as a user's module would be)."""

    def mlp_networks(self) -> bool:
        return False


def test_unsupported_algorithms_and_devices_are_refused_with_the_fix():
    impl = get("Learn", "blas")
    sac = make_algorithm("sac", env_spec("Pendulum-v1"), SACConfig())
    ddpg = make_algorithm("ddpg", env_spec("Pendulum-v1"), DDPGConfig())
    assert impl.unsupported(sac) is None and impl.unsupported(ddpg) is None
    assert "DQN, DDPG, TD3 and SAC only, not ppo" in impl.unsupported(SimpleNamespace(name="ppo"))
    assert impl.takes_host_arrays and not impl.runs_on("cuda:0")
    with pytest.raises(HetrlError, match="DDPG, TD3 and SAC with MLP networks only.*torch learner"):
        LearnBlas(_UserNetworks(ddpg.spec, ddpg.config), "cpu", seed=0)
    with pytest.raises(HetrlError, match="runs on the host"):
        LearnBlas(ddpg, "cuda", seed=0)


def test_narrow_kernels_are_compiled_before_the_first_update():
    LearnBlas(make_algorithm("ddpg", env_spec("Pendulum-v1"), DDPGConfig(hidden=(8,))), "cpu", seed=0)
    kernels = [getattr(narrow, name) for name in dir(narrow) if hasattr(getattr(narrow, name), "signatures") and not name.startswith("_")]
    assert len(kernels) == 9
    for kernel in (*kernels, blas_module.td_loss, blas_module.squash_backward, blas_module.squashed_gaussian,
                   blas_module.squashed_gaussian_backward, blas_module.soft_actor_loss):
        assert kernel.signatures, kernel


@pytest.mark.parametrize("rows", [1, 37, 64])
def test_layer_kernels_match_numpy(rows):
    """Each fused kernel against the numpy it replaces; odd batches take the kernels' remainder paths."""
    rng = np.random.default_rng(rows)

    def f32(*shape):
        return rng.standard_normal(shape).astype(np.float32)

    def close(actual, expected):
        np.testing.assert_allclose(actual, expected, rtol=1e-4, atol=1e-5)

    relu, wide = (lambda a: np.maximum(a, 0)), 24
    for n_in in (1, 3, 4):
        x, w, b, out = f32(rows, n_in), f32(wide, n_in), f32(wide), np.empty((rows, wide), np.float32)
        for flag in (False, True):
            narrow.forward_four_inputs(x, w, b, out, flag)
            close(out, relu(x @ w.T + b) if flag else x @ w.T + b)
        g, h, gw, gb = f32(rows, wide), f32(rows, wide), np.empty((wide, n_in), np.float32), np.empty(wide, np.float32)
        for masked in (False, True):
            narrow.grads_four_inputs(g, x, gw, gb, h, masked)
            seen = g * (h > 0) if masked else g
            close(gw, seen.T @ x)
            close(gb, seen.sum(0))
    x, x_bias, w, b, out = f32(rows, wide), f32(wide), f32(3, wide), f32(3), np.empty((rows, 3), np.float32)
    before = x.copy()
    narrow.finish_then_few_outputs(x, x_bias, w, b, out, False)
    close(x, relu(before + x_bias))
    close(out, relu(before + x_bias) @ w.T + b)
    for n_out in (1, 3):
        g, h, w = f32(rows, n_out), relu(f32(rows, wide)), f32(n_out, wide)
        gw, gb, g_in, sums = np.empty((n_out, wide), np.float32), np.empty(n_out, np.float32), np.empty((rows, wide), np.float32), np.empty(wide, np.float32)
        for weight_grads in (False, True):
            narrow.backward_few_outputs(g, h, w, gw, gb, g_in, weight_grads, sums)
            close(g_in, (g @ w) * (h > 0))
            close(sums, ((g @ w) * (h > 0)).sum(0))
        close(gw, g.T @ h)
        close(gb, g.sum(0))
    g, h, wt, out = f32(rows, wide), f32(rows, wide), f32(2, wide), np.empty((rows, 2), np.float32)
    for masked in (False, True):
        narrow.input_grads(g, h, wt, out, masked)
        close(out, ((g * (h > 0)) if masked else g) @ wt.T)


def test_learner_buffers_start_on_cache_lines():
    """MKL's products are 4-5% slower on operands 16 bytes off a cache line, where np.zeros puts them."""
    spec = env_spec("Pendulum-v1")
    learner = LearnBlas(make_algorithm("td3", spec, TD3Config(hidden=(40, 40))), "cpu", seed=0).learner
    learner.update(_batch(np.random.default_rng(5), spec, b=33))
    flat = learner.critic_flat
    weights = [layer.w.numpy() for layer in flat.layers + flat.grad_layers + flat.target_layers]  # every head's, side by side
    arrays = [flat.params, flat.target, flat.grads, *weights, *learner.critic_pass.h_np, *learner.actor_pass.g_np]
    assert flat.count == 2 and all(a.ctypes.data % CACHE_LINE == 0 for a in arrays if a.size)
    assert aligned_zeros((3, 5)).shape == (3, 5) and not aligned_zeros(7).any()


def test_twin_heads_lie_side_by_side_and_nets_of_two_shapes_are_refused():
    """Each layer's weights of every head are one block (what one batched product reads and writes),
    and each head's module still sees its own weights."""
    from torch import nn

    from hetrl.primitives.learn_blas import FlatNets

    heads = [nn.Sequential(nn.Linear(3, 8), nn.ReLU(), nn.Linear(8, 1)) for _ in range(2)]
    flat = FlatNets(heads, None, 1e-3)
    assert flat.layers[0].w.shape == (2, 8, 3) and flat.layers[0].w.is_contiguous()
    for k, head in enumerate(heads):
        assert head[0].weight.data_ptr() == flat.layers[0].w[k].data_ptr()
        assert head[2].bias.data_ptr() == flat.layers[1].nets[k].b.data_ptr()
    with pytest.raises(ValueError, match="one shape"):
        FlatNets([heads[0], nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 1))], None, 1e-3)
