"""Environments: Gymnasium ids validated into an :class:`EnvSpec` (stepping them is the EnvStep
primitive's, in ``hetrl.primitives``)."""

from hetrl.envs.spec import EnvSpec, env_spec, make_env

__all__ = ["EnvSpec", "env_spec", "make_env"]
