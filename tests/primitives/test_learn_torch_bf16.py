"""Learn/torch-bf16: mixed precision for conv Q-networks on a CPU with native bfloat16 products. The
update follows Learn/torch's to bfloat16's resolution (8 significant bits), the weights, optimiser,
output layer and loss stay fp32, acting stays fp32; the ``precision`` setting decides which learners
a run may use; a CPU without native bfloat16 is refused with the fix."""

import numpy as np
import pytest
import torch

from hetrl.algos import DQNConfig, make_algorithm
from hetrl.config import make_config
from hetrl.envs import EnvSpec, env_spec
from hetrl.errors import HetrlError
from hetrl.primitives import build, get
from hetrl.primitives import learn_torch_bf16 as bf16
from hetrl.protocol import Slot

native = pytest.mark.skipif(not bf16.cpu_bf16_flags(), reason="this CPU has no native bfloat16 (avx512_bf16 or amx_bf16)")


def image_spec(shape, n_actions=4):
    return EnvSpec("Pixels/Fake-v0", shape, True, n_actions, (), (), (), None, False, obs_dtype="uint8")


def batches(shape, n_actions, high, n=4, size=8, seed=0):
    rng = np.random.default_rng(seed)
    return [{"obs": torch.as_tensor(rng.integers(0, high, (size, *shape), dtype=np.uint8)),
             "next_obs": torch.as_tensor(rng.integers(0, high, (size, *shape), dtype=np.uint8)),
             "actions": torch.as_tensor(rng.integers(0, n_actions, size)), "rewards": torch.randn(size),
             "discounts": torch.full((size,), 0.99), "weights": torch.ones(size)} for _ in range(n)]


@native
@pytest.mark.parametrize("network, shape, high, dueling", [("nature", (4, 36, 36), 256, False), ("minatar", (4, 10, 10), 2, False),
                                                            ("minatar", (4, 10, 10), 2, True)])
def test_the_update_is_torchs_to_bfloat16_resolution_with_fp32_state(network, shape, high, dueling):
    algo = make_algorithm("dqn", image_spec(shape), DQNConfig(network=network, lr=1e-4, dueling=dueling))
    plain, mixed = build("Learn", Slot("torch", "cpu", 1), algo, 3), build("Learn", Slot("torch-bf16", "cpu", 1), algo, 3)
    for batch in batches(shape, 4, high):
        a, b = plain.learn(**batch), mixed.learn(**batch)
        assert b["loss"].dtype == torch.float32 and b["td_errors"].dtype == torch.float32
        # 8 significant bits per product, summed over hundreds of terms: close, not equal
        torch.testing.assert_close(a["td_errors"], b["td_errors"], rtol=0.05, atol=0.02)
        assert not torch.equal(a["td_errors"], b["td_errors"])  # it did run in bfloat16
    state = mixed.learner.state_dict()
    assert all(v.dtype == torch.float32 for v in state["q"].values())
    assert all(s["exp_avg"].dtype == torch.float32 for s in state["optimizer"]["state"].values())
    # 4 Adam steps of lr 1e-4 from the same weights: Adam moves each weight about lr a step whatever its
    # gradient's size, so where bfloat16 flips a tiny gradient's sign the two differ by up to 8e-4
    for name, value in plain.learner.q.state_dict().items():
        torch.testing.assert_close(value, state["q"][name], rtol=0.01, atol=1e-3)
    # its checkpoint resumes on the fp32 learner, and the fp32 one's on it
    again = build("Learn", Slot("torch", "cpu", 1), algo, 9)
    again.learner.load_state_dict(state)
    back = build("Learn", Slot("torch-bf16", "cpu", 1), algo, 9)
    back.learner.load_state_dict(again.learner.state_dict())
    obs = batches(shape, 4, high, n=1)[0]["obs"]
    torch.testing.assert_close(again.learner.q(obs), plain.learner.q(obs), rtol=0.05, atol=0.02)


@native
def test_acting_from_a_mixed_precision_learner_is_fp32():
    """Act/torch copies the learner's network; the copy acts in fp32 on the same weights."""
    algo = make_algorithm("dqn", image_spec((4, 36, 36)), DQNConfig(network="nature"))
    learn = build("Learn", Slot("torch-bf16", "cpu", 1), algo, 0)
    act = build("Act", Slot("torch", "cpu"), algo, 0, source=learn.learner.q)
    obs = np.random.default_rng(1).integers(0, 256, (3, 4, 36, 36), dtype=np.uint8)
    fp32 = make_algorithm("dqn", image_spec((4, 36, 36)), DQNConfig(network="nature")).make_networks()["q"]
    fp32.load_state_dict(learn.learner.q.state_dict())
    with torch.no_grad():
        want = fp32(torch.as_tensor(obs)).numpy()
    np.testing.assert_allclose(act.forward(obs), want, rtol=1e-5, atol=1e-6)
    with torch.no_grad():  # the learner's own pass is the mixed one
        assert not np.allclose(learn.learner.q(torch.as_tensor(obs)).numpy(), want, rtol=1e-5, atol=1e-6)


def test_the_precision_setting_decides_which_learners_a_run_may_use():
    spec = image_spec((4, 10, 10))
    fp32 = make_algorithm("dqn", spec, DQNConfig(network="minatar", precision="fp32"))
    reason = get("Learn", "torch-bf16").unsupported(fp32)
    assert reason == ("Learn/torch-bf16 computes in bf16 and the run asks for precision=fp32; set precision=auto to let the plan "
                      "choose, or precision=bf16 for this learner")
    assert get("Learn", "torch").unsupported(fp32) is None
    mixed = make_algorithm("dqn", spec, DQNConfig(network="minatar", precision="bf16"))
    for backend in ("torch", "torch-channels-last", "blas"):
        assert "computes in fp32 and the run asks for precision=bf16" in get("Learn", backend).unsupported(mixed)
    with pytest.raises(HetrlError, match="computes in fp32 and the run asks for precision=bf16"):
        build("Learn", Slot("torch", "cpu", 1), mixed, 0)
    with pytest.raises(HetrlError, match=r"precision must be one of auto, fp32, bf16 \(got 'fp16'\)"):
        make_algorithm("dqn", env_spec("CartPole-v1"), make_config("dqn", "CartPole-v1", None, ["precision=fp16"]).agent)


def test_vectors_and_cpus_without_native_bfloat16_are_refused_with_the_fix(tmp_path, monkeypatch):
    impl = get("Learn", "torch-bf16")
    assert "bf16 learner lays out hetrl's conv Q-networks" in impl.unsupported(make_algorithm("dqn", env_spec("CartPole-v1"), DQNConfig()))
    from hetrl.algos.exit_dqn import ExitDQNConfig

    branched = make_algorithm("exit-dqn", image_spec((4, 10, 10)), ExitDQNConfig(network="minatar"))
    assert impl.unsupported(branched) == ("the bf16 learner lays out DQN's conv Q-networks, not exit-dqn's branched one; "
                                          "use the torch learner")
    assert get("Learn", "torch-channels-last").unsupported(branched) == (
        "the channels-last learner lays out DQN's conv Q-networks, not exit-dqn's branched one; use the torch learner")
    old = tmp_path / "cpuinfo"
    old.write_text("processor\t: 0\nflags\t\t: fpu sse2 avx2 avx512f avx512bw avx512_vnni\n\nprocessor\t: 1\n")
    assert bf16.cpu_bf16_flags(old) == []
    new = tmp_path / "cpuinfo_new"
    new.write_text("processor\t: 0\nflags\t\t: fpu avx512f avx512_bf16 amx_tile amx_bf16\n")
    assert bf16.cpu_bf16_flags(new) == ["avx512_bf16", "amx_bf16"]
    assert bf16.cpu_bf16_flags(tmp_path / "absent") == []
    monkeypatch.setattr(bf16, "CPUINFO", old)
    algo = make_algorithm("dqn", image_spec((4, 10, 10)), DQNConfig(network="minatar"))
    assert impl.unsupported(algo) == ("this CPU has no native bfloat16 products (avx512_bf16 or amx_bf16), where bf16 runs slower "
                                      "than fp32; use the torch or torch-channels-last learner (precision=fp32 or auto)")
    with pytest.raises(HetrlError, match="no native bfloat16"):
        build("Learn", Slot("torch-bf16", "cpu", 1), algo, 0)


def test_the_fixed_rule_gives_bf16_only_where_the_run_asks_for_it():
    from hetrl.planner.rule import host_backends

    spec = image_spec((4, 84, 84))
    for precision, learn in (("auto", "torch"), ("fp32", "torch"), ("bf16", "torch-bf16")):
        assert host_backends(make_algorithm("dqn", spec, DQNConfig(network="nature", precision=precision)))[0] == learn
    assert host_backends(make_algorithm("dqn", image_spec((4, 10, 10)), DQNConfig(network="minatar")))[0] == "blas"
