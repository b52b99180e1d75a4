"""Vector kernels: a chain of vector ops over tiles of the output spread over the cores:
whole rows when a row-wise op is in the chain, or chunks of rows too long for UB, each row
visited twice (its statistics, then applying them); per tile MTE2 loads, VECTOR runs the
chain, MTE3 stores."""

from __future__ import annotations

from ..config.hardware import Hardware
from ..config.workload import Workload
from ..cost import vector_work
from ..errors import TilingError, TooLargeError
from ..ops import OPS, operands_of
from .epilogue import UB_ALIGN_BYTES, VectorChain, as_2d, chain_slots, seeds_of
from .footprint import read_once_bytes
from .kernel import Kernel
from .program import MAX_INSTRUCTIONS, CoreBuilder, KernelProgram
from .tiling import round_up


def lower_vector(kernel: Kernel, workload: Workload, hw: Hardware) -> KernelProgram:
    """A chain of vector ops: tiles of the output spread over the cores."""
    tensors = workload.tensors
    ops = list(kernel.ops)
    out = tensors[kernel.output]
    rows, cols = as_2d(out)
    buffers = workload.tiling_for(kernel.tiling_op).buffers or 2
    seeds = seeds_of(ops)
    ub = hw.ub_bytes(matmul=False)

    def ub_need(tile_rows: int, tile_cols: int) -> int:
        return sum(chain_slots(ops, tensors, seeds, tile_rows, tile_cols).values()) * buffers

    split_rows = kernel.rowwise and ub_need(1, cols) > ub
    if split_rows:  # a row longer than UB holds: chunks of it, each row visited twice
        tile_rows, tile_cols = 1, cols
        while tile_cols > UB_ALIGN_BYTES and ub_need(1, tile_cols) > ub:
            tile_cols = round_up(tile_cols // 2, UB_ALIGN_BYTES)
    elif kernel.rowwise:
        tile_cols = cols
        tile_rows = max(1, min(-(-rows // hw.cores), ub // ub_need(1, cols)))
        while tile_rows > 1 and ub_need(tile_rows, cols) > ub:
            tile_rows -= 1
    else:
        per_core = round_up(-(-rows * cols // hw.cores), UB_ALIGN_BYTES)
        per_elem = ub_need(1, UB_ALIGN_BYTES) / UB_ALIGN_BYTES
        tile_elems = min(
            per_core, max(UB_ALIGN_BYTES, int(ub / per_elem) // UB_ALIGN_BYTES * UB_ALIGN_BYTES)
        )
        tile_cols = min(cols, tile_elems)
        tile_rows = max(1, min(rows, tile_elems // tile_cols))
        while ub_need(tile_rows, tile_cols) > ub and tile_rows > 1:
            tile_rows -= 1
    if OPS[ops[0].op].gathers:  # a tile gathers at most its table's rows (gathered_region)
        tile_rows = min(tile_rows, as_2d(tensors[ops[0].inputs[0]])[0])
    if ub_need(tile_rows, tile_cols) > ub:
        need = ub_need(tile_rows, tile_cols)
        raise TilingError(
            f"{ops[0].path}: the smallest tile of kernel '{kernel.name}' "
            f"({tile_rows}x{tile_cols} elements) needs {need} B of UB but UB "
            f"holds {ub} B"
        )
    count = -(-rows // tile_rows) * -(-cols // tile_cols) * (2 + 2 * len(ops)) * (1 + split_rows)
    if count > MAX_INSTRUCTIONS:
        raise TooLargeError(
            f"{ops[0].path}: kernel '{kernel.name}' would need about {count:,} "
            f"instructions, more than the {MAX_INSTRUCTIONS:,} a run can hold in "
            "memory; use a smaller problem or a chip with a larger UB",
            count,
        )
    # a core's tiles: (r0, c0) each; split rows deal whole rows, each row's chunks twice
    chunks = range(0, cols, tile_cols)
    tiles = [[(r, c) for c in chunks] for r in range(0, rows, tile_rows)]
    if not split_rows:
        tiles = [[tile] for row in tiles for tile in row]
    cores = []
    for core_index in range(min(hw.cores, len(tiles))):
        core = CoreBuilder()
        chain = VectorChain(
            core, ops, workload, hw, buffers, tile_rows, tile_cols, None, split_rows
        )
        for row in tiles[core_index :: hw.cores]:
            for statistics in (True, False) if split_rows else (False,):
                for r0, c0 in row:
                    r1, c1 = min(rows, r0 + tile_rows), min(cols, c0 + tile_cols)
                    chain.begin_tile(r0, r1, c0, c1)
                    chain.block(c0, c1)
                    if statistics:
                        chain.statistics()
                    else:
                        chain.end_tile()
        cores.append(core.build())
    ins = {name for op in ops for name in op.inputs} - {op.output for op in ops}
    return KernelProgram(
        kernel.name,
        tuple(op.name for op in ops),
        kernel.fused,
        "vector",
        out.dtype,
        kernel_flops(ops, tensors),
        tuple(cores),
        {"row_chunk": tile_cols, "passes": 2} if split_rows else None,
        sum(read_once_bytes(n, kernel.ops, tensors) for n in ins),
        out.nbytes,
        {"UB": ub_need(tile_rows, tile_cols)},
        vector_work_bytes=vector_work(kernel.epilogue, tensors, hw.vector),
    )


def kernel_flops(ops, tensors) -> int:
    return sum(OPS[op.op].flops(operands_of(op, tensors), op.attrs) for op in ops)
