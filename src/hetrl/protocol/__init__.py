"""The hardware-agnostic training protocol: primitive contracts and their implementations."""

from hetrl.protocol.contracts import PRIMITIVES, ArraySpec, Contract
from hetrl.protocol.registry import Implementation, get, implementations, implements

__all__ = ["PRIMITIVES", "ArraySpec", "Contract", "Implementation", "get", "implementations", "implements"]
