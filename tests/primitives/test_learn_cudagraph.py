"""Learn/cudagraph against Learn/torch on the same GPU, update by update, and its checkpoints on
either backend. Every test needs a GPU and skips without one."""

import copy

import numpy as np
import pytest
import torch

pytestmark = pytest.mark.gpu


@pytest.fixture(autouse=True)
def _cuda(require_cuda):
    yield



GRAPH_CASES = {
    "dqn double, clipped, hard target": ("dqn", "CartPole-v1", dict(double=True, max_grad_norm=0.5, target_update_every=3)),
    "dqn max target, Polyak": ("dqn", "Acrobot-v1", dict(double=False, tau=0.05, hidden=(32, 16, 24))),
    "ddpg": ("ddpg", "Pendulum-v1", dict()),
    "td3 (noise drawn outside the graph, delayed actor)": ("td3", "Pendulum-v1", dict(policy_delay=2)),
    "sac (two noise draws, tuned temperature, its own Adam)": ("sac", "Pendulum-v1", dict()),
    "sac, delayed actor and temperature, clipped": ("sac", "MountainCarContinuous-v0", dict(policy_delay=2, max_grad_norm=1.0)),
    "sac, fixed temperature": ("sac", "Pendulum-v1", dict(ent_coef="0.3")),
}


def _host_batch(rng, algo, b=48):
    spec = algo.spec
    return {
        "obs": rng.standard_normal((b,) + spec.obs_shape).astype(np.float32),
        "actions": algo.random_actions(rng, b),
        "rewards": rng.standard_normal(b).astype(np.float32),
        "next_obs": rng.standard_normal((b,) + spec.obs_shape).astype(np.float32),
        "discounts": rng.choice([0.0, 0.99], b).astype(np.float32),
        "weights": rng.uniform(0.2, 1.0, b).astype(np.float32),
    }


def _learner_states_close(a, b):
    for name in a:
        if isinstance(a[name], dict) and "param_groups" not in a[name]:  # networks
            for key in a[name]:
                torch.testing.assert_close(a[name][key].cpu(), b[name][key].cpu(), rtol=1e-4, atol=2e-5, msg=f"{name}.{key}")
    if "log_alpha" in a:  # SAC's temperature
        torch.testing.assert_close(a["log_alpha"].cpu(), b["log_alpha"].cpu(), rtol=1e-4, atol=1e-6, msg="log_alpha")


# the compiled backend on fewer cases: each compiles its update (seconds)
COMPILED_CASES = ("dqn double, clipped, hard target", "td3 (noise drawn outside the graph, delayed actor)",
                  "sac (two noise draws, tuned temperature, its own Adam)")


@pytest.mark.parametrize("backend,case", [("cudagraph", c) for c in GRAPH_CASES]
                         + [("cudagraph-compiled", c) for c in COMPILED_CASES]
                         + [("triton", c) for c in ("dqn double, clipped, hard target", "dqn max target, Polyak")])
def test_the_graphed_update_matches_the_torch_update(backend, case):
    from hetrl.algos import make_algorithm
    from hetrl.primitives import get
    from hetrl.primitives.learn_torch import LearnTorch
    from hetrl.envs import env_spec

    name, env_id, settings = GRAPH_CASES[case]
    algo = make_algorithm(name, env_spec(env_id), _config(name, **{"hidden": (64, 64), "lr": 3e-3, "batch_size": 48, **settings}))
    graphed, plain = get("Learn", backend).cls(algo, "cuda", seed=3), LearnTorch(algo, "cuda", seed=3)
    rng = np.random.default_rng(0)
    kept = []
    for _ in range(9):
        batch = _host_batch(rng, algo)
        a = graphed.learn(**batch)  # host arrays, as from a numpy replay
        b = plain.learn(**{k: torch.as_tensor(v, device="cuda") for k, v in batch.items()})
        torch.testing.assert_close(a["loss"], b["loss"], rtol=1e-4, atol=1e-6)
        torch.testing.assert_close(a["td_errors"], b["td_errors"], rtol=1e-4, atol=1e-5)
        assert a.keys() == b.keys()  # the actor's loss, on the updates that step an actor
        if "actor_loss" in b:
            torch.testing.assert_close(a["actor_loss"], b["actor_loss"], rtol=1e-4, atol=1e-5)
            kept.append((a["actor_loss"], a["actor_loss"].item()))
    assert all(t.item() == v for t, v in kept)  # clones: later replays overwrote none of them
    assert len(kept) == (0 if name == "dqn" else 9 // settings.get("policy_delay", 1))
    assert graphed.learner.updates == plain.learner.updates == 9
    _learner_states_close(graphed.learner.state_dict(), plain.learner.state_dict())
    # inputs already on the device (a torch replay on the GPU) go the same way
    batch = {k: torch.as_tensor(v, device="cuda") for k, v in _host_batch(rng, algo).items()}
    torch.testing.assert_close(graphed.learn(**batch)["td_errors"], plain.learn(**batch)["td_errors"], rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("name", ["td3", "sac"])
def test_graphed_checkpoints_resume_on_the_host_and_back(name):
    from hetrl.algos import make_algorithm
    from hetrl.primitives.learn_torch import LearnTorch
    from hetrl.primitives.learn_cudagraph import LearnCudagraph
    from hetrl.envs import env_spec

    algo = make_algorithm(name, env_spec("Pendulum-v1"), _config(name, hidden=(32, 32), batch_size=32))
    state, batches = _state_after_4_updates(LearnCudagraph, algo, batch_seed=1)
    assert all(not g["capturable"] for g in state["actor_optimizer"]["param_groups"])  # the torch learner's format
    host = LearnTorch(algo, "cpu", seed=1)
    host.learner.load_state_dict(state)  # the generator is reseeded (cuda -> cpu), the rest carries over
    host.learn(**{k: torch.as_tensor(v) for k, v in batches[4].items()})
    _resumed_alike(LearnCudagraph, algo, state, batches[4:])


def _state_after_4_updates(backend, algo, batch_seed):
    """The state of ``backend``'s learner on the GPU after 4 updates, and 8 host batches: those 4, then 4 more."""
    rng = np.random.default_rng(batch_seed)
    batches = [_host_batch(rng, algo, 32) for _ in range(8)]
    graphed = backend(algo, "cuda", seed=0)
    for batch in batches[:4]:
        graphed.learn(**batch)
    return graphed.learner.state_dict(), batches


def _resumed_alike(backend, algo, state, batches):
    """A graphed learner of ``backend`` and the torch learner on the GPU, each loading its own copy of
    ``state`` (as from a file: torch's optimizers keep loaded tensors of the right device as they
    are), go on alike over ``batches``: a loaded graphed learner captures anew. Returns both."""
    from hetrl.primitives.learn_torch import LearnTorch

    again, plain = backend(algo, "cuda", seed=1), LearnTorch(algo, "cuda", seed=1)
    again.learner.load_state_dict(copy.deepcopy(state))
    plain.learner.load_state_dict(copy.deepcopy(state))
    for batch in batches:
        a = again.learn(**batch)
        b = plain.learn(**{k: torch.as_tensor(v, device="cuda") for k, v in batch.items()})
        torch.testing.assert_close(a["td_errors"], b["td_errors"], rtol=1e-4, atol=1e-5)
    return again, plain


def test_triton_checkpoints_resume_on_the_torch_learner_and_back():
    from hetrl.algos import make_algorithm
    from hetrl.envs import env_spec
    from hetrl.primitives.learn_triton import LearnTriton

    algo = make_algorithm("dqn", env_spec("Acrobot-v1"), _config("dqn", hidden=(64, 64), batch_size=32, target_update_every=2))
    state, batches = _state_after_4_updates(LearnTriton, algo, batch_seed=3)
    again, plain = _resumed_alike(LearnTriton, algo, state, batches[4:])
    assert again.learner.inner.optimizer.steps == 4 + 4  # the 4 loaded, counted on by the kernels
    _learner_states_close(again.learner.state_dict(), plain.learner.state_dict())


def _config(name, **settings):
    from hetrl.algos import algorithm_class

    return algorithm_class(name).Config(**settings)
