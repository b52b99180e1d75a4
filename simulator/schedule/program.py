"""Programs: per core, per pipe, in-order instruction queues synchronised by flags.

A flag is a counting semaphore between two pipes of one core, as DaVinci's
set_flag/wait_flag: an instruction waits on its `waits` before it starts and
sets its `sets` when it completes. Ping-pong buffer slots are a pair of flags
per slot: `ready` (data written, cause of a wait: "data") and `free`
(consumer done, cause of a wait: "buffer_slot").
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..cost import block_packets, run_packets, shaped_rate, strided_read_factor
from ..errors import InvariantError

PIPES = ("MTE2", "MTE1", "CUBE", "FIXPIPE", "VECTOR", "MTE3")
UNIT_OF_PIPE = {"CUBE": "cube", "VECTOR": "vector"}  # a pipe named by its unit in reports
# The keys of a report's utilization, in order: each pipe's unit, then the shared memories.
UTILIZATION_KEYS = (*(UNIT_OF_PIPE.get(p, p) for p in PIPES), "HBM", "L2")


@dataclass(frozen=True, slots=True)
class Region:
    """A rectangle of a tensor viewed as 2-D (rows = all leading dims, cols = last dim)."""

    tensor: str
    row0: int
    row1: int
    col0: int
    col1: int

    def __str__(self) -> str:
        return f"{self.tensor}[{self.row0}:{self.row1}, {self.col0}:{self.col1}]"


@dataclass(slots=True, eq=False)
class Instr:
    """One instruction of one pipe. Identity is the instruction: the lowering reuses one
    object wherever the same instruction recurs (so it hashes by identity)."""

    pipe: str
    label: str
    src: str | None = None  # transfers: source and destination levels
    dst: str | None = None
    nbytes: int = 0  # bytes moved (transfers) or processed (compute)
    cycles: int = 0  # compute: busy cycles, latency included
    region: Region | None = None  # the tensor rectangle read from or written to HBM/L2
    reads: tuple[tuple[str, int], ...] = ()  # (level, bytes) this instruction reads
    writes: tuple[tuple[str, int], ...] = ()  # (level, bytes) this instruction writes
    waits: list[int] = field(default_factory=list)
    sets: list[int] = field(default_factory=list)
    acquire: tuple[str, int] | None = None  # buffer slot taken at start
    release: tuple[tuple[str, int], ...] = ()  # slots freed at end
    multicast: int = 1  # cores one L2 read of this region serves at once


def transfer_packets(instr: Instr, program: Program, packet_bytes: int) -> int:
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


def moved_bytes(instr: Instr, program: Program) -> int:
    """The bytes a global transfer moves: its own, or a strided slice's whole sectors."""
    return instr.nbytes * program.read_factor(instr.region.tensor)


def transfer_rate(
    instr: Instr, program: Program, path_bytes_per_cycle: float, packet_bytes: int
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
) -> Instr:
    """A data movement; `read_bytes` differs from `nbytes` when the engine converts in flight,
    and `multicast` counts the cores that stage the same region from one L2 read."""
    return Instr(
        pipe,
        label,
        src,
        dst,
        nbytes,
        region=region,
        reads=((src, nbytes if read_bytes is None else read_bytes),),
        writes=((dst, nbytes),),
        multicast=multicast,
    )


@dataclass
class CoreProgram:
    queues: dict[str, list[Instr]]
    flag_initial: list[int]
    flag_cause: list[str]

    def new_flag(self, initial: int, cause: str) -> int:
        self.flag_initial.append(initial)
        self.flag_cause.append(cause)
        return len(self.flag_initial) - 1

    def emit(self, instr: Instr) -> Instr:
        self.queues[instr.pipe].append(instr)
        return instr

    @property
    def instruction_count(self) -> int:
        return sum(len(q) for q in self.queues.values())


def new_core_program() -> CoreProgram:
    return CoreProgram({pipe: [] for pipe in PIPES}, [], [])


class SlotRing:
    """`count` equal slots of one buffer, filled in turn by one pipe and drained by another."""

    def __init__(self, core: CoreProgram, buffer: str, slot_bytes: int, count: int):
        self.buffer = buffer
        self.slot_bytes = slot_bytes
        self.ready = [core.new_flag(0, "data") for _ in range(count)]
        self.free = [core.new_flag(1, "buffer_slot") for _ in range(count)]
        # a second producer-consumer hand-off on the same slot (vector result → store)
        self.done = [core.new_flag(0, "data") for _ in range(count)]
        self.next = 0

    def fill(self, producer: Instr) -> int:
        """The producer takes the next slot (waiting until it is free) and marks it ready."""
        if producer.nbytes > self.slot_bytes:
            raise InvariantError(
                f"{producer.label}: {producer.nbytes} B into a "
                f"{self.slot_bytes} B slot of {self.buffer}"
            )
        slot = self.next
        self.next = (slot + 1) % len(self.ready)
        producer.waits.append(self.free[slot])
        producer.sets.append(self.ready[slot])
        producer.acquire = (self.buffer, self.slot_bytes)
        return slot

    def first_use(self, consumer: Instr, slot: int) -> None:
        consumer.waits.append(self.ready[slot])

    def last_use(self, consumer: Instr, slot: int) -> None:
        consumer.sets.append(self.free[slot])
        consumer.release += ((self.buffer, self.slot_bytes),)


@dataclass
class KernelProgram:
    """One kernel lowered for every core, plus what the analysis needs to judge it."""

    name: str
    ops: tuple[str, ...]
    fused: bool
    unit: str  # "cube" or "vector"
    dtype: str
    flops: int
    cores: list[CoreProgram]
    tiling: dict | None
    compulsory_read_bytes: int  # inputs read once from HBM
    compulsory_write_bytes: int  # outputs written once to HBM
    buffer_plan_bytes: dict[str, int] = field(default_factory=dict)  # slots reserved per core
    vector_work_bytes: float = 0.0  # vector ops: bytes × op cost factor
    cube_flops: int = 0  # the part of `flops` the Cube does
    gemms: int = 0  # GEMMs sharing each A block (dual GEMM: 2)

    @property
    def instruction_count(self) -> int:
        return sum(core.instruction_count for core in self.cores)


@dataclass
class Program:
    kernels: list[KernelProgram]
    tensor_geometry: dict[str, tuple[int, int, int]]  # tensor -> (rows, cols, element bytes)
    compulsory_hbm_bytes: int  # external inputs once + outputs once
    tensor_roles: dict[str, tuple[str, int]] = field(default_factory=dict)  # name -> (role, bytes)
    nz_tensors: frozenset[str] = frozenset()  # stored in Ascend's fractal NZ layout
    slice_steps: dict[str, int] = field(default_factory=dict)  # slice views read in place

    @property
    def instruction_count(self) -> int:
        return sum(k.instruction_count for k in self.kernels)

    def read_factor(self, tensor: str) -> int:
        """Bytes memory moves per byte a transfer of `tensor` keeps: above 1 only for a slice
        read in place (cost.strided_read_factor)."""
        step = self.slice_steps.get(tensor)
        return 1 if step is None else strided_read_factor(step, self.tensor_geometry[tensor][2])
