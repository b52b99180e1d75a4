"""Vector chains: the ops a kernel runs on the vector unit, tile by tile, in UB.

The same chain serves a fused matmul epilogue (its first values arrive from
L0C through FIXPIPE) and a vector kernel (they arrive from HBM through MTE2).
Ops work in place: the chain's running value stays in one UB slot per tile
(sized for the widest dtype it takes), each op's other inputs are loaded into
slots of their own (a bias or scale only its broadcast row or column), and
the final value leaves once, UB → HBM by MTE3.

A chain with a row-wise op (softmax, layernorm, rmsnorm) works on tiles of
whole rows; after a matmul that means a block of rows × all N columns,
filled block by block by FIXPIPE before the row-wise op runs. A vector kernel
whose single row does not fit UB splits its rows into chunks and visits each
row twice: its statistics, then their application (cost.row_pass_factors).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from ..config.hardware import Hardware
from ..config.workload import Op, Tensor, Workload
from ..cost import row_pass_factors, vector_op_cycles
from ..errors import TilingError
from ..ops import DTYPE_BYTES, OPS
from .program import CoreBuilder, Draft, Region, SlotRing, VectorOp, transfer
from .tiling import gemm_shape, resolve_tiling, round_up

UB_ALIGN_BYTES = 32  # UB and L1 addresses are 32-byte aligned (Ascend C hardware constraints)


def as_2d(tensor: Tensor) -> tuple[int, int]:
    cols = tensor.shape[-1]
    return math.prod(tensor.shape) // cols, cols


def broadcast_region(tensor: Tensor, r0: int, r1: int, c0: int, c1: int) -> Region:
    """The part of an input that one output tile reads: inputs either match the output, are
    one row broadcast over all leading dims (a bias), or one column (a per-row scale)."""
    rows, cols = as_2d(tensor)
    if rows == 1:
        r0, r1 = 0, 1
    if cols == 1:
        c0, c1 = 0, 1
    return Region(tensor.name, r0, r1, c0, c1)


def gathered_region(table: Tensor, first: int, count: int, c0: int, c1: int) -> Region:
    """The rows `first`.. `first + count` that a gather reads of its table, wrapping past the
    last row (the tile is kept to at most the table's rows: lower_vector)."""
    rows, _ = as_2d(table)
    row0 = first % rows
    if row0 + count > rows:
        row0 = rows - count
    return Region(table.name, row0, row0 + count, c0, c1)


def region_bytes(region: Region, tensor: Tensor) -> int:
    return (region.row1 - region.row0) * (region.col1 - region.col0) * DTYPE_BYTES[tensor.dtype]


def chain_slots(
    ops: list[Op],
    tensors: dict[str, Tensor],
    seeds: tuple[str, ...],
    tile_rows: int,
    tile_cols: int,
    block_cols: int | None = None,
    in_registers: bool = False,
) -> dict[str, int]:
    """UB bytes of one slot of each ring a chain needs for tiles of tile_rows × tile_cols.

    `seeds` are the values that enter UB first (the GEMM results, or the first op's first
    input); `in_registers`: they stay in the accumulators instead (no UB for them). Ring
    names: 'chain:<tensor>' for running values, 'in:<tensor>' for inputs."""
    vector_ops = [op for op in ops if OPS[op.op].unit == "vector"]
    values = set(seeds) | {op.output for op in vector_ops}
    widest = max(DTYPE_BYTES[tensors[name].dtype] for name in values)
    value_bytes = 0 if in_registers else round_up(tile_rows * tile_cols * widest, UB_ALIGN_BYTES)
    slots = {f"chain:{name}": value_bytes for name in seeds}
    before_rowwise = True
    for op in vector_ops:
        before_rowwise = before_rowwise and not OPS[op.op].rowwise
        cols = (block_cols or tile_cols) if before_rowwise else tile_cols
        for name in op.inputs:
            if name not in values:  # an input two ops read takes the larger of their tiles
                region = broadcast_region(tensors[name], 0, tile_rows, 0, cols)
                slots[f"in:{name}"] = max(
                    slots.get(f"in:{name}", 0),
                    round_up(region_bytes(region, tensors[name]), UB_ALIGN_BYTES),
                )
    return slots


def chain_bytes(
    ops: list[Op], tensors: dict, hw: Hardware, rows: int, cols: int, block_cols: int
) -> int:
    """The UB bytes of one buffer of a matmul's chain over tiles of `rows` x `cols`."""
    slots = chain_slots(ops, tensors, seeds_of(ops), rows, cols, block_cols, in_registers(hw, ops))
    return sum(slots.values())


def seeds_of(ops: list[Op]) -> tuple[str, ...]:
    gemms = [op for op in ops if OPS[op.op].unit == "cube"]
    return tuple(op.output for op in gemms) if gemms else (ops[0].inputs[0],)


def in_registers(hw: Hardware, ops: list[Op]) -> bool:
    """Whether a kernel's chain works on its accumulators in place: a matmul epilogue on a
    chip that says so, with no row-wise op (a block's registers hold no whole row)."""
    return (
        hw.epilogue_in_registers
        and any(OPS[op.op].unit == "cube" for op in ops)
        and not any(OPS[op.op].rowwise for op in ops)
    )


def epilogue_refusal(workload: Workload, ops: list[Op]) -> str | None:
    """Why these ops cannot run as one kernel's chain with its tiling, or None if they can."""
    tensors, hw = workload.tensors, workload.hardware
    gemms = [op for op in ops if OPS[op.op].unit == "cube"]
    rowwise = next((op for op in ops if OPS[op.op].rowwise), None)
    buffers = workload.tiling_for(ops[0].name).buffers or 2
    if gemms:
        shape = gemm_shape(gemms, tensors)
        try:
            t = resolve_tiling(shape, workload.tiling_for(ops[0].name), hw, ops[0].name)
        except TilingError:
            return None  # the lowering reports the tiling's own problem
        buffers = t.buffers
        rows, cols = min(t.base_m, shape.m), t.base_n  # a block holds at most M rows
        block_cols = t.base_n
        if rowwise:
            path = f"schedule.tiling.{ops[0].name}"
            if t.split_n != 1:
                core_n = -(-shape.n // t.split_n)
                return (
                    f"{rowwise.op} needs whole rows of {rowwise.inputs[0]} (N={shape.n}) on "
                    f"one core, but split.n={t.split_n} gives each core about {core_n} "
                    f"columns; set {path}.split.n=1 to fuse"
                )
            if t.order != "n":
                return (
                    f"{rowwise.op} needs each block row finished before the next, but "
                    f"order m walks M first; set {path}.order=n"
                )
            cols = shape.n
    else:
        rows, cols = (1, as_2d(tensors[ops[0].output])[1]) if rowwise else (1, UB_ALIGN_BYTES)
        block_cols = cols
    slots = chain_slots(ops, tensors, seeds_of(ops), rows, cols, block_cols, in_registers(hw, ops))
    need = sum(slots.values()) * buffers
    ub = hw.ub_bytes(matmul=bool(gemms))
    if need > ub:
        what = f"{rows} x {cols} tiles" if gemms else "one row"
        return (
            f"the chain needs {need} B of UB for {what} ({len(slots)} slots x {buffers} "
            f"buffers) but UB holds {ub} B"
        )
    return None


class VectorChain:
    """Emits a chain of vector ops over tiles on one core (see the module docstring)."""

    def __init__(
        self,
        core: CoreBuilder,
        ops: list[Op],
        workload: Workload,
        hw: Hardware,
        buffers: int,
        tile_rows: int,
        tile_cols: int,
        block_cols: int | None = None,
        split_rows: bool = False,
    ):
        self.core = core
        # rows too long for UB: each tile is a chunk of a row, visited twice (statistics)
        self.split_rows = split_rows
        self.tensors = workload.tensors
        self.hw = hw
        self.ops = [op for op in ops if OPS[op.op].unit == "vector"]
        split = next((i for i, op in enumerate(self.ops) if OPS[op.op].rowwise), len(self.ops))
        self.block_ops, self.tile_ops = self.ops[:split], self.ops[split:]
        self.seeds = seeds_of(ops)
        # where the running values live: UB, or the accumulators themselves (in_registers)
        self.in_registers = in_registers(hw, ops)
        self.value_level = "L0C" if self.in_registers else "UB"
        self.rings = {
            name: SlotRing(core, "UB", nbytes, buffers)
            for name, nbytes in chain_slots(
                ops,
                workload.tensors,
                self.seeds,
                tile_rows,
                tile_cols,
                block_cols,
                self.in_registers,
            ).items()
        }
        self.final = self.ops[-1].output
        first = self.ops[0] if self.ops else None
        # a vector kernel that opens with a gather loads the rows it gathers from its table
        self.gather_start = (
            first.attrs.get("start", 0) if first is not None and OPS[first.op].gathers else None
        )
        self.held: list[tuple[SlotRing, int]] = []  # accumulators the tile keeps to its store

    def begin_tile(self, r0: int, r1: int, c0: int, c1: int) -> None:
        self.tile = (r0, r1, c0, c1)
        self.slot_of: dict[str, tuple[SlotRing, int]] = {}
        self.pending: dict[str, list[int]] = {}  # ready flags not yet waited on

    def block(
        self,
        c0: int,
        c1: int,
        drains: dict[str, Draft] | None = None,
        held: Sequence[tuple[SlotRing, int]] = (),
    ) -> None:
        """One block of columns of the tile arrives (from L0C, or loaded from HBM), and the
        ops before any row-wise op run on it. `held`: accumulator slots the values stay in
        until the tile is stored (in_registers)."""
        self.held += held
        r0, r1, _, _ = self.tile
        arrivals = drains or {
            self.seeds[0]: self._load(self.seeds[0], r0, r1, c0, c1, self.gather_start)
        }
        for name, instr in arrivals.items():
            ring = self.rings[f"chain:{name}"]
            if name in self.slot_of:  # a later block of a row tile: same slot, more data
                slot = self.slot_of[name][1]
                instr.signals(ring.ready[slot])
            else:
                slot = ring.fill(instr)
                self.slot_of[name] = (ring, slot)
            self.pending.setdefault(name, []).append(ring.ready[slot])
            self.core.emit(instr)
        for op in self.block_ops:
            self._run(op, r0, r1, c0, c1)

    def end_tile(self) -> None:
        """The row-wise op and what follows it run on the whole tile; the result is stored."""
        r0, r1, c0, c1 = self.tile
        last = None
        for op in self.tile_ops:
            last = self._run(op, r0, r1, c0, c1)
        last = last or self._last
        ring, slot = self.slot_of[self.final]
        last.signals(ring.done[slot])
        region = Region(self.final, r0, r1, c0, c1)
        nbytes = region_bytes(region, self.tensors[self.final])
        store = (
            transfer("FIXPIPE", f"store {region}", "L0C", "HBM", nbytes, region)
            if self.in_registers
            else transfer("MTE3", f"store {region}", "UB", "HBM", nbytes, region)
        )
        store.waits_for(ring.done[slot])
        ring.last_use(store, slot)
        for accumulators, held in self.held:  # the registers are free once stored
            accumulators.last_use(store, held)
        self.held = []
        self.core.emit(store)

    def touches(self, r0: int, r1: int, c0: int, c1: int) -> tuple[tuple[Region, bool], ...]:
        """The global regions a tile of a matmul's chain reads (its ops' other inputs) and
        writes (its result), as `block` and `end_tile` would: what a sampled kernel's skipped
        blocks leave in L2 (schedule/sampling.py)."""
        values = set(self.seeds)
        reads = []
        for op in self.ops:
            reads += [
                (broadcast_region(self.tensors[name], r0, r1, c0, c1), False)
                for name in op.inputs
                if name not in values
            ]
            values.add(op.output)
        return (*reads, (Region(self.final, r0, r1, c0, c1), True))

    def statistics(self) -> None:
        """Pass one over a chunk of rows too long for UB: the row-wise op gathers its
        statistics over the chunk (kept in a register, a few bytes), and the chunk is let go
        unstored; pass two loads it again and ends the tile as any other."""
        r0, r1, c0, c1 = self.tile
        op = self.tile_ops[0]
        name = next(n for n in op.inputs if n in self.slot_of)
        ring, slot = self.slot_of[name]
        elems = (r1 - r0) * (c1 - c0)
        widest = self._widest(op)
        spec = OPS[op.op]
        instr = Draft(
            VectorOp,
            "VECTOR",
            f"{op.op} statistics {name}[{r0}:{r1}, {c0}:{c1}]",
            cycles=vector_op_cycles(
                self.hw.vector,
                elems,
                widest,
                spec.cost_class,
                row_pass_factors(self.hw.vector, spec.cost_class)[0],
            ),
            reads=((self.value_level, elems * DTYPE_BYTES[self.tensors[name].dtype]),),
        )
        instr.waits_for(*self.pending.pop(name, []))
        ring.last_use(instr, slot)
        self.core.emit(instr)

    def _widest(self, op: Op) -> int:
        """Bytes per value of the widest tensor an op reads or writes (its vector cost)."""
        return max(DTYPE_BYTES[self.tensors[n].dtype] for n in (*op.inputs, op.output))

    def _load(
        self, name: str, r0: int, r1: int, c0: int, c1: int, gather_start: int | None = None
    ) -> Draft:
        tensor = self.tensors[name]
        region = (
            broadcast_region(tensor, r0, r1, c0, c1)
            if gather_start is None
            else gathered_region(tensor, gather_start + r0, r1 - r0, c0, c1)
        )
        return transfer(
            "MTE2", f"load {region}", "HBM", "UB", region_bytes(region, self.tensors[name]), region
        )

    def _run(self, op: Op, r0: int, r1: int, c0: int, c1: int) -> Draft:
        spec = OPS[op.op]
        out = self.tensors[op.output]
        elems = (r1 - r0) * (c1 - c0)
        widest = self._widest(op)
        instr = Draft(
            VectorOp,
            "VECTOR",
            f"{op.op} {op.output}[{r0}:{r1}, {c0}:{c1}]",
            nbytes=elems * DTYPE_BYTES[out.dtype],
            cycles=vector_op_cycles(
                self.hw.vector,
                elems,
                widest,
                spec.cost_class,
                row_pass_factors(self.hw.vector, spec.cost_class)[1]
                if self.split_rows and spec.rowwise
                else None,
            ),
        )
        reads = []
        chain_inputs = list(dict.fromkeys(n for n in op.inputs if n in self.slot_of))
        for name in op.inputs:
            if name in self.slot_of:
                instr.waits_for(*self.pending.pop(name, []))
                reads.append((self.value_level, elems * DTYPE_BYTES[self.tensors[name].dtype]))
                continue
            load = self._load(name, r0, r1, c0, c1)
            ring = self.rings[f"in:{name}"]
            slot = ring.fill(load)
            self.core.emit(load)
            ring.first_use(instr, slot)
            ring.last_use(instr, slot)
            reads.append(("UB", load.nbytes))
        target = self.slot_of[chain_inputs[0]]
        for name in chain_inputs[1:]:
            if self.slot_of[name] is not target:
                ring, slot = self.slot_of.pop(name)
                ring.last_use(instr, slot)  # a second running value (dual GEMM) is done
        self.slot_of[op.output] = target
        instr.reads = tuple(reads)
        instr.writes = ((self.value_level, instr.nbytes),)
        self.core.emit(instr)
        self._last = instr
        return instr
