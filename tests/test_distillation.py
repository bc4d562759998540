"""A DQN learner with a teacher (``teacher=RUN_DIR``): the teacher's Q-network loaded by the torch
learners, the distillation loss beside the TD loss, and the refusals of everything else."""

import pytest
import torch

from hetrl.algos import DQNConfig, make_algorithm
from hetrl.algos.distillation import DISTILL
from hetrl.algos.exit_dqn import ExitDQNConfig
from hetrl.cli import main
from hetrl.cosearch.options import DISTILL as PARSER_DISTILL
from hetrl.envs import env_spec
from hetrl.errors import HetrlError
from hetrl.planner.rule import host_backends
from hetrl.policy import load
from hetrl.primitives import build, get
from hetrl.protocol import Slot
from hetrl.run.saved_network import load_teacher

ENV = "CartPole-v1"


@pytest.fixture(scope="module")
def teacher_run(tmp_path_factory):
    path = tmp_path_factory.mktemp("teacher") / "dqn"
    assert main(["train", "dqn", ENV, "--steps", "400", "--run-dir", str(path), "--plan", "rule", "--executor", "inline",
                 "--set", "learning_starts=100", "--set", "hidden=[32]", "--set", "eval_episodes=1",
                 "--set", "eval_every=400", "--no-progress"]) == 0
    return path


def student(teacher, **settings):
    return make_algorithm("dqn", env_spec(ENV), DQNConfig(hidden=(16,), teacher=str(teacher), **settings))


def batch_of(n: int = 64, seed: int = 0) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return {"obs": torch.randn(n, 4, generator=g), "actions": torch.randint(0, 2, (n,), generator=g),
            "rewards": torch.ones(n), "next_obs": torch.randn(n, 4, generator=g), "discounts": torch.full((n,), 0.99),
            "weights": torch.ones(n)}


def test_the_parser_names_the_same_distillation_losses():
    assert PARSER_DISTILL == DISTILL


def test_the_torch_learner_loads_the_teacher_and_its_q_values_pull_the_student(teacher_run):
    algo = student(teacher_run, distill_weight=10.0, lr=1e-2)
    learn = build("Learn", Slot("torch", "cpu"), algo, 0)
    teacher_q = load(teacher_run).network
    batch = batch_of()
    with torch.no_grad():
        torch.testing.assert_close(learn.learner.teacher(batch["obs"]), teacher_q(batch["obs"]))
    assert not any(p.requires_grad for p in learn.learner.teacher.parameters())

    def distance() -> float:
        with torch.no_grad():
            return torch.nn.functional.mse_loss(learn.learner.q(batch["obs"]), teacher_q(batch["obs"])).item()

    first = distance()
    for _ in range(100):
        learn.learn(**batch)
    assert distance() < 0.5 * first
    plain = build("Learn", Slot("torch", "cpu"), student(teacher_run, distill_weight=0.0, lr=1e-2), 0)
    for _ in range(100):  # the same updates, the teacher's term weighed 0: the student stays far from it
        plain.learn(**batch)
    with torch.no_grad():
        assert torch.nn.functional.mse_loss(plain.learner.q(batch["obs"]), teacher_q(batch["obs"])).item() > 2 * distance()


def test_a_learner_built_without_its_teacher_refuses_to_step(teacher_run):
    learner = student(teacher_run).build_learner(torch.device("cpu"), 0)
    with pytest.raises(HetrlError, match="was never loaded into this learner"):
        learner.update(batch_of())


def test_the_learners_that_do_not_distil_refuse_and_the_rule_picks_torch(teacher_run):
    algo = student(teacher_run)
    assert algo.distils and not student("").distils
    for backend in ("numba", "blas", "cudagraph"):
        assert "does not distil from a teacher" in get("Learn", backend).unsupported(algo)
    assert get("Learn", "torch").unsupported(algo) is None
    assert host_backends(algo)[0] == "torch" and host_backends(student(""))[0] == "blas"


def test_bad_teacher_settings_are_named(teacher_run, tmp_path):
    assert any("is not a directory" in p for p in DQNConfig(teacher=str(tmp_path / "none")).validate())
    assert any("distill must be one of mse, kl" in p for p in DQNConfig(distill="l1").validate())
    assert any("distill_weight must be >= 0" in p for p in DQNConfig(distill_weight=-1).validate())
    assert any("distill_temperature must be > 0" in p for p in DQNConfig(distill_temperature=0).validate())
    assert any("distillation from a teacher run is dqn's" in p for p in ExitDQNConfig(teacher=str(teacher_run)).validate())
    with pytest.raises(HetrlError, match=r"learned CartPole-v1 \(\(4,\) observations, 2 actions\), which does not fit Acrobot-v1"):
        load_teacher(teacher_run, env_spec("Acrobot-v1"))
    with pytest.raises(HetrlError, match="not a hetrl run directory|no config"):
        load_teacher(tmp_path, env_spec(ENV))


def test_train_distils_and_resumes_with_the_teacher(teacher_run, tmp_path, capsys):
    run = tmp_path / "student"
    args = ["--run-dir", str(run), "--plan", "rule", "--executor", "inline", "--set", "learning_starts=100",
            "--set", f"teacher={teacher_run}", "--set", "eval_episodes=1", "--set", "eval_every=300", "--no-progress"]
    assert main(["train", "dqn", ENV, "--steps", "300", *args]) == 0
    assert main(["resume", str(run), "--steps", "600", "--no-progress"]) == 0
    assert load(run).network is not None
    capsys.readouterr()
    assert main(["train", "dqn", "Acrobot-v1", "--steps", "300", "--run-dir", str(tmp_path / "other"), "--plan", "rule",
                 "--set", f"teacher={teacher_run}", "--no-progress"]) != 0
    assert "which does not fit Acrobot-v1" in capsys.readouterr().err


def test_the_channels_last_learner_lays_the_teacher_out_and_learns_as_torch_does(tmp_path):
    teacher = tmp_path / "minatar"
    assert main(["train", "dqn", "MinAtar/Breakout-v1", "--steps", "200", "--run-dir", str(teacher), "--plan", "rule",
                 "--executor", "inline", "--set", "learning_starts=100", "--set", "batch_size=8",
                 "--set", "eval_episodes=1", "--set", "eval_every=200", "--no-progress"]) == 0
    spec = env_spec("MinAtar/Breakout-v1")
    algo = make_algorithm("dqn", spec, DQNConfig(network="minatar", teacher=str(teacher), batch_size=8))
    g = torch.Generator().manual_seed(0)
    obs = (torch.rand((8, *spec.obs_shape), generator=g) < 0.1).to(torch.uint8)
    batch = {"obs": obs, "actions": torch.randint(0, spec.n_actions, (8,), generator=g), "rewards": torch.ones(8),
             "next_obs": obs.flip(0), "discounts": torch.full((8,), 0.99), "weights": torch.ones(8)}
    losses = {}
    for backend in ("torch", "torch-channels-last"):
        learn = build("Learn", Slot(backend, "cpu"), algo, 0)
        losses[backend] = [learn.learn(**batch)["loss"].item() for _ in range(3)]
    assert learn.learner.teacher.memory_format == torch.channels_last
    plain = build("Learn", Slot("torch", "cpu"), make_algorithm("dqn", spec, DQNConfig(network="minatar", batch_size=8)), 0)
    assert losses["torch-channels-last"] == pytest.approx(losses["torch"], rel=1e-4)
    assert plain.learn(**batch)["loss"].item() < losses["torch"][0]  # the teacher's term adds to the TD loss
