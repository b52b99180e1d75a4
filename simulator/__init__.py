"""A cycle-approximate NPU memory-hierarchy simulator.

    import simulator as sim
    w = sim.load_workload("workloads/ffn_decode.yaml", ["params.tokens=64"])
    r = sim.simulate(w)
    r                  # in Jupyter: the report as a readable table (r.summary() as text)
    r.plot_timeline()  # Gantt chart per core and pipe, stalls shaded by cause
    rows = sim.sweep("workloads/ffn_decode.yaml", {"params.tokens": [1, 64, 1024]})
"""

from __future__ import annotations

from .config.hardware import Hardware, load_hardware
from .config.workload import Workload, load_workload
from .errors import ConfigError, SimulatorError
from .pipeline import compare, lower_workload, plan, simulate
from .schedule.search import tune
from .sweep import sweep
from .version import __version__

__all__ = ["Hardware", "Workload", "ConfigError", "SimulatorError", "load_hardware",
           "load_workload", "lower_workload", "simulate", "plan", "compare", "sweep", "tune",
           "__version__"]
