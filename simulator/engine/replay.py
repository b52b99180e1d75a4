"""Kernels that begin as an earlier one did run as it did: replay them instead.

A kernel's run depends on its program and on what L2 holds as it starts, nothing else: the
other shared state (HBM's and L2's flows, the same-address queues) is idle between kernels,
and the launch wait before it is counted apart. So a kernel whose program is an earlier
kernel's with other tensors of the same shapes in the same places (`layout`), and
which begins with the L2 holding what that one began with, tensor for tensor
(L2Cache.entry_state), takes the same cycles, instruction for instruction, and leaves L2
as that one left it, its tensors for the earlier one's. A model's layers are such copies:
from the second on, most kernels of a layer begin as the layer before's did. A kernel that
evicted every line but its own tensors' (an LM head streaming its weights through L2) is
replayed, too, by one that begins with the same lines of its own tensors, whatever the
others (L2Cache.own_state): a decode step's LM head runs as the prefill's did.

The engine keeps, for each kernel it simulated, its pipe logs, its span, its buffers' peaks
and the L2 before and after it; a kernel that matches one is not simulated: its logs share
the earlier kernel's, shifted to its start, and L2 is left as the earlier kernel left it, its
tensors renamed (the lines it did not touch are the ones now in their places:
L2Cache.rerun). What a run kept and used passes to the next run on the same hardware
object, as lowered kernels do (schedule/copies.py): a request's decode steps at other
contexts begin their GEMMs as the step before did, so only attention and what follows it
before L2 forgets the difference are simulated again. The reference
twin (engine/reference.py) replays nothing, and tests check a run with replays against one
without, record for record (tests/test_engine.py, tests/test_properties.py).
"""

from __future__ import annotations

import hashlib
import itertools
from array import array
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace

from ..config.hardware import Hardware
from ..schedule.program import GlobalTransfer, Instruction, KernelProgram, Program, Transfer
from ..schedule.region import Region
from .l2cache import L2Cache
from .trace import KernelSpan, PipeLog


def layout(kernel: KernelProgram, program: Program) -> tuple:
    """The shape, layout and slicing of each tensor a kernel touches, in the order it
    touches them: with its queues (`queues_digest`), everything in its program that decides
    its run."""
    return tuple(
        (
            program.tensor_geometry[tensor],
            tensor in program.nz_tensors,
            program.slice_steps.get(tensor),
        )
        for tensor in kernel.touched_tensors
    )


def queues_digest(kernel: KernelProgram, numbers: dict[tuple, int]) -> bytes | None:
    """A digest of a kernel's queues and sampling, each tensor named by its place in
    `kernel.touched_tensors` and labels left out (so the same for a kernel and its copies:
    schedule/copies.py); None where its sampling touches a tensor its instructions do not.
    `numbers` numbers the distinct instruction shapes of the run (kept by the caller), so
    that a queue is digested as its shapes' numbers: equal numbers, equal shapes."""
    names = {tensor: place for place, tensor in enumerate(kernel.touched_tensors)}
    digest = hashlib.blake2b(digest_size=16)
    known: dict[int, int] = {}  # an instruction (it recurs by identity) -> its shape's number
    for core in kernel.cores:
        for pipe, queue in core.queues.items():
            digest.update(pipe.encode())
            sequence = array("q")
            for instr in queue:
                number = known.get(id(instr))
                if number is None:
                    shape = _shape(instr, names)
                    number = known[id(instr)] = numbers.setdefault(shape, len(numbers))
                sequence.append(number)
            digest.update(sequence.tobytes())
    sampling = kernel.sampling
    if sampling is not None:
        try:
            skips = [
                [
                    (
                        skip.chunks_before,
                        [[(_named(r, names), w) for r, w in s] for s in skip.steps],
                    )
                    for skip in core_skips
                ]
                for core_skips in sampling.skips
            ]
        except KeyError:
            return None
        digest.update(repr((sampling.chunks, sampling.kept, sampling.windows, skips)).encode())
    return digest.digest()


def _shape(instr: Instruction, names: dict[str, int]) -> tuple:
    common = (
        type(instr).__name__,
        instr.nbytes,
        instr.reads,
        instr.writes,
        instr.waits,
        instr.sets,
        instr.acquire,
        instr.release,
    )
    if type(instr) is GlobalTransfer:
        region = _named(instr.region, names)
        return (*common, instr.src, instr.dst, region, instr.multicast, instr.warms)
    if isinstance(instr, Transfer):
        return (*common, instr.src, instr.dst)
    return (*common, instr.cycles)


def _named(region: Region, names: dict[str, int]) -> tuple[int, int, int, int, int]:
    return (names[region.tensor], region.row0, region.row1, region.col0, region.col1)


UNDIGESTED = ""  # a kernel's shape not digested yet (most never need it)


@dataclass(slots=True, eq=False)
class Simulated:
    """A kernel the engine simulated, as a later one would replay it."""

    kernel: KernelProgram
    layout: tuple  # its tensors' (see `layout`)
    logs: Sequence[PipeLog]
    span: KernelSpan
    peaks: dict[str, int]  # the most bytes each buffer held (occupancy.kernel_peaks)
    l2_before: tuple[list[tuple], int, int]  # L2Cache.state as it began
    l2_after: tuple[list[tuple], int, int]  # and as it ended
    run: int  # the run that simulated it (Replays.serial)
    own_entry: str  # the L2 it began with as its own tensors see it (L2Cache.own_state)
    # whether it left in L2 only lines of its own tensors: then a kernel that begins with
    # the same own state, whatever the other lines were, runs as it ran and leaves what it left
    evicted_all_others: bool
    shape: str | None = UNDIGESTED  # its queues and layout digested (Replays.digest)


class Replays:
    """The kernels simulated so far, by the L2 state they began with: this run's, and those
    the last run on the same hardware kept or replayed (`done` hands them on)."""

    _last: tuple[Hardware, list[Simulated], dict[tuple, int], dict] | None = None
    _serials = itertools.count()

    def __init__(self, program: Program, hardware: Hardware):
        self.program, self.hardware = program, hardware
        self.serial = next(Replays._serials)
        self.by_entry: dict[str, list[Simulated]] = {}
        # those that evicted every line not their own, by their own state
        self.by_own_entry: dict[str, list[Simulated]] = {}
        self.numbers: dict[tuple, int] = {}  # every distinct instruction shape digested
        # per program a kernel's is a copy of (or its own), by id: it and its queues digest
        self.queues: dict[int, tuple[KernelProgram, bytes | None]] = {}
        last = Replays._last
        if last is not None and last[0] is hardware:
            for simulated in last[1]:
                self.keep(simulated)
            self.numbers, self.queues = last[2], last[3]
        self.used: set[Simulated] = set()  # what this run replayed

    def earlier(self, index: int, entry: str, own_entry: str) -> Simulated | None:
        """A kernel simulated before kernel `index` whose program has the same shape and
        that began with the same L2 (`entry`), or with the same lines of its own tensors
        (`own_entry`) and evicted all the others, if any."""
        shape: str | None = UNDIGESTED
        candidates = (*self.by_entry.get(entry, ()), *self.by_own_entry.get(own_entry, ()))
        for candidate in candidates:
            if shape == UNDIGESTED:
                kernel = self.program.kernels[index]
                shape = self.digest(kernel, layout(kernel, self.program))
            if candidate.shape == UNDIGESTED:
                candidate.shape = self.digest(candidate.kernel, candidate.layout)
            if shape is not None and candidate.shape == shape:
                self.used.add(candidate)
                return candidate
        return None

    def digest(self, kernel: KernelProgram, layout: tuple) -> str | None:
        """A kernel's shape: its queues (digested once for all copies) and its tensors'
        layout; None if its queues cannot be digested (see queues_digest)."""
        source = kernel.copy_of or kernel
        kept = self.queues.get(id(source))
        if kept is None:
            kept = self.queues[id(source)] = (source, queues_digest(source, self.numbers))
        if kept[1] is None:
            return None
        digest = hashlib.blake2b(kept[1], digest_size=16)
        digest.update(repr(layout).encode())
        return digest.hexdigest()

    def simulated(
        self,
        kernel: KernelProgram,
        logs: Sequence[PipeLog],
        span: KernelSpan,
        peaks: dict[str, int],
        before: tuple[list[tuple], int, int],
        after: tuple[list[tuple], int, int],
        own_entry: str,
    ) -> None:
        """Keep a kernel just simulated (L2 `before` and `after` it: L2Cache.state) for later
        ones to replay."""
        touched = set(kernel.touched_tensors)
        alone = all(tensor in touched for (tensor, _), _, _ in after[0])
        shape = layout(kernel, self.program)
        self.keep(
            Simulated(
                kernel, shape, logs, span, peaks, before, after, self.serial, own_entry, alone
            )
        )

    def keep(self, simulated: Simulated) -> None:
        """Keep a kernel simulated, in this run or one before, for later ones to replay."""
        self.by_entry.setdefault(simulated.span.entry[0], []).append(simulated)
        if simulated.evicted_all_others:
            self.by_own_entry.setdefault(simulated.own_entry, []).append(simulated)

    def done(self) -> None:
        """Hand the next run on this hardware what this one simulated or replayed (not all
        it was handed: a request's steps, or a sweep's points, keep only what still
        serves), with the digests' numbering and the queues digested so far."""
        handed = [
            simulated
            for kept in self.by_entry.values()
            for simulated in kept
            if simulated.run == self.serial or simulated in self.used
        ]
        sources = {id(s.kernel.copy_of or s.kernel) for s in handed}
        queues = {key: kept for key, kept in self.queues.items() if key in sources}
        Replays._last = (self.hardware, handed, self.numbers, queues)

    def replay(
        self,
        earlier: Simulated,
        index: int,
        start: int,
        run: int,
        entry: tuple[str, int],
        l2: L2Cache,
    ) -> tuple[list[PipeLog], KernelSpan]:
        """Kernel `index`, launched after `start` and begun at `run`, as `earlier` ran: its
        pipe logs and span, and L2 left as that kernel left it, tensor for tensor."""
        kernel = self.program.kernels[index]
        renamed = kernel.tensors_for(earlier.kernel)
        l2.rerun(earlier.l2_before, earlier.l2_after, renamed)
        l2.warmed = {renamed[tensor]: list(found) for tensor, found in earlier.span.warmed.items()}
        shift = run - earlier.span.run_cycle
        logs = [
            replace(log, kernel=index, instrs=_Queue(kernel, log), shift=log.shift + shift)
            for log in earlier.logs
        ]
        was = earlier.span
        span = KernelSpan(
            index,
            start,
            was.end_cycle + shift,
            run,
            was.extrapolated_cycles,
            was.error_cycles,
            l2.warmed,
            entry,
            earlier.span,
        )
        return logs, span


class _Queue(Sequence[Instruction]):
    """A replayed kernel's queue for `log`'s pipe, read from its program only when asked (for
    records: a trace or a timeline), so a copied kernel replayed is never renamed (copies.py)."""

    def __init__(self, kernel: KernelProgram, log: PipeLog):
        self.kernel, self.core, self.pipe, self.length = kernel, log.core, log.pipe, len(log.instrs)

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index):  # type: ignore[override]
        return self.kernel.cores[self.core].queues[self.pipe][index]

    def __iter__(self) -> Iterator[Instruction]:
        return iter(self.kernel.cores[self.core].queues[self.pipe])
