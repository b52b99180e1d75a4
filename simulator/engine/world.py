"""The SimPy world: runs a Program on a Hardware and returns the Trace.

Lifecycle: build (channels, L2) → for each kernel: launch overhead, then one
in-order process per pipe per core → collect. Time is integer cycles. Every
executed instruction leaves one frozen `Record`; every statistic of the
report is derived from those records.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import NamedTuple

import simpy

from ..config.hardware import Hardware
from ..errors import SimulatorError
from ..schedule.program import CoreProgram, Instr, Program
from .bandwidth import SharedChannel
from .l2cache import L2Cache


class InvariantError(AssertionError):
    """The model broke physics (a bug in the simulator, never a user mistake)."""


class CycleBudgetError(SimulatorError):
    """A run went past the cycle budget it was given: stopped rather than left to hang."""


class Record(NamedTuple):
    """One executed instruction (a NamedTuple: immutable and cheap to create on the hot path)."""

    kernel: int
    core: int
    pipe: str
    label: str
    start_cycle: int           # when it began executing (after its waits)
    end_cycle: int
    wait_data_cycles: int      # waiting for a producer's data before starting
    wait_slot_cycles: int      # waiting for a free buffer slot before starting
    wait_bandwidth_cycles: int  # extra transfer time from sharing HBM/L2 with other transfers
    src: str | None
    dst: str | None
    nbytes: int
    reads: tuple[tuple[str, int], ...]   # (level, bytes) read; for HBM, see the two fields below
    writes: tuple[tuple[str, int], ...]
    l2_hit_bytes: int          # of a global-memory read: bytes served by L2
    hbm_bytes: int             # bytes moved on HBM (a read's fetch, or a write)
    tensor: str | None         # the tensor read from or written to global memory
    acquire: tuple[str, int] | None          # buffer slot taken at start (buffer, bytes)
    release: tuple[tuple[str, int], ...]     # slots freed at the end


@dataclass(frozen=True)
class KernelSpan:
    index: int
    start_cycle: int           # launch begins
    end_cycle: int             # last instruction of the last core done


@dataclass(frozen=True)
class Trace:
    records: list[Record]
    kernels: list[KernelSpan]
    cycles: int
    l2_hits: int
    l2_misses: int
    peak_occupancy_bytes: dict[str, int]   # per buffer, highest seen on any core
    instructions: int


class _Flag:
    """A counting semaphore between two pipes of one core (set_flag / wait_flag)."""
    __slots__ = ("count", "waiters")

    def __init__(self, count: int):
        self.count = count
        self.waiters: list[simpy.Event] = []

    def set(self) -> None:
        if self.waiters:
            self.waiters.pop(0).succeed()
        else:
            self.count += 1


class World:
    def __init__(self, program: Program, hw: Hardware, env: simpy.Environment | None = None):
        self.program = program
        self.hw = hw
        self.env = env or simpy.Environment()   # a benchmark may pass an instrumented one
        self.channels = {name: SharedChannel(self.env, name, mem.sustained_bytes_per_cycle)
                         for name, mem in hw.memories.items()}
        self.l2 = L2Cache(hw.memories["L2"].capacity_bytes, program.tensor_geometry)
        self.records: list[Record] = []
        self.spans: list[KernelSpan] = []
        self.peak_occupancy = {name: 0 for name in hw.buffer_bytes}
        self.waiting: dict[tuple[int, int, str], tuple[int, int]] = {}  # pipe -> (instr, flag)
        self.routes = {path: (engine.latency_cycles, rate) for engine in hw.engines.values()
                       for path, rate in engine.path_bytes_per_cycle.items()}
        self.l2_latency = hw.memories["L2"].latency_cycles
        self.hbm_latency = hw.memories["HBM"].latency_cycles

    def run(self, max_cycles: int | None = None) -> Trace:
        """Run to completion; a deadlock is diagnosed, and `max_cycles` bounds the run."""
        main = self.env.process(self._kernels())
        stop = main if max_cycles is None else self.env.any_of([main,
                                                                 self.env.timeout(max_cycles)])
        try:
            self.env.run(until=stop)
        except RuntimeError as exc:
            if "No scheduled events left" not in str(exc):
                raise
            # nothing left to happen before the last kernel finished: a deadlock, diagnosed below
        executed = len(self.records)
        if executed != self.program.instruction_count:
            if max_cycles is not None and self.env.now >= max_cycles:
                raise CycleBudgetError(
                    f"the simulation passed its budget of {max_cycles:,} cycles with "
                    f"{executed:,} of {self.program.instruction_count:,} instructions done; "
                    "raise the budget (simulate(..., max_cycles=N)) if the workload is that "
                    "long, or look for a schedule that never finishes")
            raise InvariantError(self.diagnose_deadlock())
        return Trace(self.records, self.spans, int(self.env.now), self.l2.hits, self.l2.misses,
                     dict(self.peak_occupancy), executed)

    def diagnose_deadlock(self) -> str:
        """Which pipes wait on which flag, and which instruction would have set it."""
        lines = [f"deadlock at cycle {self.env.now:,}: {len(self.records):,} of "
                 f"{self.program.instruction_count:,} instructions executed"]
        done = {(r.kernel, r.core, r.pipe) for r in self.records}
        for (kernel, core_index, pipe), (position, flag_id) in sorted(self.waiting.items()):
            core = self.program.kernels[kernel].cores[core_index]
            instr = core.queues[pipe][position]
            setters = [(p, i, q.label) for p, queue in core.queues.items()
                       for i, q in enumerate(queue) if flag_id in q.sets]
            who = "; ".join(f"{p} #{i} '{label}'" for p, i, label in setters) or "no instruction"
            lines.append(f"  kernel {self.program.kernels[kernel].name} core {core_index} {pipe} "
                         f"#{position} '{instr.label}' waits on flag {flag_id} "
                         f"({core.flag_cause[flag_id]}), set by: {who}")
        if len(lines) == 1:
            lines.append(f"  no pipe is waiting on a flag; pipes that ran: {len(done)}")
        return "\n".join(lines[:40])

    def _kernels(self):
        for index, kernel in enumerate(self.program.kernels):
            start = self.env.now
            yield self.env.timeout(self.hw.launch_overhead_cycles)
            pipes = []
            for core_index, core in enumerate(kernel.cores):
                flags = [_Flag(n) for n in core.flag_initial]
                occupancy = dict.fromkeys(self.hw.buffer_bytes, 0)
                for pipe, queue in core.queues.items():
                    if queue:
                        pipes.append(self.env.process(
                            self._pipe(index, core_index, pipe, queue, core, flags, occupancy)))
            yield self.env.all_of(pipes)
            self.spans.append(KernelSpan(index, start, int(self.env.now)))

    def _pipe(self, kernel: int, core_index: int, pipe: str, queue: list[Instr],
              core: CoreProgram, flags: list[_Flag], occupancy: dict[str, int]):
        env = self.env
        slot_flag = [cause == "buffer_slot" for cause in core.flag_cause]
        for position, instr in enumerate(queue):
            wait_data = wait_slot = 0
            for flag_id in instr.waits:
                flag = flags[flag_id]
                if flag.count:
                    flag.count -= 1
                    continue
                event = env.event()
                flag.waiters.append(event)
                since = env.now
                self.waiting[(kernel, core_index, pipe)] = (position, flag_id)
                yield event
                del self.waiting[(kernel, core_index, pipe)]
                if slot_flag[flag_id]:
                    wait_slot += env.now - since
                else:
                    wait_data += env.now - since
            start = env.now
            if instr.acquire:
                buffer, nbytes = instr.acquire
                occupancy[buffer] += nbytes
                if occupancy[buffer] > self.hw.buffer_bytes[buffer]:
                    raise InvariantError(f"{buffer} of core {core_index} holds "
                                         f"{occupancy[buffer]} B > capacity")
                self.peak_occupancy[buffer] = max(self.peak_occupancy[buffer], occupancy[buffer])
            hit_bytes = hbm_bytes = bandwidth_wait = 0
            if instr.src is None:
                yield env.timeout(instr.cycles)
            elif instr.region is None:      # on-chip move: start latency, then the engine's rate
                latency, rate = self.routes[(instr.src, instr.dst)]
                yield env.timeout(latency + math.ceil(instr.nbytes / rate))
            else:
                hit_bytes, hbm_bytes, ideal = yield from self._transfer(instr)
                bandwidth_wait = env.now - start - ideal
            for flag_id in instr.sets:
                flags[flag_id].set()
            for buffer, nbytes in instr.release:
                occupancy[buffer] -= nbytes
            self.records.append(Record(
                kernel, core_index, pipe, instr.label, start, env.now, wait_data,
                wait_slot, bandwidth_wait, instr.src, instr.dst, instr.nbytes,
                instr.reads, instr.writes, hit_bytes, hbm_bytes,
                instr.region.tensor if instr.region else None, instr.acquire,
                tuple(instr.release)))

    def _transfer(self, instr: Instr):
        """A transfer to or from global memory: latency, then its bytes over each shared
        memory they cross, at the shared rate.

        A global-memory read looks up L2: hits cross the L2 port (after any
        other core's fetch of the same cells has landed), misses are fetched
        over HBM (filling L2). A write goes through to HBM and allocates in L2.
        Returns (L2 hit bytes, HBM bytes, uncontended cycles); the time spent
        beyond the uncontended cycles is waiting on the shared memories.
        """
        src, dst = instr.src, instr.dst
        latency, rate = self.routes[(src, dst)]
        hit_bytes = hbm_bytes = 0
        fill = in_flight = None
        if src == "HBM":
            fill = self.env.event()
            hit_bytes, hbm_bytes, in_flight = self.l2.read(instr.region, fill)
            latency += self.l2_latency + (self.hbm_latency if hbm_bytes else 0)
            legs = (("HBM", hbm_bytes, rate), ("L2", hit_bytes, self.routes[("L2", dst)][1]))
        else:
            self.l2.write(instr.region)
            hbm_bytes = instr.nbytes
            latency += self.l2_latency + self.hbm_latency
            legs = (("HBM", hbm_bytes, rate),)
        ideal = latency + sum(math.ceil(nbytes / cap) for _, nbytes, cap in legs)
        yield self.env.timeout(latency)
        for channel, nbytes, cap in legs:
            if channel == "L2" and in_flight:
                yield self.env.all_of(in_flight)
            if nbytes:
                yield self.channels[channel].transfer(nbytes, cap)
            if channel == "HBM" and fill is not None:
                fill.succeed()      # the fetched cells have landed in L2
        if fill is not None and not fill.triggered:
            fill.succeed()
        return hit_bytes, hbm_bytes, ideal


def simulate_program(program: Program, hw: Hardware, max_cycles: int | None = None) -> Trace:
    return World(program, hw).run(max_cycles)
