"""The report's parts as small frozen records, one per section of a report.

A record's fields are its JSON keys, in the order DESIGN.md gives them: `plain()` turns any
record (or mapping or tuple of them) into that JSON form, so the typed report and the file a
user keeps can never drift apart.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


def plain(value: Any) -> Any:
    """The JSON form of a record, a mapping or sequence of records, or a plain value."""
    if hasattr(value, "to_dict"):
        return value.to_dict()
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, Mapping):
        return {key: plain(item) for key, item in value.items()}
    if isinstance(value, (tuple, list)):
        return [plain(item) for item in value]
    return value


@dataclass(frozen=True, slots=True)
class LevelTraffic:
    """Bytes read from and written to one level of the hierarchy. For L2 it also carries the
    bytes cores received from reads that served a peer too (multicast), and for a whole run
    the cache's lookups that hit and missed, in cells (the cache does not count per kernel)."""

    read_bytes: int
    write_bytes: int
    hits: int | None = None
    misses: int | None = None
    multicast_bytes: int | None = None

    def to_dict(self) -> dict[str, int]:
        return {
            f.name: getattr(self, f.name)
            for f in dataclasses.fields(self)
            if getattr(self, f.name) is not None
        }


@dataclass(frozen=True, slots=True)
class TensorTraffic:
    """What global memory moved for one tensor: where its reads came from, what was written."""

    role: str  # weight, cache, activation, intermediate, output, viewed, on_chip
    bytes: int
    hbm_read_bytes: int
    l2_read_bytes: int
    hbm_write_bytes: int


@dataclass(frozen=True, slots=True)
class Intermediates:
    """The tensors one kernel writes and a later one reads, together: what fusion removes."""

    bytes: int
    hbm_write_bytes: int
    hbm_read_bytes: int
    l2_read_bytes: int


@dataclass(frozen=True, slots=True)
class PipeStalls:
    """Cycles a pipe had reached an instruction but could not work on it, by cause (summed
    over cores; see analysis.report.STALL_CAUSES)."""

    data: int
    buffer_slot: int
    shared_bandwidth: int


@dataclass(frozen=True, slots=True)
class RooflineSummary:
    """The run against its bounds: the analytic roofline and each resource's ceiling."""

    compute_cycles: float
    memory_cycles: float
    bound_cycles: float
    efficiency: float  # bound over simulated cycles
    compulsory_hbm_bytes: int
    ceiling_cycles: Mapping[str, float]


@dataclass(frozen=True, slots=True)
class MemoryFootprint:
    """HBM bytes the workload occupies while it runs, by role (nothing is freed)."""

    weight_bytes: int
    cache_bytes: int
    activation_bytes: int
    intermediate_bytes: int
    output_bytes: int
    viewed_bytes: int
    total_bytes: int
    hbm_capacity_bytes: int


@dataclass(frozen=True, slots=True)
class EnergyRecord:
    """Joules the run spent: bytes read and written at each level, the Cube's MACs, the
    vector unit's work, and static power for the run's duration (the preset's figures)."""

    by_level_j: Mapping[str, float]
    cube_j: float
    vector_j: float
    static_j: float
    total_j: float
    # the share of its work's joules the run spends: below 1 when at the preset's figures it
    # would draw more than the board's power cap, which holds it at the cap
    dynamic_scale: float = 1.0

    @classmethod
    def of(
        cls,
        by_level_j: Mapping[str, float],
        cube_j: float,
        vector_j: float,
        static_j: float,
        cap_j: float | None = None,
    ) -> EnergyRecord:
        """The joules of a run; `cap_j` (the cap's watts over the run's time) bounds them: the
        work's joules scale down to fit it beside the static ones, as a chip at its power cap
        lowers its voltage and each operation costs less."""
        dynamic = sum(by_level_j.values()) + cube_j + vector_j
        scale = 1.0
        if cap_j is not None and dynamic + static_j > cap_j:
            scale = max(0.0, cap_j - static_j) / dynamic
            by_level_j = {level: j * scale for level, j in by_level_j.items()}
            cube_j, vector_j = cube_j * scale, vector_j * scale
        total = sum(by_level_j.values()) + cube_j + vector_j + static_j
        return cls(by_level_j, cube_j, vector_j, static_j, total, scale)

    def parts(self) -> dict[str, float]:
        """Joules by where they went: each level, then the Cube, the vector unit, static."""
        return {
            **self.by_level_j,
            "Cube": self.cube_j,
            "vector": self.vector_j,
            "static": self.static_j,
        }


@dataclass(frozen=True, slots=True)
class SampledRecord:
    """What sampling left out of a kernel (schedule/sampling.py): of the `chunks` K chunks
    of all its blocks on all its cores, `simulated_chunks` were simulated, and the rest
    added `extrapolated_cycles`, good to about `error_cycles`."""

    chunks: int
    simulated_chunks: int
    extrapolated_cycles: int
    error_cycles: int


@dataclass(frozen=True, slots=True)
class KernelRecord:
    """One kernel of the run: what it ran, how long it took and why, what it moved."""

    name: str
    ops: tuple[str, ...]
    fused: bool
    unit: str  # cube or vector
    cycles: int  # from the previous kernel's end, launch wait included
    launch_cycles: int
    flops: int
    roofline_cycles: float  # its work alone with its inputs read from HBM (analysis/roofline)
    # the least time its binding ceiling needs for what it actually moved and computed, its
    # inputs counted where they came from (HBM, or the L2 an earlier kernel left them in):
    # never above `cycles`
    floor_cycles: float
    traffic: Mapping[str, LevelTraffic]
    tiling: Mapping[str, Any] | None  # a matmul kernel's resolved tiling
    bound: str
    binding: str
    cores_used: int
    instructions: int
    buffer_plan_bytes: Mapping[str, int]
    energy: EnergyRecord | None  # None: the hardware gives no energy figures
    sampled: SampledRecord | None = None  # None: every instruction simulated

    def to_dict(self) -> dict[str, Any]:
        """Its fields as JSON, `sampled` only where the kernel was."""
        return {
            f.name: plain(getattr(self, f.name))
            for f in dataclasses.fields(self)
            if f.name != "sampled" or self.sampled is not None
        }


@dataclass(frozen=True, slots=True)
class Provenance:
    """Where a report came from: enough to run it again."""

    simulator_version: str
    workload_file: str
    hardware_file: str
    overrides: tuple[str, ...]
    params: Mapping[str, int]
    hardware: Mapping[str, Any]  # the preset as loaded, overrides applied
