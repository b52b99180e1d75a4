"""Lowering: a kernel plus its tiling and the hardware → per-core, per-pipe programs.

Matmul (per core, on its split block of C):
  for each base output block, walking `order` first:
    for each K chunk of step.k base-k blocks:
      MTE2   stages the A and B chunks from HBM/L2 into L1 (ping-pong slots;
             a chunk identical to the one already staged is not reloaded)
      for each base-k block of the chunk:
        MTE1 moves A → L0A and B → L0B;  CUBE accumulates into L0C
    FIXPIPE drains the block from L0C to HBM (fp32 accumulators → output dtype)

Elementwise op (a vector kernel of its own): tiles of the output spread over
cores; per tile MTE2 loads each input HBM/L2 → UB, VECTOR computes, MTE3
stores UB → HBM.
"""

from __future__ import annotations

import math

from ..config.hardware import Hardware
from ..config.workload import DTYPE_BYTES, Tensor, Workload
from ..errors import SimulatorError
from ..graph.dataflow import Kernel
from ..graph.ops import OPS
from .program import (
    CoreProgram,
    Instr,
    KernelProgram,
    Program,
    Region,
    SlotRing,
    new_core_program,
    transfer,
)
from .tiling import (
    ACCUMULATOR_BYTES,
    MatmulShape,
    TilingError,
    buffer_needs,
    cube_cycles,
    resolve_tiling,
    round_up,
    single_core_extent,
)

UB_ALIGN_BYTES = 32  # UB and L1 addresses are 32-byte aligned (Ascend C hardware constraints)


def as_2d(tensor: Tensor) -> tuple[int, int]:
    cols = tensor.shape[-1]
    return math.prod(tensor.shape) // cols, cols


def lower(workload: Workload, kernels: list[Kernel]) -> Program:
    """Lower every kernel; every tiling problem of every kernel is reported together."""
    hw = workload.hardware
    lowered, problems = [], []
    for kernel in kernels:
        try:
            if kernel.ops[0].op == "matmul":
                lowered.append(lower_matmul(kernel, workload, hw))
            else:
                lowered.append(lower_elementwise(kernel, workload, hw))
        except TilingError as exc:
            problems.append(str(exc))
    if problems:
        lines = [line for problem in problems for line in problem.splitlines()]
        raise TilingError("\n".join(f"{workload.source}: {line}" for line in lines))
    geometry = {t.name: (*as_2d(t), DTYPE_BYTES[t.dtype]) for t in workload.tensors.values()}
    produced = {op.output for kernel in kernels for op in kernel.ops}
    consumed = {name for kernel in kernels for op in kernel.ops for name in op.inputs}
    compulsory = sum(workload.tensors[name].nbytes for name in (consumed - produced) | produced)
    return Program(lowered, geometry, compulsory)


def matmul_shape(kernel: Kernel, workload: Workload) -> MatmulShape:
    op = kernel.ops[0]
    a, b = (workload.tensors[name] for name in op.inputs)
    out = workload.tensors[op.output]
    return MatmulShape(m=a.shape[0], n=b.shape[1], k=a.shape[1], a_bytes=DTYPE_BYTES[a.dtype],
                       b_bytes=DTYPE_BYTES[b.dtype], out_bytes=DTYPE_BYTES[out.dtype],
                       dtype=a.dtype)


def lower_matmul(kernel: Kernel, workload: Workload, hw: Hardware) -> KernelProgram:
    op = kernel.ops[0]
    shape = matmul_shape(kernel, workload)
    if shape.dtype not in hw.cube.fractal:
        raise SimulatorError(f"{op.path}: the Cube of {hw.name} has no {shape.dtype} mode "
                             f"(modes: {', '.join(hw.cube.fractal)})")
    t = resolve_tiling(shape, workload.tiling_for(op.name), hw, kernel.name)
    fractal = hw.cube.fractal[shape.dtype]
    fm, fn, fk = fractal
    a_name, b_name = op.inputs
    core_m = single_core_extent(shape.m, t.split_m, fm)
    core_n = single_core_extent(shape.n, t.split_n, fn)
    chunk_k = t.base_k * t.step_k
    cores = []
    for core_row in range(t.split_m):
        for core_col in range(t.split_n):
            m0, n0 = core_row * core_m, core_col * core_n
            m1, n1 = min(shape.m, m0 + core_m), min(shape.n, n0 + core_n)
            if m0 >= m1 or n0 >= n1:
                continue
            core = new_core_program()
            l1_a = SlotRing(core, "L1", t.base_m * chunk_k * shape.a_bytes, t.buffers)
            l1_b = SlotRing(core, "L1", chunk_k * t.base_n * shape.b_bytes, t.buffers)
            l0_a = SlotRing(core, "L0A", t.base_m * t.base_k * shape.a_bytes, t.buffers)
            l0_b = SlotRing(core, "L0B", t.base_k * t.base_n * shape.b_bytes, t.buffers)
            l0_c = SlotRing(core, "L0C", t.base_m * t.base_n * ACCUMULATOR_BYTES, t.buffers)
            blocks = [(bm, bn) for bm in range(m0, m1, t.base_m) for bn in range(n0, n1, t.base_n)]
            if t.order == "m":
                blocks.sort(key=lambda block: (block[1], block[0]))
            # Plan the L1 chunk loads first: a chunk equal to the one staged just before it is
            # reused in place, so its slot is released only after its last use.
            steps = []
            staged = {"A": None, "B": None}
            for bm, bn in blocks:
                for kc in range(0, shape.k, chunk_k):
                    kc1 = min(shape.k, kc + chunk_k)
                    keys = {"A": Region(a_name, bm, min(m1, bm + t.base_m), kc, kc1),
                            "B": Region(b_name, kc, kc1, bn, min(n1, bn + t.base_n))}
                    fresh = {side: staged[side] != keys[side] for side in keys}
                    staged.update(keys)
                    steps.append((bm, bn, kc, kc1, keys, fresh))
            _emit_matmul_core(core, steps, t, shape, fractal, hw, op.output, m1, n1,
                              {"A": l1_a, "B": l1_b}, l0_a, l0_b, l0_c)
            cores.append(core)
    a, b = (workload.tensors[n] for n in op.inputs)
    out = workload.tensors[op.output]
    peak = {buf: need for buf, (need, _) in buffer_needs(shape, t).items()}
    return KernelProgram(kernel.name, (op.name,), False, "cube", shape.dtype,
                         2 * shape.m * shape.n * shape.k, cores, t.to_dict(),
                         a.nbytes + b.nbytes, out.nbytes, peak)


def _emit_matmul_core(core: CoreProgram, steps: list, t, shape: MatmulShape, fractal, hw,
                      out_name: str, m1: int, n1: int, l1: dict, l0_a: SlotRing,
                      l0_b: SlotRing, l0_c: SlotRing) -> None:
    fm, fn, fk = fractal
    # Which step last uses each staged chunk: the step before the next fresh load of that side.
    last_use = {}
    for side in ("A", "B"):
        current = None
        for index, step in enumerate(steps):
            if step[5][side]:
                current = index
            last_use[(side, current)] = index
    slot_of = {}
    block_first = True
    for index, (bm, bn, kc, kc1, keys, fresh) in enumerate(steps):
        rows, cols = min(m1, bm + t.base_m) - bm, min(n1, bn + t.base_n) - bn
        for side in ("A", "B"):
            if fresh[side]:
                region = keys[side]
                nbytes = ((region.row1 - region.row0) * (region.col1 - region.col0)
                          * (shape.a_bytes if side == "A" else shape.b_bytes))
                load = transfer("MTE2", f"load {side} {_region_label(region)}", "HBM", "L1",
                                nbytes, region)
                slot_of[side] = (l1[side].fill(load), index)
                core.emit(load)
        chunk_starts = range(kc, kc1, t.base_k)
        for kb_index, kb in enumerate(chunk_starts):
            depth = min(kc1, kb + t.base_k) - kb
            moves, moves_bytes = {}, {}
            for side, ring, nbytes in (
                    ("A", l0_a, round_up(rows, fm) * round_up(depth, fk) * shape.a_bytes),
                    ("B", l0_b, round_up(depth, fk) * round_up(cols, fn) * shape.b_bytes)):
                dst = ring.buffer
                move = transfer("MTE1", f"move {side} k{kb}", "L1", dst, nbytes)
                slot, loaded_at = slot_of[side]
                if kb_index == 0 and loaded_at == index:
                    l1[side].first_use(move, slot)
                if kb_index == len(chunk_starts) - 1 and last_use[(side, loaded_at)] == index:
                    l1[side].last_use(move, slot)
                moves[side] = (ring.fill(move), ring)
                moves_bytes[side] = nbytes
                core.emit(move)
            mmad = Instr("CUBE", f"mmad {rows}x{cols}x{depth}",
                         cycles=hw.cube.latency_cycles + cube_cycles(
                             round_up(rows, fm), round_up(cols, fn), depth, fractal),
                         reads=(("L0A", moves_bytes["A"]), ("L0B", moves_bytes["B"])),
                         writes=(("L0C", round_up(rows, fm) * round_up(cols, fn)
                                  * ACCUMULATOR_BYTES),))
            for slot, ring in moves.values():
                ring.first_use(mmad, slot)
                ring.last_use(mmad, slot)
            if block_first:
                acc_slot = l0_c.fill(mmad)
                mmad.sets.remove(l0_c.ready[acc_slot])  # ready only after the whole K
                block_first = False
            block_last = kc1 == shape.k and kb_index == len(chunk_starts) - 1
            if block_last:
                mmad.sets.append(l0_c.ready[acc_slot])
                block_first = True
            core.emit(mmad)
        if kc1 == shape.k:
            region = Region(out_name, bm, bm + rows, bn, bn + cols)
            drain = transfer("FIXPIPE", f"drain C {_region_label(region)}", "L0C", "HBM",
                             rows * cols * shape.out_bytes, region,
                             read_bytes=round_up(rows, fm) * round_up(cols, fn) * ACCUMULATOR_BYTES)
            l0_c.first_use(drain, acc_slot)
            l0_c.last_use(drain, acc_slot)
            core.emit(drain)


def _region_label(r: Region) -> str:
    return f"{r.tensor}[{r.row0}:{r.row1}, {r.col0}:{r.col1}]"


def lower_elementwise(kernel: Kernel, workload: Workload, hw: Hardware) -> KernelProgram:
    """An elementwise op on the vector unit: tiles of the output spread over the cores."""
    op = kernel.ops[0]
    spec = OPS[op.op]
    out = workload.tensors[op.output]
    inputs = [workload.tensors[name] for name in op.inputs]
    rows, cols = as_2d(out)
    buffers = workload.tiling_for(op.name).buffers or 2
    # UB holds a slot per input and one for the output, each `buffers` deep: size the tile so
    # that all of them fit even if no input is broadcast.
    bytes_per_elem = sum(DTYPE_BYTES[t.dtype] for t in (*inputs, out))
    max_elems = max(1, hw.buffer_bytes["UB"] // (buffers * bytes_per_elem)
                    // UB_ALIGN_BYTES * UB_ALIGN_BYTES)
    per_core = round_up(-(-rows * cols // hw.cores), UB_ALIGN_BYTES)
    tile_elems = min(max_elems, per_core)
    tile_cols = min(cols, tile_elems)
    tile_rows = max(1, min(rows, tile_elems // tile_cols))
    tiles = [(r, c) for r in range(0, rows, tile_rows) for c in range(0, cols, tile_cols)]

    def slot_bytes(tensor: Tensor) -> int:
        region = _broadcast_region(tensor, 0, tile_rows, 0, tile_cols)
        return round_up((region.row1 - region.row0) * (region.col1 - region.col0)
                        * DTYPE_BYTES[tensor.dtype], UB_ALIGN_BYTES)

    factor = hw.vector.cost_factor[spec.cost_class]
    cores = []
    for core_index in range(min(hw.cores, len(tiles))):
        core = new_core_program()
        in_rings = [SlotRing(core, "UB", slot_bytes(t), buffers) for t in inputs]
        out_ring = SlotRing(core, "UB", slot_bytes(out), buffers)
        for r0, c0 in tiles[core_index::hw.cores]:
            r1, c1 = min(rows, r0 + tile_rows), min(cols, c0 + tile_cols)
            out_bytes = (r1 - r0) * (c1 - c0) * DTYPE_BYTES[out.dtype]
            compute = Instr("VECTOR", f"{op.op} [{r0}:{r1}, {c0}:{c1}]", nbytes=out_bytes,
                            cycles=hw.vector.latency_cycles + math.ceil(
                                out_bytes * factor / hw.vector.bytes_per_cycle),
                            writes=(("UB", out_bytes),))
            in_bytes = []
            for tensor, ring in zip(inputs, in_rings):
                region = _broadcast_region(tensor, r0, r1, c0, c1)
                nbytes = ((region.row1 - region.row0) * (region.col1 - region.col0)
                          * DTYPE_BYTES[tensor.dtype])
                load = transfer("MTE2", f"load {_region_label(region)}", "HBM", "UB", nbytes,
                                region)
                in_bytes.append(nbytes)
                slot = ring.fill(load)
                core.emit(load)
                ring.first_use(compute, slot)
                ring.last_use(compute, slot)
            compute.reads = tuple(("UB", n) for n in in_bytes)
            out_slot = out_ring.fill(compute)
            core.emit(compute)
            region = Region(out.name, r0, r1, c0, c1)
            store = transfer("MTE3", f"store {_region_label(region)}", "UB", "HBM", out_bytes,
                             region)
            out_ring.first_use(store, out_slot)
            out_ring.last_use(store, out_slot)
            core.emit(store)
        cores.append(core)
    flops = spec.flops([t.shape for t in inputs])
    ub_bytes = sum(slot_bytes(t) for t in (*inputs, out)) * buffers
    return KernelProgram(kernel.name, (op.name,), False, "vector", out.dtype, flops, cores, None,
                         sum(t.nbytes for t in inputs), out.nbytes, {"UB": ub_bytes},
                         vector_work_bytes=out.nbytes * factor)


def _broadcast_region(tensor: Tensor, r0: int, r1: int, c0: int, c1: int) -> Region:
    """The part of an input that one output tile reads. Inputs are either the output's shape,
    a row broadcast over all leading dims (a bias: 1 row), or a column broadcast (1 column)."""
    rows, cols = as_2d(tensor)
    if rows == 1:
        r0, r1 = 0, 1
    if cols == 1:
        c0, c1 = 0, 1
    return Region(tensor.name, r0, r1, c0, c1)
