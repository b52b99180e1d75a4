"""The ops registry: for every op, its unit, operands, output shape and dtype, FLOPs and
vector cost, defined in this one place.

Vector ops cost `work bytes / vector bytes-per-cycle × factor`: the work bytes
are the elements times the widest dtype the op touches (the vector lanes run
at that width), the factor belongs to the op's cost class and its value to
the hardware (a chip with a fast exp unit has a smaller `transcendental`).
Row-wise ops (softmax, layernorm, rmsnorm) reduce along the last dimension,
so a tile must hold whole rows.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable

from .errors import quote
from .units import DTYPE_BYTES

FLOAT_DTYPES = ("fp16", "bf16", "fp32")
CUBE_DTYPES = ("fp16", "bf16", "fp8", "int8")
# may multiply a narrower B, converted as it loads: int8 weights (weight-only quantization),
# or an int8 or fp8 KV cache
FLOAT_CUBE_DTYPES = ("fp16", "bf16")
# Accumulator dtype of the Cube per input dtype; the matmul result is cast on the way out
# (FIXPIPE) unless the op says otherwise.
CUBE_RESULT = {"fp16": "fp16", "bf16": "bf16", "fp8": "bf16", "int8": "int32"}

Shape = tuple[int, ...]


@dataclass(frozen=True)
class Operand:
    name: str
    shape: Shape
    dtype: str


def operands_of(op, tensors: dict) -> list[Operand]:
    """The shapes and dtypes an op's inputs have, as the registry's functions take them."""
    return [Operand(n, tensors[n].shape, tensors[n].dtype) for n in op.inputs]


def _bool(value: Any) -> bool:
    if not isinstance(value, bool):
        raise ValueError(f"expected true or false, got {value!r}")
    return value


QUANTIZED_DTYPES = ("int8", "fp8")


def _quantized_dtype(value: Any) -> str:
    if value not in QUANTIZED_DTYPES:
        raise ValueError(f"{value!r}: quantize produces {' or '.join(QUANTIZED_DTYPES)}")
    return value


def _dtype(value: Any) -> str:
    if not isinstance(value, str) or value not in DTYPE_BYTES:
        raise ValueError(f"{quote(value)} is not a dtype (dtypes: {', '.join(DTYPE_BYTES)})")
    return value


@dataclass(frozen=True)
class OpSpec:
    name: str
    unit: str  # "cube" or "vector"
    arity: tuple[int, int]  # fewest and most inputs
    cost_class: str  # vector cost class ("matmul" for the Cube)
    flops_per_element: int  # vector ops: an estimate, for the roofline's FLOP count
    infer: Callable[..., tuple[Shape, str]]
    rowwise: bool = False
    gathers: bool = False  # reads only as many rows of its input as it writes
    attrs: dict[str, tuple[Callable[[Any], Any], Any]] = field(default_factory=dict)

    def parse_attrs(self, raw: dict) -> dict[str, Any]:
        """Validated attributes with defaults; ValueError naming the attribute."""
        unknown = sorted(set(raw) - set(self.attrs))
        if unknown:
            known = ", ".join(self.attrs) or "none"
            raise ValueError(f"{self.name} has no attribute '{unknown[0]}' (attributes: {known})")
        out = {}
        for key, (parse, default) in self.attrs.items():
            if key in raw:
                try:
                    out[key] = parse(raw[key])
                except ValueError as exc:
                    raise ValueError(f"attribute {key}: {exc}") from None
            else:
                out[key] = default
        for required in REQUIRED_ATTRS.get(self.name, ()):
            if out[required] is None:
                raise ValueError(f"{self.name} needs the attribute '{required}'")
        return out

    def output(self, operands: list[Operand], attrs: dict) -> tuple[Shape, str]:
        """Result shape and dtype; ValueError naming the operand when they do not fit."""
        return self.infer(operands, attrs)

    def flops(self, operands: list[Operand], attrs: dict) -> int:
        if self.unit == "cube":
            batch, m, n, k = matmul_dims(operands, attrs)
            return 2 * batch * m * n * k
        shape, _ = self.infer(operands, attrs)
        return self.flops_per_element * math.prod(shape)

    def vector_work_bytes(self, operands: list[Operand], attrs: dict) -> int:
        shape, dtype = self.infer(operands, attrs)
        widest = max(DTYPE_BYTES[t] for t in [dtype, *(o.dtype for o in operands)])
        return math.prod(shape) * widest


def matmul_dims(operands: list[Operand], attrs: dict) -> tuple[int, int, int, int]:
    """(batch, M, N, K) of a matmul or batch_matmul, honouring transposed operands."""
    a, b = operands
    m, ka = (a.shape[-1], a.shape[-2]) if attrs.get("transpose_a") else a.shape[-2:]
    kb, n = (b.shape[-1], b.shape[-2]) if attrs.get("transpose_b") else b.shape[-2:]
    if ka != kb:
        raise ValueError(
            f"inner dimensions differ: {a.name} {list(a.shape)} has K={ka}, "
            f"{b.name} {list(b.shape)} has K={kb}"
        )
    return math.prod(a.shape[:-2]), m, n, ka


def _matmul(batched: bool):
    def infer(operands: list[Operand], attrs: dict) -> tuple[Shape, str]:
        a, b = operands
        for t in operands:
            if batched and len(t.shape) < 3:
                raise ValueError(
                    f"batch_matmul takes tensors with leading batch dims, "
                    f"{t.name} is {list(t.shape)}; use matmul for 2-D"
                )
            if not batched and len(t.shape) != 2:
                raise ValueError(
                    f"matmul takes 2-D tensors, {t.name} is {list(t.shape)}; "
                    "use batch_matmul for leading batch dims"
                )
        if a.shape[:-2] != b.shape[:-2]:
            raise ValueError(
                f"batch dims differ: {a.name} {list(a.shape[:-2])} vs {b.name} {list(b.shape[:-2])}"
            )
        converted = a.dtype in FLOAT_CUBE_DTYPES and b.dtype in QUANTIZED_DTYPES
        if a.dtype != b.dtype and not converted:
            raise ValueError(
                f"{a.name} is {a.dtype} but {b.name} is {b.dtype}: the Cube "
                "multiplies one dtype (or fp16/bf16 by an int8 or fp8 B, converted as it "
                "loads); quantize A or dequantize B"
            )
        if a.dtype not in CUBE_DTYPES:
            raise ValueError(
                f"the Cube has no {a.dtype} mode (modes: {', '.join(CUBE_DTYPES)}); "
                "cast to fp16 first"
            )
        _, m, n, _ = matmul_dims(operands, attrs)
        return (*a.shape[:-2], m, n), attrs.get("to") or CUBE_RESULT[a.dtype]

    return infer


def broadcasts(small: Shape, big: Shape) -> bool:
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


def _need_float(t: Operand, op: str) -> None:
    if t.dtype not in FLOAT_DTYPES:
        raise ValueError(
            f"{op} takes floating-point input, {t.name} is {t.dtype}; dequantize or cast it first"
        )


def _elementwise(op: str):
    def infer(operands: list[Operand], attrs: dict) -> tuple[Shape, str]:
        x = operands[0]
        for t in operands:
            _need_float(t, op)
        for t in operands[1:]:
            if t.dtype != x.dtype:
                raise ValueError(
                    f"{op} of {x.dtype} {x.name} and {t.dtype} {t.name}: cast one "
                    "so both have the same dtype"
                )
            if not broadcasts(t.shape, x.shape):
                raise ValueError(
                    f"{t.name} {list(t.shape)} does not broadcast to {x.name} "
                    f"{list(x.shape)} (it must match, be one row [..., N] or one "
                    "column [..., 1])"
                )
        return x.shape, x.dtype

    return infer


def causal_queries(rows: int, keys: int, attrs: dict) -> int:
    """The queries of one sequence in a causal softmax's rows: the `queries` attribute, or
    all rows when they are no more than the keys, or the keys when the rows stack whole
    groups of them (grouped query heads). Row r sits at position keys - queries + r mod
    queries: the last query sees every key (a prompt after earlier chunks, or the tokens a
    speculative step verifies)."""
    return attrs.get("queries") or (rows if rows <= keys else keys)


def _softmax(operands: list[Operand], attrs: dict) -> tuple[Shape, str]:
    shape, dtype = _elementwise("softmax")(operands, attrs)
    if attrs.get("causal") or attrs.get("queries"):
        rows, keys = (shape[-2] if len(shape) > 1 else 1), shape[-1]
        queries = causal_queries(rows, keys, attrs)
        if not attrs.get("causal"):
            raise ValueError("attribute queries: only a causal softmax places its queries")
        if queries > keys or rows % queries:
            raise ValueError(
                f"causal softmax of {operands[0].name} {list(shape)}: {rows} rows of "
                f"{keys} keys must be whole groups of one sequence's queries, at most one "
                f"per key (queries {queries}); set the attribute queries"
            )
    return shape, dtype


def _bias_add(operands: list[Operand], attrs: dict) -> tuple[Shape, str]:
    x, bias = operands
    if len(bias.shape) != 1 or bias.shape[0] != x.shape[-1]:
        raise ValueError(
            f"bias {bias.name} must be 1-D with {x.shape[-1]} elements (the last "
            f"dim of {x.name}), got {list(bias.shape)}"
        )
    return _elementwise("bias_add")(operands, attrs)


def _norm(op: str):
    def infer(operands: list[Operand], attrs: dict) -> tuple[Shape, str]:
        x = operands[0]
        _need_float(x, op)
        for t in operands[1:]:
            if list(t.shape) != [x.shape[-1]]:
                raise ValueError(
                    f"{op} weight {t.name} must be [{x.shape[-1]}] (the last dim "
                    f"of {x.name}), got {list(t.shape)}"
                )
            _need_float(t, op)
        return x.shape, x.dtype

    return infer


def _quantize(operands: list[Operand], attrs: dict) -> tuple[Shape, str]:
    x = operands[0]
    _need_float(x, "quantize")
    for scale in operands[1:]:
        if not broadcasts(scale.shape, x.shape):
            raise ValueError(
                f"scale {scale.name} {list(scale.shape)} does not broadcast to "
                f"{x.name} {list(x.shape)}"
            )
    return x.shape, attrs["to"]


def _dequantize(operands: list[Operand], attrs: dict) -> tuple[Shape, str]:
    x, scale = operands
    if x.dtype not in (*QUANTIZED_DTYPES, "int32"):
        raise ValueError(f"dequantize takes int8, fp8 or int32 input, {x.name} is {x.dtype}")
    if not broadcasts(scale.shape, x.shape):
        raise ValueError(
            f"scale {scale.name} {list(scale.shape)} does not broadcast to "
            f"{x.name} {list(x.shape)} (per channel: [N]; per token: [M, 1])"
        )
    _need_float(scale, "dequantize (scale)")
    return x.shape, attrs["to"]


def _cast(operands: list[Operand], attrs: dict) -> tuple[Shape, str]:
    return operands[0].shape, attrs["to"]


def _reshape(operands: list[Operand], attrs: dict) -> tuple[Shape, str]:
    x, shape = operands[0], tuple(attrs["shape"])
    if math.prod(shape) != math.prod(x.shape):
        raise ValueError(
            f"reshape of {x.name} {list(x.shape)} ({math.prod(x.shape)} elements) "
            f"to {list(shape)} ({math.prod(shape)} elements)"
        )
    return shape, x.dtype


def _slice(operands: list[Operand], attrs: dict) -> tuple[Shape, str]:
    x = operands[0]
    n = x.shape[-1]
    start, step = attrs["start"], attrs["step"]
    stop = n if attrs["stop"] is None else attrs["stop"]
    if not 0 <= start < stop <= n:
        raise ValueError(
            f"slice of {x.name} {list(x.shape)} from {start} to {stop}: needs "
            f"0 <= start < stop <= {n} (its last dimension)"
        )
    return (*x.shape[:-1], -(-(stop - start) // step)), x.dtype


def _gather(operands: list[Operand], attrs: dict) -> tuple[Shape, str]:
    x, rows = operands[0], attrs["rows"]
    if len(x.shape) != 2:
        raise ValueError(
            f"gather takes rows of a 2-D table: {rows} rows of {x.name} {list(x.shape)}"
        )
    return (rows, x.shape[1]), x.dtype


def _index(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"expected a whole number of at least 0, got {value!r}")
    return value


def _optional_positive(value: Any) -> int | None:
    return None if value is None else _positive(value)


def _positive(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"expected a whole number of at least 1, got {value!r}")
    return value


def _dims(value: Any) -> tuple[int, ...]:
    """Dimensions already evaluated by the workload loader (params allowed there)."""
    if (
        not isinstance(value, (list, tuple))
        or not value
        or not all(isinstance(d, int) and not isinstance(d, bool) and d > 0 for d in value)
    ):
        raise ValueError(f"expected a list of positive dimensions, got {value!r}")
    return tuple(value)


REQUIRED_ATTRS = {"cast": ("to",), "reshape": ("shape",), "gather": ("rows",)}
_TRANSPOSE = {"transpose_a": (_bool, False), "transpose_b": (_bool, False)}

OPS: dict[str, OpSpec] = {
    spec.name: spec
    for spec in (
        OpSpec(
            "matmul",
            "cube",
            (2, 2),
            "matmul",
            0,
            _matmul(False),
            attrs={**_TRANSPOSE, "to": (_dtype, None)},
        ),
        OpSpec(
            "batch_matmul",
            "cube",
            (2, 2),
            "matmul",
            0,
            _matmul(True),
            attrs={**_TRANSPOSE, "to": (_dtype, None)},
        ),
        OpSpec("bias_add", "vector", (2, 2), "elementwise", 1, _bias_add),
        OpSpec("add", "vector", (2, 2), "elementwise", 1, _elementwise("add")),
        OpSpec("mul", "vector", (2, 2), "elementwise", 1, _elementwise("mul")),
        OpSpec("relu", "vector", (1, 1), "elementwise", 1, _elementwise("relu")),
        # SiLU x·sigmoid(x) and tanh-GELU need an exp and a division: a handful of FLOPs each.
        OpSpec("silu", "vector", (1, 1), "transcendental", 4, _elementwise("silu")),
        OpSpec("gelu", "vector", (1, 1), "transcendental", 8, _elementwise("gelu")),
        # rotary position embedding: x·cos + rotate(x)·sin, the angle tables held on chip
        # (a row of head_dim per position, small beside x): two multiplies and an add
        OpSpec("rope", "vector", (1, 1), "elementwise", 3, _elementwise("rope")),
        # max, subtract, exp, sum, divide along the row
        # causal: each row attends to the keys up to its own position (causal_queries): an
        # unfused kernel still computes and masks the whole row
        OpSpec(
            "softmax",
            "vector",
            (1, 1),
            "transcendental",
            5,
            _softmax,
            rowwise=True,
            attrs={"causal": (_bool, False), "queries": (_optional_positive, None)},
        ),
        # mean, variance, normalise, scale, shift
        OpSpec("layernorm", "vector", (3, 3), "reduction", 8, _norm("layernorm"), rowwise=True),
        # mean of squares, rsqrt, normalise, scale
        OpSpec("rmsnorm", "vector", (2, 2), "reduction", 4, _norm("rmsnorm"), rowwise=True),
        OpSpec(
            "quantize",
            "vector",
            (1, 2),
            "convert",
            2,
            _quantize,
            attrs={"to": (_quantized_dtype, "int8")},
        ),
        OpSpec(
            "dequantize",
            "vector",
            (2, 2),
            "convert",
            2,
            _dequantize,
            attrs={"to": (_dtype, "fp16")},
        ),
        OpSpec("cast", "vector", (1, 1), "convert", 0, _cast, attrs={"to": (_dtype, None)}),
        # rows of a table by index (an embedding lookup, a sequence's last token, tokens sent
        # to their experts): the indices are data, so the model reads the table's rows from
        # `start` on, the same bytes, wrapping past its last row (more rows than the table
        # has: indices repeat, as a batch's tokens repeat vocabulary entries)
        OpSpec(
            "gather",
            "vector",
            (1, 1),
            "elementwise",
            0,
            _gather,
            gathers=True,
            attrs={"rows": (_positive, None), "start": (_index, 0)},
        ),
        # a copy into a contiguous tensor (what `strided: copy` puts after a slice)
        OpSpec("copy", "vector", (1, 1), "elementwise", 0, _elementwise("copy")),
        # A view: no data moves. Its input goes to HBM and its consumers read it back there.
        OpSpec("reshape", "view", (1, 1), "none", 0, _reshape, attrs={"shape": (_dims, None)}),
        # x[..., start:stop:step]: read in place, as runs of single elements when step > 1
        OpSpec(
            "slice",
            "view",
            (1, 1),
            "none",
            0,
            _slice,
            attrs={"start": (_index, 0), "stop": (_positive, None), "step": (_positive, 1)},
        ),
    )
}
