"""Fused attention (FlashAttention): QK^T, softmax and PV as one kernel whose scores and
probabilities never leave the chip.

Each core owns some (batch, query block) units, dealt as FlashAttention-3's scheduler deals
them: the longest first (causal: the last queries), each to the core with the least work,
batches grouped so that their K and V fit in L2. On a chip whose epilogues run in the
registers (a GPU), the warps that compute a unit also store it, so a core starts its next
unit once the last one is stored. Per unit:

  MTE2    stages the query block Q in L1 once
  for each key/value block (causal: only blocks at or before the unit's last query):
    MTE2    stages the K and V blocks in L1
    MTE1    moves Q → L0A and K → L0B (a K block of an int8 or fp8 cache is converted to
            the Cube's dtype there by VECTOR first; so is V's);  CUBE  S = Q·Kᵀ into L0C
    FIXPIPE drains S to UB (on a chip whose epilogues work in the registers, S stays there)
    VECTOR  (causal, a block past some query's position: a masking pass first)
    VECTOR  online softmax over the block: row max, P = exp(S − max), row sum, and the
            running max and sum rescaled (two reductions and an exponential per score)
    P reaches the Cube's A side: UB → L1 (MTE3) → L0A (MTE1), or in place in the registers
    MTE1    moves V → L0B;  CUBE  P·V into L0C
    the running O is rescaled: drained to UB and rescaled-and-added there by VECTOR, or (in
            the registers) rescaled by VECTOR before the Cube accumulates the next P·V
  VECTOR  divides O by the row sums; MTE3 (or FIXPIPE from the registers) stores O once

HBM sees Q, K and V read and O written: the scores, whose size grows with the square of the
sequence, stay on chip. The softmax rescaling is paid for in full, as vector work.

Split keys (FlashDecoding): a decode step has one query block per (sequence, key/value head),
too few units to keep every core busy while the KV cache streams. Then each unit's keys are
cut into chunks of whole blocks, one chunk per core; each chunk stores its partial O, divided
by its own row sums, with its rows' log-sum-exp, in fp32 (the `.partials` workspace), and a
second kernel combines the chunks, rescaling each by its log-sum-exp as the online softmax
rescales O. The partials' round trip through memory and the second launch are what the split
costs; the cores it wakes are what it buys.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..config.hardware import ACCUMULATOR_BYTES, CONVERT, Hardware
from ..config.workload import Tensor, Workload
from ..cost import cube_call_cycles
from ..errors import TooLargeError
from ..ops import OPS
from .attention_plan import (
    BUFFERS,
    O_BYTES,
    AttentionShape,
    attention_blocks,
    attention_needs,
    attention_shape,
    attention_splits,
    deal_units,
    keys_seen,
    padded_head_dim,
    partials_tensor,
)
from .combine import lower_combine, vector_instruction
from .kernel import Kernel
from .program import (
    MAX_INSTRUCTIONS,
    CoreBuilder,
    CubeBlock,
    Draft,
    KernelProgram,
    SlotRing,
    converted_in_l0b,
    operand_region,
    transfer,
)
from .tiling import round_up


def lower_attention(kernel: Kernel, workload: Workload, hw: Hardware) -> tuple[KernelProgram, ...]:
    """The attention kernel, and when its keys are split, the kernel that combines them."""
    shape = attention_shape(kernel, workload)
    block_q, block_kv = attention_blocks(shape, hw)
    splits = attention_splits(shape, hw, block_q, block_kv)
    partials = partials_tensor(kernel, shape, splits)
    key_blocks = {  # per query block, the key blocks its queries see
        q0: -(-keys_seen(shape, q0, min(shape.queries, q0 + block_q)) // block_kv)
        for q0 in range(0, shape.queries, block_q)
    }
    _refuse_if_too_large(kernel, shape, hw, block_q, block_kv, key_blocks)
    blocks = -(-shape.keys // block_kv)
    chunk = block_kv * -(-blocks // splits)  # keys per chunk of split keys
    units = [
        (b, q0, split)
        for b in range(shape.batch)
        for q0 in range(0, shape.queries, block_q)
        for split in range(splits)
    ]
    cores = []
    flops = vector_work = 0.0
    from_ub = 0
    for dealt in deal_units(units, shape, hw, key_blocks):
        builder = _AttentionCore(kernel, workload, hw, shape, block_q, block_kv)
        for b, q0, split in dealt:
            if partials is None:
                builder.unit(b, q0)
            else:
                keys = (split * chunk, min(shape.keys, (split + 1) * chunk))
                builder.unit(b, q0, keys, (partials, b * splits + split))
        cores.append(builder.core.build())
        flops += builder.flops
        vector_work += builder.vector_work
        from_ub += builder.from_ub
    tensors = workload.tensors
    qk, _, pv = kernel.ops
    inputs = [*qk.inputs, pv.inputs[1]]
    out = partials or tensors[kernel.output]
    attention = KernelProgram(
        kernel.name,
        tuple(op.name for op in kernel.ops),
        True,
        "cube",
        shape.dtype,
        int(flops),
        tuple(cores),
        {"block_q": block_q, "block_kv": block_kv, "splits": splits},
        sum(tensors[n].nbytes for n in inputs),
        out.nbytes,
        attention_needs(shape, hw, block_q, block_kv),
        vector_work_bytes=vector_work,
        cube_flops=int(flops),
        gemms=1,
        l1_from_ub_bytes=from_ub,
    )
    if partials is None:
        return (attention,)
    return attention, lower_combine(kernel, tensors[kernel.output], partials, splits, hw)


def _refuse_if_too_large(
    kernel: Kernel,
    s: AttentionShape,
    hw: Hardware,
    block_q: int,
    block_kv: int,
    key_blocks: dict[int, int],
) -> None:
    """Refused before it is built: a kernel of more instructions than a run can hold (per
    key/value block 9 in the registers, 13 through UB, and one per K or V block converted;
    3 more per unit)."""
    per_block = 9 if hw.epilogue_in_registers else 13
    per_block += (s.k_bytes < s.element_bytes) + (s.v_bytes < s.element_bytes)
    blocks = sum(key_blocks.values())
    count = s.batch * (per_block * blocks + 3 * len(key_blocks))
    if count > MAX_INSTRUCTIONS:
        raise TooLargeError(
            f"{kernel.ops[0].path}: fused attention kernel '{kernel.name}' would need about "
            f"{count:,} instructions, more than the {MAX_INSTRUCTIONS:,} a run can hold in "
            f"memory ({s.batch} x {s.queries} queries against {s.keys} keys, in blocks of "
            f"{block_q} x {block_kv}); use a smaller problem",
            count,
        )


class _AttentionCore:
    """One core's program: its units one after another, the slots shared between them."""

    def __init__(
        self,
        kernel: Kernel,
        workload: Workload,
        hw: Hardware,
        shape: AttentionShape,
        block_q: int,
        block_kv: int,
    ):
        self.hw, self.s, self.bq, self.bkv = hw, shape, block_q, block_kv
        self.qk, _, self.pv = kernel.ops
        self.tensors = workload.tensors
        self.out = kernel.output
        self.in_registers = hw.epilogue_in_registers
        self.fractal = hw.cube.fractal[shape.dtype]
        self.flops = self.vector_work = 0.0
        self.from_ub = 0
        core = self.core = CoreBuilder()
        d, e = padded_head_dim(shape.head_dim, hw, shape.dtype), shape.element_bytes
        self.l1_q = SlotRing(core, "L1", block_q * d * e, BUFFERS)
        self.l1_k = SlotRing(core, "L1", block_kv * d * shape.k_bytes, BUFFERS)
        self.l1_v = SlotRing(core, "L1", block_kv * d * shape.v_bytes, BUFFERS)
        a_block = block_q * (d if self.in_registers else max(d, block_kv)) * e
        self.l0a = SlotRing(core, "L0A", a_block, BUFFERS)  # Q for S, and (through UB) P
        self.l0b = SlotRing(core, "L0B", block_kv * d * e, BUFFERS)
        score_slots = 2 if self.in_registers else 1
        self.l0c_s = SlotRing(core, "L0C", block_q * block_kv * ACCUMULATOR_BYTES, score_slots)
        # in the registers, the warps that issue a unit's products also run its epilogue (as
        # FlashAttention's consumer warpgroups do): the next unit starts once O is stored
        self.unit_done = core.new_flag(1, "buffer_slot")
        self.l0c_o = SlotRing(core, "L0C", block_q * d * ACCUMULATOR_BYTES, 1)
        if not self.in_registers:
            self.l1_p = SlotRing(core, "L1", block_q * block_kv * e, BUFFERS)
            self.ub_s = SlotRing(core, "UB", block_q * block_kv * e, BUFFERS)
            self.ub_o = SlotRing(core, "UB", block_q * d * O_BYTES, 1)

    def _vector(
        self,
        label: str,
        passes: int,
        cost_class: str,
        width: int,
        level: str,
        reads: int,
        writes: int,
    ) -> Draft:
        draft, work = vector_instruction(
            self.core, self.hw.vector, label, passes, cost_class, width, level, reads, writes
        )
        self.vector_work += work
        return draft

    def _move(self, label: str, dst: str, rows: int, cols: int, element_bytes: int) -> Draft:
        """L1 → L0A or L0B: a rows × cols operand block, padded to whole fractals."""
        return self.core.emit(
            transfer("MTE1", label, "L1", dst, self._padded(dst, rows, cols) * element_bytes)
        )

    def _padded(self, dst: str, rows: int, cols: int) -> int:
        """Elements of a rows × cols block in L0A or L0B, padded to whole fractals."""
        fm, fn, fk = self.fractal
        if dst == "L0A":
            return round_up(rows, fm) * round_up(cols, fk)
        return round_up(rows, fk) * round_up(cols, fn)

    def _to_l0b(
        self, label: str, rows: int, cols: int, stored_bytes: int, l1: SlotRing, l1_slot: int
    ) -> tuple[int, int]:
        """A K or V block moved from its L1 slot into L0B: its L0B slot, and the flag that
        says it is ready for the Cube. A block stored narrower than the Cube's dtype (an int8
        or fp8 KV cache) is converted there by VECTOR first, as a weight-only matmul converts
        its B blocks."""
        move = self._move(f"move {label}", "L0B", rows, cols, stored_bytes)
        l1.first_use(move, l1_slot)
        l1.last_use(move, l1_slot)
        slot = self.l0b.fill(move)
        e = self.s.element_bytes
        if stored_bytes == e:
            return slot, self.l0b.ready[slot]
        elements = self._padded("L0B", rows, cols)
        self.core.emit(
            converted_in_l0b(self.hw, f"convert {label}", elements, stored_bytes, e, self.l0b, slot)
        )
        self.vector_work += elements * e * self.hw.vector.cost_factor[CONVERT]
        return slot, self.l0b.done[slot]

    def _mmad(self, label: str, m: int, n: int, k: int) -> Draft:
        fm, fn, fk = self.fractal
        self.flops += 2 * m * n * k
        e = self.s.element_bytes
        return self.core.emit(
            Draft(
                CubeBlock,
                "CUBE",
                label,
                cycles=cube_call_cycles(
                    self.hw.cube, round_up(m, fm), round_up(n, fn), k, self.fractal
                ),
                reads=(
                    ("L0A", round_up(m, fm) * round_up(k, fk) * e),
                    ("L0B", round_up(k, fk) * round_up(n, fn) * e),
                ),
                writes=(("L0C", round_up(m, fm) * round_up(n, fn) * ACCUMULATOR_BYTES),),
            )
        )

    def _load(self, name: str, transposed: bool, b: int, rows, cols, element_bytes: int) -> Draft:
        tensor = self.tensors[name]
        region = operand_region(name, tensor.shape, transposed, b, rows, cols)
        nbytes = (rows[1] - rows[0]) * (cols[1] - cols[0]) * element_bytes
        return self.core.emit(transfer("MTE2", f"load {region}", "HBM", "L1", nbytes, region))

    def unit(
        self,
        b: int,
        q0: int,
        keys: tuple[int, int] | None = None,
        partial: tuple[Tensor, int] | None = None,
    ) -> None:
        """One (batch, query block): Q staged once, then its key/value blocks software-
        pipelined one deep, as FlashAttention kernels are: the scores and softmax of block
        j + 1 are issued before the P·V and the O update of block j, so the Cube and the
        vector unit work on neighbouring blocks side by side. A chunk of split keys covers
        `keys` and stores its partial O as batch `partial[1]` of the workspace `partial[0]`."""
        s, core, d = self.s, self.core, self.s.head_dim
        q1 = min(s.queries, q0 + self.bq)
        rows = q1 - q0
        transpose_q = bool(self.qk.attrs.get("transpose_a"))
        q_load = self._load(self.qk.inputs[0], transpose_q, b, (q0, q1), (0, d), s.element_bytes)
        q_slot = self.l1_q.fill(q_load)
        flags = core.new_flag(0, "data"), core.new_flag(0, "data")
        unit = _Unit(rows, q0, q1, b, q_slot, *flags, partial=partial)
        starts = range(*(keys or (0, keys_seen(s, q0, q1))), self.bkv)
        blocks = []
        for index, k0 in enumerate(starts):
            blocks.append(self._scores(unit, k0, index == 0, index == len(starts) - 1))
            if index:
                self._output(unit, blocks[index - 1], index - 1)
        self._output(unit, blocks[-1], len(blocks) - 1)
        self._store(unit)

    def _scores(self, unit: _Unit, k0: int, first: bool, last: bool) -> _Block:
        """Stage one of a block: stage K and V, S = Q·Kᵀ, the block's softmax (and, through
        UB, P on its way back to L1)."""
        s, core, d, rows = self.s, self.core, self.s.head_dim, unit.rows
        k1 = min(s.keys, k0 + self.bkv)  # a block on the diagonal is computed whole
        cols = k1 - k0
        (_, k_name), v_name = self.qk.inputs, self.pv.inputs[1]
        transpose_k = bool(self.qk.attrs.get("transpose_b"))
        transpose_v = bool(self.pv.attrs.get("transpose_b"))
        k_load = self._load(k_name, transpose_k, unit.b, (0, d), (k0, k1), s.k_bytes)
        k_slot = self.l1_k.fill(k_load)
        v_load = self._load(v_name, transpose_v, unit.b, (k0, k1), (0, d), s.v_bytes)
        v_slot = self.l1_v.fill(v_load)
        q_move = self._move(f"move Q k{k0}", "L0A", rows, d, s.element_bytes)
        if first:
            self.l1_q.first_use(q_move, unit.q_slot)
        if last:
            self.l1_q.last_use(q_move, unit.q_slot)
        qa = self.l0a.fill(q_move)
        kb, k_ready = self._to_l0b(f"K k{k0}", d, cols, s.k_bytes, self.l1_k, k_slot)
        score = self._mmad(f"mmad S {rows}x{cols}x{d}", rows, cols, d)
        if first and self.in_registers:
            score.waits_for(self.unit_done)
        self.l0a.first_use(score, qa)
        self.l0a.last_use(score, qa)
        score.waits_for(k_ready)
        self.l0b.last_use(score, kb)
        s_slot = self.l0c_s.fill(score)
        # the block's softmax costs what the softmax op costs per score (max, exp, sum);
        # what the online form adds is the rescaling of O, in the output stage
        elements = rows * cols
        score_bytes = elements * s.element_bytes
        block = _Block(k0, cols, v_slot, s_slot)
        masked = s.causal and k1 - 1 > s.first_position(unit.q0, unit.q1)  # past a query
        if self.in_registers:
            opening, softmax = self._softmax(k0, masked, "L0C", score_bytes)
            self.l0c_s.first_use(opening, s_slot)
            block.p_ready = core.new_flag(0, "data")
            softmax.signals(block.p_ready)
        else:
            drain = core.emit(transfer("FIXPIPE", f"drain S k{k0}", "L0C", "UB", score_bytes))
            self.l0c_s.first_use(drain, s_slot)
            self.l0c_s.last_use(drain, s_slot)
            ub_slot = self.ub_s.fill(drain)
            opening, softmax = self._softmax(k0, masked, "UB", score_bytes)  # P overwrites S
            self.ub_s.first_use(opening, ub_slot)
            softmax.signals(self.ub_s.done[ub_slot])
            p_out = core.emit(transfer("MTE3", f"move P k{k0}", "UB", "L1", score_bytes))
            self.from_ub += score_bytes
            p_out.waits_for(self.ub_s.done[ub_slot])
            self.ub_s.last_use(p_out, ub_slot)
            block.p_slot = self.l1_p.fill(p_out)
        unit.holds_o = unit.holds_o or softmax
        return block

    def _softmax(self, k0: int, masked: bool, level: str, nbytes: int) -> tuple[Draft, Draft]:
        """The block's softmax at the softmax op's cost per score, after a pass that masks
        the scores past each query's position where the block holds any; the first of them
        and the softmax."""
        width = self.s.element_bytes
        mask = (
            self._vector(f"mask k{k0}", 1, "elementwise", width, level, nbytes, nbytes)
            if masked
            else None
        )
        cost_class = OPS["softmax"].cost_class
        softmax = self._vector(f"softmax k{k0}", 1, cost_class, width, level, nbytes, nbytes)
        return mask or softmax, softmax

    def _output(self, unit: _Unit, block: _Block, index: int) -> None:
        """Stage two of a block: P·V, and the running O rescaled by the block's new row
        maxima and accumulated."""
        s, core, d, rows, k0 = self.s, self.core, self.s.head_dim, unit.rows, block.k0
        elements = rows * block.cols
        if not self.in_registers:
            p_move = self._move(f"move P k{k0}", "L0A", rows, block.cols, s.element_bytes)
            self.l1_p.first_use(p_move, block.p_slot)
            self.l1_p.last_use(p_move, block.p_slot)
            pa = self.l0a.fill(p_move)
        vb, v_ready = self._to_l0b(f"V k{k0}", block.cols, d, s.v_bytes, self.l1_v, block.v_slot)
        o_bytes = rows * d * O_BYTES
        if self.in_registers and index:  # the Cube accumulates into the rescaled O
            rescale = self._vector(
                f"rescale O k{k0}", 1, "elementwise", O_BYTES, "L0C", o_bytes, o_bytes
            )
            rescale.waits_for(unit.o_done)
            rescale.signals(unit.o_scaled)
        pv = self._mmad(f"mmad O {rows}x{d}x{block.cols}", rows, d, block.cols)
        pv.waits_for(v_ready)
        self.l0b.last_use(pv, vb)
        if self.in_registers:  # P is read where the softmax left it
            pv.reads = (("L0C", elements * s.element_bytes), pv.reads[1])
            pv.waits_for(block.p_ready)
            self.l0c_s.last_use(pv, block.s_slot)
            if index == 0:
                unit.o_slot = self.l0c_o.fill(pv, marks_ready=False)
            else:
                pv.waits_for(unit.o_scaled)
            pv.signals(unit.o_done)
            return
        self.l0a.first_use(pv, pa)
        self.l0a.last_use(pv, pa)
        o_slot = self.l0c_o.fill(pv)
        drain_o = core.emit(transfer("FIXPIPE", f"drain O k{k0}", "L0C", "UB", o_bytes))
        self.l0c_o.first_use(drain_o, o_slot)
        self.l0c_o.last_use(drain_o, o_slot)
        part = self.ub_o.fill(drain_o)
        add = self._vector(  # O = O·rescale + P·V: reads both, writes O
            f"rescale O k{k0}", 2, "elementwise", O_BYTES, "UB", 2 * o_bytes, o_bytes
        )
        self.ub_o.first_use(add, part)
        self.ub_o.last_use(add, part)

    def _store(self, unit: _Unit) -> None:
        """O divided by the row sums, then stored once (a chunk of split keys: in fp32, with
        its rows' log-sum-exp)."""
        s, core, d, rows = self.s, self.core, self.s.head_dim, unit.rows
        level = "L0C" if self.in_registers else "UB"
        o_bytes = rows * d * O_BYTES
        if unit.partial is None:
            out, b, nbytes, cols = self.tensors[self.out], unit.b, rows * d * s.element_bytes, d
        else:
            (out, b), cols = unit.partial, d + 1
            nbytes = rows * cols * O_BYTES
        final = self._vector("normalise O", 1, "elementwise", O_BYTES, level, o_bytes, nbytes)
        finished = core.new_flag(0, "data")
        final.signals(finished)
        region = operand_region(out.name, out.shape, False, b, (unit.q0, unit.q1), (0, cols))
        if self.in_registers:
            final.waits_for(unit.o_done)
            store = transfer("FIXPIPE", f"store {region}", "L0C", "HBM", nbytes, region)
            self.l0c_o.last_use(store, unit.o_slot)
            store.signals(self.unit_done)
        else:  # the running O holds UB from the unit's first softmax to the store
            store = transfer("MTE3", f"store {region}", "UB", "HBM", nbytes, region)
            if unit.holds_o is not None:
                unit.holds_o.takes("UB", o_bytes)
                store.frees("UB", o_bytes)
        store.waits_for(finished)
        core.emit(store)


@dataclass
class _Unit:
    """What the stages of one (batch, query block) share."""

    rows: int
    q0: int
    q1: int
    b: int
    q_slot: int  # of Q in L1
    o_done: int  # flag: a P·V accumulated into the running O
    o_scaled: int  # flag: the running O rescaled (in the registers)
    o_slot: int = 0
    holds_o: Draft | None = None  # the first instruction that needs the running O
    partial: tuple[Tensor, int] | None = None  # split keys: (workspace, batch) it stores to


@dataclass
class _Block:
    """What the output stage of a key/value block needs from its scores stage."""

    k0: int
    cols: int
    v_slot: int
    s_slot: int
    p_ready: int = 0  # flag: P in the registers (epilogues in the registers)
    p_slot: int = 0  # P's slot in L1 (through UB)
