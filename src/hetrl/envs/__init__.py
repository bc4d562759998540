"""Environments: where a run's envs come from (an id, ``module:Id`` or a factory, with kwargs and
wrappers: :class:`EnvSource`), validated into an :class:`EnvSpec` (stepping them is the EnvStep
primitive's, in ``hetrl.primitives``); MinAtar and Atari ids from the ``pixels`` extra
(``hetrl.envs.pixels``)."""

from hetrl.envs.pixels import AtariOptions
from hetrl.envs.source import EnvSource, env_source
from hetrl.envs.spec import EnvSpec, env_spec, make_env

__all__ = ["AtariOptions", "EnvSource", "EnvSpec", "env_source", "env_spec", "make_env"]
