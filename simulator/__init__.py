"""A cycle-approximate NPU memory-hierarchy simulator.

import simulator as sim
w = sim.load_workload("workloads/ffn_decode.yaml", ["params.tokens=64"])
r = sim.simulate(w)
r                  # in Jupyter: the report as a readable table (r.summary() as text)
r.plot_timeline()  # Gantt chart per core and pipe, stalls shaded by cause
rows = sim.sweep("workloads/ffn_decode.yaml", {"params.tokens": [1, 64, 1024]})
t = sim.infer(sim.load_model("llama2-7b"), sim.load_hardware("ascend910"), prompt=128)
"""

from __future__ import annotations

from .version import __version__

# Imported on first use, so that `python -m simulator --help` and `import simulator` do not
# pay for numpy, networkx and SimPy before they are needed.
_LAZY = {
    "Hardware": "config.hardware",
    "load_hardware": "config.hardware",
    "Workload": "config.workload",
    "load_workload": "config.workload",
    "ConfigError": "errors",
    "SimulatorError": "errors",
    "compare": "studies.compare",
    "lower_workload": "pipeline",
    "plan": "pipeline",
    "simulate": "pipeline",
    "tune": "studies.search",
    "load_model": "config.model",
    "load_runtime": "config.runtime",
    "infer": "studies.inference",
    "serve": "studies.serving",
    "sweep": "studies.sweep",
}


def __getattr__(name: str):
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'simulator' has no attribute {name!r}")
    from importlib import import_module

    value = getattr(import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))


__all__ = [
    "Hardware",
    "Workload",
    "ConfigError",
    "SimulatorError",
    "load_hardware",
    "load_runtime",
    "load_workload",
    "lower_workload",
    "simulate",
    "plan",
    "compare",
    "sweep",
    "tune",
    "load_model",
    "infer",
    "serve",
    "__version__",
]
