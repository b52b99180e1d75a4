"""Sweeps: simulate every point of a grid of overrides, in parallel, as tidy rows.

Each point is a complete, independent run (load → simulate → report), so the
points run in worker processes and the rows come back in grid order whatever
the number of workers: the same grid gives the same rows, bit for bit. A point
whose overrides break a rule (a tile that does not fit) becomes a row with
its `error` set, not a crash.
"""

from __future__ import annotations

import itertools
import os
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any, Iterable

from .errors import SimulatorError

# Report figures that become columns of a sweep row, flattened to one level.
METRICS = ("time_us", "cycles", "bound", "flops", "achieved_tflops", "peak_tflops",
           "mac_utilization", "achieved_hbm_tbps", "hbm_bandwidth_tbps", "roofline_efficiency",
           "roofline_bound_us", "compute_bound_us", "memory_bound_us", "arithmetic_intensity",
           "hbm_read_bytes", "hbm_write_bytes", "l2_hit_bytes", "launch_overhead_us", "kernels",
           "instructions")


def parse_grid(items: Iterable[str]) -> dict[str, list[Any]]:
    """['params.tokens=1,8,64', ...] -> {'params.tokens': [1, 8, 64], ...} (YAML scalars)."""
    import yaml

    grid: dict[str, list[Any]] = {}
    for item in items:
        field, sep, values = item.partition("=")
        field = field.strip()
        if not sep or not field or not values.strip():
            raise SimulatorError(f"--grid {item!r}: write FIELD=V1,V2,... e.g. "
                                 "params.tokens=1,8,64")
        if field in grid:
            raise SimulatorError(f"--grid {field} is given twice; put all its values in one list")
        parsed = []
        for text in values.split(","):
            try:
                parsed.append(yaml.safe_load(text.strip()))
            except yaml.YAMLError:
                parsed.append(text.strip())
        grid[field] = parsed
    if not grid:
        raise SimulatorError("a sweep needs at least one --grid FIELD=V1,V2,...")
    return grid


def points(grid: dict[str, list[Any]]) -> list[dict[str, Any]]:
    """Every combination of the grid's values, the last field varying fastest."""
    fields = list(grid)
    return [dict(zip(fields, combo)) for combo in itertools.product(*grid.values())]


def row_of(point: dict[str, Any], report: dict | None, error: str = "") -> dict[str, Any]:
    row = dict(point)
    row["error"] = error
    for metric in METRICS:
        row[metric] = None
    if report is None:
        return row
    us = 1e-3 / report["clock_ghz"]
    roof = report["roofline"]
    hbm = report["traffic"]["HBM"]
    moved = hbm["read_bytes"] + hbm["write_bytes"]
    row.update({key: report[key] for key in ("time_us", "cycles", "bound", "flops",
                                             "achieved_tflops", "peak_tflops", "mac_utilization",
                                             "achieved_hbm_tbps", "hbm_bandwidth_tbps",
                                             "instructions")})
    row.update(roofline_efficiency=roof["efficiency"], roofline_bound_us=roof["bound_cycles"] * us,
               compute_bound_us=roof["compute_cycles"] * us,
               memory_bound_us=roof["memory_cycles"] * us,
               arithmetic_intensity=report["flops"] / moved if moved else None,
               hbm_read_bytes=hbm["read_bytes"], hbm_write_bytes=hbm["write_bytes"],
               l2_hit_bytes=report["traffic"]["L2"]["read_bytes"],
               launch_overhead_us=report["launch_overhead_cycles"] * us,
               kernels=len(report["kernels"]))
    for unit, fraction in report["utilization"].items():
        row[f"util_{unit}"] = fraction
    return row


def run_point(args: tuple[str, list[str], dict[str, Any]]) -> dict[str, Any]:
    """One grid point, in a worker process: a row, or a row with the reason it is illegal."""
    from . import load_workload, simulate

    path, base, point = args
    overrides = [*base, *(f"{field}={value}" for field, value in point.items())]
    try:
        report = simulate(load_workload(path, overrides)).to_dict()
    except SimulatorError as exc:
        return row_of(point, None, " | ".join(str(exc).splitlines()))
    return row_of(point, report)


def sweep(path: str, grid: dict[str, list[Any]] | Iterable[str], overrides: Iterable[str] = (),
          workers: int | None = None, progress: bool = False,
          scheduler: str | None = None) -> list[dict[str, Any]]:
    """Simulate every grid point; rows in grid order, ready for `pandas.DataFrame(rows)`.

    `grid` maps a field path to its values ({'params.tokens': [1, 64]}) or is a list of
    'FIELD=V1,V2' strings. `workers` defaults to the core count; 1 runs in this process.
    With `scheduler` (a Dask scheduler address) the points run on that cluster instead."""
    if not isinstance(grid, dict):
        grid = parse_grid(grid)
    jobs = [(str(Path(path).resolve()), list(overrides), point) for point in points(grid)]
    workers = workers or os.cpu_count() or 1
    bar = _progress(len(jobs), str(path)) if progress else None
    rows = []
    if scheduler:
        rows = _on_dask(scheduler, jobs, bar)
    elif workers == 1 or len(jobs) == 1:
        for job in jobs:
            rows.append(run_point(job))
            bar and bar.update()
    else:
        with ProcessPoolExecutor(max_workers=min(workers, len(jobs))) as pool:
            for row in pool.map(run_point, jobs):
                rows.append(row)
                bar and bar.update()
    if bar:
        bar.close()
    columns = list(dict.fromkeys(key for row in rows for key in row))
    return [{key: row.get(key) for key in columns} for row in rows]


def _on_dask(address: str, jobs: list, bar) -> list[dict[str, Any]]:
    """Run the points on an existing Dask cluster; rows come back in grid order."""
    try:
        from distributed import Client, as_completed
    except ImportError:
        raise SimulatorError("--executor dask needs dask.distributed: pip install "
                             "'dask[distributed]'") from None
    try:
        client = Client(address, timeout=10)
    except (OSError, TimeoutError) as exc:
        raise SimulatorError(f"--scheduler {address}: cannot reach the Dask scheduler "
                             f"({exc})") from None
    with client:
        futures = client.map(run_point, jobs, pure=False)
        index = {future.key: i for i, future in enumerate(futures)}
        rows: list = [None] * len(jobs)
        for future in as_completed(futures):
            rows[index[future.key]] = future.result()
            bar and bar.update()
    return rows


def _progress(total: int, label: str):
    from tqdm import tqdm
    return tqdm(total=total, desc=f"sweep {label}", unit="point", leave=False)


def write_csv(rows: list[dict[str, Any]], path) -> None:
    import csv

    with open(path, "w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        for row in rows:
            writer.writerow({k: "" if v is None else v for k, v in row.items()})
