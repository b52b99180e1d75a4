"""The SimPy world: runs a Program on a Hardware and returns the Trace.

Lifecycle: build (channels, L2) → for each kernel: its launch (overlapping the kernel
before it, cost.kernel_start_cycle), then every core's pipes run their in-order queues (or,
when it begins as an earlier kernel did, that kernel's run is replayed: engine/replay.py)
→ collect. Time is integer cycles.
Every executed instruction leaves one `Record` in the trace (engine/trace.py); every
statistic of the report is derived from those records.

Only HBM and L2 are shared between cores, so only transfers to or from global
memory need the global clock. Everything else a pipe does (Cube and vector
work, on-chip moves) depends on nothing but the pipe's own clock and the
flags it waits on, so its times are computed on the spot, running ahead of
the global clock, and every flag set carries the cycle it becomes visible
at. A pipe stops only to wait for a flag nobody has set yet (whoever sets it
moves the pipe on) or for a global transfer of its own to land: its engine's
queue is full, or on-chip work follows the transfers (engine/transfer.py times
them on SimPy's clock). The times are exactly those of a
SimPy process per pipe waiting on every flag (tests/test_engine_reference.py
checks it), at about a seventh of the events.
"""

from __future__ import annotations

import math
from array import array
from collections import deque
from functools import partial
from operator import attrgetter
from typing import Sequence

import simpy

from ..config.hardware import Hardware
from ..cost import host_lead_cycles, kernel_start_cycle, transfer_cycles
from ..errors import CycleBudgetError, InvariantError
from ..schedule.program import (
    CoreProgram,
    GlobalTransfer,
    Instruction,
    KernelProgram,
    Program,
    Region,
    Transfer,
    transfer_rate,
)
from ..schedule.sampling import TIMED_PIPE as TIMED
from ..schedule.sampling import Extension, KernelSampling, Load, extension_cycles
from .bandwidth import channel
from .l2cache import L2Cache
from .occupancy import TIME_BITS, kernel_peaks
from .replay import Replays
from .skips import Skips
from .trace import LOGGED, ON_CHIP, KernelSpan, PipeLog, Trace
from .transfer import AfterTheCycle, EngineQueue, TransferInFlight, landing_delay

# The longest run the simulator follows (its occupancy check needs 2 x cycle + 1 < 2**41):
# about 18 minutes of simulated time at 1 GHz, far beyond any kernel sequence of one chip.
MAX_RUN_CYCLES = (1 << (TIME_BITS - 1)) - 1


class _Flag:
    """A counting semaphore between two pipes of one core (set_flag / wait_flag). Each set
    leaves a token stamped with the cycle it becomes visible at; one pipe sets a flag and
    one pipe waits on it, so tokens arrive in cycle order."""

    __slots__ = ("tokens", "waiter")

    def __init__(self, count: int, cycle: int):
        self.tokens = deque([cycle] * count)
        self.waiter: _Pipe | None = None  # the pipe that found no token here


class _Pipe:
    """One in-order pipe of a core: its queue, the next instruction, its own clock, and the
    global transfers it has issued that have not landed yet (at most `depth`, its engine's
    queue depth)."""

    __slots__ = (
        "name",
        "queue",
        "position",
        "clock",
        "logged",
        "depth",
        "in_flight",
        "blocked",
        "transfers",
        "landed_at",
        "width",
    )

    def __init__(
        self, name: str, queue: Sequence[Instruction], clock: int, depth: int, per_tensor: bool
    ):
        self.name, self.queue, self.position, self.clock = name, queue, 0, clock
        self.logged = array("q")  # see LOGGED: 8 bytes an int, where a list holds ~36
        # how many LOGGED ints an instruction leaves: a pipe with no global transfer, ON_CHIP
        self.width = len(LOGGED) if GlobalTransfer in set(map(type, queue)) else ON_CHIP
        self.depth = depth
        self.in_flight = 0
        self.blocked = False  # waits for a transfer of its own to land
        self.transfers = EngineQueue(per_tensor)
        self.landed_at = clock  # when its latest global transfer landed

    def must_wait_for_landing(self, instr: Instruction) -> bool:
        """An engine works its queue in order: a global transfer waits for room in the queue,
        any other instruction for the transfers before it to land."""
        return bool(self.in_flight) and (
            type(instr) is not GlobalTransfer or self.in_flight >= self.depth
        )


class _CoreState:
    __slots__ = (
        "kernel",
        "core",
        "flags",
        "slot_flag",
        "pipes",
        "ready",
        "unfinished",
        "in_flight",
        "done",
    )

    def __init__(
        self,
        kernel: int,
        core: CoreProgram,
        core_index: int,
        clock: int,
        done: simpy.Event,
        depths: dict[str, int],
        per_tensor: frozenset[str],
    ):
        self.kernel, self.core = kernel, core_index
        self.pipes = [
            _Pipe(name, queue, clock, depths.get(name, 1), name in per_tensor)
            for name, queue in core.queues.items()
            if queue
        ]
        self.ready = deque(self.pipes)  # pipes that may be able to move
        self.unfinished = len(self.pipes)
        self.in_flight = 0  # global transfers under way
        self.flags = [_Flag(n, clock) for n in core.flag_initial]
        self.slot_flag = [cause == "buffer_slot" for cause in core.flag_cause]
        self.done = done  # fires with the cycle the last pipe ended


class World:
    """One run of a Program on a Hardware, on one SimPy clock. It exists so that only what
    cores share (HBM, L2, kernel launches) waits on that clock: each pipe times its own
    on-chip work directly and joins the clock only for global transfers and flags nobody
    has set yet, which is what makes the engine fast and the reference twin comparable."""

    def __init__(
        self,
        program: Program,
        hw: Hardware,
        env: simpy.Environment | None = None,
        replay: bool = True,
    ):
        self.program = program
        self.hw = hw
        # kernels that begin as an earlier one did are replayed, not simulated (replay.py)
        self.replays = Replays(program, hw) if replay else None
        self.env = env or simpy.Environment()  # a benchmark may pass an instrumented one
        self.channels = {
            name: channel(self.env, name, mem.sustained_bytes_per_cycle, hw.cores)
            for name, mem in hw.memories.items()
        }
        self.l2 = L2Cache(hw.memories["L2"].capacity_bytes, program.tensor_geometry)
        self.pipe_logs: list[PipeLog] = []
        self.spans: list[KernelSpan] = []
        self.kernel_started = 0  # the cycle the running kernel's cores began
        self.kernel: KernelProgram | None = None  # the running kernel
        self.entry = ("", 0)  # what the running kernel began with (KernelSpan.entry)
        self.own = ""  # and as its own tensors see it (L2Cache.own_state): its replays' too
        self.skips = Skips(self.l2, None, 0)  # the running kernel's, as cores pass them
        self.peak_occupancy = dict.fromkeys(hw.buffer_bytes, 0)  # see _count_occupancy
        self.waiting: dict[tuple[int, int, str], tuple[int, int]] = {}  # pipe -> (instr, flag)
        self.routes = {
            path: (engine.latency_cycles, rate)
            for engine in hw.engines.values()
            for path, rate in engine.path_bytes_per_cycle.items()
        }
        self.queue_depths = {name: engine.queue_depth for name, engine in hw.engines.items()}
        self.per_tensor_streams = frozenset(
            name for name, engine in hw.engines.items() if engine.streams == "per_tensor"
        )
        self.packet_bytes = {
            path: engine.packet_bytes
            for engine in hw.engines.values()
            for path in engine.path_bytes_per_cycle
        }
        self.shaped_rates: dict[tuple[GlobalTransfer, float], float] = {}  # see shaped
        self.private_cycles: dict[Instruction, int] = {}  # see _compute_private_cycles
        self.beginning: dict[int, list[TransferInFlight]] = {}  # see begin_at
        # readers of one block crossing the L2 port one after another (see TransferInFlight)
        self.serialise_same_address = hw.l2_serialises_same_address
        self.same_address: dict[Region, deque[TransferInFlight]] = {}
        self.l2_latency = hw.memories["L2"].latency_cycles
        self.hbm_latency = hw.memories["HBM"].latency_cycles

    def run(self, max_cycles: int | None = None) -> Trace:
        """Run to completion; a deadlock is diagnosed, and `max_cycles` bounds the run."""
        budget = min(max_cycles or MAX_RUN_CYCLES, MAX_RUN_CYCLES)
        main = self.env.process(self._kernels())
        limit = self.env.timeout(budget + 1)  # a run that ends at `budget` is within it
        idle = []  # whether nothing but the limit was left to happen: a deadlock
        limit.callbacks.append(lambda _: idle.append(self.env.peek() == math.inf))
        self.env.run(until=self.env.any_of([main, limit]))
        executed = self.instructions_executed()
        if executed != self.program.instruction_count:
            if idle[0]:
                raise InvariantError(self.diagnose_deadlock())
            if budget == MAX_RUN_CYCLES:
                raise CycleBudgetError(
                    f"the simulation passed {MAX_RUN_CYCLES + 1:,} cycles ("
                    f"{MAX_RUN_CYCLES / self.hw.clock_hz:,.0f} s of this chip's time), the "
                    "longest run the simulator follows; a rate or latency of the hardware is "
                    "probably off by a unit prefix"
                )
            raise CycleBudgetError(
                f"the simulation passed its budget of {budget:,} cycles with "
                f"{executed:,} of {self.program.instruction_count:,} instructions done; "
                "raise the budget with --max-cycles N (simulate(..., max_cycles=N) from "
                "Python) if the workload is that long, or look for a schedule that never "
                "finishes"
            )
        return Trace(
            self.pipe_logs,
            self.spans,
            int(self.env.now),
            self.l2.hits,
            self.l2.misses,
            self.peak_occupancy,
            executed,
        )

    def instructions_executed(self) -> int:
        return sum(log.executed for log in self.pipe_logs)

    def diagnose_deadlock(self) -> str:
        """Which pipes wait on which flag, and which instruction would have set it."""
        ends = [log.column("end_cycle")[-1] for log in self.pipe_logs if log.logged]
        lines = [
            f"deadlock at cycle {max([self.kernel_started, *ends]):,}: "
            f"{self.instructions_executed():,} of "
            f"{self.program.instruction_count:,} instructions executed"
        ]
        for (kernel, core_index, pipe), (position, flag_id) in sorted(self.waiting.items()):
            core = self.program.kernels[kernel].cores[core_index]
            instr = core.queues[pipe][position]
            setters = [
                (p, i, q.label)
                for p, queue in core.queues.items()
                for i, q in enumerate(queue)
                if flag_id in q.sets
            ]
            who = "; ".join(f"{p} #{i} '{label}'" for p, i, label in setters) or "no instruction"
            lines.append(
                f"  kernel {self.program.kernels[kernel].name} core {core_index} {pipe} "
                f"#{position} '{instr.label}' waits on flag {flag_id} "
                f"({core.flag_cause[flag_id]}), set by: {who}"
            )
        if len(lines) == 1:
            ran = sum(1 for log in self.pipe_logs if log.logged)
            lines.append(f"  no pipe is waiting on a flag; pipes that ran: {ran}")
        return "\n".join(lines[:40])

    def _kernels(self):
        for index, kernel in enumerate(self.program.kernels):
            start = yield from self._launch(index, kernel)
            replays = self.replays
            earlier = None if replays is None else replays.earlier(index, self.entry[0], self.own)
            if earlier is not None:  # it begins as an earlier kernel did (engine/replay.py)
                logs, span = replays.replay(
                    earlier, index, start, self.kernel_started, self.entry, self.l2
                )
                self._fold_peaks(earlier.peaks)
                self.pipe_logs += logs
                yield self.env.timeout(span.end_cycle - self.env.now)
                self.spans.append(span)
                continue
            l2_before = None if replays is None else self.l2.state()
            cores_done, first_log = [], len(self.pipe_logs)
            for core_index, core in enumerate(kernel.cores):
                state = _CoreState(
                    index,
                    core,
                    core_index,
                    int(self.env.now),
                    self.env.event(),
                    self.queue_depths,
                    self.per_tensor_streams,
                )
                cores_done.append(state.done)
                self.pipe_logs += (
                    PipeLog(index, core_index, pipe.name, pipe.queue, pipe.logged, 0, pipe.width)
                    for pipe in state.pipes
                )
                self._move(state)
            yield self.env.all_of(cores_done)
            ends = [done.value for done in cores_done]
            peaks = yield from self._finish(index, kernel, start, first_log, ends)
            if replays is not None:
                logs, span = self.pipe_logs[first_log:], self.spans[-1]
                replays.simulated(kernel, logs, span, peaks, l2_before, self.l2.state(), self.own)
        if replays is not None:
            replays.done()

    def _launch(self, index: int, kernel: KernelProgram):
        """Wait for kernel `index`'s launch (the one before it has ended) and make it the
        current kernel; returns the cycle its wait began."""
        start = int(self.env.now)
        yield self.env.timeout(kernel_start_cycle(index, start, self.hw) - start)
        self.kernel_started = int(self.env.now)
        self.l2.warmed = {}
        self.skips = Skips(self.l2, kernel.sampling, self.kernel_started)
        self.kernel = kernel
        ahead = (later.touched_tensors for later in self.program.kernels[index:])
        self.entry = (self.l2.entry_state(ahead), host_lead_cycles(index, start, self.hw))
        self.own = self.l2.own_state(kernel.touched_tensors) if self.replays is not None else ""
        return start

    def _finish(
        self, index: int, kernel: KernelProgram, start: int, first_log: int, ends: list[int]
    ):
        """Close kernel `index`, whose cores ended at `ends` and logged from `first_log` on (a
        sampled one runs on for what it skipped: sampling.extension_cycles); its peaks."""
        logs = self.pipe_logs[first_log:]
        peaks = kernel_peaks(index, kernel, logs, self.hw, int(self.env.now))
        self._fold_peaks(peaks)
        extension = Extension(0, 0)
        if kernel.sampling is not None:
            timed = {log.core: log.column("end_cycle") for log in logs if log.pipe == TIMED}
            fetched = sum(found for _, found in self.l2.warmed.values())
            floor = math.ceil(fetched / self.channels["HBM"].bytes_per_cycle)
            loads = window_loads(self, kernel.sampling, logs)
            bandwidths = [self.channels[name].bytes_per_cycle for name in ("HBM", "L2")]
            extension = extension_cycles(
                kernel.sampling, ends, timed, floor, loads, self.skips.passed_at, bandwidths
            )
        self.shaped_rates.clear()  # keyed by this kernel's instructions: never seen again
        self.private_cycles.clear()
        end = max(ends, default=int(self.env.now)) + extension.cycles
        if end > self.env.now:
            yield self.env.timeout(end - self.env.now)
        self.spans.append(
            KernelSpan(
                index,
                start,
                int(self.env.now),
                self.kernel_started,
                extension.cycles,
                extension.error_cycles,
                self.l2.warmed,
                self.entry,
            )
        )
        return peaks

    def _move(self, state: _CoreState) -> None:
        """Move every pipe of a core that can. A pipe runs until it needs a flag nobody has set
        yet (it waits there until a set puts it back among the ready) or starts a global
        transfer (which calls this again when it lands)."""
        while state.ready:
            self._advance(state, state.ready.popleft())
        if not state.unfinished:
            state.done.succeed(
                max(
                    (max(pipe.clock, pipe.landed_at) for pipe in state.pipes),
                    default=int(self.env.now),
                )
            )
        elif not state.in_flight:  # nothing can move, nothing will land: a deadlock
            for flag_id, flag in enumerate(state.flags):
                if flag.waiter is not None:
                    self.waiting[(state.kernel, state.core, flag.waiter.name)] = (
                        flag.waiter.position,
                        flag_id,
                    )

    def _advance(self, state: _CoreState, pipe: _Pipe) -> None:
        """Run `pipe` until it needs a flag nobody has set yet or waits for a global transfer
        of its own to land."""
        flags, slot_flag, queue = state.flags, state.slot_flag, pipe.queue
        private_cycles = self.private_cycles
        while pipe.position < len(queue):
            instr = queue[pipe.position]
            if pipe.in_flight and pipe.must_wait_for_landing(instr):
                pipe.blocked = True  # a landing moves it on
                return
            waits = instr.waits
            for flag_id in waits:  # a flag waited on twice needs two tokens
                if len(flags[flag_id].tokens) < (1 if len(waits) == 1 else waits.count(flag_id)):
                    flags[flag_id].waiter = pipe
                    return
            start = pipe.clock
            wait_data = wait_slot = 0
            for flag_id in waits:
                ready = flags[flag_id].tokens.popleft()
                if ready > start:
                    if slot_flag[flag_id]:
                        wait_slot += ready - start
                    else:
                        wait_data += ready - start
                    start = ready
            pipe.position += 1
            if type(instr) is GlobalTransfer:  # at its cycle on the global clock
                state.in_flight += 1
                pipe.in_flight += 1
                pipe.clock = start
                pipe.transfers.issue(
                    self,
                    instr,
                    start,
                    partial(self._landed, state, pipe, wait_data, wait_slot),
                    order=(state.kernel, state.core, pipe.name, pipe.position - 1),
                )
                continue
            cycles = private_cycles.get(instr)
            if cycles is None:
                cycles = private_cycles[instr] = self._compute_private_cycles(instr)
            pipe.clock = start + cycles
            self._retire(state, pipe, instr, start, pipe.clock, wait_data, wait_slot, 0, 0, 0)
        if not pipe.in_flight:
            state.unfinished -= 1

    def begin_at(self, cycle: int, transfer: TransferInFlight) -> None:
        """Begin a global transfer at `cycle`, after every other event of that cycle and in the
        order of its key among the transfers beginning then: L2 lookups of one cycle then
        happen in one order, whichever order the engine issued them in."""
        batch = self.beginning.get(cycle)
        if batch is None:
            batch = self.beginning[cycle] = []
            AfterTheCycle(self.env, cycle - self.env.now).callbacks.append(
                partial(self._begin_batch, cycle)
            )
        batch.append(transfer)

    def _begin_batch(self, cycle: int, _event) -> None:
        batch = sorted(self.beginning.pop(cycle), key=attrgetter("order"))
        for transfer in batch:  # cores that pass a skip together: each finds L2 warmed
            if transfer.instr.warms >= 0:
                self.skips.passed(transfer.instr.warms, transfer.order[1], cycle)
        for transfer in batch:
            transfer.begin()

    def shaped(self, instr: GlobalTransfer, bytes_per_cycle: float) -> float:
        """A global transfer's rate on a path of `bytes_per_cycle`, given its shape."""
        packet_bytes = self.packet_bytes[(instr.src, instr.dst)]
        if not packet_bytes:
            return bytes_per_cycle
        key = (instr, bytes_per_cycle)
        rate = self.shaped_rates.get(key)
        if rate is None:
            rate = self.shaped_rates[key] = transfer_rate(
                instr, self.program, bytes_per_cycle, packet_bytes
            )
        return rate

    def _compute_private_cycles(self, instr: Instruction) -> int:
        """How long an instruction that needs no shared memory takes: compute its cycles, an
        on-chip move its engine's start latency, then its bytes at the engine's rate."""
        if isinstance(instr, Transfer):
            return transfer_cycles(instr.nbytes, *self.routes[(instr.src, instr.dst)])
        return instr.cycles

    def _landed(
        self,
        state: _CoreState,
        pipe: _Pipe,
        wait_data: int,
        wait_slot: int,
        transfer: TransferInFlight,
    ) -> None:
        """A global transfer is done: retire it and move its core on."""
        end = int(self.env.now)
        bandwidth_wait = landing_delay(transfer, pipe.landed_at)
        pipe.landed_at = end
        self._retire(
            state,
            pipe,
            transfer.instr,
            transfer.start,
            end,
            wait_data,
            wait_slot,
            bandwidth_wait,
            transfer.hit_bytes,
            transfer.hbm_bytes,
        )
        state.in_flight -= 1
        pipe.in_flight -= 1
        if pipe.blocked:
            pipe.blocked = False
            pipe.clock = max(pipe.clock, end)
            state.ready.append(pipe)
        elif not pipe.in_flight and pipe.position == len(pipe.queue):
            state.unfinished -= 1
        self._move(state)

    def _retire(
        self,
        state: _CoreState,
        pipe: _Pipe,
        instr: Instruction,
        start: int,
        end: int,
        wait_data: int,
        wait_slot: int,
        bandwidth_wait: int,
        hit_bytes: int,
        hbm_bytes: int,
    ) -> None:
        """An instruction is done: set its flags and log it (its slots, taken at its start and
        freed at its end, are counted after the kernel: see _count_occupancy)."""
        for flag_id in instr.sets:  # set_flag: a token at `end`; wake the pipe waiting
            flag = state.flags[flag_id]
            flag.tokens.append(end)
            if flag.waiter is not None:
                state.ready.append(flag.waiter)
                flag.waiter = None
        logged = (start, end, wait_data, wait_slot, bandwidth_wait, hit_bytes, hbm_bytes)
        pipe.logged.extend(logged[: pipe.width])

    def _fold_peaks(self, peaks: dict[str, int]) -> None:
        """Fold the most bytes each buffer held on any core of a kernel (its `peaks`:
        engine/occupancy.py) into `peak_occupancy`."""
        for buffer, most in peaks.items():
            self.peak_occupancy[buffer] = max(self.peak_occupancy[buffer], most)


def window_loads(world: World, sampling: KernelSampling, logs: Sequence[PipeLog]) -> list[Load]:
    """What each measured window of a sampled kernel needed of its core alone, and moved
    through HBM and L2 (see Load), from the pipe logs of its run: per pipe, its
    instructions' cycles; per stream of an engine's global transfers, their bytes at their
    own rates from where they found them, with nothing sharing them and no start-ups (the
    engine's queue overlaps those)."""
    by_pipe = {(log.core, log.pipe): log for log in logs}
    loads = []
    for window in sampling.windows:
        busy: dict[tuple[str, str | None], int] = {}
        fetched = hit = 0
        for pipe, (start, end) in window.spans.items():
            log = by_pipe[window.core, pipe]
            starts, ends = log.column("start_cycle"), log.column("end_cycle")
            hits, fetches = log.column("l2_hit_bytes"), log.column("hbm_bytes")
            per_tensor = pipe in world.per_tensor_streams
            for i in range(start, end):
                instr = log.instrs[i]
                if type(instr) is not GlobalTransfer:
                    busy[pipe, None] = busy.get((pipe, None), 0) + ends[i] - starts[i]
                    continue
                fetched, hit = fetched + fetches[i], hit + hits[i]
                rate = world.shaped(instr, world.routes[instr.src, instr.dst][1])
                cycles = math.ceil(fetches[i] / rate)
                if hits[i]:
                    l2_rate = world.shaped(instr, world.routes["L2", instr.dst][1])
                    cycles += math.ceil(hits[i] / l2_rate)
                stream = (pipe, instr.region.tensor if per_tensor else None)
                busy[stream] = busy.get(stream, 0) + cycles
        loads.append(Load(max(busy.values(), default=0), (fetched, hit)))
    return loads


def simulate_program(
    program: Program, hw: Hardware, max_cycles: int | None = None, replay: bool = True
) -> Trace:
    return World(program, hw, replay=replay).run(max_cycles)
