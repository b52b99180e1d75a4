"""What a workload keeps in HBM: each tensor's role (from the kernels that read and write it)
and the bytes per role. Nothing is freed while a workload runs, so the footprint is the sum."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping

from ..config.workload import Op, Tensor, Workload
from ..errors import SimulatorError, TooLargeError
from ..ops import DTYPE_BYTES, OPS
from ..units import format_bytes_decimal as fmt_bytes
from .kernel import Plan
from .program import MAX_INSTRUCTIONS
from .tiling import MatmulShape, Tiling, TilingError, gemm_shape, resolve_tiling

# Roles of tensors that occupy HBM while the workload runs (a view shares its source's bytes,
# an on-chip value never reaches HBM).
RESIDENT_ROLES = ("weight", "cache", "activation", "intermediate", "output", "viewed")
# Roles of tensors a workload reads from HBM without writing them.
INPUT_ROLES = ("weight", "cache", "activation", "view")


def tensor_roles(workload: Workload, plan: Plan) -> dict[str, tuple[str, int]]:
    """name -> (role, bytes) for every tensor the kernels touch."""
    tensors = workload.tensors
    produced = {op.output for kernel in plan.kernels for op in kernel.ops}
    consumed = {name for kernel in plan.kernels for op in kernel.ops for name in op.inputs}
    written = {kernel.output for kernel in plan.kernels}
    roles = {}
    for name in sorted(consumed | produced):
        if name not in produced and tensors[name].kind == "intermediate":
            role = "view"  # a reshape or a slice of a tensor in HBM
        elif name not in produced:
            role = tensors[name].kind  # activation, weight or cache: from HBM
        elif name not in written:
            role = "on_chip"  # lives and dies inside one fused kernel
        elif name in consumed:
            role = "intermediate"  # written by one kernel, read by another
        else:
            role = "output"
        roles[name] = (role, tensors[name].nbytes)
    for op in workload.ops:  # an input that kernels read only through a view of it
        if OPS[op.op].unit == "view" and op.output in roles and op.inputs[0] not in roles:
            roles[op.inputs[0]] = ("viewed", tensors[op.inputs[0]].nbytes)
    return roles


def read_once_bytes(name: str, ops: Iterable[Op], tensors: Mapping[str, Tensor]) -> int:
    """The bytes of a tensor the ops reading it (among `ops`) must fetch at least once: all
    of them, unless every reader only gathers rows of it (an embedding lookup reads a row per
    token, not the table)."""
    readers = [op for op in ops if name in op.inputs]
    tensor = tensors[name]
    if not readers or not all(OPS[op.op].gathers for op in readers):
        return tensor.nbytes
    gathered = max(math.prod(tensors[op.output].shape) for op in readers)
    return min(tensor.nbytes, gathered * DTYPE_BYTES[tensor.dtype])


def compulsory_bytes(workload: Workload, roles: Mapping[str, tuple[str, int]]) -> int:
    """The HBM traffic no schedule avoids: every input read once (a gathered one, its rows),
    every kernel's result written once (an input kernels read only through a view counts as
    that view)."""
    return sum(
        read_once_bytes(name, workload.ops, workload.tensors) if role in INPUT_ROLES else nbytes
        for name, (role, nbytes) in roles.items()
        if role not in ("on_chip", "viewed")
    )


def footprint_bytes(roles: Mapping[str, tuple[str, int]]) -> dict[str, int]:
    """HBM bytes per resident role, and their total (nothing is freed while a workload runs)."""
    by_role = {role: sum(n for r, n in roles.values() if r == role) for role in RESIDENT_ROLES}
    return {**by_role, "total": sum(by_role.values())}


def refuse_if_over_capacity(workload: Workload, roles: Mapping[str, tuple[str, int]]) -> None:
    """A workload whose tensors do not fit in HBM is refused with the bytes per role."""
    footprint = footprint_bytes(roles)
    capacity = workload.hardware.memories["HBM"].capacity_bytes
    if footprint["total"] > capacity:
        parts = ", ".join(
            f"{role}s {fmt_bytes(n)}" for role, n in footprint.items() if n and role != "total"
        )
        raise SimulatorError(
            f"{workload.source}: the tensors need {fmt_bytes(footprint['total'])} of HBM "
            f"({parts}) but {workload.hardware.name} has {fmt_bytes(capacity)}; use a smaller "
            "problem or a chip with more HBM"
        )


def instruction_count(shape: MatmulShape, t: Tiling, epilogue_ops: int) -> int:
    """About how many instructions a matmul kernel lowers to with this tiling."""
    g = shape.gemms
    blocks = shape.batch * -(-shape.m // t.base_m) * -(-shape.n // t.base_n)
    k_blocks = -(-shape.k // t.base_k)
    chunks = -(-shape.k // (t.base_k * t.step_k))
    return blocks * (k_blocks * (1 + 2 * g) + chunks * (1 + g) + g + 2 * epilogue_ops)


def refuse_if_too_large(workload: Workload, plan: Plan) -> None:
    """Refused before any kernel is built: matmul kernels of more instructions in all than a
    run can hold (counted from their tilings; a kernel whose tiling is wrong counts none, as
    lowering reports it), naming the kernel if one alone is too large."""
    counts = []
    for kernel in plan.kernels:
        if kernel.gemms and not kernel.attention:
            try:
                shape = gemm_shape(list(kernel.gemms), workload.tensors)
                tiling = workload.tiling_for(kernel.tiling_op)
                t = resolve_tiling(shape, tiling, workload.hardware, kernel.name)
            except TilingError:
                continue
            counts.append((instruction_count(shape, t, len(kernel.epilogue)), kernel, t))
    total = sum(count for count, _, _ in counts)
    if total <= MAX_INSTRUCTIONS:
        return
    count, kernel, t = max(counts, key=lambda c: c[0])
    if count > MAX_INSTRUCTIONS:
        raise TooLargeError(
            f"{workload.source}: {kernel.gemms[0].path}: kernel '{kernel.name}' would need "
            f"about {count:,} instructions, more than the {MAX_INSTRUCTIONS:,} a run can hold "
            f"in memory; use larger base blocks (now {t.base_m}x{t.base_n}x{t.base_k}) or a "
            "smaller problem",
            count,
        )
    raise TooLargeError(
        f"{workload.source}: its matmul kernels would need about {total:,} instructions in "
        f"all, more than the {MAX_INSTRUCTIONS:,} a run can hold in memory; use larger base "
        "blocks or a smaller problem",
        total,
    )
