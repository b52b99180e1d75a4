"""Hardware files (hw_models/*.yaml) → a frozen, unit-free `Hardware`.

A chip is a topology: shared memories (HBM, L2), per-core buffers, data
movement engines each serving a set of paths at a rate, and compute units.
Every size becomes integer bytes, every time integer cycles of the core
clock, every rate bytes per cycle.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from ..errors import OVERRIDE_MARK, ConfigError, InvariantError, Problems, quote
from ..units import (
    DTYPE_BYTES,
    format_size,
    parse_clock,
    parse_rate,
    parse_size,
    parse_time,
)
from .energy import Energy, parse_energy
from .figures import Figure, parse_figures
from .link import Link, parse_link
from .strict import (
    HARDWARE_PREFIX,
    Fields,
    apply_overrides,
    as_bool,
    as_fraction,
    as_int,
    as_name,
    as_number,
    one_of,
    override_label,
    parse_overrides,
    read_yaml,
    shipped_name,
)


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
# a type conversion (int8 to fp16 and back), the elementwise factor where a file gives none
CONVERT = "convert"
DTYPES = ("fp16", "bf16", "fp32", "fp8", "int8")
ACCUMULATOR_BYTES = 4  # the Cube accumulates in fp32 (int32 for int8)


@dataclass(frozen=True)
class SharedMemory:
    name: str
    capacity_bytes: int
    peak_bytes_per_cycle: float  # chip-wide, shared by all cores
    latency_cycles: int
    efficiency: float  # fraction of peak that streaming transfers reach

    @property
    def sustained_bytes_per_cycle(self) -> float:
        return self.peak_bytes_per_cycle * self.efficiency


@dataclass(frozen=True)
class Engine:
    name: str
    latency_cycles: int  # fixed start-up cost of every transfer
    path_bytes_per_cycle: dict[tuple[str, str], float]  # (source, destination) -> per-core rate
    queue_depth: int = 1  # global-memory transfers one core's engine keeps in flight
    packet_bytes: int = 0  # global transfers move as packets of this size (cost.py); 0: none
    # "one": the engine moves one global transfer's data at a time, in issue order (a DMA
    # queue); "per_tensor": each tensor's transfers in order, different tensors' side by side
    # (a GPU's asynchronous copies). See engine/transfer.py's EngineQueue.
    streams: str = "one"


@dataclass(frozen=True)
class Cube:
    latency_cycles: int
    fractal: dict[str, tuple[int, int, int]]  # dtype -> (m, n, k) MACs per cycle


@dataclass(frozen=True)
class Vector:
    bytes_per_cycle: float
    latency_cycles: int
    cost_factor: dict[str, float]  # cost class -> cycles multiplier


@dataclass(frozen=True)
class Hardware:
    """A chip as the model needs it, every figure resolved to bytes and cycles once at load,
    so no later layer converts units or guesses a default. Presets are data (hw_models/*.yaml,
    each figure cited or marked as an assumption); this is their checked, frozen form."""

    name: str
    source: str
    clock_hz: float
    cores: int
    memories: dict[str, SharedMemory]
    buffer_bytes: dict[str, int]  # per-core buffer capacities
    engines: dict[str, Engine]
    cube: Cube
    vector: Vector
    launch_overhead_cycles: int
    # cores one L2 read can deliver to at once (Hopper's TMA multicast within a cluster): a
    # matmul's cores that stage the same operand block share one read of it
    multicast_cores: int = 1
    # cores reading the same block from L2 at once are served one after another (Ascend's
    # same-address access conflict) rather than side by side
    l2_serialises_same_address: bool = False
    # launches: the host issues kernels one launch_overhead apart (all at once, after one,
    # with graph_launch) while the device runs earlier ones; a kernel that waits on the one
    # before starts kernel_gap after it ends (by default a whole launch: no overlap)
    kernel_gap_cycles: int | None = None
    graph_launch: bool = False
    # a fused elementwise epilogue works on the accumulators where they are (a GPU's
    # registers) and stores from there, instead of moving each block L0C -> UB first
    epilogue_in_registers: bool = False
    link: Link | None = None  # to the other chips of a tensor-parallel group (None: alone)
    energy: Energy | None = None  # None: a hardware file that gives no energy figures
    overrides: tuple[str, ...] = ()  # the --set hardware.* overrides applied, as given
    full_clock_hz: float | None = None  # the clock before a power cap lowered it (at_clock)
    figures: tuple[Figure, ...] = ()  # every figure as written, with its class (figures.py)
    # UB and L1 are carve-outs of one memory (a GPU SM's shared memory): see ub_bytes
    ub_shares_l1: bool = False

    @property
    def kernel_gap(self) -> int:
        return (
            self.launch_overhead_cycles
            if self.kernel_gap_cycles is None
            else self.kernel_gap_cycles
        )

    def at_clock(self, clock_hz: float) -> Hardware:
        """This chip with its cores' clock at `clock_hz`: everything on the chip keeps its
        cycles, while HBM, the links and the host keep their times and rates in seconds."""
        ratio = clock_hz / self.clock_hz  # cycles of the new clock per cycle of the old

        def off_chip(m: SharedMemory) -> SharedMemory:
            if m.name != "HBM":
                return m
            return replace(
                m,
                peak_bytes_per_cycle=m.peak_bytes_per_cycle / ratio,
                latency_cycles=math.ceil(m.latency_cycles * ratio),
            )

        return replace(
            self,
            clock_hz=clock_hz,
            memories={n: off_chip(m) for n, m in self.memories.items()},
            launch_overhead_cycles=math.ceil(self.launch_overhead_cycles * ratio),
            kernel_gap_cycles=None
            if self.kernel_gap_cycles is None
            else math.ceil(self.kernel_gap_cycles * ratio),
            link=None if self.link is None else self.link.at_clock(ratio),
            full_clock_hz=self.full_clock_hz or self.clock_hz,
        )

    def ub_bytes(self, matmul: bool) -> int:
        """The UB a kernel's vector work has: with L1's added, in a kernel with no matmul (it
        stages no operands in L1) on a chip whose UB and L1 are one memory."""
        shared = self.ub_shares_l1 and not matmul
        return self.buffer_bytes["UB"] + (self.buffer_bytes["L1"] if shared else 0)

    def route(self, source: str, destination: str) -> tuple[Engine, float]:
        """The engine that moves data from source to destination, and its per-core rate."""
        for engine in self.engines.values():
            rate = engine.path_bytes_per_cycle.get((source, destination))
            if rate is not None:
                return engine, rate
        raise InvariantError(f"{self.name}: no engine serves the path {source}->{destination}")

    def peak_flops_per_cycle(self, dtype: str) -> int:
        m, n, k = self.cube.fractal[dtype]
        return 2 * m * n * k * self.cores

    def cycles_to_us(self, cycles: float) -> float:
        return cycles / self.clock_hz * 1e6

    def to_dict(self) -> dict:
        """The resolved figures (bytes, cycles, bytes per cycle), for a report's provenance."""
        return {
            "name": self.name,
            "clock_hz": self.clock_hz,
            "full_clock_hz": self.full_clock_hz,
            "cores": self.cores,
            "memories": {n: asdict(m) for n, m in self.memories.items()},
            "buffer_bytes": dict(self.buffer_bytes),
            "engines": {
                n: {
                    "latency_cycles": e.latency_cycles,
                    "queue_depth": e.queue_depth,
                    "packet_bytes": e.packet_bytes,
                    "streams": e.streams,
                    "path_bytes_per_cycle": {
                        f"{s}->{d}": r for (s, d), r in e.path_bytes_per_cycle.items()
                    },
                }
                for n, e in self.engines.items()
            },
            "cube": {
                "latency_cycles": self.cube.latency_cycles,
                "fractal": {k: list(v) for k, v in self.cube.fractal.items()},
            },
            "vector": asdict(self.vector),
            "launch_overhead_cycles": self.launch_overhead_cycles,
            "multicast_cores": self.multicast_cores,
            "kernel_gap_cycles": self.kernel_gap,
            "graph_launch": self.graph_launch,
            "epilogue_in_registers": self.epilogue_in_registers,
            "ub_shares_l1": self.ub_shares_l1,
            "l2_serialises_same_address": self.l2_serialises_same_address,
            "link": None if self.link is None else asdict(self.link),
            "energy": None if self.energy is None else asdict(self.energy),
        }


def _queue_depth(value: Any) -> int:
    """A count of transfers in flight, or `stages`: as many as the kernel's staged buffer slots
    allow (a GPU's copies wait for their stage's slot in shared memory, not for a queue)."""
    if value == "stages":
        return MAX_QUEUE_DEPTH
    if isinstance(value, str):
        raise ValueError(f"{quote(value)} is neither a count nor 'stages'")
    return as_int(1, MAX_QUEUE_DEPTH)(value)


def resolve_hardware_path(name_or_path: str, relative_to: Path | None = None) -> Path:
    """A preset name ('ascend910') or a path to a YAML file; a relative path is taken from
    `relative_to` (the folder of the workload that names it) when given."""
    candidate = Path(name_or_path)
    if candidate.suffix in (".yaml", ".yml"):
        if not candidate.is_absolute() and relative_to is not None:
            candidate = relative_to / candidate
        return candidate
    preset = PRESET_DIR / f"{name_or_path}.yaml"
    if FILE_NAME.fullmatch(name_or_path) and len(preset.name) < 256 and preset.is_file():
        return preset  # the usual case: no need to list the presets
    return PRESET_DIR / f"{shipped_name(name_or_path, preset_names()) or name_or_path}.yaml"


def preset_names() -> list[str]:
    return sorted(p.stem for p in PRESET_DIR.glob("*.yaml"))


def load_hardware(
    name_or_path: str,
    overrides: Sequence[tuple[str, Any]] = (),
    relative_to: Path | None = None,
    named_in: str | None = None,
) -> Hardware:
    """Load and validate a hardware preset or file; `overrides` are (dotted path, value) pairs.

    `named_in` is the workload file (or the override) that names this hardware: a name
    that leads nowhere is its mistake, reported against it."""
    if not isinstance(name_or_path, (str, os.PathLike)):
        raise TypeError(
            "load_hardware() takes a preset's name or a hardware file's path, got "
            f"{type(name_or_path).__name__}"
        )
    name_or_path = str(name_or_path)
    overrides = parse_overrides(overrides, OVERRIDE_MARK.strip())
    path = resolve_hardware_path(name_or_path, relative_to)
    where, field = (named_in, "hardware: ") if named_in else (str(name_or_path), "")
    if where.startswith(OVERRIDE_MARK):
        field = ""
    names_a_file = Path(name_or_path).suffix in (".yaml", ".yml")
    if not names_a_file and not (FILE_NAME.fullmatch(name_or_path) and os.path.isfile(path)):
        raise ConfigError(
            where,
            [
                f"{field}no hardware preset named {quote(name_or_path)} "
                f"(presets: {', '.join(preset_names())}; a hardware file's "
                "path ends in .yaml)"
            ],
        )
    if not os.path.exists(path):
        raise ConfigError(
            where, [f"{field}{quote(name_or_path)}: no such file ({quote(str(path))})"]
        )
    raw = read_yaml(path)
    if "ops" in raw and "cores" not in raw:  # one line, not every hardware field missing
        raise ConfigError(
            where,
            [
                f"{field}{quote(name_or_path)} is a workload (it has ops), not a hardware "
                f"file; give a preset ({', '.join(preset_names())}) or a hardware YAML"
            ],
        )
    raw = apply_overrides(raw, list(overrides), str(path), HARDWARE_PREFIX)
    labels = {p: override_label(HARDWARE_PREFIX + p, v) for p, v in overrides}
    return replace(parse_hardware(raw, str(path), labels), overrides=tuple(labels.values()))


FILE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")  # a shipped file named bare


# Sanity ranges: a figure outside them is a slip (a unit off by 1e3 or 1e6), not a chip.
CLOCK_RANGE_HZ = (1e6, 1e11)  # 1 MHz to 100 GHz
MAX_LATENCY_S = 100e-6  # the start-up of any memory, engine or unit
MAX_LAUNCH_OVERHEAD_S = 10e-3  # dispatching one kernel
MAX_MULTICAST_CORES = 16  # Hopper's largest (non-portable) cluster
PACKET_RANGE_BYTES = (32, 65536)  # a global transfer's packet: a power of two
MAX_QUEUE_DEPTH = 1024  # transfers in flight on one core's engine
MAX_COST_FACTOR = 1000.0  # cycles per byte of a vector op, relative to an add
RATE_RANGE_BYTES_PER_CYCLE = (1e-3, 1e6)  # any memory, path or unit: 1 MB/s to 1 PB/s at 1 GHz


def packet_size(value: Any) -> int:
    """A packet: a power of two of bytes within PACKET_RANGE_BYTES, written as a size."""
    nbytes = parse_size(value)
    low, high = PACKET_RANGE_BYTES
    if not low <= nbytes <= high or nbytes & (nbytes - 1):
        raise ValueError(
            f"{quote(value)} must be a power of two from {low} B to {format_size(high)}"
        )
    return nbytes


def parse_hardware(raw: dict, source: str, overrides: dict[str, str] | None = None) -> Hardware:
    """`overrides` maps each overridden field path to the override as the user wrote it."""
    problems = Problems(source, overrides)
    top = Fields(raw, "", problems)
    name = top.get("name", as_name)
    clock_hz = top.get("clock", _clock)
    cores = top.get("cores", as_int(1, 4096))
    clock = clock_hz or 1e9  # keep validating the rest even if the clock is bad
    latency = _latency(clock, MAX_LATENCY_S)
    rate = _rate(clock)

    memories = {}
    multicast, serialise = 1, False
    for mem in SHARED_MEMORIES:
        f = top.sub(mem)
        if mem == "L2":
            multicast = f.get("multicast", as_int(1, MAX_MULTICAST_CORES), default=1)
            serialise = (
                f.get("same_address_reads", one_of("share", "serialise"), default="share")
                == "serialise"
            )
        memories[mem] = SharedMemory(
            name=mem,
            capacity_bytes=f.get("capacity", parse_size),
            peak_bytes_per_cycle=f.get("bandwidth", rate),
            latency_cycles=f.get("latency", latency),
            efficiency=f.get("efficiency", _efficiency, default=1.0),
        )
        f.finish()

    buffer_bytes = {}
    ub_shares_l1 = False
    for buf in BUFFERS:
        f = top.sub(buf)
        buffer_bytes[buf] = f.get("capacity", parse_size)
        if buf == "UB":  # `shared_with: L1`: the two are one memory (Hardware.ub_bytes)
            ub_shares_l1 = f.get("shared_with", one_of("L1"), default=None) == "L1"
        f.finish()

    engines = {}
    served: dict[tuple[str, str], str] = {}
    for eng in ENGINES:
        f = top.sub(eng)
        start_cycles = f.get("latency", latency)
        queue_depth = f.get("queue_depth", _queue_depth, default=1)
        packet_bytes = f.get("packet_bytes", packet_size, default=0)
        streams = f.get("streams", one_of("one", "per_tensor"), default="one")
        paths_f = f.sub("paths")
        rates: dict[tuple[str, str], float] = {}
        for key in paths_f.raw:
            paths_f.used.add(key)
            path_name = f"{paths_f.path}.{key}"
            ends = str(key).split("->")
            if len(ends) != 2 or any(e not in LEVELS for e in ends):
                problems.add(
                    path_name,
                    f"a path is written SOURCE->DESTINATION with levels from {', '.join(LEVELS)}",
                )
                continue
            src_dst = (ends[0], ends[1])
            if src_dst in served:
                problems.add(path_name, f"path already served by {served[src_dst]}")
                continue
            served[src_dst] = eng
            try:
                rates[src_dst] = rate(paths_f.raw[key])
            except ValueError as exc:
                problems.add(path_name, str(exc))
        paths_f.finish()
        f.finish()
        engines[eng] = Engine(eng, start_cycles, rates, queue_depth, packet_bytes, streams)

    cube_f = top.sub("cube")
    cube_latency = cube_f.get("latency", latency)
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
    vec_rate = vec_f.get("bandwidth", rate)
    vec_latency = vec_f.get("latency", latency)
    factor_f = vec_f.sub("cost_factor")
    factors = {cls: factor_f.get(cls, as_number(MAX_COST_FACTOR)) for cls in VECTOR_COST_CLASSES}
    factors[CONVERT] = factor_f.get(
        CONVERT, as_number(MAX_COST_FACTOR), default=factors.get("elementwise", 1.0)
    )
    factor_f.finish()
    vec_f.finish()

    launch = top.get("launch_overhead", _latency(clock, MAX_LAUNCH_OVERHEAD_S))
    kernel_gap = top.get("kernel_gap", _latency(clock, MAX_LAUNCH_OVERHEAD_S), default=None)
    graph_launch = top.get("graph_launch", as_bool, default=False)
    epilogue = top.get("epilogue", one_of("ub", "registers"), default="ub")
    link = parse_link(top, rate, latency, problems) if "link" in top.raw else None
    energy = parse_energy(top, LEVELS, fractal, _clock, problems) if "energy" in top.raw else None
    top.used.update(("references", "figures"))
    figures = parse_figures(raw, problems, overrides or {})
    top.finish()
    if not problems.items:
        _check_topology(served, problems)
        _check_buffers(buffer_bytes, fractal, problems)
    problems.raise_if_any()
    return Hardware(
        name,
        source,
        clock_hz,
        cores,
        memories,
        buffer_bytes,
        engines,
        Cube(cube_latency, fractal),
        Vector(vec_rate, vec_latency, factors),
        launch,
        multicast,
        serialise,
        kernel_gap,
        graph_launch,
        epilogue == "registers",
        link,
        energy,
        ub_shares_l1=ub_shares_l1,
        figures=figures,
    )


def _clock(value: Any) -> float:
    hertz = parse_clock(value)
    low, high = CLOCK_RANGE_HZ
    if not low <= hertz <= high:
        raise ValueError(
            f"{quote(value)} is outside the {low / 1e6:g} MHz to {high / 1e9:g} "
            "GHz a chip's clock can be"
        )
    return hertz


MIN_EFFICIENCY = 0.01  # of a memory's peak: below it the figure is surely a slip


def _efficiency(value: Any) -> float:
    fraction = as_fraction(value)
    if fraction < MIN_EFFICIENCY:
        raise ValueError(
            f"{quote(value)} is below the {MIN_EFFICIENCY:g} of its peak any memory reaches"
        )
    return fraction


def _rate(clock_hz: float):
    """Bytes per cycle, refused outside RATE_RANGE_BYTES_PER_CYCLE (the unit is surely wrong)."""

    def parse(value: Any) -> float:
        per_cycle = parse_rate(value, clock_hz)
        low, high = RATE_RANGE_BYTES_PER_CYCLE
        if not low <= per_cycle <= high:
            raise ValueError(
                f"{quote(value)} is {per_cycle:.3g} bytes per cycle, outside the "
                f"{low:g} to {high:,.0f} a memory, path or unit can sensibly move "
                "(is the unit right?)"
            )
        return per_cycle

    return parse


def _latency(clock_hz: float, maximum_s: float):
    """A time in whole cycles, refused beyond `maximum_s` (the unit is then surely wrong)."""

    def parse(value: Any) -> int:
        cycles = parse_time(value, clock_hz)
        if cycles > maximum_s * clock_hz:
            raise ValueError(
                f"{quote(value)} is {cycles / clock_hz * 1e6:,.0f} µs, beyond the "
                f"{maximum_s * 1e6:,.0f} µs this can sensibly take (is the unit "
                "right?)"
            )
        return cycles

    return parse


def _check_buffers(capacity: dict[str, int], fractal: dict, problems: Problems) -> None:
    """The hierarchy must be able to run one Cube fractal: L0A/L0B are filled from L1, so they
    cannot be larger; each buffer holds at least its share of one fractal step, and UB one
    accumulator block drained for an epilogue."""
    for buf in ("L0A", "L0B"):
        if capacity[buf] > capacity["L1"]:
            problems.add(
                f"{buf}.capacity",
                f"{format_size(capacity[buf])} is larger than L1 "
                f"({format_size(capacity['L1'])}), which fills it",
            )
    needs: dict[str, tuple[int, str]] = {}  # buffer -> (bytes, the fractal that needs it)
    for dtype, (m, n, k) in fractal.items():
        width = DTYPE_BYTES[dtype]
        for buf, nbytes in (
            ("L0A", m * k * width),
            ("L0B", k * n * width),
            ("L0C", m * n * ACCUMULATOR_BYTES),
            ("UB", m * n * ACCUMULATOR_BYTES),
            ("L1", (m + n) * k * width),
        ):
            needs[buf] = max(needs.get(buf, (0, "")), (nbytes, f"{dtype} {m}x{n}x{k}"))
    for buf, (nbytes, which) in needs.items():
        if capacity[buf] < nbytes:
            problems.add(
                f"{buf}.capacity",
                f"{format_size(capacity[buf])} cannot hold its part "
                f"of one Cube fractal ({which}): it needs {nbytes:,} B",
            )


# Paths the lowering uses: staging operands, feeding the Cube, draining, vector kernels.
# Every path the lowering moves data on, and the engine (the pipe) it issues the move to.
REQUIRED_PATHS = {
    ("HBM", "L1"): "MTE2",
    ("L2", "L1"): "MTE2",
    ("HBM", "UB"): "MTE2",
    ("L2", "UB"): "MTE2",
    ("L1", "L0A"): "MTE1",
    ("L1", "L0B"): "MTE1",
    ("L0C", "HBM"): "FIXPIPE",
    ("L0C", "UB"): "FIXPIPE",
    ("UB", "HBM"): "MTE3",
}


def _check_topology(served: dict, problems: Problems) -> None:
    for (source, destination), engine in REQUIRED_PATHS.items():
        name = f"{source}->{destination}"
        if (source, destination) not in served:
            problems.add(
                "",
                f"no engine serves the path {name}, which the lowering needs; "
                f"add it to {engine}'s paths",
            )
        elif served[source, destination] != engine:
            problems.add(
                f"{served[source, destination]}.paths.{name}",
                f"the lowering moves {name} on {engine}; give the path to {engine}",
            )
