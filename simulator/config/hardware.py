"""Hardware files (hw_models/*.yaml) → a frozen, unit-free `Hardware`.

A chip is a topology: shared memories (HBM, L2), per-core buffers, data
movement engines each serving a set of paths at a rate, and compute units.
Every size becomes integer bytes, every time integer cycles of the core
clock, every rate bytes per cycle.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from ..errors import ConfigError, Problems
from ..units import parse_clock, parse_rate, parse_size, parse_time
from .strict import Fields, apply_overrides, as_fraction, as_int, as_number, read_yaml


def _preset_dir() -> Path:
    """The presets ship inside an installed package as simulator/hw_models; in a source
    checkout (or an editable install) they are the repository's top-level hw_models/."""
    package = Path(__file__).resolve().parents[1]
    shipped = package / "hw_models"
    return shipped if shipped.is_dir() else package.parent / "hw_models"


PRESET_DIR = _preset_dir()
SHARED_MEMORIES = ("HBM", "L2")
BUFFERS = ("L1", "L0A", "L0B", "L0C", "UB")
ENGINES = ("MTE2", "MTE1", "FIXPIPE", "MTE3")
LEVELS = SHARED_MEMORIES + BUFFERS
VECTOR_COST_CLASSES = ("elementwise", "transcendental", "reduction")
DTYPES = ("fp16", "bf16", "fp32", "int8")


@dataclass(frozen=True)
class SharedMemory:
    name: str
    capacity_bytes: int
    peak_bytes_per_cycle: float       # chip-wide, shared by all cores
    latency_cycles: int
    efficiency: float                 # fraction of peak that streaming transfers reach

    @property
    def sustained_bytes_per_cycle(self) -> float:
        return self.peak_bytes_per_cycle * self.efficiency


@dataclass(frozen=True)
class Engine:
    name: str
    latency_cycles: int                               # fixed start-up cost of every transfer
    path_bytes_per_cycle: dict[tuple[str, str], float]  # (source, destination) -> per-core rate


@dataclass(frozen=True)
class Cube:
    latency_cycles: int
    fractal: dict[str, tuple[int, int, int]]          # dtype -> (m, n, k) MACs per cycle


@dataclass(frozen=True)
class Vector:
    bytes_per_cycle: float
    latency_cycles: int
    cost_factor: dict[str, float]                     # cost class -> cycles multiplier


@dataclass(frozen=True)
class Hardware:
    name: str
    source: str
    clock_hz: float
    cores: int
    memories: dict[str, SharedMemory]
    buffer_bytes: dict[str, int]                      # per-core buffer capacities
    engines: dict[str, Engine]
    cube: Cube
    vector: Vector
    launch_overhead_cycles: int

    def route(self, source: str, destination: str) -> tuple[Engine, float]:
        """The engine that moves data from source to destination, and its per-core rate."""
        for engine in self.engines.values():
            rate = engine.path_bytes_per_cycle.get((source, destination))
            if rate is not None:
                return engine, rate
        raise KeyError(f"{self.name}: no engine serves the path {source}->{destination}")

    def peak_flops_per_cycle(self, dtype: str) -> int:
        m, n, k = self.cube.fractal[dtype]
        return 2 * m * n * k * self.cores

    def cycles_to_us(self, cycles: float) -> float:
        return cycles / self.clock_hz * 1e6

    def to_dict(self) -> dict:
        """The resolved figures (bytes, cycles, bytes per cycle), for a report's provenance."""
        return {
            "name": self.name, "clock_hz": self.clock_hz, "cores": self.cores,
            "memories": {n: asdict(m) for n, m in self.memories.items()},
            "buffer_bytes": dict(self.buffer_bytes),
            "engines": {n: {"latency_cycles": e.latency_cycles,
                            "path_bytes_per_cycle": {f"{s}->{d}": r for (s, d), r
                                                     in e.path_bytes_per_cycle.items()}}
                        for n, e in self.engines.items()},
            "cube": {"latency_cycles": self.cube.latency_cycles,
                     "fractal": {k: list(v) for k, v in self.cube.fractal.items()}},
            "vector": asdict(self.vector),
            "launch_overhead_cycles": self.launch_overhead_cycles,
        }


def resolve_hardware_path(name_or_path: str, relative_to: Path | None = None) -> Path:
    """A preset name ('ascend910') or a path to a YAML file."""
    candidate = Path(name_or_path)
    if candidate.suffix in (".yaml", ".yml"):
        if not candidate.is_absolute() and relative_to is not None and not candidate.exists():
            candidate = relative_to / candidate
        return candidate
    return PRESET_DIR / f"{name_or_path}.yaml"


def preset_names() -> list[str]:
    return sorted(p.stem for p in PRESET_DIR.glob("*.yaml"))


def load_hardware(name_or_path: str, overrides: list[tuple[str, Any]] = ()) -> Hardware:
    """Load and validate a hardware preset or file; `overrides` are (dotted path, value) pairs."""
    path = resolve_hardware_path(name_or_path)
    if not path.exists() and path.parent == PRESET_DIR:
        raise ConfigError(str(name_or_path), [
            f"no hardware preset named '{name_or_path}' (presets: {', '.join(preset_names())})"])
    raw = apply_overrides(read_yaml(path), list(overrides), str(path))
    return parse_hardware(raw, str(path))


def parse_hardware(raw: dict, source: str) -> Hardware:
    problems = Problems(source)
    top = Fields(raw, "", problems)
    name = top.get("name", str)
    clock_hz = top.get("clock", parse_clock)
    cores = top.get("cores", as_int(1, 4096))
    clock = clock_hz or 1e9  # keep validating the rest even if the clock is bad

    memories = {}
    for mem in SHARED_MEMORIES:
        f = top.sub(mem)
        memories[mem] = SharedMemory(
            name=mem,
            capacity_bytes=f.get("capacity", parse_size),
            peak_bytes_per_cycle=f.get("bandwidth", lambda v: parse_rate(v, clock)),
            latency_cycles=f.get("latency", lambda v: parse_time(v, clock)),
            efficiency=f.get("efficiency", as_fraction, default=1.0),
        )
        f.finish()

    buffer_bytes = {}
    for buf in BUFFERS:
        f = top.sub(buf)
        buffer_bytes[buf] = f.get("capacity", parse_size)
        f.finish()

    engines = {}
    served: dict[tuple[str, str], str] = {}
    for eng in ENGINES:
        f = top.sub(eng)
        latency = f.get("latency", lambda v: parse_time(v, clock))
        paths_f = f.sub("paths")
        rates = {}
        for key in paths_f.raw:
            paths_f.used.add(key)
            path_name = f"{paths_f.path}.{key}"
            ends = str(key).split("->")
            if len(ends) != 2 or any(e not in LEVELS for e in ends):
                problems.add(path_name, f"a path is written SOURCE->DESTINATION with levels from "
                             f"{', '.join(LEVELS)}")
                continue
            if tuple(ends) in served:
                problems.add(path_name, f"path already served by {served[tuple(ends)]}")
                continue
            served[tuple(ends)] = eng
            try:
                rates[tuple(ends)] = parse_rate(paths_f.raw[key], clock)
            except ValueError as exc:
                problems.add(path_name, str(exc))
        paths_f.finish()
        f.finish()
        engines[eng] = Engine(eng, latency, rates)

    cube_f = top.sub("cube")
    cube_latency = cube_f.get("latency", lambda v: parse_time(v, clock))
    fractal_f = cube_f.sub("fractal")
    fractal = {}
    for dtype in fractal_f.raw:
        fractal_f.used.add(dtype)
        if dtype not in DTYPES:
            problems.add(f"{fractal_f.path}.{dtype}", f"unknown dtype (known: {', '.join(DTYPES)})")
            continue
        dims = Fields(fractal_f.raw[dtype], f"{fractal_f.path}.{dtype}", problems)
        m, n, k = (dims.get(d, as_int(1, 1024)) for d in "mnk")
        dims.finish()
        fractal[dtype] = (m, n, k)
    if not fractal_f.raw:
        problems.add(fractal_f.path, "needs at least one dtype, e.g. fp16: {m: 16, n: 16, k: 16}")
    fractal_f.finish()
    cube_f.finish()

    vec_f = top.sub("vector")
    vec_rate = vec_f.get("bandwidth", lambda v: parse_rate(v, clock))
    vec_latency = vec_f.get("latency", lambda v: parse_time(v, clock))
    factor_f = vec_f.sub("cost_factor")
    factors = {cls: factor_f.get(cls, as_number) for cls in VECTOR_COST_CLASSES}
    factor_f.finish()
    vec_f.finish()

    launch = top.get("launch_overhead", lambda v: parse_time(v, clock))
    top.finish()
    if not problems.items:
        _check_topology(served, problems)
    problems.raise_if_any()
    return Hardware(name, source, clock_hz, cores, memories, buffer_bytes, engines,
                    Cube(cube_latency, fractal), Vector(vec_rate, vec_latency, factors), launch)


# Paths the lowering uses: staging operands, feeding the Cube, draining, vector kernels.
REQUIRED_PATHS = (("HBM", "L1"), ("L2", "L1"), ("L1", "L0A"), ("L1", "L0B"), ("L0C", "HBM"),
                  ("HBM", "UB"), ("L2", "UB"), ("UB", "HBM"))


def _check_topology(served: dict, problems: Problems) -> None:
    for path in REQUIRED_PATHS:
        if path not in served:
            problems.add("", f"no engine serves the path {path[0]}->{path[1]}, which the "
                         "lowering needs; add it to one engine's paths")
