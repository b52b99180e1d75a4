"""Trace → Report: traffic, utilization, stalls, roofline, per-kernel rows.

Everything here is derived from the trace (what each pipe logged) and the analytic model;
nothing reaches back into the SimPy world.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields
from functools import cached_property
from itertools import repeat
from typing import Any, Callable

import numpy as np

from ..config.hardware import BUFFERS, ENGINES, Hardware
from ..cost import (
    cube_peak_cycles,
    l2_port_bytes,
    launch_bound_cycles,
    memory_cycles,
    vector_peak_cycles,
)
from ..engine.trace import KernelSpan, PipeLog, Trace
from ..errors import InvariantError
from ..schedule.footprint import footprint_bytes
from ..schedule.program import (
    PIPES,
    UNIT_OF_PIPE,
    GlobalTransfer,
    KernelProgram,
    Program,
    Transfer,
    moved_bytes,
    transfer_rate,
)
from ..version import format_mark
from .records import (
    EnergyRecord,
    Intermediates,
    KernelRecord,
    LevelTraffic,
    MemoryFootprint,
    PipeStalls,
    Provenance,
    RooflineSummary,
    SampledRecord,
    TensorTraffic,
    plain,
)
from .roofline import Roofline, roofline

# Why a pipe was not working on an instruction it had reached:
#   data              waiting for the producer's flag (its input is not there yet)
#   buffer_slot       waiting for a free ping-pong slot (its consumer still holds it)
#   shared_bandwidth  a transfer taking longer than its engine alone would: sharing HBM/L2
#                     with other transfers, or waiting for another core's fetch of the same data
STALL_CAUSES = ("data", "buffer_slot", "shared_bandwidth")
LEVELS = ("HBM", "L2", *BUFFERS)
# A run is latency-bound when no ceiling takes this much of its time: no unit, memory or
# engine is near saturation, so fixed costs (start-ups, launches, pipeline fill) dominate.
LATENCY_BOUND_BELOW = 0.5
# The ceilings that make a run compute-bound; the others (memories, engines) memory-bound.
COMPUTE_CEILINGS = ("cube", "vector")


@dataclass(frozen=True)
class Report:
    """One simulation's results as typed records; `to_dict()` is its JSON form, the fields in
    order as its keys (DESIGN.md fixes them), and `report["key"]` reads that form. Frozen: a
    report is evidence of one run. What a user holds is simulator/report.py's
    SimulationReport, which adds the renderings."""

    workload: str
    hardware: str
    cores: int
    clock_ghz: float
    cycles: int
    time_us: float
    flops: int
    achieved_tflops: float
    peak_tflops: float
    mac_utilization: float
    hbm_bandwidth_tbps: float
    achieved_hbm_tbps: float
    bound: str  # compute, memory or latency
    binding: str  # the ceiling nearest the run's time
    roofline: RooflineSummary
    traffic: Mapping[str, LevelTraffic]  # by level, HBM first
    tensors: Mapping[str, TensorTraffic]
    intermediates: Intermediates
    utilization: Mapping[str, float]  # per unit, pipe and shared memory: busy over time
    stalls: Mapping[str, PipeStalls]  # per pipe
    launch_overhead_cycles: int  # waited on launches (a launch overlaps the kernel before it)
    memory_footprint: MemoryFootprint
    peak_buffer_bytes: Mapping[str, int]  # per buffer, highest seen on any core
    buffer_capacity_bytes: Mapping[str, int]  # per buffer, the most any kernel had
    instructions: int
    kernels: tuple[KernelRecord, ...]
    energy: EnergyRecord | None  # None: the hardware gives no energy figures
    provenance: Provenance | None = None
    trace: Trace | None = field(default=None, repr=False, compare=False)  # for timelines
    # per kernel, what it began with (KernelSpan.entry): kept with the report, not in its
    # JSON, so that a cached run still proves a layer repeats (layer_steps.py)
    kernel_entries: tuple[tuple[str, int], ...] = field(default=(), repr=False, compare=False)

    def __getitem__(self, key: str) -> Any:
        return self._plain[key]

    @cached_property
    def _plain(self) -> dict[str, Any]:
        return self.to_dict()

    def to_dict(self) -> dict[str, Any]:
        data = {
            f.name: plain(getattr(self, f.name))
            for f in fields(Report)
            if f.name not in ("provenance", "trace", "kernel_entries")
        }
        provenance = {} if self.provenance is None else plain(self.provenance)
        return {"format": format_mark("report"), **data, "provenance": provenance}

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, sort_keys=False, allow_nan=False)


def analyse(
    trace: Trace,
    program: Program,
    hw: Hardware,
    workload_name: str,
    provenance: Provenance | None = None,
) -> Report:
    cycles = max(trace.cycles, 1)
    bound: Roofline = roofline(program, hw)
    flops = sum(k.flops for k in program.kernels)
    time_s = cycles / hw.clock_hz
    hbm = hw.memories["HBM"]

    logs_of: list[list[PipeLog]] = [[] for _ in program.kernels]
    for log in trace.pipes:
        logs_of[log.kernel].append(log)
    engine_of = {
        path: engine for engine in hw.engines.values() for path in engine.path_bytes_per_cycle
    }

    def engine_cycles_of(instr: Transfer) -> float:
        """A move's cycles on its engine, no start-up: its bytes at the path's rate, or for a
        global transfer the bytes it moves at its shape's rate (program.transfer_rate)."""
        engine = engine_of[instr.src, instr.dst]
        rate = engine.path_bytes_per_cycle[instr.src, instr.dst]
        if not isinstance(instr, GlobalTransfer):
            return instr.nbytes / rate
        return moved_bytes(instr, program) / transfer_rate(
            instr, program, rate, engine.packet_bytes
        )

    tallied = _Tallies(hw)
    tallies = [
        tallied.of(span, kernel, logs, engine_cycles_of)
        for logs, kernel, span in zip(logs_of, program.kernels, trace.kernels)
    ]
    tallied.done()
    busy = {pipe: sum(t.busy[pipe] for t in tallies) for pipe in PIPES}
    stalls = {
        pipe: {cause: sum(t.stalls[pipe][cause] for t in tallies) for cause in STALL_CAUSES}
        for pipe in PIPES
    }
    per_tensor: dict[str, dict[str, Any]] = {
        name: {"role": role, "bytes": nbytes, **dict.fromkeys(_Tally.TENSOR_KEYS, 0)}
        for name, (role, nbytes) in program.tensor_roles.items()
    }
    for tally in tallies:
        for name, counts in tally.tensors.items():
            entry = per_tensor.get(name)
            if entry is not None:
                for key, count in zip(_Tally.TENSOR_KEYS, counts):
                    entry[key] += count
    kernel_traffic = [t.traffic for t in tallies]
    kernel_engine_cycles = [t.engine_cycles for t in tallies]
    engine_cycles = {engine: sum(e[engine] for e in kernel_engine_cycles) for engine in ENGINES}
    traffic = {
        level: {
            key: sum(t[level][key] for t in kernel_traffic) for key in ("read_bytes", "write_bytes")
        }
        for level in LEVELS
    }
    traffic["L2"].update(
        hits=trace.l2_hits,
        misses=trace.l2_misses,
        multicast_bytes=sum(t["L2"]["multicast_bytes"] for t in kernel_traffic),
    )
    _check_invariants(trace, program, bound, traffic, kernel_traffic)
    core_cycles = cycles * hw.cores
    utilization = {UNIT_OF_PIPE.get(p, p): busy[p] / core_cycles for p in PIPES}
    hbm_bytes = traffic["HBM"]["read_bytes"] + traffic["HBM"]["write_bytes"]
    utilization["HBM"] = hbm_bytes / (hbm.peak_bytes_per_cycle * cycles)
    utilization["L2"] = traffic["L2"]["read_bytes"] / (
        hw.memories["L2"].peak_bytes_per_cycle * cycles
    )

    peak_tflops = _peak_tflops(program, hw)
    achieved_tflops = flops / time_s / 1e12
    ceilings = _ceilings(
        program.kernels, hw, traffic, engine_cycles, launch_bound_cycles(len(program.kernels), hw)
    )
    bound_kind, binding = _classify(ceilings, cycles)

    tensors = {name: TensorTraffic(**entry) for name, entry in per_tensor.items()}
    middle = [t for t in tensors.values() if t.role == "intermediate"]
    intermediates = Intermediates(
        sum(t.bytes for t in middle),
        sum(t.hbm_write_bytes for t in middle),
        sum(t.hbm_read_bytes for t in middle),
        sum(t.l2_read_bytes for t in middle),
    )

    kernels = []
    # the least launch wait of a kernel in the sequence: a whole launch for the first, the
    # device gap for the others
    first_launch = launch_bound_cycles(1, hw)
    for span, kernel in zip(trace.kernels, program.kernels):
        kernel_ceilings = _ceilings(
            [kernel],
            hw,
            kernel_traffic[span.index],
            kernel_engine_cycles[span.index],
            first_launch if span.index == 0 else min(hw.kernel_gap, first_launch),
        )
        kernel_bound, kernel_binding = _classify(
            kernel_ceilings, max(span.end_cycle - span.start_cycle, 1)
        )
        kernels.append(
            KernelRecord(
                kernel.name,
                kernel.ops,
                kernel.fused,
                kernel.unit,
                span.end_cycle - span.start_cycle,
                span.run_cycle - span.start_cycle,
                kernel.flops,
                bound.per_kernel[span.index],
                kernel_ceilings[kernel_binding],
                _traffic_record(kernel_traffic[span.index]),
                kernel.tiling,
                kernel_bound,
                kernel_binding,
                len(kernel.cores),
                kernel.instruction_count,
                kernel.buffer_plan_bytes,
                _energy(
                    hw, kernel_traffic[span.index], [kernel], span.end_cycle - span.start_cycle
                ),
                None
                if kernel.sampling is None
                else SampledRecord(
                    kernel.sampling.chunks,
                    kernel.sampling.kept,
                    span.extrapolated_cycles,
                    span.error_cycles,
                ),
            )
        )

    footprint = {f"{role}_bytes": n for role, n in footprint_bytes(program.tensor_roles).items()}
    return Report(
        workload=workload_name,
        hardware=hw.name,
        cores=hw.cores,
        clock_ghz=hw.clock_hz / 1e9,
        cycles=cycles,
        time_us=hw.cycles_to_us(cycles),
        flops=flops,
        achieved_tflops=achieved_tflops,
        peak_tflops=peak_tflops,
        mac_utilization=achieved_tflops / peak_tflops if peak_tflops else 0.0,
        hbm_bandwidth_tbps=hbm.peak_bytes_per_cycle * hw.clock_hz / 1e12,
        achieved_hbm_tbps=hbm_bytes / time_s / 1e12,
        bound=bound_kind,
        binding=binding,
        roofline=RooflineSummary(
            bound.compute_cycles,
            bound.memory_cycles,
            bound.bound_cycles,
            bound.bound_cycles / cycles,
            bound.compulsory_bytes,
            ceilings,
        ),
        traffic=_traffic_record(traffic),
        tensors=tensors,
        intermediates=intermediates,
        utilization=utilization,
        stalls={pipe: PipeStalls(**causes) for pipe, causes in stalls.items()},
        launch_overhead_cycles=sum(span.run_cycle - span.start_cycle for span in trace.kernels),
        memory_footprint=MemoryFootprint(**footprint, hbm_capacity_bytes=hbm.capacity_bytes),
        peak_buffer_bytes=trace.peak_occupancy_bytes,
        buffer_capacity_bytes={
            b: max((k.capacity_bytes(hw, b) for k in program.kernels), default=n)
            for b, n in hw.buffer_bytes.items()
        },
        instructions=trace.instructions,
        kernels=tuple(kernels),
        energy=_energy(hw, traffic, program.kernels, cycles),
        provenance=provenance,
        trace=trace,
        kernel_entries=tuple(span.entry for span in trace.kernels),
    )


def _energy(
    hw: Hardware, traffic: dict, kernels: Sequence[KernelProgram], cycles: int
) -> EnergyRecord | None:
    """The joules of `kernels` that moved `traffic` in `cycles`, at the preset's figures,
    within its power cap if it gives one."""
    e = hw.energy
    if e is None:
        return None
    by_level = {
        level: (t["read_bytes"] + t["write_bytes"]) * e.joules_per_byte[level]
        for level, t in traffic.items()
    }
    cube = sum(k.cube_flops / 2 * e.joules_per_mac[k.dtype] for k in kernels if k.cube_flops)
    vector = sum(k.vector_work_bytes for k in kernels) * e.vector_joules_per_byte
    seconds = cycles / hw.clock_hz
    cap_j = None if e.cap_watts is None or not cycles else e.cap_watts * seconds
    return EnergyRecord.of(by_level, cube, vector, e.static_watts * seconds, cap_j)


def _traffic_record(traffic: dict[str, dict[str, int]]) -> dict[str, LevelTraffic]:
    return {level: LevelTraffic(**counts) for level, counts in traffic.items()}


def _check_invariants(
    trace: Trace, program: Program, bound: Roofline, traffic: dict, kernel_traffic: list[dict]
) -> None:
    """Cheap physics checks on every run: a failure is a simulator bug, not a user mistake."""
    if trace.cycles + 1e-6 < bound.bound_cycles:
        raise InvariantError(
            f"{trace.cycles} cycles is below the roofline bound {bound.bound_cycles:.0f}"
        )
    written = sum(
        nbytes
        for role, nbytes in program.tensor_roles.values()
        if role in ("intermediate", "output")
    )
    if traffic["HBM"]["write_bytes"] != written:
        raise InvariantError(
            f"HBM received {traffic['HBM']['write_bytes']} B but the kernels' "
            f"results are {written} B: bytes were lost or duplicated"
        )
    # bytes conserved: a block staged in L0A/L0B is consumed exactly once per GEMM reading
    # it (a dual GEMM shares its A block); nothing staged in UB is left unread (an op may
    # read a value twice, x*x); what L1 receives came over L2 or HBM (or, in fused attention,
    # the probabilities from UB)
    for kernel, t in zip(program.kernels, kernel_traffic):
        for level, times in (("L0A", max(kernel.gemms, 1)), ("L0B", 1)):
            if t[level]["read_bytes"] != times * t[level]["write_bytes"]:
                raise InvariantError(
                    f"kernel {kernel.name}: {level} received {t[level]['write_bytes']} B but "
                    f"gave {t[level]['read_bytes']} B (expected {times} x): bytes not conserved"
                )
        if t["UB"]["read_bytes"] < t["UB"]["write_bytes"]:
            raise InvariantError(
                f"kernel {kernel.name}: UB received {t['UB']['write_bytes']} B"
                f" but gave only {t['UB']['read_bytes']} B"
            )
        received = t["HBM"]["read_bytes"] + t["L2"]["read_bytes"] + t["L2"]["multicast_bytes"]
        if t["L1"]["write_bytes"] > received + kernel.l1_from_ub_bytes:
            raise InvariantError(
                f"kernel {kernel.name}: L1 received {t['L1']['write_bytes']} B,"
                " more than came from global memory"
            )


def _ceilings(
    kernels: Sequence[KernelProgram],
    hw: Hardware,
    traffic: dict,
    engine_cycles: dict[str, float],
    launch_cycles: float,
) -> dict[str, float]:
    """The least time each resource needs for the work these kernels were given, spread
    evenly over the cores: the Cube's FLOPs and the vector unit's work at peak, the bytes HBM
    and L2 actually served at their peak bandwidth, each engine's bytes at its own paths'
    rates, and the launches. The largest is the ceiling the run is held to."""
    return {
        "cube": sum(cube_peak_cycles(k.cube_flops, k.dtype, hw) for k in kernels),
        "vector": vector_peak_cycles(sum(k.vector_work_bytes for k in kernels), hw),
        "hbm": memory_cycles(traffic["HBM"]["read_bytes"] + traffic["HBM"]["write_bytes"], hw),
        "l2": memory_cycles(traffic["L2"]["read_bytes"], hw, "L2"),
        **{engine: cycles / hw.cores for engine, cycles in engine_cycles.items()},
        "launch": launch_cycles,
    }


def _classify(ceilings: dict[str, float], cycles: int) -> tuple[str, str]:
    """The bound (compute, memory or latency) and the binding ceiling: the highest, unless
    none reaches LATENCY_BOUND_BELOW of the time or launches bind, which is latency."""
    binding = max(ceilings, key=lambda name: ceilings[name])  # first of equals: in order
    if ceilings[binding] / cycles < LATENCY_BOUND_BELOW or binding == "launch":
        return "latency", binding
    return ("compute" if binding in COMPUTE_CEILINGS else "memory"), binding


@dataclass(frozen=True)
class _Tally:
    """What one kernel's run adds up to: the bytes read from and written to each level, each
    pipe's busy cycles and stalls, per tensor the bytes read from HBM and L2 and written to
    HBM (TENSOR_KEYS), and each engine's cycles of moving bytes at its own rates."""

    TENSOR_KEYS = ("hbm_read_bytes", "l2_read_bytes", "hbm_write_bytes")

    traffic: dict[str, dict[str, int]]
    busy: dict[str, int]
    stalls: dict[str, dict[str, int]]
    tensors: dict[str, list[int]]
    engine_cycles: dict[str, float]

    def renamed(self, names: Mapping[str, str]) -> _Tally:
        """The tally of a kernel that ran as this one did with `names` for its tensors."""
        return _Tally(
            self.traffic,
            self.busy,
            self.stalls,
            {names[name]: counts for name, counts in self.tensors.items()},
            self.engine_cycles,
        )


class _Tallies:
    """The tally of each kernel the engine simulated, by its span, seeded with the last
    analysis's on the same hardware: a kernel that replayed one (engine/replay.py), in this
    run or the one before, counts as it did, its tensors renamed. A replay of a kernel not
    tallied here is tallied from its own logs, which are that kernel's."""

    _last: tuple[Hardware, dict[int, tuple[KernelSpan, KernelProgram, _Tally]]] | None = None

    def __init__(self, hw: Hardware):
        self.hw, last = hw, _Tallies._last
        self.by_span = dict(last[1]) if last is not None and last[0] is hw else {}
        self.kept: dict[int, tuple[KernelSpan, KernelProgram, _Tally]] = {}  # for the next

    def of(
        self,
        span: KernelSpan,
        kernel: KernelProgram,
        logs: list[PipeLog],
        engine_cycles_of: Callable[[Transfer], float],
    ) -> _Tally:
        source = span.replayed
        known = None if source is None else self.by_span.get(id(source))
        if known is not None:
            self.kept[id(source)] = known
            return known[2].renamed(kernel.tensors_for(known[1]))
        tally = _tally(logs, kernel, span.warmed, engine_cycles_of)
        if source is None:
            self.by_span[id(span)] = self.kept[id(span)] = (span, kernel, tally)
        return tally

    def done(self) -> None:
        """Hand the next analysis on this hardware the tallies this one made or used."""
        _Tallies._last = (self.hw, self.kept)


def _tally(
    logs: list[PipeLog],
    kernel: KernelProgram,
    warmed: Mapping[str, list[int]],
    engine_cycles_of: Callable[[Transfer], float],
) -> _Tally:
    """One pass over one kernel's pipe logs: the bytes read from and written to each level,
    the busy cycles and stalls per pipe, the traffic per tensor and each engine's cycles of
    moving bytes at its own rates (no start-ups, no sharing).

    The bytes an instruction names are counted once per distinct instruction, times the times
    it ran (the lowering reuses one instruction on every core and block). A global read is
    split by its log into the bytes L2 served and the bytes fetched from HBM (which also fill
    L2); a write goes through to HBM and allocates in L2. In a sampled kernel, an instruction
    of a measured window counts once more for every window it stands for (sampling.py),
    except that what its reads found in L2 is in the share the skipped chunks' regions
    found there (`warmed`, per tensor: bytes found and fetched)."""
    traffic = {level: {"read_bytes": 0, "write_bytes": 0} for level in LEVELS}
    busy = dict.fromkeys(PIPES, 0)
    stalls = {pipe: dict.fromkeys(STALL_CAUSES, 0) for pipe in PIPES}
    per_tensor: dict[str, list[int]] = {}  # TENSOR_KEYS of each
    engine_cycles = dict.fromkeys(ENGINES, 0.0)
    hbm, l2 = traffic["HBM"], traffic["L2"]
    l2["multicast_bytes"] = 0  # bytes cores received from L2 reads that served a peer too
    ran: Counter[Any] = Counter()
    sampling = kernel.sampling
    for log in logs:
        weights = None
        if sampling is not None:
            weights = sampling.weights(log.core, log.pipe, len(log.instrs))
        _add_busy_and_stalls(log, busy, stalls, weights)
        if weights is None:
            ran.update(log.instrs)
        else:
            for instr, times in zip(log.instrs, weights):
                ran[instr] += times
        for instr, hit_bytes, fetched_bytes, times in zip(
            log.instrs,
            log.column("l2_hit_bytes"),
            log.column("hbm_bytes"),
            weights or repeat(1),
        ):
            if type(instr) is not GlobalTransfer:
                continue
            if times > 1 and instr.src == "HBM":
                found = warmed.get(instr.region.tensor)
                hit_bytes, fetched_bytes = _skipped_too(hit_bytes, fetched_bytes, times, found)
            entry = per_tensor.setdefault(instr.region.tensor, [0, 0, 0])
            if instr.src == "HBM":
                port_bytes = l2_port_bytes(hit_bytes, instr.multicast)
                hbm["read_bytes"] += fetched_bytes
                l2["read_bytes"] += port_bytes
                l2["multicast_bytes"] += hit_bytes - port_bytes
                l2["write_bytes"] += fetched_bytes
                entry[0] += fetched_bytes
                entry[1] += port_bytes
            else:
                entry[2] += times * instr.nbytes
    for instr, times in ran.items():
        if isinstance(instr, Transfer):
            engine_cycles[instr.pipe] += times * engine_cycles_of(instr)
        for level, nbytes in instr.reads:
            if level != "HBM":  # how much came over HBM is in the log, above
                traffic[level]["read_bytes"] += times * nbytes
        for level, nbytes in instr.writes:
            traffic[level]["write_bytes"] += times * nbytes
            if level == "HBM":
                l2["write_bytes"] += times * nbytes
    return _Tally(traffic, busy, stalls, per_tensor, engine_cycles)


def _skipped_too(
    hit_bytes: int, fetched_bytes: int, times: int, found: list[int] | None
) -> tuple[int, int]:
    """A measured read's bytes found in L2 and fetched, with those of the `times - 1`
    skipped reads it stands for, split as the skipped chunks' reads split (`found`: bytes
    found and fetched; without it, as this read split)."""
    skipped = (times - 1) * (hit_bytes + fetched_bytes)
    if not found or not sum(found):
        return times * hit_bytes, times * fetched_bytes
    fetched = skipped * found[1] // sum(found)
    return hit_bytes + skipped - fetched, fetched_bytes + fetched


def _add_busy_and_stalls(
    log: PipeLog, busy: dict, stalls: dict, weights: list[int] | None = None
) -> None:
    """A pipe's busy cycles and stalls, each counted once in time. A pipe starts and ends its
    instructions in order, but an engine's transfers in flight overlap: busy is the union of
    their spans, and a wait for data or a slot counts only while nothing of the pipe's own was
    in flight (split between its causes in proportion). Landing delays never overlap (see
    engine.world.landing_delay). `weights`: how many times each instruction counts."""
    column = {
        field: np.array(log.column(field), dtype=np.int64)
        for field in (
            "start_cycle",
            "end_cycle",
            "wait_data_cycles",
            "wait_slot_cycles",
            "wait_bandwidth_cycles",
        )
    }
    starts, ends = column["start_cycle"], column["end_cycle"]
    if not len(ends):
        return
    times = np.ones(len(ends), np.int64) if weights is None else np.array(weights, np.int64)
    previous_end = np.r_[0, ends[:-1]]
    busy[log.pipe] += int((times * np.maximum(0, ends - np.maximum(starts, previous_end))).sum())
    wait_data, wait_slot = column["wait_data_cycles"], column["wait_slot_cycles"]
    waited = wait_data + wait_slot
    idle_waiting = np.minimum(waited, np.maximum(0, starts - previous_end))
    counted = times * np.divide(idle_waiting, waited, out=np.zeros(len(waited)), where=waited > 0)
    stalls[log.pipe]["data"] += int(round(float((wait_data * counted).sum())))
    stalls[log.pipe]["buffer_slot"] += int(round(float((wait_slot * counted).sum())))
    stalls[log.pipe]["shared_bandwidth"] += int((times * column["wait_bandwidth_cycles"]).sum())


def _peak_tflops(program: Program, hw: Hardware) -> float:
    """Peak of the Cube at the dtype the (first) matmul runs at; fp16 if there is none."""
    dtypes = [k.dtype for k in program.kernels if k.unit == "cube"] or ["fp16"]
    return hw.peak_flops_per_cycle(dtypes[0]) * hw.clock_hz / 1e12
