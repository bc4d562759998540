"""Environments: Gymnasium ids validated into an :class:`EnvSpec`, stepped in batches."""

from hetrl.envs.batch import EnvBatch
from hetrl.envs.spec import EnvSpec, make_env, env_spec

__all__ = ["EnvBatch", "EnvSpec", "env_spec", "make_env"]
