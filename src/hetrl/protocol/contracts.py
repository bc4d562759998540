"""The training protocol: named primitives with fixed contracts.

One off-policy iteration is a dataflow between these primitives::

    EnvStep --obs--> Act --actions--> EnvStep                      (actors)
    EnvStep --transitions--> ReplayAdd --> replay storage
    ReplaySample --batch, indices, weights--> Learn --td errors--> PriorityUpdate
    Learn --parameters--> WeightSync --> Act

A contract names each input and output with a symbolic shape and a dtype. Symbols are filled from
the algorithm's spec: ``N`` envs stepped together, ``B`` the batch size, ``obs`` the observation
shape, ``act`` the action shape (empty for discrete actions), ``obs_dtype`` the observations' dtype
everywhere they travel (the spec's ``EnvSpec.obs_dtype``: uint8 for pixel envs, float32 when left
out): EnvStep returns it, Act reads it, the replays store and sample it, Learn receives it on its
device (a conv network converts uint8 to float there); for tabular learning ``T``
transitions, ``U`` units and ``table`` the entries of a flat Q-table. Randomness is an *input* (uniform
draws, noise): the executor owns the random number generator, so every implementation of a
primitive computes the same function and a run is reproducible whatever backend runs it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

import numpy as np

Shape = tuple[str | int, ...]


@dataclass(frozen=True)
class ArraySpec:
    """One named array of a contract. ``shape`` may hold symbols such as ``"B"`` or ``"obs"``."""

    name: str
    shape: Shape
    dtype: str  # a numpy dtype name, or a symbol looked up in the dims (e.g. "action_dtype")
    doc: str = ""


@dataclass(frozen=True)
class Contract:
    name: str
    inputs: tuple[ArraySpec, ...]
    outputs: tuple[ArraySpec, ...]
    doc: str

    def check(self, side: str, arrays: Mapping[str, Any], dims: Mapping[str, Any]) -> None:
        """Raise ``TypeError`` if ``arrays`` do not match the ``side`` ("inputs"/"outputs") specs.

        ``dims`` maps each shape symbol to an int or, for ``obs``/``act``, a tuple of ints, and each
        dtype symbol (``action_dtype``, ``table_dtype``) to a dtype name.
        """
        for spec in getattr(self, side):
            if spec.name not in arrays:
                raise TypeError(f"{self.name}: missing {side[:-1]} {spec.name!r}")
            value = arrays[spec.name]
            shape = tuple(value.shape)
            want: list[int] = []
            for dim in spec.shape:
                resolved = dims[dim] if isinstance(dim, str) else dim
                want.extend(resolved if isinstance(resolved, tuple) else (resolved,))
            if shape != tuple(want):
                raise TypeError(f"{self.name}: {spec.name} has shape {shape}, contract says {tuple(want)}")
            dtype = dims.get(spec.dtype, DTYPE_DEFAULTS.get(spec.dtype, spec.dtype))
            got = str(value.dtype).replace("torch.", "")
            if got != np.dtype(dtype).name:
                raise TypeError(f"{self.name}: {spec.name} has dtype {got}, contract says {dtype}")


A = ArraySpec
DTYPE_DEFAULTS = {"obs_dtype": "float32"}  # a dtype symbol that dims may leave out: vector envs' observations
_TRANSITION = (
    A("obs", ("B", "obs"), "obs_dtype", "uint8 for pixel envs: converted to float by the network, on its device"),
    A("actions", ("B", "act"), "action_dtype"),
    A("rewards", ("B",), "float32", "n-step discounted reward sum"),
    A("next_obs", ("B", "obs"), "obs_dtype", "observation n steps later (the true final one at an episode end)"),
    A("discounts", ("B",), "float32", "gamma**k to bootstrap with; 0 where the episode terminated"),
)

PRIMITIVES: dict[str, Contract] = {
    c.name: c
    for c in (
        Contract(
            "EnvStep",
            inputs=(A("actions", ("N", "act"), "action_dtype"),),
            outputs=(
                A("next_obs", ("N", "obs"), "obs_dtype", "after auto-reset: first obs of the new episode (uint8 for pixel envs)"),
                A("rewards", ("N",), "float32"),
                A("terminated", ("N",), "bool"),
                A("truncated", ("N",), "bool"),
                A("final_obs", ("N", "obs"), "obs_dtype", "the last obs of an episode that ended, else next_obs"),
            ),
            doc="Step N environments; ended episodes reset automatically.",
        ),
        Contract(
            "Act",
            inputs=(
                A("obs", ("N", "obs"), "obs_dtype"),
                A("explore", ("N", "act"), "float32", "exploration draws: DQN uniform [0,1) per env; DDPG Gaussian noise"),
                A("random_actions", ("N", "act"), "action_dtype", "what a fully random policy would do"),
            ),
            outputs=(A("actions", ("N", "act"), "action_dtype"),),
            doc="The behaviour policy: the network's greedy action plus exploration.",
        ),
        Contract(
            "ReplayAdd",
            inputs=tuple(A(s.name, ("N",) + s.shape[1:], s.dtype, s.doc) for s in _TRANSITION),
            outputs=(),
            doc="Append N transitions to the ring storage; new items get the maximum priority.",
        ),
        Contract(
            "ReplaySample",
            inputs=(A("uniform", ("B",), "float64", "one U[0,1) draw per sample"),),
            outputs=_TRANSITION
            + (
                A("indices", ("B",), "int64"),
                A("weights", ("B",), "float32", "importance-sampling weights (ones for uniform replay)"),
            ),
            doc="Draw a batch: uniform, or proportional to priority (stratified) with IS weights.",
        ),
        Contract(
            "Learn",
            inputs=_TRANSITION + (A("weights", ("B",), "float32"),),
            outputs=(A("td_errors", ("B",), "float32", "absolute TD errors, for PriorityUpdate"),),
            doc="One gradient update of the algorithm's networks (and its target networks).",
        ),
        Contract(
            "PriorityUpdate",
            inputs=(A("indices", ("B",), "int64"), A("td_errors", ("B",), "float32")),
            outputs=(),
            doc="Set priorities to (|td| + eps) ** alpha for the sampled items.",
        ),
        Contract(
            "TabularLearn",
            inputs=(A("transitions", ("T", 4), "int32", "packed rows: Q index, next-row offset, next action, reward bits"),),
            outputs=(A("tables", ("U", "table"), "table_dtype", "one flat Q-table per unit (float32, or int32 fixed point)"),),
            doc="Q-learning or SARSA on U units, each over its shard of an experience dataset, in the schedule's order.",
        ),
        Contract(
            "WeightSync",
            inputs=(),
            outputs=(),
            doc="Copy the learner's policy parameters into the acting policy.",
        ),
    )
}

LEARN_INPUTS = tuple(spec.name for spec in PRIMITIVES["Learn"].inputs)  # what a Learn call reads of a batch


def contract_dims(spec: Any, **sizes: int | None) -> dict[str, Any]:
    """The dims a contract check needs, from an env spec (``EnvSpec`` or anything with its fields:
    obs_shape, action_shape, action_dtype, and obs_dtype, float32 where it lacks one) and the sizes
    (``N``, ``B``, ...) given by keyword."""
    return {**sizes, "obs": tuple(spec.obs_shape), "act": tuple(spec.action_shape), "action_dtype": spec.action_dtype,
            "obs_dtype": getattr(spec, "obs_dtype", DTYPE_DEFAULTS["obs_dtype"])}
