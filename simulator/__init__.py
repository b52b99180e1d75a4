"""A cycle-approximate NPU memory-hierarchy simulator.

    import simulator as sim
    w = sim.load_workload("workloads/ffn_decode.yaml", ["params.tokens=64"])
    r = sim.simulate(w)
    r.summary()        # the report as a readable table
"""

from __future__ import annotations

from .config.hardware import Hardware, load_hardware
from .config.workload import Workload, load_workload
from .errors import ConfigError, SimulatorError
from .pipeline import lower_workload, simulate

__version__ = "0.1.0"

__all__ = ["Hardware", "Workload", "ConfigError", "SimulatorError", "load_hardware",
           "load_workload", "lower_workload", "simulate", "__version__"]
