"""Buffer occupancy, counted from a kernel's pipe logs after it ran: an instruction takes its
slot at its start and frees its slots at its end. Above a buffer's capacity is a bug."""

from __future__ import annotations

from itertools import chain
from typing import Callable, Iterable, Sequence

import numpy as np

from ..config.hardware import Hardware
from ..errors import InvariantError
from ..schedule.program import Instruction, KernelProgram
from .trace import PipeLog

TIME_BITS = 41  # an occupancy key keeps 2 x cycle + 1 below 2**41 (see _slot_changes)


def kernel_peaks(
    index: int, kernel: KernelProgram, logs: Sequence[PipeLog], hw: Hardware, now: int
) -> dict[str, int]:
    """The most bytes each buffer held on any core of kernel `index` (at one cycle, frees
    count before takes), from its pipe logs; the run is at cycle `now`. Kernel by kernel,
    so the arrays are one kernel's."""
    buffers = {name: number for number, name in enumerate(hw.buffer_bytes)}
    core_buffers = len(kernel.cores) * len(buffers)
    if now >= 1 << (TIME_BITS - 1) or core_buffers >= 1 << (63 - TIME_BITS):
        raise InvariantError(
            f"a run of {now:,} cycles over {core_buffers:,} buffers "
            "is too large to check buffer occupancy"
        )
    keys, changes = _slot_changes(logs, buffers)
    peaks: dict[str, int] = {}
    if not len(keys):
        return peaks
    order = np.argsort(keys, kind="stable")  # fast: the keys come in long sorted runs
    groups, held = keys[order] >> TIME_BITS, np.cumsum(changes[order])
    first = np.flatnonzero(np.r_[True, groups[1:] != groups[:-1]])
    before = np.r_[0, held[first[1:] - 1]]  # the running sum each group inherits
    held -= np.repeat(before, np.diff(np.r_[first, len(groups)]))
    group_peak, group = np.maximum.reduceat(held, first), groups[first]
    for buffer, number in buffers.items():
        mine = np.flatnonzero(group % len(buffers) == number)
        if not len(mine):
            continue
        at = mine[np.argmax(group_peak[mine])]
        most, capacity = int(group_peak[at]), kernel.capacity_bytes(hw, buffer)
        if most > capacity:
            raise InvariantError(
                f"{buffer} of core {int(group[at]) // len(buffers)} in kernel {index} "
                f"holds {most} B > capacity {capacity} B"
            )
        peaks[buffer] = most
    return peaks


def _slot_changes(
    logs: Sequence[PipeLog], buffers: dict[str, int]
) -> tuple[np.ndarray, np.ndarray]:
    """Every slot taken or freed in one kernel's logs: its sort key (core and buffer in the
    high bits, then twice the cycle, plus one for a take so that frees come first) and its
    bytes (negative when freed)."""
    # what an instruction takes and frees, numbered per distinct pattern (a few dozen;
    # looked up per instruction run, as a map of every instruction would be the largest
    # object of a run)
    patterns: dict[tuple, int] = {}

    def pattern_of(instr: Instruction) -> int:
        slots = ((instr.acquire,) if instr.acquire else (), instr.release)
        return patterns.setdefault(slots, len(patterns))

    instructions = sum(len(log.instrs) for log in logs)

    def gathered(values_of: Callable[[PipeLog], Iterable[int]]) -> np.ndarray:
        """One value per instruction of every log, as one array."""
        return np.fromiter(chain.from_iterable(map(values_of, logs)), np.int64, instructions)

    pattern = gathered(lambda log: map(pattern_of, log.instrs))
    take_at = 2 * gathered(lambda log: log.column("start_cycle")) + 1
    free_at = 2 * gathered(lambda log: log.column("end_cycle"))
    group_of = np.repeat(
        np.array([log.core for log in logs], dtype=np.int64), [len(log.instrs) for log in logs]
    ) * len(buffers)
    keys, changes = [], []
    for (taken, freed), number in patterns.items():
        mine = np.flatnonzero(pattern == number)
        for slots, at, sign in ((taken, take_at, 1), (freed, free_at, -1)):
            for buffer, nbytes in slots:
                keys.append(((group_of[mine] + buffers[buffer]) << TIME_BITS) + at[mine])
                changes.append(np.full(len(mine), sign * nbytes, dtype=np.int64))
    if not keys:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    return np.concatenate(keys), np.concatenate(changes)
