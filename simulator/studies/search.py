"""The tiling search: enumerate legal tilings, rank them analytically, simulate the best few.

For each matmul kernel: every combination of base m/n/k (fractal multiples),
step.k, order, buffers and a core split that keeps the cores busy is checked
against the tiling rules (and, for a fused kernel, against UB); the legal ones
are ranked by an analytic estimate of the busiest core's time; the top few
and the default are simulated (each kernel alone, L2 cold), and the fastest
simulated one wins. The estimate only has to rank, the simulation decides.
"""

from __future__ import annotations

import itertools
from contextlib import nullcontext
from dataclasses import asdict, dataclass, replace
from typing import Callable

from ..config.workload import TilingSpec, Workload, check_workload
from ..cost import compute_cycles, memory_cycles, vector_work
from ..errors import SimulatorError, check_count
from ..ops import OPS, operands_of
from ..schedule.epilogue import epilogue_refusal, in_registers
from ..schedule.footprint import instruction_count
from ..schedule.fusion import plan_kernels
from ..schedule.kernel import Kernel, Plan
from ..schedule.program import MAX_INSTRUCTIONS
from ..schedule.tiling import (
    Tiling,
    TilingError,
    _splits,
    check_tiling,
    column_align,
    gemm_shape,
    resolve_tiling,
    round_up,
    single_core_extent,
)
from ..schedule.tiling import estimate_cycles as tiling_estimate
from ..workers import worker_pool

ESTIMATE_TIE = 0.01  # estimates this close rank alike: the analytic model is not finer
BASE_M = (16, 32, 64, 128, 256)
BASE_N = (16, 32, 64, 128, 256, 512)
BASE_K = (16, 32, 64, 128, 256)
STEP_K = (1, 2, 4, 8, 16, 32)


@dataclass(frozen=True)
class KernelTuning:
    kernel: str
    tiling_op: str
    joined_ops: tuple[str, ...]  # the kernel's other ops: their own tiling entries give way
    default: Tiling
    default_cycles: int
    best: Tiling
    best_cycles: int
    roofline_cycles: float
    legal: int  # legal tilings enumerated
    simulated: int  # of which simulated


def spec_of(tiling: Tiling, path: str = "") -> TilingSpec:
    return TilingSpec(**asdict(tiling), path=path)


def legal_tilings(kernel: Kernel, workload: Workload) -> list[Tiling]:
    hw = workload.hardware
    shape = gemm_shape(list(kernel.gemms), workload.tensors)
    fm, fn, fk = hw.cube.fractal[shape.dtype]
    tilings = []
    for split in _splits(shape, hw, fm, fn):
        core_m = single_core_extent(shape.m, split[1], fm)
        core_n = single_core_extent(shape.n, split[2], column_align(shape, fn))
        # the usual sizes, plus a block covering the core's whole share (what the default uses)
        bases_m = sorted(set(BASE_M) | {round_up(min(core_m, 128), fm)})
        bases_n = sorted(set(BASE_N) | {round_up(min(core_n, 256), fn)})
        for bm, bn, bk in itertools.product(bases_m, bases_n, BASE_K):
            if bm > round_up(core_m, fm) or bn > round_up(core_n, fn) or bk > round_up(shape.k, fk):
                continue
            for step, order, buffers, acc in itertools.product(
                STEP_K, ("n", "m"), (2, 1), (None, 1)
            ):
                if (step > 1 and step * bk > round_up(shape.k, fk)) or (acc and buffers == 1):
                    continue
                t = Tiling(bm, bn, bk, step, order, buffers, *split, acc_buffers=acc)
                # legal, and small enough to simulate
                if (
                    not check_tiling(shape, t, hw, "", kernel.name)
                    and instruction_count(shape, t, len(kernel.epilogue)) <= MAX_INSTRUCTIONS
                ):
                    tilings.append(t)
    if kernel.epilogue:
        tilings = [t for t in tilings if _epilogue_fits(kernel, workload, t)]
    return tilings


def _epilogue_fits(kernel: Kernel, workload: Workload, t: Tiling) -> bool:
    trial = replace(workload, tiling={**workload.tiling, kernel.tiling_op: spec_of(t)})
    return epilogue_refusal(trial, list(kernel.ops)) is None


def estimate_cycles(kernel: Kernel, workload: Workload, t: Tiling) -> float:
    """The analytic estimate of `t` for this kernel (see tiling.estimate_cycles)."""
    shape = gemm_shape(list(kernel.gemms), workload.tensors)
    classes = tuple(OPS[op.op].cost_class for op in kernel.epilogue)
    return tiling_estimate(
        shape, workload.hardware, t, classes, in_registers(workload.hardware, list(kernel.ops))
    )


def simulate_kernel(args: tuple[Workload, Kernel, Tiling]) -> int:
    """Cycles of one kernel run alone (cold L2) with the given tiling (kept in the cache of
    simulated runs, so tuning the same kernel again costs a lookup)."""
    from ..engine.world import simulate_program
    from ..schedule.lower import lower
    from ..step_cache import remembered

    workload, kernel, tiling = args
    trial = replace(workload, tiling={**workload.tiling, kernel.tiling_op: spec_of(tiling)})
    return remembered(
        "kernel",
        (trial, kernel),
        lambda: simulate_program(lower(trial, Plan((kernel,), {})), workload.hardware).cycles,
    )


def tune_kernel(kernel: Kernel, workload: Workload, top: int = 4, pool=None) -> KernelTuning:
    hw = workload.hardware
    shape = gemm_shape(list(kernel.gemms), workload.tensors)
    default = resolve_tiling(shape, workload.tiling_for(kernel.tiling_op), hw, kernel.name)
    legal = legal_tilings(kernel, workload)
    estimates = {t: estimate_cycles(kernel, workload, t) for t in legal}
    ranked = sorted(legal, key=lambda t: (estimates[t], _key(t)))
    # one tiling of each of the best-ranked block shapes: tilings that differ only in step,
    # order or K depth simulate alike, so spend the simulations on different shapes; of a
    # shape's tilings the estimate cannot tell apart, the one with the fewest instructions
    # (the cheapest to simulate, and on silicon the least to issue)
    groups: dict[tuple, list[Tiling]] = {}
    for t in ranked:
        groups.setdefault(
            (t.base_m, t.base_n, t.buffers, t.l0c_buffers, t.split_b, t.split_m, t.split_n), []
        ).append(t)
    shapes = []
    for members in list(groups.values())[:top]:
        alike = [t for t in members if estimates[t] <= estimates[members[0]] * (1 + ESTIMATE_TIE)]
        shapes.append(min(alike, key=lambda t: instruction_count(shape, t, len(kernel.epilogue))))
    trials = [default] + [t for t in shapes if t != default]
    jobs = [(workload, kernel, t) for t in trials]
    cycles = list(pool.map(simulate_kernel, jobs)) if pool else list(map(simulate_kernel, jobs))
    best_cycles, best = min(zip(cycles, trials), key=lambda pair: (pair[0], _key(pair[1])))
    return KernelTuning(
        kernel.name,
        kernel.tiling_op,
        tuple(op.name for op in kernel.ops[1:]),
        default,
        cycles[0],
        best,
        best_cycles,
        kernel_bound_cycles(kernel, workload),
        len(legal),
        len(trials),
    )


def kernel_bound_cycles(kernel: Kernel, workload: Workload) -> float:
    """The kernel's roofline: its Cube or vector work at peak, or its inputs and output at
    peak HBM bandwidth, whichever is longer (launch overhead not included)."""
    hw, tensors = workload.hardware, workload.tensors
    flops = sum(OPS[op.op].flops(operands_of(op, tensors), op.attrs) for op in kernel.gemms)
    compute = compute_cycles(
        flops,
        tensors[kernel.gemms[0].inputs[0]].dtype,
        vector_work(kernel.epilogue, tensors, hw.vector),
        hw,
    )
    produced = {op.output for op in kernel.ops}
    inputs = {n for op in kernel.ops for n in op.inputs} - produced
    moved = sum(tensors[n].nbytes for n in inputs) + tensors[kernel.output].nbytes
    return max(compute, memory_cycles(moved, hw))


def _key(t: Tiling) -> tuple:
    """A total order on tilings, to break ties the same way every run."""
    return tuple(-1 if v is None else v for v in asdict(t).values())


def tune(
    workload: Workload,
    top: int = 4,
    workers: int = 1,
    on_kernel: Callable[[KernelTuning], None] | None = None,
) -> list[KernelTuning]:
    """Tune every matmul kernel of the workload's fusion plan; `on_kernel` hears of each
    kernel as it is done (for a progress bar)."""
    check_workload("tune", workload)
    check_count("top", top)
    check_count("workers", workers)
    plan = plan_kernels(workload)
    kernels = [k for k in plan.kernels if k.gemms and not k.attention]  # attention: its own
    if not kernels:
        names = ", ".join(k.name for k in plan.kernels) or "none"
        raise SimulatorError(
            f"{workload.source}: nothing to tune: the tuner searches the "
            f"tilings of matmul kernels, and there is none (kernels: {names})"
        )
    results = []
    with worker_pool(workers) if workers > 1 else nullcontext() as pool:
        for kernel in kernels:
            results.append(tune_kernel(kernel, workload, top, pool))
            if on_kernel:
                on_kernel(results[-1])
    return results


def tuned_workload(workload: Workload, results: list[KernelTuning]) -> Workload:
    tiling = dict(workload.tiling)
    for r in results:
        for name in r.joined_ops:
            tiling.pop(name, None)
        tiling[r.tiling_op] = spec_of(r.best, f"schedule.tiling.{r.tiling_op}")
    return replace(workload, tiling=tiling)


__all__ = [
    "KernelTuning",
    "legal_tilings",
    "estimate_cycles",
    "simulate_kernel",
    "tune",
    "tune_kernel",
    "tuned_workload",
    "TilingError",
]
