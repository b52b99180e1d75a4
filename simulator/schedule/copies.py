"""Kernels lowered once: a kernel that is an earlier one with other tensors of the same
shapes (a model's layers are one another's copies; a decode step's GEMMs are the step
before's) gets that kernel's programs with its tensors renamed instead of being lowered again.

Lowering reads a kernel's ops (their types, attributes and the tensors they connect), those
tensors' shapes, dtypes, kinds and layouts, the tilings the workload gives its ops, the
hardware and whether it samples: nothing else (names and file paths only in its errors).
`_signature` is all of that with every tensor named by its place in the kernel, so two
kernels of one signature lower to the same programs but for the names, which `_renamed`
swaps. Instructions that name
no tensor are shared, as lowering already shares them between cores and blocks. A copy's
cores are renamed when first read (`_RenamedCores`): a copy the engine replays (a layer's
kernels from the second layer on) is never read, so never renamed.
tests/test_copies.py checks the renamed programs against ones lowered afresh, field for field.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable, Hashable, Sequence
from dataclasses import replace

from ..config.hardware import Hardware
from ..config.workload import Workload
from .attention_plan import PARTIALS
from .kernel import Kernel
from .program import CoreProgram, GlobalTransfer, Instruction, KernelProgram, _shared
from .region import Region
from .sampling import Skip

_Names = tuple[str, tuple[str, ...], tuple[str, ...]]  # a kernel's, its tensors' and ops'


class LoweredKernels:
    """The kernels lowered for one workload, by signature, seeded with those of the workload
    lowered just before when it ran on the same hardware (the steps of a request)."""

    _previous: LoweredKernels | None = None  # the last workload's, for the next

    def __init__(self, workload: Workload, sample: bool):
        self.hardware: Hardware = workload.hardware
        self.sample = sample
        self.tensors = workload.tensors
        self.tilings = workload.tiling_for
        earlier = LoweredKernels._previous
        same = (
            earlier is not None and earlier.hardware is self.hardware and earlier.sample == sample
        )
        self.earlier = earlier.lowered if same and earlier is not None else {}
        # signature -> the names of each kernel of it lowered -> its programs
        self.lowered: dict[Hashable, dict[_Names, tuple[KernelProgram, ...]]] = {}
        LoweredKernels._previous = self

    def programs(
        self, kernel: Kernel, lower: Callable[[Kernel], tuple[KernelProgram, ...]]
    ) -> tuple[KernelProgram, ...]:
        """The kernel's programs: those of a kernel of its signature and names lowered before,
        or theirs renamed, or (none yet) what `lower(kernel)` gives."""
        key, names = self._signature(kernel)
        alike = self.lowered.get(key)
        if alike is None:
            alike = self.lowered[key] = dict(self.earlier.get(key, {}))
        if names not in alike:
            if not alike:
                alike[names] = lower(kernel)
            else:
                output = names[1].index(kernel.output)  # its place, the same in every copy
                alike[names] = _renamed(*next(iter(alike.items())), names, output)
        return alike[names]

    def _signature(self, kernel: Kernel) -> tuple[Hashable, _Names]:
        """Everything lowering reads of a kernel, its tensors named by place; and its names:
        its own, its tensors' in that order and its ops'."""
        places: dict[str, int] = {}
        ops = tuple(
            (
                op.op,
                repr(sorted(op.attrs.items())),
                tuple(places.setdefault(name, len(places)) for name in op.inputs),
                places.setdefault(op.output, len(places)),
                replace(self.tilings(op.name), path=""),
                op in kernel.gemms,
                op in kernel.epilogue,
            )
            for op in kernel.ops
        )
        tensors = tuple(
            replace(self.tensors[name], name="", path="") for name in places
        )  # shape, dtype, kind and layout
        names = (kernel.name, tuple(places), tuple(op.name for op in kernel.ops))
        return (ops, tensors, self.sample), names


def _renamed(
    was: _Names, programs: tuple[KernelProgram, ...], names: _Names, output: int
) -> tuple[KernelProgram, ...]:
    """`programs`, lowered for a kernel of names `was`, for the kernel of `names`, whose
    output is its tensor number `output` (a split attention's workspace is named by it)."""
    (kernel, tensors, ops), (new_kernel, new_tensors, new_ops) = was, names
    renamed = dict(zip(tensors, new_tensors))
    renamed.setdefault(tensors[output] + PARTIALS, new_tensors[output] + PARTIALS)
    swap = _Renaming(renamed, dict(zip(ops, new_ops)), kernel, new_kernel)
    return tuple(swap.program(program) for program in programs)


class _Renaming:
    """One kernel's programs with their tensors, ops and kernel renamed."""

    def __init__(self, tensors: dict[str, str], ops: dict[str, str], old: str, new: str):
        self.tensors, self.ops, self.old, self.new = tensors, ops, old, new
        # a tensor in a label: a region or a vector op's tile, `name[rows, cols]`, after a
        # space; every name of the kernel is sought and the first and longest that fits is
        # taken, so that `x` is not found in a tensor `w x` or `x[0]` beside it
        every = sorted(tensors, key=len, reverse=True)
        self.named = any(n != m for n, m in tensors.items()) and re.compile(
            r"(?<= )(" + "|".join(map(re.escape, every)) + r")(?=\[)"
        )
        self.instructions: dict[int, Instruction] = {}
        self.labels: dict[str, str] = {}
        self.regions: dict[Region, Region] = {}

    def program(self, program: KernelProgram) -> KernelProgram:
        sampling = program.sampling
        if sampling is not None:
            skips = tuple(tuple(map(self.skip, core)) for core in sampling.skips)
            sampling = replace(sampling, skips=skips)
        copy = replace(
            program,
            name=self.new + program.name[len(self.old) :],
            ops=tuple(self.ops[op] for op in program.ops),
            cores=_RenamedCores(program.cores, self),
            sampling=sampling,
            copy_of=program.copy_of or program,
        )
        # what the engine asks of every kernel as one begins, known without its cores
        copy.__dict__["touched_tensors"] = tuple(self.tensors[t] for t in program.touched_tensors)
        return copy

    def skip(self, skip: Skip) -> Skip:
        steps = tuple(tuple((self.region(r), wrote) for r, wrote in step) for step in skip.steps)
        return Skip(skip.chunks_before, steps)

    def core(self, core: CoreProgram) -> CoreProgram:
        instructions, instruction = self.instructions, self.instruction
        return replace(
            core,
            queues={
                pipe: tuple(
                    instructions.get(id(i)) or instruction(i)  # shared: renamed once
                    for i in queue
                )
                for pipe, queue in core.queues.items()
            },
        )

    def instruction(self, instr: Instruction) -> Instruction:
        label = self.labels.get(instr.label)
        if label is None:
            label = instr.label if not self.named else self.named.sub(self._name, instr.label)
            label = self.labels[instr.label] = sys.intern(label)
        if type(instr) is GlobalTransfer:
            renamed: Instruction = replace(instr, label=label, region=self.region(instr.region))
        elif label != instr.label:
            renamed = replace(instr, label=label)
        else:
            renamed = instr
        self.instructions[id(instr)] = renamed
        return renamed

    def region(self, region: Region) -> Region:
        renamed = self.regions.get(region)
        if renamed is None:
            renamed = self.regions[region] = _shared(
                replace(region, tensor=self.tensors[region.tensor])
            )
        return renamed

    def _name(self, match: re.Match) -> str:
        return self.tensors[match.group(1)]


class _RenamedCores(Sequence[CoreProgram]):
    """A copy's cores, each renamed when first read (and kept): equal to the tuple of them."""

    def __init__(self, cores: Sequence[CoreProgram], swap: _Renaming):
        self._cores, self._swap = cores, swap
        self._renamed: list[CoreProgram | None] = [None] * len(cores)

    def __len__(self) -> int:
        return len(self._cores)

    def __getitem__(self, index):  # type: ignore[override]
        if isinstance(index, slice):
            return tuple(self[i] for i in range(*index.indices(len(self))))
        core = self._renamed[index]
        if core is None:
            core = self._renamed[index] = self._swap.core(self._cores[index])
        return core

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Sequence) and tuple(self) == tuple(other)

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return repr(tuple(self))
