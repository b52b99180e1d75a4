"""Report → Chrome trace event JSON (opens in Perfetto and chrome://tracing).

One process per core (plus one for the chip), one thread (track) per pipe
(and one more per further transfer an engine's queue has in flight at once),
one complete slice ("X") per executed instruction with its bytes and stalls
in args; counter tracks ("C") for each core's buffer occupancy and for the
chip's HBM bandwidth in use. Timestamps are microseconds of simulated time.
"""

from __future__ import annotations

import gzip
import json
from collections import defaultdict
from dataclasses import dataclass
from fnmatch import fnmatchcase
from pathlib import Path

from ..errors import SimulatorError
from ..schedule.fusion import plan_kernels
from ..schedule.program import PIPES
from ..units import us_per_cycle
from ..version import format_mark

HBM_BIN_CYCLES = 1000  # HBM bandwidth counter resolution


def chrome_trace_events(report, only: TraceLimits | None = None) -> list[dict]:
    """The trace's events; with `only`, those of its cores and kernels (the chip's HBM
    counter then sums the kept kernels' transfers on every core)."""
    if report.trace is None:
        raise ValueError("this report carries no trace (it was loaded from JSON)")
    us = us_per_cycle(report.clock_ghz)
    events: list[dict] = [
        {"ph": "M", "pid": 0, "name": "process_name", "args": {"name": f"{report.hardware} chip"}}
    ]
    kernel_names = [k.name for k in report.kernels]
    records = report.trace.records
    if only is not None and only.kernels is not None:
        kept = {i for i, name in enumerate(kernel_names) if only.keeps_kernel(name)}
        records = [r for r in records if r.kernel in kept]
    hbm_records = records
    if only is not None and only.cores is not None:
        records = [r for r in records if r.core in only.cores]
    cores = sorted({r.core for r in records})
    for core in cores:
        events.append(
            {"ph": "M", "pid": core + 1, "name": "process_name", "args": {"name": f"core {core}"}}
        )
        events.append(
            {
                "ph": "M",
                "pid": core + 1,
                "name": "process_sort_index",
                "args": {"sort_index": core + 1},
            }
        )
        for tid, pipe in enumerate(PIPES):
            events.append(
                {
                    "ph": "M",
                    "pid": core + 1,
                    "tid": tid,
                    "name": "thread_name",
                    "args": {"name": pipe},
                }
            )
    tid_of = {pipe: tid for tid, pipe in enumerate(PIPES)}
    occupancy: dict[tuple[int, str], list[tuple[int, int]]] = defaultdict(list)
    hbm_bins: dict[int, float] = defaultdict(float)
    lanes: dict[tuple[int, str], list[int]] = defaultdict(list)  # each lane's last end
    for r in records:
        args = {"kernel": kernel_names[r.kernel], "bytes": r.nbytes}
        if r.wait_data_cycles or r.wait_slot_cycles or r.wait_bandwidth_cycles:
            args.update(
                wait_data_cycles=r.wait_data_cycles,
                wait_slot_cycles=r.wait_slot_cycles,
                wait_bandwidth_cycles=r.wait_bandwidth_cycles,
            )
        if r.hbm_bytes or r.l2_hit_bytes:
            args.update(hbm_bytes=r.hbm_bytes, l2_hit_bytes=r.l2_hit_bytes)
        tid = tid_of[r.pipe] + len(PIPES) * _lane(lanes[(r.core, r.pipe)], r, events)
        events.append(
            {
                "ph": "X",
                "pid": r.core + 1,
                "tid": tid,
                "name": r.label,
                "cat": r.pipe,
                "ts": r.start_cycle * us,
                "dur": (r.end_cycle - r.start_cycle) * us,
                "args": args,
            }
        )
        if r.acquire:
            occupancy[(r.core, r.acquire[0])].append((r.start_cycle, r.acquire[1]))
        for buffer, nbytes in r.release:
            occupancy[(r.core, buffer)].append((r.end_cycle, -nbytes))
    for r in hbm_records:
        if r.hbm_bytes:
            _spread(hbm_bins, r.start_cycle, r.end_cycle, r.hbm_bytes)
    for (core, buffer), changes in sorted(occupancy.items()):
        level = 0
        for cycle, delta in sorted(changes):
            level += delta
            events.append(
                {
                    "ph": "C",
                    "pid": core + 1,
                    "name": f"{buffer} occupancy (B)",
                    "ts": cycle * us,
                    "args": {"bytes": level},
                }
            )
    bytes_per_cycle_to_gbps = report.clock_ghz
    for index in range(max(hbm_bins, default=-1) + 2):
        rate = hbm_bins.get(index, 0.0) / HBM_BIN_CYCLES * bytes_per_cycle_to_gbps
        events.append(
            {
                "ph": "C",
                "pid": 0,
                "name": "HBM bandwidth (GB/s)",
                "ts": index * HBM_BIN_CYCLES * us,
                "args": {"GB/s": rate},
            }
        )
    return events


def _lane(ends: list[int], record, events: list[dict]) -> int:
    """The first lane of a core's pipe free at the record's start (a new one, named, if none):
    transfers in flight at once get a track each, so slices on one track never overlap."""
    for lane, end in enumerate(ends):
        if end <= record.start_cycle:
            ends[lane] = record.end_cycle
            return lane
    ends.append(record.end_cycle)
    lane = len(ends) - 1
    if lane:
        events.append(
            {
                "ph": "M",
                "pid": record.core + 1,
                "tid": PIPES.index(record.pipe) + len(PIPES) * lane,
                "name": "thread_name",
                "args": {"name": f"{record.pipe} queue {lane + 1}"},
            }
        )
    return lane


def _spread(bins: dict[int, float], start: int, end: int, nbytes: int) -> None:
    """Spread a transfer's bytes evenly over the bins its duration covers."""
    duration = max(1, end - start)
    first, last = start // HBM_BIN_CYCLES, (max(start, end - 1)) // HBM_BIN_CYCLES
    for index in range(first, last + 1):
        lo, hi = max(start, index * HBM_BIN_CYCLES), min(end, (index + 1) * HBM_BIN_CYCLES)
        bins[index] += nbytes * max(hi - lo, 0 if end > start else 1) / duration


@dataclass(frozen=True)
class TraceLimits:
    """What a trace keeps: these cores (None: all) and the kernels whose names match one of
    these shell patterns (None: all)."""

    cores: frozenset[int] | None = None
    kernels: tuple[str, ...] | None = None

    def keeps_kernel(self, name: str) -> bool:
        return self.kernels is None or any(fnmatchcase(name, p) for p in self.kernels)


def trace_limits(workload, cores: frozenset[int] | None, kernels: str | None) -> TraceLimits:
    """What --trace-cores and --trace-kernels keep (`kernels`: names or shell patterns,
    comma-separated), checked against the workload's chip and kernels before the run."""
    hardware = workload.hardware
    if cores is not None and max(cores) >= hardware.cores:
        raise SimulatorError(
            f"--trace-cores: {hardware.name} has {hardware.cores} cores, numbered "
            f"0-{hardware.cores - 1}; {max(cores)} is not one"
        )
    patterns = None
    if kernels is not None:
        patterns = tuple(p.strip() for p in kernels.split(",") if p.strip())
        names = [kernel.name for kernel in plan_kernels(workload).kernels]
        if not patterns or not any(TraceLimits(kernels=patterns).keeps_kernel(n) for n in names):
            raise SimulatorError(
                f"--trace-kernels {kernels!r} names none of the workload's kernels: "
                + ", ".join(names)
            )
    return TraceLimits(cores, patterns)


def write_chrome_trace(report, path: str | Path, only: TraceLimits | None = None) -> None:
    """Write the trace as JSON, gzipped when `path` ends in .gz."""
    other = {"workload": report.workload, "hardware": report.hardware}
    write_events(path, other, chrome_trace_events(report, only))


def write_events(path: str | Path, other: dict, events: list[dict]) -> None:
    """A Chrome trace of `events` (with `other` beside our mark in its header), gzipped when
    `path` ends in .gz (with no name or time in the gzip header, so the same run writes the
    same bytes). Timestamps are microseconds of simulated time."""
    trace = {
        "otherData": {
            "format": format_mark("trace"),
            **other,
            "time_unit": "microseconds of simulated time",
        },
        "traceEvents": events,
        "displayTimeUnit": "ns",
    }
    text = json.dumps(trace, separators=(",", ":"), allow_nan=False).encode("utf-8")
    if str(path).endswith(".gz"):
        with open(path, "wb") as raw, gzip.GzipFile("", "wb", fileobj=raw, mtime=0) as zipped:
            zipped.write(text)
    else:
        Path(path).write_bytes(text)
