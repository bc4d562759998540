"""Algorithms, written once against the protocol: DQN (and its early-exit variant), DDPG, TD3 and SAC."""

from __future__ import annotations

from hetrl.algos.base import AgentConfig, Algorithm, Learner, TorchLearner
from hetrl.algos.ddpg import DDPG, TD3, DDPGConfig, TD3Config
from hetrl.algos.dqn import DQN, DQNConfig
from hetrl.algos.exit_dqn import ExitDQN, ExitDQNConfig
from hetrl.algos.sac import SAC, SACConfig
from hetrl.envs.spec import EnvSpec
from hetrl.errors import HetrlError, did_you_mean

ALGORITHMS: dict[str, type[Algorithm]] = {cls.name: cls for cls in (DQN, ExitDQN, DDPG, TD3, SAC)}


def algorithm_class(name: str) -> type[Algorithm]:
    if not isinstance(name, str):
        raise HetrlError(f"algo must be an algorithm's name ({', '.join(ALGORITHMS)}), not {type(name).__name__} {name!r}")
    key = name.lower()
    if key not in ALGORITHMS:
        raise HetrlError(f"unknown algorithm {name!r}{did_you_mean(key, ALGORITHMS)}; choose one of: {', '.join(ALGORITHMS)}")
    return ALGORITHMS[key]


def make_algorithm(name: str, spec: EnvSpec, config: AgentConfig) -> Algorithm:
    """The algorithm ``name`` for ``spec``, after checking that it can handle the env's actions."""
    cls = algorithm_class(name)
    if spec.is_image and not issubclass(cls, DQN):
        raise HetrlError(f"{cls.name} has MLP networks only, and {spec.env_id} has image observations "
                         f"{spec.obs_shape}; train dqn (or exit-dqn) on it")
    if cls.discrete_actions and not spec.discrete:
        raise HetrlError(
            f"{cls.name} needs a discrete action space, but {spec.env_id} has continuous actions; "
            "use ddpg, td3 or sac for it"
        )
    if not cls.discrete_actions and spec.discrete:
        raise HetrlError(
            f"{cls.name} needs a continuous (Box) action space, but {spec.env_id} has discrete actions; use dqn for it"
        )
    problems = config.validate()
    if problems:
        raise HetrlError(f"invalid {cls.name} config: {'; '.join(problems)}")
    return cls(spec, config)


__all__ = [
    "ALGORITHMS", "AgentConfig", "Algorithm", "DDPG", "DDPGConfig", "DQN", "DQNConfig", "ExitDQN", "ExitDQNConfig", "Learner",
    "SAC", "SACConfig", "TD3", "TD3Config", "TorchLearner", "algorithm_class", "make_algorithm",
]
