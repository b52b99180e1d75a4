"""What a run leaves: a Trace of every pipe's executed instructions.

Every executed instruction leaves one `Record`; every statistic of the report is derived
from those records. A pipe logs only the ints a record adds to its instruction (times,
waits, bytes) and records are built from the log when asked for: building millions of
tuples cost more than the timing.
"""

from __future__ import annotations

from array import array
from dataclasses import dataclass, field
from functools import cached_property
from typing import Iterator, MutableSequence, NamedTuple, Sequence

from ..schedule.program import GlobalTransfer, Instruction, Transfer


class Record(NamedTuple):
    """One executed instruction: its instruction's fields and what its run LOGGED."""

    kernel: int
    core: int
    pipe: str
    label: str
    start_cycle: int  # when it began executing (after its waits)
    end_cycle: int
    wait_data_cycles: int  # waiting for a producer's data before starting
    wait_slot_cycles: int  # waiting for a free buffer slot before starting
    wait_bandwidth_cycles: int  # extra transfer time from sharing HBM/L2 with other transfers
    src: str | None
    dst: str | None
    nbytes: int
    reads: tuple[tuple[str, int], ...]  # (level, bytes) read; for HBM, see the two fields below
    writes: tuple[tuple[str, int], ...]
    l2_hit_bytes: int  # of a global-memory read: bytes served by L2
    hbm_bytes: int  # bytes moved on HBM (a read's fetch, or a write)
    tensor: str | None  # the tensor read from or written to global memory
    acquire: tuple[str, int] | None  # buffer slot taken at start (buffer, bytes)
    release: tuple[tuple[str, int], ...]  # slots freed at the end


# the ints a pipe logs per executed instruction, in this order (the rest of its Record is
# its instruction's)
LOGGED = (
    "start_cycle",
    "end_cycle",
    "wait_data_cycles",
    "wait_slot_cycles",
    "wait_bandwidth_cycles",
    "l2_hit_bytes",
    "hbm_bytes",
)


CYCLES = ("start_cycle", "end_cycle")  # the LOGGED fields that are points in time
# a pipe with no global transfer logs only these first LOGGED fields (the rest are 0): three
# quarters of a matmul's instructions are its MTE1 moves and Cube calls
ON_CHIP = 4


@dataclass(frozen=True)
class PipeLog:
    """What one pipe of one core executed: its instructions in order and, flat, the first
    `width` LOGGED ints of each (the rest are 0: ON_CHIP). A replayed kernel's logs share
    the logged ints of the kernel it ran as, its cycles `shift` later (engine/replay.py)."""

    kernel: int
    core: int
    pipe: str
    instrs: Sequence[Instruction]
    logged: MutableSequence[int]  # LOGGED ints, flat (an int64 array), cycles `shift` early
    shift: int = 0
    width: int = len(LOGGED)

    @property
    def executed(self) -> int:
        """How many instructions it executed."""
        return len(self.logged) // self.width

    def column(self, field: str) -> Sequence[int]:
        """One LOGGED field of every executed instruction."""
        index = LOGGED.index(field)
        if index >= self.width:
            return array("q", bytes(8 * self.executed))
        column = self.logged[index :: self.width]
        if self.shift and field in CYCLES:
            return array("q", (value + self.shift for value in column))
        return column

    def records(self) -> Iterator[Record]:
        """The Record of each executed instruction, in the order the pipe ran them."""
        rest = (0,) * (len(LOGGED) - self.width)  # of a pipe that logs ON_CHIP fields only
        rows: Iterator[tuple[int, ...]] = zip(*[iter(self.logged)] * self.width)
        if rest:
            rows = (row + rest for row in rows)
        shift = self.shift
        for instr, (start, end, wait_data, wait_slot, wait_bandwidth, hit, hbm) in zip(
            self.instrs, rows
        ):
            src = dst = tensor = None
            if isinstance(instr, Transfer):
                src, dst = instr.src, instr.dst
                if isinstance(instr, GlobalTransfer):
                    tensor = instr.region.tensor
            yield Record(
                self.kernel,
                self.core,
                self.pipe,
                instr.label,
                start + shift,
                end + shift,
                wait_data,
                wait_slot,
                wait_bandwidth,
                src,
                dst,
                instr.nbytes,
                instr.reads,
                instr.writes,
                hit,
                hbm,
                tensor,
                instr.acquire,
                instr.release,
            )


@dataclass(frozen=True)
class KernelSpan:
    index: int
    start_cycle: int  # the kernel before it ended (0 for the first): its launch wait
    end_cycle: int  # last instruction of the last core done
    run_cycle: int = 0  # its cores began
    extrapolated_cycles: int = 0  # of a sampled kernel: its end is this much after its run's
    error_cycles: int = 0  # and that estimate is good to about this much (schedule/sampling)
    # per tensor, what the reads of its skipped chunks found in L2 and fetched from HBM
    warmed: dict[str, list[int]] = field(default_factory=dict)
    # what it began with: the L2's state (L2Cache.entry_state) and how far ahead of the
    # device the host had issued it (cost.host_lead_cycles)
    entry: tuple[str, int] = ("", 0)
    # the span of the kernel it ran as, replayed (engine/replay.py), in this run or an earlier
    # one on the same hardware; None if simulated. The same run either way
    replayed: KernelSpan | None = field(default=None, compare=False, repr=False)


@dataclass(frozen=True)
class Trace:
    """Everything a run did, kept as compact per-pipe logs rather than records: the analysis
    reads columns of them, and only plots and Chrome traces ask for full records."""

    pipes: Sequence[PipeLog]  # by kernel, core, pipe
    kernels: Sequence[KernelSpan]
    cycles: int
    l2_hits: int
    l2_misses: int
    peak_occupancy_bytes: dict[str, int]  # per buffer, highest seen on any core
    instructions: int

    @cached_property
    def records(self) -> list[Record]:
        """One Record per executed instruction, pipe by pipe (built on first use)."""
        return [record for log in self.pipes for record in log.records()]
