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
import math
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass, replace

from ..config.hardware import Hardware
from ..config.workload import TilingSpec, Workload
from ..graph.fusion import Kernel, Plan, plan_kernels
from ..graph.ops import OPS, Operand
from .epilogue import epilogue_refusal
from .tiling import (
    MatmulShape,
    Tiling,
    TilingError,
    check_tiling,
    gemm_shape,
    resolve_tiling,
    round_up,
    single_core_extent,
)

BASE_M = (16, 32, 64, 128, 256)
BASE_N = (16, 32, 64, 128, 256, 512)
BASE_K = (16, 32, 64, 128, 256)
STEP_K = (1, 2, 4, 8, 16, 32)


@dataclass(frozen=True)
class KernelTuning:
    kernel: str
    tiling_op: str
    default: Tiling
    default_cycles: int
    best: Tiling
    best_cycles: int
    roofline_cycles: float
    legal: int                  # legal tilings enumerated
    simulated: int              # of which simulated


def spec_of(tiling: Tiling, path: str = "") -> TilingSpec:
    return TilingSpec(**asdict(tiling), path=path)


def legal_tilings(kernel: Kernel, workload: Workload) -> list[Tiling]:
    hw = workload.hardware
    shape = gemm_shape(list(kernel.gemms), workload.tensors)
    fm, fn, fk = hw.cube.fractal[shape.dtype]
    tilings = []
    for split in _splits(shape, hw, fm, fn):
        core_m = single_core_extent(shape.m, split[1], fm)
        core_n = single_core_extent(shape.n, split[2], fn)
        # the usual sizes, plus a block covering the core's whole share (what the default uses)
        bases_m = sorted(set(BASE_M) | {round_up(min(core_m, 128), fm)})
        bases_n = sorted(set(BASE_N) | {round_up(min(core_n, 256), fn)})
        for bm, bn, bk in itertools.product(bases_m, bases_n, BASE_K):
            if (bm > round_up(core_m, fm) or bn > round_up(core_n, fn)
                    or bk > round_up(shape.k, fk)):
                continue
            for step, order, buffers in itertools.product(STEP_K, ("n", "m"), (2, 1)):
                if step > 1 and step * bk > round_up(shape.k, fk):
                    continue
                t = Tiling(bm, bn, bk, step, order, buffers, *split)
                if not check_tiling(shape, t, hw, "", kernel.name):
                    tilings.append(t)
    if kernel.epilogue:
        tilings = [t for t in tilings if _epilogue_fits(kernel, workload, t)]
    return tilings


def _splits(shape: MatmulShape, hw: Hardware, fm: int, fn: int) -> list[tuple[int, int, int]]:
    """Core splits whose busiest core has at most 15% more work than the best split's."""
    options = []
    for sb in range(1, min(shape.batch, hw.cores) + 1):
        for sm in range(1, hw.cores // sb + 1):
            sn = hw.cores // (sb * sm)
            core_m = single_core_extent(shape.m, sm, fm)
            core_n = single_core_extent(shape.n, sn, fn)
            if core_m > round_up(shape.m, fm) or core_n > round_up(shape.n, fn):
                continue
            options.append((-(-shape.batch // sb) * core_m * core_n, (sb, sm, sn)))
    least = min(work for work, _ in options)
    return sorted({split for work, split in options if work <= 1.15 * least})


def _epilogue_fits(kernel: Kernel, workload: Workload, t: Tiling) -> bool:
    trial = replace(workload, tiling={**workload.tiling, kernel.tiling_op: spec_of(t)})
    return epilogue_refusal(trial, list(kernel.ops)) is None


def estimate_cycles(kernel: Kernel, workload: Workload, t: Tiling) -> float:
    """The busiest core's time, from the same rates the engine uses, with no simulation."""
    hw = workload.hardware
    shape = gemm_shape(list(kernel.gemms), workload.tensors)
    fm, fn, fk = hw.cube.fractal[shape.dtype]
    g = shape.gemms
    core_m = min(shape.m, single_core_extent(shape.m, t.split_m, fm))
    core_n = min(shape.n, single_core_extent(shape.n, t.split_n, fn))
    batch = -(-shape.batch // t.split_b)
    m_blocks, n_blocks = -(-core_m // t.base_m), -(-core_n // t.base_n)
    k_blocks = -(-shape.k // t.base_k)
    blocks = batch * m_blocks * n_blocks
    rows = min(t.base_m, shape.m)
    cube = blocks * k_blocks * g * (hw.cube.latency_cycles + math.ceil(rows / fm)
                                    * math.ceil(t.base_n / fn) * math.ceil(t.base_k / fk))
    mte1_latency, rate_a = _route(hw, "L1", "L0A")
    _, rate_b = _route(hw, "L1", "L0B")
    mte1 = blocks * k_blocks * (mte1_latency + round_up(rows, fm) * t.base_k * shape.a_bytes
                                / rate_a + g * (mte1_latency + t.base_k * t.base_n
                                                * shape.b_bytes / rate_b))
    chunk = min(shape.k, t.base_k * t.step_k)
    chunks = -(-shape.k // chunk)
    a_loads = batch * m_blocks if chunks == 1 and t.order == "n" else blocks * chunks
    b_loads = batch * n_blocks if chunks == 1 and t.order == "m" else blocks * chunks
    mte2_bytes = a_loads * rows * chunk * shape.a_bytes + g * b_loads * chunk * t.base_n \
        * shape.b_bytes
    mte2_latency, mte2_rate = _route(hw, "HBM", "L1")
    l2, hbm = hw.memories["L2"], hw.memories["HBM"]
    used = t.split_b * t.split_m * t.split_n
    out_bytes = shape.batch * shape.m * shape.n * shape.out_bytes
    hbm_bytes = _hbm_bytes(shape, hw, m_blocks, n_blocks)
    miss_bytes = min(mte2_bytes, hbm_bytes / used)           # this core's share of the misses
    transfers = a_loads + g * b_loads
    miss_transfers = transfers * miss_bytes / mte2_bytes
    mte2 = (transfers * (mte2_latency + l2.latency_cycles) + miss_transfers * hbm.latency_cycles
            + (mte2_bytes - miss_bytes) / min(mte2_rate, l2.sustained_bytes_per_cycle / used)
            + miss_bytes / min(mte2_rate, hbm.sustained_bytes_per_cycle / used))
    fix_latency, fix_rate = _route(hw, "L0C", "UB" if kernel.epilogue else "HBM")
    drain = blocks * g * (fix_latency + rows * t.base_n * shape.out_bytes / fix_rate)
    vector = 0.0
    for op in kernel.epilogue:
        vector += batch * core_m * core_n * 2 * hw.vector.cost_factor[OPS[op.op].cost_class] \
            / hw.vector.bytes_per_cycle
    stages = [mte2, mte1, cube, drain, vector]
    if t.buffers == 2:       # every stage overlaps the others: the slowest sets the pace
        steady = max(stages)
    else:                    # one slot: staging the next chunk waits until MTE1 moved this one
        steady = max(mte2 + mte1, cube + mte1, drain, vector)
    # filling and draining the pipeline: one step of every stage that does not set the pace
    steps = max(1, blocks * chunks)
    chip = (hbm_bytes + out_bytes) / hbm.sustained_bytes_per_cycle
    fill = hbm.latency_cycles + (sum(stages) - steady) / steps
    return max(steady, chip) + fill


def _hbm_bytes(shape: MatmulShape, hw: Hardware, m_blocks: int, n_blocks: int) -> float:
    """Operand bytes from HBM: each core re-reads its A rows per N block and its B columns
    per M block; a re-read operand that fits half the L2 is read from HBM once."""
    a_bytes = shape.batch * shape.m * shape.k * shape.a_bytes
    b_bytes = shape.batch * shape.k * shape.n * shape.b_bytes * shape.gemms
    half = hw.memories["L2"].capacity_bytes // 2
    return (a_bytes * (n_blocks if a_bytes > half else 1)
            + b_bytes * (m_blocks if b_bytes > half else 1))


def _route(hw: Hardware, src: str, dst: str) -> tuple[int, float]:
    engine, rate = hw.route(src, dst)
    return engine.latency_cycles, rate


def simulate_kernel(args: tuple[Workload, Kernel, Tiling]) -> int:
    """Cycles of one kernel run alone (cold L2) with the given tiling."""
    from ..engine.world import simulate_program
    from .lower import lower

    workload, kernel, tiling = args
    trial = replace(workload, tiling={**workload.tiling, kernel.tiling_op: spec_of(tiling)})
    program = lower(trial, Plan((kernel,), {}))
    return simulate_program(program, workload.hardware).cycles


def tune_kernel(kernel: Kernel, workload: Workload, top: int = 4, pool=None) -> KernelTuning:
    hw = workload.hardware
    shape = gemm_shape(list(kernel.gemms), workload.tensors)
    default = resolve_tiling(shape, workload.tiling_for(kernel.tiling_op), hw, kernel.name)
    legal = legal_tilings(kernel, workload)
    ranked = sorted(legal, key=lambda t: (estimate_cycles(kernel, workload, t), _key(t)))
    # the best-ranked of each block shape: tilings that differ only in step or order
    # simulate alike, so spend the simulations on different shapes
    shapes: dict[tuple, Tiling] = {}
    for t in ranked:
        shapes.setdefault((t.base_m, t.base_n, t.buffers, t.split_b, t.split_m, t.split_n), t)
        if len(shapes) == top:
            break
    trials = [default] + [t for t in shapes.values() if t != default]
    jobs = [(workload, kernel, t) for t in trials]
    cycles = list(pool.map(simulate_kernel, jobs)) if pool else list(map(simulate_kernel, jobs))
    best_cycles, best = min(zip(cycles, trials), key=lambda pair: (pair[0], _key(pair[1])))
    return KernelTuning(kernel.name, kernel.tiling_op, default, cycles[0], best, best_cycles,
                        kernel_bound_cycles(kernel, workload), len(legal), len(trials))


def kernel_bound_cycles(kernel: Kernel, workload: Workload) -> float:
    """The kernel's roofline: its Cube or vector work at peak, or its inputs and output at
    peak HBM bandwidth, whichever is longer (launch overhead not included)."""
    hw, tensors = workload.hardware, workload.tensors
    operands = {op.name: [Operand(n, tensors[n].shape, tensors[n].dtype) for n in op.inputs]
                for op in kernel.ops}
    cube = sum(OPS[op.op].flops(operands[op.name], op.attrs) for op in kernel.gemms) \
        / hw.peak_flops_per_cycle(tensors[kernel.gemms[0].inputs[0]].dtype)
    vector = sum(OPS[op.op].vector_work_bytes(operands[op.name], op.attrs)
                 * hw.vector.cost_factor[OPS[op.op].cost_class] for op in kernel.epilogue) \
        / (hw.vector.bytes_per_cycle * hw.cores)
    produced = {op.output for op in kernel.ops}
    inputs = {n for op in kernel.ops for n in op.inputs} - produced
    moved = sum(tensors[n].nbytes for n in inputs) + tensors[kernel.output].nbytes
    return max(cube, vector, moved / hw.memories["HBM"].peak_bytes_per_cycle)


def _key(t: Tiling) -> tuple:
    return tuple(asdict(t).values())


def tune(workload: Workload, top: int = 4, workers: int = 1) -> list[KernelTuning]:
    """Tune every matmul kernel of the workload's fusion plan."""
    kernels = [k for k in plan_kernels(workload).kernels if k.gemms]
    if workers > 1:
        with ProcessPoolExecutor(max_workers=workers) as pool:
            return [tune_kernel(k, workload, top, pool) for k in kernels]
    return [tune_kernel(k, workload, top) for k in kernels]


def tuned_workload(workload: Workload, results: list[KernelTuning]) -> Workload:
    tiling = dict(workload.tiling)
    for r in results:
        tiling[r.tiling_op] = spec_of(r.best, f"schedule.tiling.{r.tiling_op}")
    return replace(workload, tiling=tiling)


__all__ = ["KernelTuning", "legal_tilings", "estimate_cycles", "simulate_kernel", "tune",
           "tune_kernel", "tuned_workload", "TilingError"]
