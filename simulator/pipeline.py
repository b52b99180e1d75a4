"""The one pipeline: Workload → kernels → Program → Trace → Report."""

from __future__ import annotations

import gc
from dataclasses import replace

from .analysis.records import Provenance
from .analysis.report import analyse
from .config.hardware import Hardware
from .config.workload import Workload, check_workload
from .engine.world import simulate_program
from .errors import check_count
from .report import SimulationReport
from .schedule.fusion import plan_kernels
from .schedule.lower import lower
from .schedule.program import Program
from .version import __version__


def lower_workload(workload: Workload, sample: bool = False) -> Program:
    return lower(workload, plan_kernels(workload), sample)


def simulate(
    workload: Workload, max_cycles: int | None = None, sample: bool = False
) -> SimulationReport:
    """Simulate a loaded workload on its hardware and analyse the trace.

    With `sample`, a matmul's K chunks (or blocks) that repeat a measured window are not
    simulated but extrapolated from it (schedule/sampling.py); the report says what was
    sampled and how far off its time may be.

    The run stops with a clear error past `max_cycles` (default: 1000 times the roofline
    bound plus 10 million cycles), so a schedule that never finishes cannot hang. A run
    whose work passes its chip's power cap (energy.cap) at the chip's clock runs again at the
    clock the chip holds under the cap, when the preset gives one (energy.cap_clock)."""

    check_workload("simulate", workload)
    check_count("max_cycles", max_cycles, optional=True)
    report = _simulate(workload, max_cycles, sample)
    capped = power_capped(workload.hardware, report)
    if capped is None:
        return report
    return _simulate(replace(workload, hardware=capped), max_cycles, sample)


def power_capped(hardware: Hardware, report: SimulationReport) -> Hardware | None:
    """The chip at the clock its power cap holds it to, if at its clock the run's work would
    draw more than the cap (its energy record scaled down to fit); None if it stayed within
    the cap, the preset gives no capped clock, or the chip already runs at or below it."""
    energy = hardware.energy
    if energy is None or energy.cap_clock_hz is None or energy.cap_clock_hz >= hardware.clock_hz:
        return None
    if report.energy is None or report.energy.dynamic_scale >= 1.0:
        return None
    return hardware.at_clock(energy.cap_clock_hz)


def _simulate(workload: Workload, max_cycles: int | None, sample: bool) -> SimulationReport:
    from .analysis.roofline import roofline

    program = lower_workload(workload, sample)
    if max_cycles is None:
        bound = roofline(program, workload.hardware).bound_cycles
        max_cycles = int(
            1000 * bound
            + 10_000_000
            + workload.hardware.launch_overhead_cycles * len(program.kernels)
        )
    trace = simulate_program(program, workload.hardware, max_cycles)
    record = analyse(
        trace, program, workload.hardware, workload.name, _provenance(workload, __version__)
    )
    del program, trace
    if not gc.isenabled():  # paused (gc_pause): free what the run left in reference cycles,
        gc.collect(0)  # or each run of a request or sweep would keep its whole program
    return SimulationReport.of(record)


def _provenance(workload: Workload, version: str) -> Provenance:
    return Provenance(
        version,
        workload.source,
        workload.hardware.source,
        tuple(f"{path}={value}" for path, value in workload.overrides),
        dict(workload.params),
        workload.hardware.to_dict(),
    )


def plan(workload: Workload):
    """The kernels the fusion pass forms, with the reason for every op left unfused."""
    check_workload("plan", workload)
    return plan_kernels(workload)
