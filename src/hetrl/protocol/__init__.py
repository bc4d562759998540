"""The hardware-agnostic training protocol: primitive contracts, their interfaces, the registry
and placements. A leaf: it imports nothing else of hetrl; the implementations are in
``hetrl.primitives``."""

from hetrl.protocol.contracts import LEARN_INPUTS, PRIMITIVES, ArraySpec, Contract, contract_dims
from hetrl.protocol.interfaces import Act, EnvStep, Executor, Learn, Primitive, Replay, TabularLearn
from hetrl.protocol.placement import PRIMITIVE_ORDER, Placement, Slot
from hetrl.protocol.registry import Implementation, implements, registered

__all__ = [
    "LEARN_INPUTS", "PRIMITIVES", "PRIMITIVE_ORDER", "Act", "ArraySpec", "Contract", "EnvStep", "Executor", "contract_dims",
    "Implementation", "Learn", "Placement", "Primitive", "Replay", "Slot", "TabularLearn", "implements", "registered",
]
