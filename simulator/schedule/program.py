"""Programs: per core, per pipe, in-order instruction queues synchronised by flags.

A flag is a counting semaphore between two pipes of one core, as DaVinci's
set_flag/wait_flag: an instruction waits on its `waits` before it starts and
sets its `sets` when it completes. Ping-pong buffer slots are a pair of flags
per slot: `ready` (data written, cause of a wait: "data") and `free`
(consumer done, cause of a wait: "buffer_slot").
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Mapping, Sequence
from dataclasses import KW_ONLY, dataclass, field
from typing import Any, ClassVar, TypeVar

from ..config.hardware import CONVERT, Hardware
from ..cost import block_packets, run_packets, shaped_rate, strided_read_factor, vector_op_cycles
from ..errors import InvariantError
from .region import Region
from .sampling import KernelSampling

PIPES = ("MTE2", "MTE1", "CUBE", "FIXPIPE", "VECTOR", "MTE3")
UNIT_OF_PIPE = {"CUBE": "cube", "VECTOR": "vector"}  # a pipe named by its unit in reports
# The keys of a report's utilization, in order: each pipe's unit, then the shared memories.
UTILIZATION_KEYS = (*(UNIT_OF_PIPE.get(p, p) for p in PIPES), "HBM", "L2")
_T = TypeVar("_T")


# Each instruction costs about 150 bytes while the program is built and run, mostly what its
# run logs (measured: the 1.69 M-instruction LLaMA-2-7B 2048-token prefill layer on a100 took
# 0.26 GB, lowering 0.09 GB of it): past this many, about 1.2 GB, a run would exhaust a
# laptop's memory long before it finished, so it is refused up front.
# Four layers of a 2048-token LLaMA-2-7B prefill on a100, infer's first run, need 6.6 M.
MAX_INSTRUCTIONS = 8_000_000


def operand_region(
    name: str,
    shape: tuple[int, ...],
    transposed: bool,
    batch: int,
    rows: tuple[int, int],
    cols: tuple[int, int],
) -> Region:
    """A logical (rows × cols) block of one batch of a matmul operand, in its stored 2-D
    view (a transposed operand is stored cols × rows)."""
    if transposed:
        rows, cols = cols, rows
    offset = batch * shape[-2]
    return Region(name, offset + rows[0], offset + rows[1], cols[0], cols[1])


@dataclass(frozen=True, slots=True, eq=False)
class InstructionBase:
    """What every instruction has: the pipe that runs it, its trace label, the bytes it moves or
    produces and the levels it reads and writes, and its synchronisation: the flags it waits on
    before it starts and sets when it ends, the buffer slot it takes at its start and the slots
    it frees at its end. Frozen and compared by identity: lowering shares one object wherever
    the same instruction recurs (on every core, every block), and the engine and the analysis
    cache per instruction, which is sound only because nothing changes one after lowering."""

    pipe: str
    label: str
    _: KW_ONLY
    nbytes: int = 0  # bytes moved (transfers) or produced (vector ops)
    reads: tuple[tuple[str, int], ...] = ()  # (level, bytes) this instruction reads
    writes: tuple[tuple[str, int], ...] = ()  # (level, bytes) this instruction writes
    waits: tuple[int, ...] = ()
    sets: tuple[int, ...] = ()
    acquire: tuple[str, int] | None = None  # buffer slot taken at start
    release: tuple[tuple[str, int], ...] = ()  # slots freed at end


@dataclass(frozen=True, slots=True, eq=False)
class Transfer(InstructionBase):
    """An on-chip data movement by a DMA engine (L1 → L0A, L0C → UB): only its own engine
    times it."""

    src: str
    dst: str


@dataclass(frozen=True, slots=True, eq=False)
class GlobalTransfer(Transfer):
    """A transfer to or from global memory: it reads or writes HBM through L2, and shares
    their bandwidth with every core."""

    region: Region  # the tensor rectangle read from or written to HBM/L2
    multicast: int = 1  # cores one L2 read of this region serves at once
    # of a sampled kernel: the group of chunks it did not simulate just before this read, on
    # every core, whose reads warm L2 first (KernelSampling.warm_groups; -1: none)
    warms: int = -1


@dataclass(frozen=True, slots=True, eq=False)
class CubeBlock(InstructionBase):
    """One Cube call: a base block's multiply-accumulate from L0A and L0B into L0C."""

    cycles: int  # busy cycles, latency included


@dataclass(frozen=True, slots=True, eq=False)
class VectorOp(InstructionBase):
    """One op of a vector chain on one tile, in UB (or in the accumulators, in_registers)."""

    cycles: int  # busy cycles, latency included


@dataclass(frozen=True, slots=True, eq=False)
class FlagOp(InstructionBase):
    """Synchronisation alone: a pipe hands data over by setting flags (FIXPIPE handing the
    accumulators to an epilogue that works on them in place). It takes no time."""

    cycles: ClassVar[int] = 0


Instruction = Transfer | GlobalTransfer | CubeBlock | VectorOp | FlagOp


class Draft:
    """An instruction while lowering builds it. A producer's slot and flags are chosen before
    its consumers exist, so synchronisation is attached as the schedule learns it; `build()`
    then makes the frozen instruction once, and every later call returns that same object (a
    draft emitted on many cores stays one instruction). A draft changed after it was built
    is a lowering bug, refused."""

    __slots__ = (
        *("kind", "pipe", "label", "nbytes", "reads", "writes", "fields"),
        *("waits", "sets", "acquire", "release", "_built"),
    )

    def __init__(
        self,
        kind: type[Instruction],
        pipe: str,
        label: str,
        nbytes: int = 0,
        reads: tuple[tuple[str, int], ...] = (),
        writes: tuple[tuple[str, int], ...] = (),
        **fields: Any,
    ):
        self.kind, self.pipe, self.label, self.nbytes = kind, pipe, sys.intern(label), nbytes
        self.reads, self.writes, self.fields = reads, writes, fields
        self.waits: list[int] = []
        self.sets: list[int] = []
        self.acquire: tuple[str, int] | None = None
        self.release: list[tuple[str, int]] = []
        self._built: Instruction | None = None

    def waits_for(self, *flags: int) -> None:
        self._unbuilt().waits.extend(flags)

    def signals(self, flag: int) -> None:
        self._unbuilt().sets.append(flag)

    def takes(self, buffer: str, nbytes: int) -> None:
        self._unbuilt().acquire = (buffer, nbytes)

    def frees(self, buffer: str, nbytes: int) -> None:
        self._unbuilt().release.append((buffer, nbytes))

    def _unbuilt(self) -> Draft:
        if self._built is not None:
            raise InvariantError(f"{self.label}: changed after it was built")
        return self

    def build(self) -> Instruction:
        if self._built is None:
            self._built = _instruction(
                self.kind,  # type: ignore[arg-type]  # a class hashes (mypy: not a frozen one)
                self.pipe,
                self.label,
                nbytes=self.nbytes,
                reads=_shared(self.reads),
                writes=_shared(self.writes),
                waits=_shared(tuple(self.waits)),
                sets=_shared(tuple(self.sets)),
                acquire=_shared(self.acquire),
                release=_shared(tuple(self.release)),
                **self.fields,
            )
        return self._built


@functools.lru_cache(maxsize=1 << 16)
def _shared(value: _T) -> _T:
    """One object for every equal value: millions of instructions carry the same few
    synchronisation and level tuples, and cores that read the same block name equal
    regions. Shared (and labels interned), an instruction of a 2048-token prefill layer
    takes 233 bytes of the program, against 455."""
    return value


@functools.lru_cache(maxsize=None)
def _instruction(kind: type[Instruction], pipe: str, label: str, **fields: Any) -> Instruction:
    """One instruction for every equal draft of a program: the cores of a kernel that stage
    the same block (a row of cores its A, a column its B) do it with equal loads. Every one:
    the analysis sums a kernel's costs per instruction (its cost times its count), so were
    some equal drafts left apart (a bounded cache), a report's last digits would depend on
    what else the process had built."""
    return kind(pipe, label, **fields)


def share_afresh() -> None:
    """Begin a program: let the instructions of earlier ones go (kept, they would grow the
    cache for the life of the process)."""
    _instruction.cache_clear()


def transfer_packets(instr: GlobalTransfer, program: Program, packet_bytes: int) -> int:
    """The packets a global transfer moves its region as (cost.block_packets); a slice read in
    place moves a run per row (each assumed to start on a packet boundary), or per element
    if strided."""
    region = instr.region
    rows, cols, element_bytes = program.tensor_geometry[region.tensor]
    step = program.slice_steps.get(region.tensor)
    block_rows, block_cols = region.row1 - region.row0, region.col1 - region.col0
    if step is not None:
        if step > 1:
            return block_rows * block_cols
        return block_rows * run_packets(0, block_cols * element_bytes, packet_bytes)
    return block_packets(
        region.row0,
        region.row1,
        region.col0,
        region.col1,
        rows,
        cols,
        element_bytes,
        packet_bytes,
        region.tensor in program.nz_tensors,
    )


def moved_bytes(instr: GlobalTransfer, program: Program) -> int:
    """The bytes a global transfer moves: its own, or a strided slice's whole sectors."""
    return instr.nbytes * program.read_factor(instr.region.tensor)


def transfer_rate(
    instr: GlobalTransfer, program: Program, path_bytes_per_cycle: float, packet_bytes: int
) -> float:
    """A global transfer's rate on a path: the path's, or lower if its packets take longer
    than its bytes (cost.shaped_rate)."""
    if not packet_bytes:
        return path_bytes_per_cycle
    return shaped_rate(
        path_bytes_per_cycle,
        moved_bytes(instr, program),
        transfer_packets(instr, program, packet_bytes),
        packet_bytes,
    )


def transfer(
    pipe: str,
    label: str,
    src: str,
    dst: str,
    nbytes: int,
    region: Region | None = None,
    read_bytes: int | None = None,
    multicast: int = 1,
    warms: int = -1,
) -> Draft:
    """A data movement; `read_bytes` differs from `nbytes` when the engine converts in flight,
    `multicast` counts the cores that stage the same region from one L2 read, and `warms`
    the chunks a sampled kernel skipped just before it (GlobalTransfer)."""
    reads, writes = ((src, nbytes if read_bytes is None else read_bytes),), ((dst, nbytes),)
    if region is None:
        return Draft(Transfer, pipe, label, nbytes, reads, writes, src=src, dst=dst)
    return Draft(
        GlobalTransfer,
        pipe,
        label,
        nbytes,
        reads,
        writes,
        src=src,
        dst=dst,
        region=_shared(region),
        multicast=multicast,
        warms=warms,
    )


@dataclass(frozen=True)
class CoreProgram:
    """One core's part of a kernel: an in-order queue per pipe, and its flags' initial counts
    and causes (see the module docstring)."""

    queues: Mapping[str, tuple[Instruction, ...]]
    flag_initial: tuple[int, ...]
    flag_cause: tuple[str, ...]

    @property
    def instruction_count(self) -> int:
        return sum(len(q) for q in self.queues.values())


class CoreBuilder:
    """A core's program while lowering writes it: drafts appended to each pipe's queue, flags
    numbered as they are made. `build()` freezes it into a CoreProgram."""

    def __init__(self) -> None:
        self.queues: dict[str, list[Draft]] = {pipe: [] for pipe in PIPES}
        self.flag_initial: list[int] = []
        self.flag_cause: list[str] = []

    def new_flag(self, initial: int, cause: str) -> int:
        self.flag_initial.append(initial)
        self.flag_cause.append(cause)
        return len(self.flag_initial) - 1

    def emit(self, draft: Draft) -> Draft:
        self.queues[draft.pipe].append(draft)
        return draft

    def build(self) -> CoreProgram:
        return CoreProgram(
            {pipe: tuple(draft.build() for draft in queue) for pipe, queue in self.queues.items()},
            tuple(self.flag_initial),
            tuple(self.flag_cause),
        )


class SlotRing:
    """`count` equal slots of one buffer, filled in turn by one pipe and drained by another."""

    def __init__(self, core: CoreBuilder, buffer: str, slot_bytes: int, count: int):
        self.buffer = buffer
        self.slot_bytes = slot_bytes
        self.ready = [core.new_flag(0, "data") for _ in range(count)]
        self.free = [core.new_flag(1, "buffer_slot") for _ in range(count)]
        # a second producer-consumer hand-off on the same slot (vector result → store)
        self.done = [core.new_flag(0, "data") for _ in range(count)]
        self.next = 0

    def fill(self, producer: Draft, marks_ready: bool = True) -> int:
        """The producer takes the next slot (waiting until it is free) and, unless told not to
        (an accumulator is ready only after its last K block), marks it ready."""
        if producer.nbytes > self.slot_bytes:
            raise InvariantError(
                f"{producer.label}: {producer.nbytes} B into a "
                f"{self.slot_bytes} B slot of {self.buffer}"
            )
        slot = self.next
        self.next = (slot + 1) % len(self.ready)
        producer.waits_for(self.free[slot])
        if marks_ready:
            producer.signals(self.ready[slot])
        producer.takes(self.buffer, self.slot_bytes)
        return slot

    def first_use(self, consumer: Draft, slot: int) -> None:
        consumer.waits_for(self.ready[slot])

    def last_use(self, consumer: Draft, slot: int) -> None:
        consumer.signals(self.free[slot])
        consumer.frees(self.buffer, self.slot_bytes)


def converted_in_l0b(
    hw: Hardware,
    label: str,
    elements: int,
    stored_bytes: int,
    cube_bytes: int,
    ring: SlotRing,
    slot: int,
) -> Draft:
    """A B block stored narrower than the Cube's dtype (int8 weights of a weight-only
    matmul, an int8 or fp8 KV cache), converted in its L0B slot by VECTOR at the convert
    rate, as a GPU's cores convert the fragments they load: it waits for the block's move
    and sets the slot's `done` flag, which the Cube waits on instead of `ready`."""
    convert = Draft(
        VectorOp,
        "VECTOR",
        label,
        elements * cube_bytes,
        reads=(("L0B", elements * stored_bytes),),
        writes=(("L0B", elements * cube_bytes),),
        cycles=vector_op_cycles(hw.vector, elements, cube_bytes, CONVERT),
    )
    ring.first_use(convert, slot)
    convert.signals(ring.done[slot])
    return convert


@dataclass(frozen=True)
class KernelProgram:
    """One kernel lowered for every core, plus what the analysis needs to judge it."""

    name: str
    ops: tuple[str, ...]
    fused: bool
    unit: str  # "cube" or "vector"
    dtype: str
    flops: int
    cores: Sequence[CoreProgram]  # a copy's are renamed when read (copies.py)
    tiling: Mapping[str, Any] | None
    compulsory_read_bytes: int  # inputs read once from HBM
    compulsory_write_bytes: int  # outputs written once to HBM
    buffer_plan_bytes: Mapping[str, int] = field(default_factory=dict)  # slots reserved per core
    vector_work_bytes: float = 0.0  # vector ops: bytes × op cost factor
    cube_flops: int = 0  # the part of `flops` the Cube does
    gemms: int = 0  # GEMMs sharing each A block (dual GEMM: 2)
    l1_from_ub_bytes: int = 0  # bytes L1 receives from UB, not from global memory (attention)
    sampling: KernelSampling | None = None  # what was sampled, if anything (sampling.py)
    # the kernel's program this one renames (copies.py): its instructions but for the names
    copy_of: KernelProgram | None = field(default=None, compare=False, repr=False)

    @property
    def instruction_count(self) -> int:
        source = self.copy_of or self  # a copy has its source's instructions, renamed
        return sum(core.instruction_count for core in source.cores)

    @functools.cached_property
    def touched_tensors(self) -> tuple[str, ...]:
        """The tensors its global transfers read or write, in the order they first appear
        (core by core, pipe by pipe): the same order, tensor for tensor, in every layer of a
        model whose layers are one another's copies (see L2Cache.entry_state)."""
        seen: dict[str, None] = {}
        for core in self.cores:
            for queue in core.queues.values():
                for instr in queue:
                    if type(instr) is GlobalTransfer:
                        seen.setdefault(instr.region.tensor, None)
        return tuple(seen)

    def tensors_for(self, earlier: KernelProgram) -> dict[str, str]:
        """The name in this kernel of each tensor `earlier` touches, place for place: this
        kernel run as `earlier` ran (a replay: engine/replay.py)."""
        return dict(zip(earlier.touched_tensors, self.touched_tensors))

    def capacity_bytes(self, hw: Hardware, buffer: str) -> int:
        """A buffer's bytes in this kernel: UB has L1's too in a vector kernel on a chip whose
        two are one memory (Hardware.ub_bytes)."""
        if buffer == "UB":
            return hw.ub_bytes(matmul=self.unit != "vector")
        return hw.buffer_bytes[buffer]


@dataclass(frozen=True)
class Program:
    """What lowering hands the engine, frozen: every kernel's per-core programs, and the
    tensors' geometry and layout the engine needs to shape global transfers."""

    kernels: tuple[KernelProgram, ...]
    tensor_geometry: Mapping[str, tuple[int, int, int]]  # tensor -> (rows, cols, element bytes)
    compulsory_hbm_bytes: int  # external inputs once + outputs once
    tensor_roles: Mapping[str, tuple[str, int]] = field(default_factory=dict)  # (role, bytes)
    nz_tensors: frozenset[str] = frozenset()  # stored in Ascend's fractal NZ layout
    slice_steps: Mapping[str, int] = field(default_factory=dict)  # slice views read in place

    @property
    def instruction_count(self) -> int:
        return sum(k.instruction_count for k in self.kernels)

    def read_factor(self, tensor: str) -> int:
        """Bytes memory moves per byte a transfer of `tensor` keeps: above 1 only for a slice
        read in place (cost.strided_read_factor)."""
        step = self.slice_steps.get(tensor)
        return 1 if step is None else strided_read_factor(step, self.tensor_geometry[tensor][2])
