"""The ops registry: for every op, its unit, FLOPs, output shape and vector cost class.

This is the one place an op's cost is defined. Vector ops cost
`bytes / vector bytes-per-cycle × factor`, where the factor belongs to the
op's cost class and its value to the hardware (a chip with a fast exp unit
has a smaller `transcendental` factor).
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class OpSpec:
    name: str
    unit: str                 # "cube" or "vector"
    arity: int
    cost_class: str           # vector cost class; "matmul" for the Cube
    flops_per_element: int    # vector ops: FLOPs per output element (an estimate for roofline)

    def output_shape(self, shapes: list[tuple[int, ...]]) -> tuple[int, ...]:
        """Shape of the result; ValueError with the rule when the inputs do not fit together."""
        if self.unit == "cube":
            a, b = shapes
            if len(a) != 2 or len(b) != 2:
                raise ValueError(f"matmul takes two 2-D tensors, got shapes {list(a)} and "
                                 f"{list(b)}")
            if a[1] != b[0]:
                raise ValueError(f"inner dimensions differ: {list(a)} · {list(b)} "
                                 f"({a[1]} != {b[0]})")
            return (a[0], b[1])
        out = shapes[0]
        for other in shapes[1:]:
            if not _broadcasts(other, out):
                raise ValueError(f"shape {list(other)} does not broadcast to {list(out)} (an "
                                 "input must match, be one row [..., 1, N] or one column "
                                 "[..., 1])")
        return out

    def flops(self, shapes: list[tuple[int, ...]]) -> int:
        if self.unit == "cube":
            (m, k), (_, n) = shapes
            return 2 * m * n * k
        return self.flops_per_element * math.prod(self.output_shape(shapes))


def _broadcasts(small: tuple[int, ...], big: tuple[int, ...]) -> bool:
    """Same shape, a row broadcast over every leading dim (a bias [N] against [..., N]),
    or a column broadcast (a per-row scale [..., 1]); scalars are both."""
    if len(small) > len(big):
        return False
    small = (1,) * (len(big) - len(small)) + tuple(small)
    if small == tuple(big):
        return True
    row = all(s == 1 for s in small[:-1]) and small[-1] in (1, big[-1])
    column = small[-1] == 1 and small[:-1] == tuple(big[:-1])
    return row or column


OPS: dict[str, OpSpec] = {spec.name: spec for spec in (
    OpSpec("matmul", "cube", 2, "matmul", 0),
    OpSpec("bias_add", "vector", 2, "elementwise", 1),
    OpSpec("add", "vector", 2, "elementwise", 1),
    OpSpec("mul", "vector", 2, "elementwise", 1),
    OpSpec("relu", "vector", 1, "elementwise", 1),
    # SiLU x·sigmoid(x) and tanh-GELU need an exp and a division: a handful of FLOPs each.
    OpSpec("silu", "vector", 1, "transcendental", 4),
    OpSpec("gelu", "vector", 1, "transcendental", 8),
)}
