"""The second kernel of split-key attention (FlashDecoding): each chunk of keys left a
partial O, divided by its own row sums, and its rows' log-sum-exp (fp32, in a workspace); this
kernel folds the chunks together per block of rows, rescaling each by its log-sum-exp as the
online softmax rescales O, and stores O once. It is launched as a kernel of its own, as
FlashAttention-2's split-KV path launches its combine."""

from __future__ import annotations

from ..config.hardware import Hardware, Vector
from ..config.workload import Tensor
from ..cost import vector_op_cycles
from ..errors import TilingError
from ..ops import DTYPE_BYTES
from .kernel import Kernel
from .program import CoreBuilder, Draft, KernelProgram, SlotRing, VectorOp, operand_region, transfer

PARTIAL_BYTES = 4  # partial outputs, their log-sum-exp and the running O are fp32
BUFFERS = 2


def lower_combine(
    kernel: Kernel, out: Tensor, partials: Tensor, splits: int, hw: Hardware
) -> KernelProgram:
    """The split keys' second kernel: per block of rows, each chunk's partial O is loaded and
    folded into a running O in UB (rescaled by the chunks' log-sum-exp so far, then added: two
    passes), which is converted and stored once."""
    *_, queries, width = partials.shape
    head_dim = width - 1
    part_row, o_row = width * PARTIAL_BYTES, head_dim * PARTIAL_BYTES
    ub = hw.ub_bytes(matmul=False)
    rows_per_block = min(queries, ub // (BUFFERS * part_row + o_row))
    if rows_per_block < 1:
        raise TilingError(
            f"{kernel.name}: one row of the split attention's partial outputs "
            f"({BUFFERS} x {part_row} B and a {o_row} B running O) does not fit "
            f"{hw.name}'s UB of {ub} B"
        )
    batch = partials.shape[0] // splits
    units = [(b, r0) for b in range(batch) for r0 in range(0, queries, rows_per_block)]
    element_bytes = DTYPE_BYTES[out.dtype]
    vector_work = 0.0
    cores = []
    for index in range(min(hw.cores, len(units))):
        core = CoreBuilder()
        ring = SlotRing(core, "UB", rows_per_block * part_row, BUFFERS)
        for b, r0 in units[index :: hw.cores]:
            r1 = min(queries, r0 + rows_per_block)
            rows = r1 - r0
            for split in range(splits):
                region = operand_region(
                    partials.name, partials.shape, False, b * splits + split, (r0, r1), (0, width)
                )
                nbytes = rows * part_row
                slot = ring.fill(
                    core.emit(transfer("MTE2", f"load {region}", "HBM", "UB", nbytes, region))
                )
                fold, work = vector_instruction(
                    core,
                    hw.vector,
                    f"combine chunk {split}",
                    2,
                    "elementwise",
                    PARTIAL_BYTES,
                    "UB",
                    nbytes + rows * o_row,
                    rows * o_row,
                )
                vector_work += work
                ring.first_use(fold, slot)
                ring.last_use(fold, slot)
                if split == 0:
                    fold.takes("UB", rows * o_row)  # the running O, until the store
            region = operand_region(out.name, out.shape, False, b, (r0, r1), (0, head_dim))
            nbytes = rows * head_dim * element_bytes
            final, work = vector_instruction(
                core,
                hw.vector,
                "convert O",
                1,
                "elementwise",
                PARTIAL_BYTES,
                "UB",
                rows * o_row,
                nbytes,
            )
            vector_work += work
            finished = core.new_flag(0, "data")
            final.signals(finished)
            store = transfer("MTE3", f"store {region}", "UB", "HBM", nbytes, region)
            store.waits_for(finished)
            store.frees("UB", rows * o_row)
            core.emit(store)
        cores.append(core.build())
    return KernelProgram(
        f"{kernel.name} (combine)",
        tuple(op.name for op in kernel.ops[1:]),
        True,
        "vector",
        out.dtype,
        0,
        tuple(cores),
        None,
        partials.nbytes,
        out.nbytes,
        {"UB": BUFFERS * rows_per_block * part_row + rows_per_block * o_row},
        vector_work_bytes=vector_work,
    )


def vector_instruction(
    core: CoreBuilder,
    spec: Vector,
    label: str,
    passes: int,
    cost_class: str,
    width: int,
    level: str,
    reads: int,
    writes: int,
) -> tuple[Draft, float]:
    """One vector instruction making `passes` passes of a cost class over `reads` bytes of
    `width`-byte values in `level`, as a vector op of that class costs; and its vector work
    (bytes × cost factor)."""
    elements = reads // width // passes
    cycles = spec.latency_cycles + passes * (
        vector_op_cycles(spec, elements, width, cost_class) - spec.latency_cycles
    )
    draft = Draft(
        VectorOp,
        "VECTOR",
        label,
        writes,
        reads=((level, reads),),
        writes=((level, writes),),
        cycles=cycles,
    )
    return core.emit(draft), passes * elements * width * spec.cost_factor[cost_class]
