"""Learn/cudagraph's logic that needs no GPU, run on the host: which graph replays on which update,
fresh outputs per update, how inputs and random draws reach the static tensors, the checkpoint
format, recapture after a load. (tests/primitives/test_learn_cudagraph.py checks the graphs
themselves against Learn/torch on a GPU.)"""

import numpy as np
import pytest
import torch

from hetrl.algos import DQNConfig, TD3Config, make_algorithm
from hetrl.envs import env_spec
from hetrl.primitives.learn_cudagraph import GraphedLearner, LearnCudagraph, pack_like

CPU = torch.device("cpu")


class FakeGraph:
    """Stands in for a captured torch.cuda.CUDAGraph: counts replays and runs ``on_replay``."""

    def __init__(self, on_replay=lambda: None):
        self.replays, self.on_replay = 0, on_replay

    def replay(self):
        self.replays += 1
        self.on_replay()


def batch(algo, rng, b=4):
    spec = algo.spec
    return {
        "obs": torch.as_tensor(rng.standard_normal((b, *spec.obs_shape)), dtype=torch.float32),
        "actions": torch.as_tensor(algo.random_actions(rng, b)),
        "rewards": torch.as_tensor(rng.standard_normal(b), dtype=torch.float32),
        "next_obs": torch.as_tensor(rng.standard_normal((b, *spec.obs_shape)), dtype=torch.float32),
        "discounts": torch.full((b,), 0.9),
        "weights": torch.ones(b),
    }


def dqn(**settings):
    return make_algorithm("dqn", env_spec("CartPole-v1"), DQNConfig(hidden=(8,), **settings))


def test_step_replays_every_update_and_periodic_when_due():
    learner = GraphedLearner(dqn(target_update_every=3), CPU, seed=0)
    out = {"td_errors": torch.zeros(4), "loss": torch.zeros(())}
    step = FakeGraph(lambda: out["loss"].add_(1.0))  # a replay overwrites the graph's output tensors in place
    periodic = FakeGraph()
    learner._graphs, learner._out, learner._fill = (step, periodic), out, lambda b: None
    results = [learner.update({}) for _ in range(7)]
    assert learner.updates == learner.inner.updates == 7 and step.replays == 7
    assert periodic.replays == 2  # after updates 3 and 6 (a hard target copy every 3)
    assert [r["loss"].item() for r in results] == [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0]  # each a copy, not the live tensor
    assert all(r["td_errors"] is not out["td_errors"] for r in results)


def test_polyak_targets_replay_periodic_every_update():
    learner = GraphedLearner(dqn(tau=0.1), CPU, seed=0)
    step, periodic = FakeGraph(), FakeGraph()
    learner._graphs, learner._out, learner._fill = (step, periodic), {}, lambda b: None
    for _ in range(4):
        learner.update({})
    assert step.replays == periodic.replays == 4


def test_fill_copies_the_batch_and_draws_the_random_inputs_from_the_learners_generator():
    algo = make_algorithm("td3", env_spec("Pendulum-v1"), TD3Config(hidden=(8,)))
    learner = GraphedLearner(algo, CPU, seed=5)
    twin = algo.build_learner(CPU, seed=5)  # the torch learner of the same seed draws the same noise
    rng = np.random.default_rng(0)
    first = batch(algo, rng)
    shapes = algo.build_learner(CPU, seed=5).draw_inputs(first)  # as _layout does, from a throwaway learner
    buffer, learner._static = pack_like({**first, **shapes})
    for _ in range(2):
        b = batch(algo, rng)
        learner._fill(b)
        want = twin.draw_inputs(b)["target_noise"]
        for key, value in b.items():
            assert torch.equal(learner._static[key], value), key
        assert torch.equal(learner._static["target_noise"], want)
        assert learner._static["obs"].untyped_storage().data_ptr() == buffer.untyped_storage().data_ptr()  # in place


def test_checkpoints_are_in_the_torch_learners_format_and_a_load_captures_again():
    algo = dqn()
    learner = GraphedLearner(algo, CPU, seed=0)
    assert all(g["capturable"] for o in learner.inner.optimizers() for g in o.param_groups)
    state = learner.state_dict()
    assert all(not g["capturable"] for g in state["optimizer"]["param_groups"])  # loads into Learn/torch
    assert all(g["capturable"] for o in learner.inner.optimizers() for g in o.param_groups)  # the live one unchanged
    other = algo.build_learner(CPU, seed=1)
    other.updates = 11
    learner._graphs = (FakeGraph(), FakeGraph())
    learner.load_state_dict(other.state_dict())
    assert learner._graphs is None  # the loaded optimizer state lives in new tensors: capture again
    assert all(g["capturable"] for o in learner.inner.optimizers() for g in o.param_groups)
    assert learner.updates == 11
    for name, value in other.q.state_dict().items():
        assert torch.equal(learner.inner.q.state_dict()[name], value), name


def test_the_graphed_learner_is_refused_off_cuda_and_for_branched_networks():
    with pytest.raises(Exception, match="runs on CUDA devices, not on cpu"):
        LearnCudagraph(dqn(), "cpu", seed=0)
    from hetrl.algos.exit_dqn import ExitDQN

    assert "does not run" in LearnCudagraph.unsupported(ExitDQN.__new__(ExitDQN))
    assert LearnCudagraph.unsupported(dqn()) is None


def _sac():
    from hetrl.algos import algorithm_class

    return make_algorithm("sac", env_spec("Pendulum-v1"), algorithm_class("sac").Config(hidden=(8, 8), batch_size=4))


@pytest.mark.parametrize("make", [lambda: dqn(), lambda: dqn(tau=0.1), _sac], ids=["dqn", "dqn polyak", "sac"])
def test_restored_puts_the_whole_state_back_in_the_same_tensors(make):
    """The compiled learner's warm-up runs on the real learner inside ``restored``: afterwards every
    value is as before (the networks, SAC's temperature), in the same tensor objects (compiled code
    and graphs hold them), and optimizer state the block made is zeroed, as a first Adam step finds it."""
    from hetrl.primitives.learn_cudagraph import restored, state_tensors

    algo = make()
    learner = algo.build_learner(CPU, seed=0)
    rng = np.random.default_rng(0)
    learner.update(batch(algo, rng))  # optimizer state exists before the block
    fresh = algo.build_learner(CPU, seed=1)  # none does
    for subject in (learner, fresh):
        before = {id(t): t.detach().clone() for t in state_tensors(subject)}
        with restored(subject):
            for _ in range(3):
                subject.update(batch(algo, rng))
            assert any(not torch.equal(t, before[id(t)]) for t in state_tensors(subject) if id(t) in before)
        after = state_tensors(subject)
        for t in after:
            if id(t) in before:
                assert torch.equal(t, before[id(t)])
            else:  # optimizer state the block made (every optimizer's for the fresh learner)
                assert not t.any()
        assert len(after) > len(before) if subject is fresh else len(after) >= len(before)
    if algo.name == "sac":
        assert any(t is learner.log_alpha for t in state_tensors(learner))


def test_the_compiled_update_equals_the_eager_update_on_the_host():
    """What Learn/cudagraph-compiled captures is ``torch.compile`` of ``step`` and ``periodic``, with
    Adam in its traced (foreach) form and the output layer's bias outside its product: on the host
    (Inductor's C++ code) it gives the eager update's
    losses and weights, update by update, with gradient clipping, double Q-learning and Polyak
    targets on; its checkpoints keep the form the algorithm built, and a load puts the traced form back."""
    algo = dqn(double=True, max_grad_norm=0.5, tau=0.1)
    eager, graphed = algo.build_learner(CPU, seed=0), GraphedLearner(algo, CPU, seed=0, compiled=True)
    built = [(g["fused"], g["foreach"]) for g in eager.optimizer.param_groups]
    assert [(g["fused"], g["foreach"]) for g in graphed.inner.optimizer.param_groups] == [(False, True)]
    rng = np.random.default_rng(2)
    for _ in range(4):
        b = batch(algo, rng, 16)
        with torch._inductor.config.patch(force_disable_caches=True):  # a cached graph would skip the pass counted below
            a, c = eager.step(b), graphed._step(b)
            eager.periodic(b), graphed._periodic(b)
        torch.testing.assert_close(c["loss"], a["loss"], rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(c["td_errors"], a["td_errors"], rtol=1e-5, atol=1e-6)
    # every layer of this small network (8 hidden units, 2 actions) in q(obs), q(next_obs) and q_target(next_obs)
    assert graphed.narrow_pass.rewritten == 6
    for p, q in zip([*eager.q.parameters(), *eager.q_target.parameters()],
                    [*graphed.inner.q.parameters(), *graphed.inner.q_target.parameters()]):
        torch.testing.assert_close(q, p, rtol=1e-5, atol=1e-6)
    state = graphed.state_dict()
    assert [(g["fused"], g["foreach"], g["capturable"]) for g in state["optimizer"]["param_groups"]] == [(*built[0], False)]
    graphed.load_state_dict(state)
    assert [(g["foreach"], g["capturable"]) for g in graphed.inner.optimizer.param_groups] == [(True, True)]


def test_the_compiled_backend_says_why_it_does_not_run():
    from hetrl.algos import algorithm_class
    from hetrl.errors import HetrlError
    from hetrl.primitives import get
    from hetrl.primitives.learn_cudagraph_compiled import LearnCudagraphCompiled

    impl = get("Learn", "cudagraph-compiled")
    assert impl.cls is LearnCudagraphCompiled and impl.runs_on("cuda:0") and not impl.runs_on("cpu")
    exit_dqn = make_algorithm("exit-dqn", env_spec("CartPole-v1"), algorithm_class("exit-dqn").Config())
    assert "cudagraph-compiled learner" in impl.unsupported(exit_dqn)
    with pytest.raises(HetrlError, match="CUDA devices"):
        LearnCudagraphCompiled(dqn(), "cpu", seed=0)


class FakeStream:
    """Stands in for a torch.cuda.Stream: records the waits (torch.cuda.stream(obj) is a no-op
    context without CUDA)."""

    def __init__(self, log, name):
        self.log, self.name = log, name

    def wait_stream(self, other):
        self.log.append(f"{self.name} waits for {other.name}")


def test_a_compilation_that_fails_is_one_clear_error_and_the_learner_state_is_put_back():
    """torch.compile fails where the toolchain does (no C compiler, Triton, Inductor: RuntimeErrors):
    the compiled learner's warm-up says so in one CannotRunHere (a HetrlError, which the profiler
    leaves out) naming the fix, waits for the side stream, and leaves the learner's state as it was."""
    from hetrl.errors import CannotRunHere, HetrlError

    learner = GraphedLearner(dqn(), CPU, seed=0, compiled=True)
    learner._capturable(False)  # the eager foreach Adam below runs capturable on CUDA devices only
    rng = np.random.default_rng(0)
    learner._static = batch(dqn(), rng)
    calls = []

    def failing_step(static):
        calls.append(1)
        if len(calls) == 2:  # the recompile once Adam has state, say
            raise RuntimeError("InductorError: CppCompileError: C++ compile error\nmore lines")
        return learner.inner.step(static)

    learner._step = failing_step
    before = [t.detach().clone() for t in learner.inner.q.parameters()]
    log = []
    with pytest.raises(CannotRunHere, match=r"torch.compile could not compile the dqn update \(RuntimeError: "
                                            r"InductorError: CppCompileError: C\+\+ compile error\); use the cudagraph learner") as caught:
        learner._warm_compiled(FakeStream(log, "side"), FakeStream(log, "main"))
    assert isinstance(caught.value, HetrlError)
    assert log == ["side waits for main", "main waits for side"]
    assert all(torch.equal(a, b) for a, b in zip(before, learner.inner.q.parameters()))


def test_a_periodic_step_that_cannot_compile_is_the_same_clear_error():
    """periodic (Polyak averaging, a hard copy) compiles at its first call too: its failure is the
    same CannotRunHere, so the profiler leaves the backend out rather than stopping."""
    from hetrl.errors import CannotRunHere

    learner = GraphedLearner(dqn(tau=0.1), CPU, seed=0, compiled=True)
    learner._capturable(False)  # the eager foreach Adam below runs capturable on CUDA devices only
    learner._static = batch(dqn(), np.random.default_rng(0))
    learner._step = learner.inner.step

    def failing_periodic(static):
        raise RuntimeError("BackendCompilerFailed: backend='inductor' raised: no working C compiler")

    learner._periodic = failing_periodic
    log = []
    with pytest.raises(CannotRunHere, match=r"could not compile the dqn update \(RuntimeError: BackendCompilerFailed"):
        learner._warm_compiled(FakeStream(log, "side"), FakeStream(log, "main"))
    assert log == ["side waits for main", "main waits for side"]
