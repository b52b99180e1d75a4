"""The one pipeline: Workload → kernels → Program → Trace → Report."""

from __future__ import annotations

from .analysis.report import Report, analyse
from .config.workload import Workload
from .engine.world import simulate_program
from .graph.dataflow import kernels
from .schedule.lower import lower
from .schedule.program import Program


def lower_workload(workload: Workload) -> Program:
    return lower(workload, kernels(workload))


def simulate(workload: Workload) -> Report:
    """Simulate a loaded workload on its hardware and analyse the trace."""
    from . import __version__

    program = lower_workload(workload)
    trace = simulate_program(program, workload.hardware)
    provenance = {
        "simulator_version": __version__,
        "workload_file": workload.source,
        "hardware_file": workload.hardware.source,
        "overrides": [f"{path}={value}" for path, value in workload.overrides],
        "params": dict(workload.params),
        "hardware": workload.hardware.to_dict(),
    }
    return analyse(trace, program, workload.hardware, workload.name, provenance)
