"""Kernels that begin as an earlier one did run as it did: replay them instead.

A kernel's run depends on its program and on what L2 holds as it starts, nothing else: the
other shared state (HBM's and L2's flows, the same-address queues) is idle between kernels,
and the launch wait before it is counted apart. So a kernel whose program is an earlier
kernel's with other tensors of the same shapes in the same places (`tensors_digest`), and
which begins with the L2 holding what that one began with, tensor for tensor
(L2Cache.entry_state), takes the same cycles, instruction for instruction, and leaves L2
as that one left it, its tensors for the earlier one's. A model's layers are such copies:
from the second on, most kernels of a layer begin as the layer before's did.

The engine keeps, for each kernel it simulated, its pipe logs, its span and the L2 before
and after it; a kernel that matches one is not simulated: its logs are the earlier kernel's
moved to its start, and L2 is left as the earlier kernel left it, its tensors renamed (the
lines it did not touch are the ones now in their places: L2Cache.rerun). The reference
twin (engine/reference.py) replays nothing, and tests check a run with replays against one
without, record for record (tests/test_engine.py, tests/test_properties.py).
"""

from __future__ import annotations

import hashlib
from array import array
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from ..schedule.program import GlobalTransfer, Instruction, KernelProgram, Program, Transfer
from ..schedule.region import Region
from .l2cache import L2Cache
from .trace import LOGGED, KernelSpan, PipeLog

TIMES = (LOGGED.index("start_cycle"), LOGGED.index("end_cycle"))  # the logged cycles


def tensors_digest(kernel: KernelProgram, program: Program, queues: bytes) -> str:
    """A digest of everything in a kernel's program that decides its run, given its queues'
    (`queues_digest`): those and the shape, layout and slicing of each tensor it touches, in
    the order it touches them."""
    digest = hashlib.blake2b(queues, digest_size=16)
    for tensor in kernel.touched_tensors:
        digest.update(
            repr(
                (
                    program.tensor_geometry[tensor],
                    tensor in program.nz_tensors,
                    program.slice_steps.get(tensor),
                )
            ).encode()
        )
    return digest.hexdigest()


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


@dataclass(frozen=True, slots=True)
class Simulated:
    """A kernel the engine simulated, as a later one would replay it."""

    index: int
    logs: Sequence[PipeLog]
    span: KernelSpan
    l2_before: tuple[list[tuple], int, int]  # L2Cache.state as it began
    l2_after: tuple[list[tuple], int, int]  # and as it ended


class Replays:
    """The kernels simulated so far, by the L2 state they began with."""

    def __init__(self, program: Program):
        self.program = program
        self.by_entry: dict[str, list[Simulated]] = {}
        self.shapes: dict[int, str | None] = {}  # digested on first need: most never match
        self.numbers: dict[tuple, int] = {}  # every distinct instruction shape digested
        # per program a kernel's is a copy of (or its own), by id: it and its queues digest
        self.queues: dict[int, tuple[KernelProgram, bytes | None]] = {}

    def earlier(self, index: int, entry: str) -> Simulated | None:
        """A kernel simulated before kernel `index` that began with the same L2 (`entry`)
        and whose program has the same shape, if any."""
        shape = None
        for candidate in self.by_entry.get(entry, ()):
            shape = shape or self._shape(index)
            if shape is not None and self._shape(candidate.index) == shape:
                return candidate
        return None

    def _shape(self, index: int) -> str | None:
        """Kernel `index`'s shape (tensors_digest), its queues digested once for all copies."""
        if index not in self.shapes:
            kernel = self.program.kernels[index]
            source = kernel.copy_of or kernel
            kept = self.queues.get(id(source))
            if kept is None:
                kept = self.queues[id(source)] = (source, queues_digest(source, self.numbers))
            queues = kept[1]
            shape = None if queues is None else tensors_digest(kernel, self.program, queues)
            self.shapes[index] = shape
        return self.shapes[index]

    def keep(self, simulated: Simulated) -> None:
        """Keep a kernel just simulated for later ones to replay."""
        self.by_entry.setdefault(simulated.span.entry[0], []).append(simulated)

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
        renamed = kernel.tensors_for(self.program.kernels[earlier.index])
        l2.rerun(earlier.l2_before, earlier.l2_after, renamed)
        l2.warmed = {renamed[tensor]: list(found) for tensor, found in earlier.span.warmed.items()}
        shift = run - earlier.span.run_cycle
        queues = [core.queues for core in kernel.cores]
        logs = [
            PipeLog(index, log.core, log.pipe, queues[log.core][log.pipe], _moved(log, shift))
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
            earlier.index,
        )
        return logs, span


def _moved(log: PipeLog, shift: int) -> array:
    """A pipe's logged ints with its cycles moved by `shift`."""
    rows = np.array(log.logged, dtype=np.int64).reshape(-1, len(LOGGED))
    rows[:, TIMES] += shift
    moved = array("q")
    moved.frombytes(rows.tobytes())
    return moved
