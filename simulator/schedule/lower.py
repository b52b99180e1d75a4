"""Lowering: kernels plus their tilings and the hardware → per-core, per-pipe programs.

Matmul kernel (per core, on its split share of the batch and of C):
  for each base output block, walking `order` first:
    for each K chunk of step.k base-k blocks:
      MTE2   stages the A chunk and each GEMM's B chunk from HBM/L2 into L1
             (ping-pong slots; a chunk equal to the one staged is not reloaded)
      for each base-k block of the chunk:
        MTE1 moves A → L0A and each B → L0B;  CUBE accumulates each GEMM in L0C
    FIXPIPE drains each accumulator: to HBM when the kernel has no epilogue,
    else to UB, where the vector chain runs and MTE3 writes the result once.

Vector kernel: see vector_kernel.py.
"""

from __future__ import annotations

from typing import NamedTuple

from ..config.hardware import CONVERT, Hardware
from ..config.workload import Workload
from ..cost import cube_call_cycles, vector_work
from ..errors import SimulatorError, TooLargeError
from ..ops import DTYPE_BYTES
from .attention import lower_attention
from .attention_plan import attention_workspace
from .block_order import Block, core_blocks
from .copies import LoweredKernels
from .epilogue import VectorChain, as_2d, chain_bytes, region_bytes
from .footprint import (
    compulsory_bytes,
    read_once_bytes,
    refuse_if_over_capacity,
    refuse_if_too_large,
    tensor_roles,
)
from .kernel import Kernel, Plan
from .program import (
    MAX_INSTRUCTIONS,
    CoreBuilder,
    CubeBlock,
    Draft,
    FlagOp,
    KernelProgram,
    Program,
    Region,
    SlotRing,
    converted_in_l0b,
    operand_region,
    share_afresh,
    transfer,
)
from .sampling import (
    CLOSES,
    OPENS,
    KernelSampling,
    Measured,
    SamplePlan,
    Skip,
    Touch,
    Window,
    chunk_plan,
    covering_tail,
    kept_blocks,
)
from .tiling import (
    ACCUMULATOR_BYTES,
    MatmulShape,
    Tiling,
    TilingError,
    buffer_needs,
    gemm_shape,
    multicast_sides,
    resolve_tiling,
    round_up,
)
from .vector_kernel import kernel_flops, lower_vector


def lower(workload: Workload, plan: Plan, sample: bool = False) -> Program:
    """Lower every kernel; every tiling problem of every kernel is reported together. With
    `sample`, a matmul lowers only the K chunks and blocks sampling.py keeps."""
    if not plan.kernels:
        raise SimulatorError(
            f"{workload.source}: nothing to simulate: no op computes anything "
            "(a reshape or a slice is a view that moves no data); add an op "
            "that does"
        )
    share_afresh()
    roles = tensor_roles(workload, plan)
    # split attention's partial outputs: written by one kernel, read by the next
    workspaces = [
        w for k in plan.kernels if k.attention and (w := attention_workspace(k, workload))
    ]
    roles.update((w.name, ("intermediate", w.nbytes)) for w in workspaces)
    refuse_if_over_capacity(workload, roles)
    if not sample:  # counted unsampled: a sampled run is held to what it lowers, below
        refuse_if_too_large(workload, plan)
    lowered: list[KernelProgram] = []
    problems: list[str] = []
    chunks: dict = {}  # K chunks built so far, shared by matmuls of one shape and tiling
    copies = LoweredKernels(workload, sample)  # a kernel like one lowered is renamed

    def lower_kernel(kernel: Kernel) -> tuple[KernelProgram, ...]:
        if kernel.attention:
            return lower_attention(kernel, workload, workload.hardware)
        if kernel.gemms:
            return (lower_matmul(kernel, workload, workload.hardware, chunks, sample),)
        return (lower_vector(kernel, workload, workload.hardware),)

    total = 0
    for kernel in plan.kernels:
        try:
            programs = copies.programs(kernel, lower_kernel)
        except TooLargeError as exc:  # nothing else is worth lowering
            raise TooLargeError(f"{workload.source}: {exc}", exc.instructions) from None
        except TilingError as exc:
            problems.append(str(exc))
            continue
        lowered.extend(programs)
        total += sum(p.instruction_count for p in programs)
        if total > MAX_INSTRUCTIONS:
            raise TooLargeError(
                f"{workload.source}: the kernels up to '{kernel.name}' already "
                f"need {total:,} instructions, more than the "
                f"{MAX_INSTRUCTIONS:,} a run can hold in memory; use larger base "
                "blocks or a smaller problem",
                total,
            )
    if problems:
        lines = [line for problem in problems for line in problem.splitlines()]
        raise TilingError("\n".join(f"{workload.source}: {line}" for line in lines))
    geometry = {
        t.name: (*as_2d(t), DTYPE_BYTES[t.dtype]) for t in (*workload.tensors.values(), *workspaces)
    }
    nz = frozenset(t.name for t in workload.tensors.values() if t.layout == "nz")
    slices = {op.output: op.attrs["step"] for op in workload.ops if op.op == "slice"}
    return Program(tuple(lowered), geometry, compulsory_bytes(workload, roles), roles, nz, slices)


class _Step(NamedTuple):
    """One K chunk of one output block, as a core runs it."""

    batch: int
    rows: tuple[int, int]  # of the output block
    cols: tuple[int, int]
    depth: tuple[int, int]  # the chunk's K range
    regions: list[Region]  # the L1 chunk each side (A, then each B) needs
    fresh: list[bool]  # per side: staged now, or equal to the chunk staged before and reused
    cell_cols: tuple[int, int]  # the columns of the core's cell the block belongs to
    window: str = ""  # a sampled kernel's measured window: "opens" or "closes" at this chunk
    skipped: tuple[tuple[Touch, ...], ...] = ()  # what the units skipped just before touched
    plan: SamplePlan | None = None  # the sampling its window belongs to
    measured: Measured | None = None  # which of the plan's windows


def lower_matmul(
    kernel: Kernel, workload: Workload, hw: Hardware, chunks_by_shape: dict, sample: bool = False
) -> KernelProgram:
    """`chunks_by_shape` keeps the K chunks built (see `_MatmulCore._chunk`) per shape and
    tiling: they name no tensor, so every kernel of that shape and tiling can reuse them.
    With `sample`, each row of a core's blocks lowers the blocks sampling.kept_blocks keeps,
    and each block the K chunks sampling.chunk_plan keeps."""
    tensors = workload.tensors
    shape = gemm_shape(list(kernel.gemms), tensors)
    t = resolve_tiling(shape, workload.tiling_for(kernel.tiling_op), hw, kernel.name)
    cells = t.cells(shape, hw.cube.fractal[shape.dtype])
    chunks = chunks_by_shape.setdefault((shape, t), {})
    multicast = multicast_sides(t, hw.multicast_cores, len(kernel.gemms))
    # a row-wise epilogue's tile spans a row of blocks: its blocks are not sampled one by one
    by_blocks = sample and not kernel.rowwise
    plan = chunk_plan(-(-shape.k // (t.base_k * t.step_k))) if sample else None
    # cell i runs on core i mod cores: one cell each, or with `split: blocks` in waves
    builders = [
        _MatmulCore(kernel, workload, hw, shape, t, chunks, multicast, core, plan, by_blocks)
        for core in range(min(hw.cores, len(cells)))
    ]
    orders = [core_blocks(cells[core :: hw.cores], t) for core in range(len(builders))]
    last = 0
    if by_blocks:  # the L2 later kernels meet is left by blocks simulated whole
        last = covering_tail(
            [blocks for blocks, _ in orders],
            builders[0].block_regions,
            hw.memories["L2"].capacity_bytes,
            lambda region: region_bytes(region, tensors[region.tensor]),
        )
    cores = tuple(b.emit(*order, last) for b, order in zip(builders, orders))
    sampling = None
    windows = tuple(window for b in builders for window in b.windows)
    if windows:
        sampling = KernelSampling(
            sum(b.chunks_run[0] for b in builders),
            sum(b.chunks_run[1] for b in builders),
            windows,
            tuple(tuple(b.skips) for b in builders),
        )
    converted_bytes = sum(b.converted_bytes for b in builders)  # B blocks converted in L0B
    ins = {name for op in kernel.ops for name in op.inputs} - {op.output for op in kernel.ops}
    buffers = {buf: need for buf, (need, _) in buffer_needs(shape, t).items()}
    if kernel.epilogue:
        cols = shape.n if kernel.rowwise else t.base_n
        buffers["UB"] = t.buffers * chain_bytes(
            list(kernel.ops), tensors, hw, min(t.base_m, shape.m), cols, t.base_n
        )
    return KernelProgram(
        kernel.name,
        tuple(op.name for op in kernel.ops),
        kernel.fused,
        "cube",
        shape.dtype,
        kernel_flops(kernel.ops, tensors),
        cores,
        t.to_dict(),
        sum(read_once_bytes(n, kernel.ops, tensors) for n in ins),
        tensors[kernel.output].nbytes,
        buffers,
        vector_work_bytes=vector_work(kernel.epilogue, tensors, hw.vector)
        + converted_bytes * hw.vector.cost_factor[CONVERT],
        cube_flops=kernel_flops(kernel.gemms, tensors),
        gemms=len(kernel.gemms),
        sampling=sampling,
    )


class _MatmulCore:
    """The program of one core of a matmul kernel."""

    def __init__(
        self,
        kernel: Kernel,
        workload: Workload,
        hw: Hardware,
        shape: MatmulShape,
        t: Tiling,
        chunks: dict,
        multicast: dict[int, int],
        index: int,
        plan: SamplePlan | None = None,
        by_blocks: bool = False,
    ):
        self.kernel, self.workload, self.hw, self.shape, self.t = kernel, workload, hw, shape, t
        self.index, self.plan = index, plan  # the core's; the K chunks each block lowers, sampled
        self.chunk_k = t.base_k * t.step_k
        self.by_blocks = by_blocks  # each row's blocks block_plan keeps, when sampled
        self.windows: list[Window] = []  # its measured windows
        self.skips: list[Skip] = []  # what each skip's units touched, in order
        self.chunks_run = [0, 0]  # K chunks of the core's blocks: all, and those lowered
        self.times = 1  # how many chunks the chunk being lowered counts for (sampling.py)
        self.multicast = multicast  # side -> cores sharing each of its L1 loads (see above)
        self.chunks = chunks  # the K chunks built so far (see _chunk)
        self.fractal = hw.cube.fractal[shape.dtype]
        self.tensors = workload.tensors
        gemm = kernel.gemms[0]
        self.a = gemm.inputs[0]
        self.a_shape = self.tensors[self.a].shape
        self.transpose_a = gemm.attrs.get("transpose_a", False)
        self.bs = [
            (
                op.inputs[1],
                self.tensors[op.inputs[1]].shape,
                op.attrs.get("transpose_b", False),
                op.output,
            )
            for op in kernel.gemms
        ]
        g = len(self.bs)
        self.side_names = ["A"] + (["B"] if g == 1 else [f"B{i}" for i in range(g)])
        self.converted_bytes = 0  # of narrower B blocks converted in L0B

    def emit(self, blocks: list[Block], row_starts: list[int], last: int):
        """The core's program for its blocks (block_order.core_blocks), the `last` of them
        kept whole when sampled (sampling.covering_tail), built: its drafts are freed before
        the next core's are made (a kernel's cores' drafts at once took three times the
        memory of its program)."""
        t, shape = self.t, self.shape
        core = self.core = CoreBuilder()
        chunk_k = self.chunk_k
        g = len(self.bs)
        self.l1_a = SlotRing(core, "L1", t.base_m * chunk_k * shape.a_bytes, t.buffers)
        self.l1_b = [
            SlotRing(core, "L1", chunk_k * t.base_n * shape.b_bytes, t.buffers) for _ in range(g)
        ]
        self.l0_a = SlotRing(core, "L0A", t.base_m * t.base_k * shape.a_bytes, t.buffers)
        self.l0_b = [
            SlotRing(core, "L0B", t.base_k * t.base_n * shape.cube_b_bytes, t.buffers)
            for _ in range(g)
        ]
        self.l0_c = [
            SlotRing(core, "L0C", t.base_m * t.base_n * ACCUMULATOR_BYTES, t.l0c_buffers)
            for _ in range(g)
        ]
        self.chain = None
        if self.kernel.epilogue:
            cols = shape.n if self.kernel.rowwise else t.base_n
            self.chain = VectorChain(
                core,
                list(self.kernel.ops),
                self.workload,
                self.hw,
                t.buffers,
                min(t.base_m, shape.m),
                cols,
                t.base_n,
            )
        self._emit_steps(self._plan_steps(blocks, row_starts, last))
        program = core.build()
        del self.core, self.chain, self.l1_a, self.l1_b, self.l0_a, self.l0_b, self.l0_c
        return program

    def _plan_steps(self, blocks: list[Block], row_starts: list[int], last: int) -> list[_Step]:
        """Each (block, K chunk) the core lowers, with the L1 chunks it needs and whether each
        is fresh: a chunk equal to the one staged just before is reused in place."""
        every = range(-(-self.shape.k // self.chunk_k))
        kept_chunks = every if self.plan is None else self.plan.kept
        staged: dict[int, Region | None] = {}
        steps: list[_Step] = []
        shapes = [(r[1] - r[0], c[1] - c[0]) for _, r, c, _ in blocks]
        chosen = (
            kept_blocks(shapes, row_starts, len(every), last)
            if self.by_blocks
            else ((block, None, "", None, range(0)) for block in range(len(blocks)))
        )
        for block, of_blocks, mark, of_window, skipped_blocks in chosen:
            b, rows, cols, cell_cols = blocks[block]
            for index, chunk in enumerate(kept_chunks):
                depth = self._depth(chunk)
                keys = self._regions(b, rows, cols, depth)
                fresh = [staged.get(side) != key for side, key in enumerate(keys)]
                staged.update(enumerate(keys))
                chunk_at = (b, rows, cols, depth, keys, fresh, cell_cols)
                window, measured = self.plan.mark(index) if self.plan else ("", None)
                plan = self.plan if measured else None  # a window of K chunks
                if (index, mark) in ((0, OPENS), (len(kept_chunks) - 1, CLOSES)):  # of blocks
                    plan, window, measured = of_blocks, mark, of_window
                gaps = () if self.plan is None else self.plan.skipped_before(index)
                skipped = tuple(self._touches(blocks[block], gap) for gap in gaps)
                if index == 0:  # after the blocks skipped just before (its chunks skip none)
                    skipped = tuple(
                        self._touches(blocks[gap], k, k == every[-1])
                        for gap in skipped_blocks
                        for k in every
                    )
                steps.append(_Step(*chunk_at, window, skipped, plan, measured))
        self.chunks_run = [len(blocks) * len(every), len(steps)]
        return steps

    def _depth(self, chunk: int) -> tuple[int, int]:
        """The K range of K chunk `chunk`."""
        return chunk * self.chunk_k, min(self.shape.k, (chunk + 1) * self.chunk_k)

    def block_regions(self, block: Block) -> list[Region]:
        """Every region of global memory a block reads (its L1 chunks) or writes."""
        b, rows, cols, _ = block
        row0, row1 = b * self.shape.m + rows[0], b * self.shape.m + rows[1]
        every = range(-(-self.shape.k // self.chunk_k))
        outs = [Region(out, row0, row1, *cols) for *_, out in self.bs]
        return [r for k in every for r in self._regions(b, rows, cols, self._depth(k))] + outs

    def _touches(self, block: Block, chunk: int, drains: bool = False) -> tuple[Touch, ...]:
        """What K chunk `chunk` of a block reads (the L1 chunk of each side), and if it
        `drains` the block, what its drain touches (the epilogue's loads, and the stores)."""
        b, rows, cols, _ = block
        reads = tuple(
            (region, False) for region in self._regions(b, rows, cols, self._depth(chunk))
        )
        if not drains:
            return reads
        row0, row1 = b * self.shape.m + rows[0], b * self.shape.m + rows[1]
        if self.chain is not None:
            return (*reads, *self.chain.touches(row0, row1, *cols))
        return (*reads, *((Region(out, row0, row1, *cols), True) for *_, out in self.bs))

    def _regions(
        self, b: int, rows: tuple[int, int], cols: tuple[int, int], depth: tuple[int, int]
    ) -> list[Region]:
        """The L1 chunk each side (A, then each B) needs for one K chunk of one block."""
        keys = [operand_region(self.a, self.a_shape, self.transpose_a, b, rows, depth)]
        return keys + [
            operand_region(name, bshape, tb, b, depth, cols) for name, bshape, tb, _ in self.bs
        ]

    def _emit_steps(self, steps: list[_Step]) -> None:
        core = self.core
        l1 = [self.l1_a, *self.l1_b]
        last_use = {}
        for side in range(len(l1)):
            current = None
            for index, step in enumerate(steps):
                if step.fresh[side]:
                    current = index
                last_use[(side, current)] = index
        slot_of = {}
        acc_slots: list[int] = []
        # by id of its Measured, each window open: its queue positions and its skip
        opened: dict[int, tuple[dict[str, int], int]] = {}  # (a window of blocks holds some)
        for index, step in enumerate(steps):
            b, (bm, bm1), (bn, bn1), (kc, kc1), keys, fresh, (n0, n1), window, skipped, *_ = step
            plan, measured = step.plan, step.measured
            rows, cols = bm1 - bm, bn1 - bn
            warms = -1  # the skip whose reads the chunk's first load warms L2 with
            if skipped:
                self.skips.append(Skip(index, skipped))
                warms = len(self.skips) - 1
            if window == OPENS and measured is not None:
                skip = len(self.skips) - 1 if measured.late else len(self.skips)
                opened[id(measured)] = ({pipe: len(q) for pipe, q in core.queues.items()}, skip)
                self.times *= 1 + measured.skipped
            for side, region in enumerate(keys):
                if fresh[side]:
                    elem = self.shape.a_bytes if side == 0 else self.shape.b_bytes
                    load = transfer(
                        "MTE2",
                        f"load {self.side_names[side]} {region}",
                        "HBM",
                        "L1",
                        (region.row1 - region.row0) * (region.col1 - region.col0) * elem,
                        region,
                        multicast=self.multicast.get(side, 1),
                        warms=warms,
                    )
                    warms = -1  # the first load of the chunk warms L2 for all of them
                    slot_of[side] = (l1[side].fill(load), index)
                    core.emit(load)
            # per L1 side: its slot, and whether this chunk is the slot's first or last use
            sides = tuple(
                (slot, loaded_at == index, last_use[(side, loaded_at)] == index)
                for side, (slot, loaded_at) in sorted(slot_of.items())
            )
            acc_slots = self._chunk(rows, cols, kc, kc1, sides, acc_slots)
            if kc1 == self.shape.k:
                self._drain(b, bm, rows, bn, cols, acc_slots, n0, n1)
            if window == CLOSES and measured is not None and plan is not None:  # after a drain
                starts, skip = opened.pop(id(measured))
                spans = {
                    pipe: (start, len(core.queues[pipe]))
                    for pipe, start in starts.items()
                    if len(core.queues[pipe]) > start
                }
                repeats = self.times // (1 + measured.skipped)  # the windows around it
                unit = "chunk" if plan is self.plan else "block"
                of_core = (self.index, spans, measured.skipped, plan.width, repeats, unit, skip)
                self.windows.append(Window(*of_core, measured.late))
                self.times = repeats

    def _chunk(
        self, rows: int, cols: int, kc: int, kc1: int, sides: tuple, acc_slots: list[int]
    ) -> list[int]:
        """Emit the MTE1 moves and Cube mmads of one K chunk of one block; return the
        accumulator slots. A chunk identical to one built before (same block shape, K range,
        slots and ring positions, on any core of a kernel of this shape and tiling) reuses its
        instructions: every such core creates its ring flags in the same order before its
        first chunk, and the engine never changes an instruction."""
        rings = [self.l0_a, *self.l0_b, *self.l0_c]
        key = (
            len(self.core.flag_initial),
            rows,
            cols,
            kc,
            kc1,
            sides,
            tuple(ring.next for ring in rings),
            tuple(acc_slots) if kc else None,
        )
        built = self.chunks.get(key)
        if built is None:
            moves, converts, mmads, acc_slots = self._build_chunk(
                rows, cols, kc, kc1, sides, acc_slots
            )
            ring_next = tuple(ring.next for ring in rings)
            built = self.chunks[key] = (moves, converts, mmads, acc_slots, ring_next)
        moves, converts, mmads, acc_slots, ring_next = built
        self.core.queues["MTE1"].extend(moves)
        self.core.queues["VECTOR"].extend(converts)
        self.converted_bytes += self.times * sum(convert.nbytes for convert in converts)
        self.core.queues["CUBE"].extend(mmads)
        for ring, position in zip(rings, ring_next):
            ring.next = position
        return list(acc_slots)

    def _build_chunk(
        self, rows: int, cols: int, kc: int, kc1: int, sides: tuple, acc_slots: list[int]
    ) -> tuple[list[Draft], list[Draft], list[Draft], list[int]]:
        """The chunk's MTE1 moves, the conversions of a narrower B to the Cube's dtype (int8
        weights of a weight-only quantized matmul, an int8 or fp8 KV cache: VECTOR converts
        each B block in L0B, as a GPU's cores convert the fragments they load) and the Cube's
        mmads."""
        t, shape = self.t, self.shape
        fm, fn, fk = self.fractal
        l1 = [self.l1_a, *self.l1_b]
        moves, converts, mmads = [], [], []
        starts = range(kc, kc1, t.base_k)
        for kb_index, kb in enumerate(starts):
            depth = min(kc1, kb + t.base_k) - kb
            a_bytes = round_up(rows, fm) * round_up(depth, fk) * shape.a_bytes
            b_elems = round_up(depth, fk) * round_up(cols, fn)
            b_bytes, b_cube = b_elems * shape.b_bytes, b_elems * shape.cube_b_bytes
            moved = []
            for side, (ring, nbytes) in enumerate(
                [(self.l0_a, a_bytes), *((r, b_bytes) for r in self.l0_b)]
            ):
                move = transfer(
                    "MTE1", f"move {self.side_names[side]} k{kb}", "L1", ring.buffer, nbytes
                )
                slot, first_use, last_use = sides[side]
                if kb_index == 0 and first_use:
                    l1[side].first_use(move, slot)
                if kb_index == len(starts) - 1 and last_use:
                    l1[side].last_use(move, slot)
                moved.append((ring, ring.fill(move)))
                moves.append(move)
            b_ready = []  # per GEMM: the flag its mmad waits on for its B block
            for ring, slot in moved[1:]:
                if not shape.converts_b:  # the move's landing is the block's readiness
                    b_ready.append(ring.ready[slot])
                    continue
                convert = converted_in_l0b(
                    self.hw,
                    f"convert B k{kb}",
                    b_elems,
                    shape.b_bytes,
                    shape.cube_b_bytes,
                    ring,
                    slot,
                )
                b_ready.append(ring.done[slot])
                converts.append(convert)
            first_k, last_k = kb == 0, kb_index == len(starts) - 1 and kc1 == shape.k
            if first_k:
                acc_slots = []
            for gemm, acc in enumerate(self.l0_c):
                mmad = Draft(
                    CubeBlock,
                    "CUBE",
                    f"mmad {rows}x{cols}x{depth}",
                    cycles=cube_call_cycles(
                        self.hw.cube, round_up(rows, fm), round_up(cols, fn), depth, self.fractal
                    ),
                    reads=(("L0A", a_bytes), ("L0B", b_cube)),
                    writes=(("L0C", round_up(rows, fm) * round_up(cols, fn) * ACCUMULATOR_BYTES),),
                )
                # every GEMM reads the one A block; each reads its own B block
                (a_ring, a_slot), (b_ring, b_slot) = moved[0], moved[1 + gemm]
                if gemm == 0:
                    a_ring.first_use(mmad, a_slot)
                if gemm == len(self.l0_c) - 1:
                    a_ring.last_use(mmad, a_slot)
                mmad.waits_for(b_ready[gemm])
                b_ring.last_use(mmad, b_slot)
                if first_k:  # the accumulator is ready after the last k
                    acc_slots.append(acc.fill(mmad, marks_ready=False))
                if last_k:
                    mmad.signals(acc.ready[acc_slots[gemm]])
                mmads.append(mmad)
        return moves, converts, mmads, acc_slots

    def _drain(
        self, b: int, bm: int, rows: int, bn: int, cols: int, acc_slots: list, n0: int, n1: int
    ) -> None:
        """Move the finished block out of L0C: to HBM, or to UB for the vector chain."""
        fm, fn, _ = self.fractal
        row0 = b * self.shape.m + bm
        acc_bytes = round_up(rows, fm) * round_up(cols, fn) * ACCUMULATOR_BYTES
        drains, held = {}, []
        for (_, _, _, out), acc, slot in zip(self.bs, self.l0_c, acc_slots):
            region = Region(out, row0, row0 + rows, bn, bn + cols)
            if self.chain and self.chain.in_registers:
                # the epilogue works on the accumulators in place: a hand-over, no move; the
                # accumulator stays taken until the chain stores the tile
                drain = Draft(FlagOp, "FIXPIPE", f"hand over {region}")
                acc.first_use(drain, slot)
                held.append((acc, slot))
                drains[out] = drain
                continue
            dst = "UB" if self.chain else "HBM"
            drain = transfer(
                "FIXPIPE",
                f"drain {region}",
                "L0C",
                dst,
                rows * cols * DTYPE_BYTES[self.tensors[out].dtype],
                region if dst == "HBM" else None,
                read_bytes=acc_bytes,
            )
            acc.first_use(drain, slot)
            acc.last_use(drain, slot)
            drains[out] = drain
        if not self.chain:
            for drain in drains.values():
                self.core.emit(drain)
            return
        if not self.kernel.rowwise:
            self.chain.begin_tile(row0, row0 + rows, bn, bn + cols)
            self.chain.block(bn, bn + cols, drains, held)
            self.chain.end_tile()
            return
        if bn == n0:
            self.chain.begin_tile(row0, row0 + rows, n0, n1)
        self.chain.block(bn, bn + cols, drains)
        if bn + cols == n1:
            self.chain.end_tile()
