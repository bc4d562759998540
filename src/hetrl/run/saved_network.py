"""A run directory's acting network, read from one of its checkpoints: what ``hetrl.load`` serves as
a policy, and what a DQN learner distils from as its teacher (``teacher=RUN_DIR``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from torch import nn

from hetrl.algos import DQN, Algorithm, make_algorithm
from hetrl.config import TrainConfig, checkpoint_misfit
from hetrl.envs import env_spec
from hetrl.envs.spec import EnvSpec
from hetrl.errors import HetrlError, check_path
from hetrl.nets.exits import ExitQNetwork
from hetrl.run.rundir import RunDir


def load_network(run: str | Path, checkpoint: str | Path | None = None) -> tuple[Algorithm, nn.Module, Path]:
    """The algorithm and acting network of a run directory, or of a checkpoint file, and the file
    read. ``checkpoint``: ``"best"`` (checkpoints/best.pt, the best evaluation during training),
    ``"final"`` (the newest periodic checkpoint) or a file; by default the best where the run has
    one, else the final, as ``hetrl eval`` picks."""
    path = check_path("run", run)
    if checkpoint not in (None, "best", "final"):
        check_path("checkpoint", checkpoint)
    if path.is_file():
        run_dir, checkpoint = RunDir.open(path.parent.parent), path
    else:
        run_dir = RunDir.open(path)
    if checkpoint in (None, "best"):
        if run_dir.best.exists():
            checkpoint = run_dir.best
        elif checkpoint == "best":
            raise HetrlError(f"{run_dir.path} has no best.pt (no evaluation was written); load the final policy with checkpoint='final'")
        else:
            checkpoint = None
    elif checkpoint == "final":
        checkpoint = None
    config = run_dir.load_config()
    source, state = run_dir.load_checkpoint(checkpoint, replay=False, env_state="never")  # tensors only: nothing unpickled
    algo = make_algorithm(config.algo, env_spec(config.env_source(), config.atari), config.agent)
    return algo, load_policy_network(algo, state, source, config, run_dir.config), source


def load_policy_network(algo: Algorithm, state: dict[str, Any], path: Path, config: TrainConfig,
                        config_file: Path) -> nn.Module:
    """``algo``'s acting network with the weights of the checkpoint ``state`` (a best.pt's policy, or a
    periodic checkpoint's learner) read from ``path``; one that does not fit is a HetrlError naming
    the settings changed in ``config_file`` since."""
    network = algo.make_policy_network()
    try:
        weights = state["policy"] if state.get("kind") == "best" else state["executor"]["learner"][algo.policy_key]
        network.load_state_dict(weights)
    except (RuntimeError, KeyError, TypeError) as exc:  # another algorithm's, or other layer sizes
        raise checkpoint_misfit(path, state.get("config"), config, config_file, exc) from None
    return network


def q_head(network: nn.Module) -> nn.Module:
    """The network whose output is a DQN agent's Q-values: an exit network's final head, else itself."""
    return network.final if isinstance(network, ExitQNetwork) else network


def load_teacher(run: str | Path, spec: EnvSpec) -> nn.Module:
    """The frozen Q-network (:func:`q_head`) of the DQN run ``run`` (its best checkpoint, else its
    newest), checked to take ``spec``'s observations and give one Q-value per action of its."""
    algo, network, _ = load_network(run)
    if not isinstance(algo, DQN):
        raise HetrlError(f"teacher={run} is a {algo.name} run; a teacher is a DQN run (dqn, exit-dqn) over the "
                         "same env's discrete actions")
    theirs, ours = algo.spec, spec
    if (tuple(theirs.obs_shape), theirs.n_actions) != (tuple(ours.obs_shape), ours.n_actions):
        raise HetrlError(f"teacher={run} learned {theirs.env_id} ({tuple(theirs.obs_shape)} observations, "
                         f"{theirs.n_actions} actions), which does not fit {ours.env_id} ({tuple(ours.obs_shape)}, "
                         f"{ours.n_actions} actions); give a run of the same env")
    return q_head(network).eval().requires_grad_(False)
