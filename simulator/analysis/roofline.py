"""The analytic model: roofline lower bounds from kernels and hardware alone.

It sits beside the simulation as its sanity check: no simulated run may be
faster than `bound_cycles`.
  compute: every kernel's work at the peak rate of the unit it runs on
           (Cube FLOPs at the fractal rate of its dtype on all cores; vector
           bytes × cost factor at the vector rate on all cores), kernels in series;
  memory:  compulsory HBM bytes at peak HBM bandwidth: each external input read
           once, each produced tensor written once (the L2 writes through).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..config.hardware import Hardware
from ..cost import compute_cycles, memory_cycles
from ..schedule.program import Program


@dataclass(frozen=True)
class Roofline:
    compute_cycles: float
    memory_cycles: float
    compulsory_bytes: int
    per_kernel: list[float]  # each kernel's own max(compute, memory), inputs from HBM

    @property
    def bound_cycles(self) -> float:
        return max(self.compute_cycles, self.memory_cycles)


def roofline(program: Program, hw: Hardware) -> Roofline:
    compute = [
        compute_cycles(k.cube_flops, k.dtype, k.vector_work_bytes, hw) for k in program.kernels
    ]
    per_kernel = [
        max(c, memory_cycles(k.compulsory_read_bytes + k.compulsory_write_bytes, hw))
        for c, k in zip(compute, program.kernels)
    ]
    return Roofline(
        sum(compute),
        memory_cycles(program.compulsory_hbm_bytes, hw),
        program.compulsory_hbm_bytes,
        per_kernel,
    )
