"""INT32 fixed-point numbers for Q-tables.

A Q-value ``x`` is stored as the int32 ``round(x * scale)``; ``scale`` is configurable (default
2**16: resolution 1.5e-5, range +-32768). The learning rate and the discount are *coefficients*
stored with a fixed 16 fractional bits, ``c = round(alpha * 2**16)``, so the update needs only
integer multiplies and shifts, and the Q-value scale never enters the update (it only converts
rewards in and Q-values out).

Rounding rule, used everywhere (encoding, every product with a coefficient, merging): round to
nearest, ties toward +infinity, i.e. ``floor(x + 1/2)``. For a product ``p`` of a coefficient
and an integer that is ``(p + 2**15) >> 16`` with an arithmetic (flooring) shift.

Saturation: intermediate values of an update are exact in 64-bit integers; the value written
back to the table is clamped to [-2**31, 2**31 - 1]. Encoded rewards are clamped the same way.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from hetrl.errors import HetrlError

INT32_MIN = -(2**31)
INT32_MAX = 2**31 - 1
COEF_BITS = 16
COEF_ONE = 1 << COEF_BITS
COEF_HALF = 1 << (COEF_BITS - 1)
DEFAULT_SCALE = 1 << 16


def coefficient(value: float, name: str) -> int:
    """``value`` in [0, 1] as a 16-fractional-bit integer, rounded half up."""
    if not 0.0 <= value <= 1.0:
        raise HetrlError(f"{name} must be in [0, 1] (got {value}); pass e.g. --{name} 0.1")
    return int(np.floor(value * COEF_ONE + 0.5))


@dataclass(frozen=True)
class FixedPoint:
    """The INT32 number format: ``x`` is stored as ``round(x * scale)``, saturated to int32."""

    scale: int = DEFAULT_SCALE

    def __post_init__(self) -> None:
        if not 1 <= self.scale <= 2**30:
            raise HetrlError(f"fixed-point scale must be an integer in [1, 2**30] (got {self.scale}); try --scale 65536")

    @property
    def max_value(self) -> float:
        """The largest representable Q-value."""
        return INT32_MAX / self.scale

    def encode(self, values: np.ndarray) -> np.ndarray:
        """Float values to int32, rounded half up (computed in float64) and saturated."""
        scaled = np.floor(np.asarray(values, dtype=np.float64) * self.scale + 0.5)
        return np.clip(scaled, INT32_MIN, INT32_MAX).astype(np.int32)

    def decode(self, values: np.ndarray) -> np.ndarray:
        """int32 values to float32 (exact division in float64, then rounded to float32)."""
        return (np.asarray(values, dtype=np.float64) / self.scale).astype(np.float32)
