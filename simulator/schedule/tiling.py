"""Matmul tiling: the rules a tiling must obey, and a legal default derived from shapes.

Vocabulary follows Ascend C's TCubeTiling: `base` m/n/k is one Cube call
(one block in L0A/L0B/L0C), `step.k` how many base-k blocks one MTE2 load
stages in L1, `order` which output dimension the loop walks first (n: walk
along N, keeping the A panel), `buffers` the ping-pong depth of every staged
buffer, `split` how output blocks are spread over cores (K is never split).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

from ..config.hardware import Hardware
from ..config.workload import TilingSpec
from ..errors import SimulatorError
from ..units import format_size

ACCUMULATOR_BYTES = 4  # L0C accumulates in fp32 (int32 for int8)


class TilingError(SimulatorError):
    """A tiling that breaks a rule; the message names the field path, the rule and the numbers."""


@dataclass(frozen=True)
class MatmulShape:
    m: int
    n: int
    k: int
    a_bytes: int       # bytes per element of A, B and the output
    b_bytes: int
    out_bytes: int
    dtype: str         # the Cube's input dtype (selects the fractal)
    batch: int = 1     # independent matmuls of this shape (batch_matmul)
    gemms: int = 1     # GEMMs sharing A in one kernel (2 for a dual gate/up GEMM)


@dataclass(frozen=True)
class Tiling:
    base_m: int
    base_n: int
    base_k: int
    step_k: int
    order: str
    buffers: int
    split_b: int
    split_m: int
    split_n: int

    def to_dict(self) -> dict:
        return {"base": {"m": self.base_m, "n": self.base_n, "k": self.base_k},
                "step": {"k": self.step_k}, "order": self.order, "buffers": self.buffers,
                "split": {"b": self.split_b, "m": self.split_m, "n": self.split_n}}


def gemm_shape(gemms: list, tensors: dict) -> MatmulShape:
    """The shape of a kernel's GEMMs (two only when they share A and have equal shapes)."""
    from ..graph.ops import DTYPE_BYTES, Operand, matmul_dims

    op = gemms[0]
    a, b = (tensors[name] for name in op.inputs)
    operands = [Operand(t.name, t.shape, t.dtype) for t in (a, b)]
    batch, m, n, k = matmul_dims(operands, op.attrs)
    return MatmulShape(m=m, n=n, k=k, a_bytes=DTYPE_BYTES[a.dtype], b_bytes=DTYPE_BYTES[b.dtype],
                       out_bytes=DTYPE_BYTES[tensors[op.output].dtype], dtype=a.dtype,
                       batch=batch, gemms=len(gemms))


def round_up(value: int, multiple: int) -> int:
    return -(-value // multiple) * multiple


def single_core_extent(total: int, parts: int, align: int) -> int:
    """Each core's share of a dimension, rounded up to the alignment (the last core gets less)."""
    return round_up(-(-total // parts), align)


def buffer_needs(shape: MatmulShape, t: Tiling) -> dict[str, tuple[int, str]]:
    """Bytes each per-core buffer needs for this tiling, with the formula that gives them."""
    a, b, db, g = shape.a_bytes, shape.b_bytes, t.buffers, shape.gemms
    gemms = f"{g} GEMMs × " if g > 1 else ""
    l1 = (t.base_m * t.base_k * a + g * t.base_k * t.base_n * b) * t.step_k * db
    return {
        "L0A": (t.base_m * t.base_k * a * db,
                f"base.m × base.k × {a} B × buffers = {t.base_m} × {t.base_k} × {a} × {db}"),
        "L0B": (g * t.base_k * t.base_n * b * db,
                f"{gemms}base.k × base.n × {b} B × buffers = {t.base_k} × {t.base_n} × {b} × "
                f"{db}"),
        "L0C": (g * t.base_m * t.base_n * ACCUMULATOR_BYTES * db,
                f"{gemms}base.m × base.n × {ACCUMULATOR_BYTES} B × buffers = {t.base_m} × "
                f"{t.base_n} × {ACCUMULATOR_BYTES} × {db}"),
        "L1": (l1, f"(base.m × base.k × {a} B + {gemms}base.k × base.n × {b} B) × step.k × "
                   f"buffers = ({t.base_m} × {t.base_k} × {a} + {g} × {t.base_k} × {t.base_n} × "
                   f"{b}) × {t.step_k} × {db}"),
    }


def check_tiling(shape: MatmulShape, t: Tiling, hw: Hardware, path: str, kernel: str) -> list[str]:
    """Every rule the tiling breaks, as 'path.field: rule (numbers)'."""
    fm, fn, fk = hw.cube.fractal[shape.dtype]
    problems = []
    for dim, value, frac, total in (("m", t.base_m, fm, shape.m), ("n", t.base_n, fn, shape.n),
                                    ("k", t.base_k, fk, shape.k)):
        if value % frac:
            problems.append(f"{path}.base.{dim}: {value} is not a multiple of the Cube fractal "
                            f"{dim}={frac} for {shape.dtype}")
        elif value > round_up(total, frac):
            problems.append(f"{path}.base.{dim}: {value} is larger than the problem: kernel "
                            f"'{kernel}' has {dim.upper()}={total} (at most "
                            f"{round_up(total, frac)} after fractal padding)")
    if t.step_k * t.base_k > round_up(shape.k, fk) and t.step_k > 1:
        problems.append(f"{path}.step.k: step.k × base.k = {t.step_k} × {t.base_k} = "
                        f"{t.step_k * t.base_k} is larger than K={shape.k} of kernel '{kernel}'")
    if t.split_b * t.split_m * t.split_n > hw.cores:
        problems.append(f"{path}.split: split.b × split.m × split.n = {t.split_b} × {t.split_m} "
                        f"× {t.split_n} = {t.split_b * t.split_m * t.split_n} cores, but "
                        f"{hw.name} has {hw.cores}")
    if t.split_b > shape.batch:
        problems.append(f"{path}.split.b: {t.split_b} is larger than the batch of kernel "
                        f"'{kernel}' ({shape.batch})")
    for buffer, (need, formula) in buffer_needs(shape, t).items():
        capacity = hw.buffer_bytes[buffer]
        if need > capacity:
            problems.append(f"{path}: does not fit {buffer} for kernel '{kernel}': {formula} = "
                            f"{need} B ({format_size(need)}) > {buffer} capacity {capacity} B "
                            f"({format_size(capacity)})")
    return problems


def resolve_tiling(shape: MatmulShape, spec: TilingSpec, hw: Hardware, kernel: str) -> Tiling:
    """The file's tiling with every unspecified field derived; refused if it breaks a rule."""
    derived = default_tiling(shape, hw, spec)
    given = {k: v for k, v in asdict(spec).items() if k != "path" and v is not None}
    tiling = Tiling(**{**asdict(derived), **given})
    problems = check_tiling(shape, tiling, hw, spec.path or "schedule.tiling", kernel)
    if problems:
        raise TilingError("\n".join(problems))
    return tiling


NOTHING_FIXED = TilingSpec()


def default_tiling(shape: MatmulShape, hw: Hardware, fixed: TilingSpec = NOTHING_FIXED) -> Tiling:
    """A legal tiling derived from the shapes and the buffer sizes, honouring fields already fixed.

    Core split: the (split.m, split.n) whose largest per-core block is smallest,
    then the one moving the fewest operand bytes. Base: the largest
    fractal-aligned blocks that double-buffer in L0 (m up to 128, n up to 256,
    then k as deep as L0A/L0B allow). Step: as many base-k blocks as fit L1.
    """
    fm, fn, fk = hw.cube.fractal[shape.dtype]
    buffers = fixed.buffers or 2
    g = shape.gemms
    split_b, split_m, split_n = _best_split(shape, hw, fm, fn, fixed)
    core_m = single_core_extent(shape.m, split_m, fm)
    core_n = single_core_extent(shape.n, split_n, fn)
    base_m = fixed.base_m or min(core_m, 128)
    base_n = fixed.base_n or min(core_n, 256)
    while g * base_m * base_n * ACCUMULATOR_BYTES * buffers > hw.buffer_bytes["L0C"]:
        if base_n > fn:
            base_n = round_up(base_n // 2, fn)
        elif base_m > fm and not fixed.base_m:
            base_m = round_up(base_m // 2, fm)
        else:
            break
    if fixed.base_k:
        base_k = fixed.base_k
    else:
        k_room = min(hw.buffer_bytes["L0A"] // (base_m * shape.a_bytes * buffers),
                     hw.buffer_bytes["L0B"] // (g * base_n * shape.b_bytes * buffers))
        base_k = max(fk, min(k_room // fk * fk, round_up(shape.k, fk), 256))
    if fixed.step_k:
        step_k = fixed.step_k
    else:
        per_step = (base_m * shape.a_bytes + g * base_n * shape.b_bytes) * base_k * buffers
        step_k = max(1, min(hw.buffer_bytes["L1"] // per_step, round_up(shape.k, fk) // base_k))
    return Tiling(base_m, base_n, base_k, step_k, fixed.order or "n", buffers, split_b,
                  split_m, split_n)


def _best_split(shape: MatmulShape, hw: Hardware, fm: int, fn: int,
                fixed: TilingSpec) -> tuple[int, int, int]:
    """Fewest output elements on the busiest core, then the fewest HBM bytes."""
    best = None
    for split_b in range(1, min(shape.batch, hw.cores) + 1):
        if fixed.split_b and split_b != fixed.split_b:
            continue
        for split_m in range(1, hw.cores // split_b + 1):
            if fixed.split_m and split_m != fixed.split_m:
                continue
            split_n = fixed.split_n or hw.cores // (split_b * split_m)
            if split_b * split_m * split_n > hw.cores:
                continue
            core_m = single_core_extent(shape.m, split_m, fm)
            core_n = single_core_extent(shape.n, split_n, fn)
            if core_m > round_up(shape.m, fm) or core_n > round_up(shape.n, fn):
                continue
            work = -(-shape.batch // split_b) * core_m * core_n
            key = (work, _hbm_estimate(shape, hw, core_m, core_n), -split_b, split_m)
            if best is None or key < best[0]:
                best = (key, split_b, split_m, split_n)
    if best is None:  # a fixed split the shapes cannot use: keep it and let the rules say why
        return fixed.split_b or 1, fixed.split_m or 1, fixed.split_n or hw.cores
    return best[1], best[2], best[3]


def _hbm_estimate(shape: MatmulShape, hw: Hardware, core_m: int, core_n: int) -> int:
    """Operand bytes from HBM: a core re-reads its A rows for each of its N blocks and its B
    columns for each of its M blocks; a re-read operand that fits half the L2 (the other half
    streams the other operand) is read from HBM once."""
    m_blocks = -(-core_m // min(core_m, 128))
    n_blocks = -(-core_n // min(core_n, 256 // shape.gemms))
    a_bytes = shape.batch * shape.m * shape.k * shape.a_bytes
    b_bytes = shape.batch * shape.k * shape.n * shape.b_bytes * shape.gemms
    l2 = hw.memories["L2"].capacity_bytes // 2
    return (a_bytes * (n_blocks if a_bytes > l2 else 1)
            + b_bytes * (m_blocks if b_bytes > l2 else 1))


def cube_cycles(m: int, n: int, k: int, fractal: tuple[int, int, int]) -> int:
    """Cycles of one Cube call: one fractal step per cycle, partial fractals padded."""
    fm, fn, fk = fractal
    return math.ceil(m / fm) * math.ceil(n / fn) * math.ceil(k / fk)
