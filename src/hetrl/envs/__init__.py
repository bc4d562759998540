"""Environments: Gymnasium ids validated into an :class:`EnvSpec` (stepping them is the EnvStep
primitive's, in ``hetrl.primitives``); MinAtar and Atari ids from the ``pixels`` extra
(``hetrl.envs.pixels``)."""

from hetrl.envs.pixels import AtariOptions
from hetrl.envs.spec import EnvSpec, env_spec, make_env

__all__ = ["AtariOptions", "EnvSpec", "env_spec", "make_env"]
