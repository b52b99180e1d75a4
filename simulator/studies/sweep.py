"""Sweeps: simulate every point of a grid of overrides, in parallel, as tidy rows.

Each point is a complete, independent run (load → simulate → report), so the
points run in worker processes and the rows come back in grid order whatever
the number of workers: the same grid gives the same rows, bit for bit. A point
whose overrides break a rule (a tile that does not fit) becomes a row with
its `error` set, not a crash.
"""

from __future__ import annotations

import itertools
import math
import os
import time
from typing import Any, Callable, Iterable

import yaml

from ..config.strict import YamlLimitError, parse_yaml
from ..errors import OVERRIDE_MARK, ConfigError, SimulatorError, check_count, quote
from ..schedule.program import UTILIZATION_KEYS
from ..units import us_per_cycle
from ..workers import dask_client, worker_pool

# Report figures that become columns of a sweep row, flattened to one level: first those a
# report carries as they are, then those derived from it.
REPORT_FIGURES = (
    "time_us",
    "cycles",
    "bound",
    "binding",
    "flops",
    "achieved_tflops",
    "peak_tflops",
    "mac_utilization",
    "achieved_hbm_tbps",
    "hbm_bandwidth_tbps",
)
METRICS = (
    *REPORT_FIGURES,
    "roofline_efficiency",
    "roofline_bound_us",
    "compute_bound_us",
    "memory_bound_us",
    "arithmetic_intensity",
    "hbm_read_bytes",
    "hbm_write_bytes",
    "l2_hit_bytes",
    "launch_overhead_us",
    "kernels",
    "instructions",
)
FIGURES = (*METRICS, *(f"util_{unit}" for unit in UTILIZATION_KEYS))  # a row after its point
PLOTTABLE = tuple(f for f in FIGURES if f not in ("bound", "binding"))  # the numbers


# Beyond this many points a sweep asks for --yes (the CLI) before it starts.
CONFIRM_ABOVE_POINTS = 100
MAX_GRID_VALUES = 1_000  # values of one field
MAX_POINTS = 100_000  # points of one sweep, --yes or not


def parse_grid(items: Iterable[str]) -> dict[str, list[Any]]:
    """['params.tokens=1,8,64', ...] -> {'params.tokens': [1, 8, 64], ...} (YAML scalars)."""
    grid: dict[str, list[Any]] = {}
    for item in items:
        field, sep, values = item.partition("=")
        field = field.strip()
        if not sep or not field or not values.strip():
            raise SimulatorError(
                f"--grid {quote(item)}: write FIELD=V1,V2,... e.g. params.tokens=1,8,64"
            )
        if field in grid:
            raise SimulatorError(f"--grid {field} is given twice; put all its values in one list")
        texts = [text.strip() for text in values.split(",")]
        if len(texts) > MAX_GRID_VALUES:
            raise SimulatorError(
                f"--grid {field}: {len(texts):,} values, more than the "
                f"{MAX_GRID_VALUES:,} one field may have"
            )
        parsed = []
        for text in texts:
            if not text:
                raise SimulatorError(
                    f"--grid {quote(item)}: an empty value (two commas in a row, or one at an end)"
                )
            try:
                value = parse_yaml(text)
            except YamlLimitError as exc:
                raise SimulatorError(
                    f"--grid {field}: {quote(text)}: refused: {exc.problem}"
                ) from None
            except yaml.YAMLError:
                value = text
            if isinstance(value, (list, dict)) or value is None:
                raise SimulatorError(
                    f"--grid {field}: {quote(text)} is not a single number or "
                    "word; values are separated by commas"
                )
            if value in parsed:
                raise SimulatorError(f"--grid {field}: {quote(text)} is given twice")
            parsed.append(value)
        grid[field] = parsed
    if not grid:
        raise SimulatorError("a sweep needs at least one --grid FIELD=V1,V2,...")
    if point_count(grid) > MAX_POINTS:
        raise SimulatorError(
            f"the grid has {point_count(grid):,} points, more than the "
            f"{MAX_POINTS:,} one sweep may have"
        )
    return grid


def point_count(grid: dict[str, list[Any]]) -> int:
    return math.prod(len(values) for values in grid.values())


def check_grid(path: str, grid: dict[str, list[Any]], overrides: Iterable[str] = ()) -> None:
    """Refuse, before any point runs, a grid value the workload cannot take: a field that does
    not exist, or a value of the wrong kind. Each value is loaded once with the other fields
    at their first values; what only a combination breaks (a tile that does not fit) is left
    to the sweep, where it becomes a row with its reason."""
    from ..config.workload import load_workload

    first = {field: values[0] for field, values in grid.items()}
    for field, values in grid.items():
        for value in values:
            point = {**first, field: value}
            try:
                load_workload(path, [*overrides, *(f"{f}={v}" for f, v in point.items())])
            except ConfigError as exc:
                raise SimulatorError(
                    "\n".join(_as_grid_problem(line, grid) for line in str(exc).splitlines())
                ) from None


def _as_grid_problem(line: str, grid: dict[str, list[Any]]) -> str:
    """A problem blamed on an override that the grid made is blamed on the --grid option."""
    for field in grid:
        mark = f"{OVERRIDE_MARK}{field}="
        if line.startswith(mark):
            return f"--grid {field}={line[len(mark) :]}"
    return line


def estimate_seconds(
    path: str, grid: dict[str, list[Any]], overrides: Iterable[str], workers: int
) -> tuple[float, tuple[int, int], float]:
    """(seconds, the instructions of the grid's first and last points, seconds the smaller
    took): a wall time for the whole grid, its points taken to lower to as many instructions
    as those two on average (a grid tends to grow along its fields), simulated at the rate
    this machine simulates the smaller of the two, timed now. (0, (0, 0), 0) where either
    point cannot run: the sweep will say why."""
    from ..config.workload import load_workload
    from ..pipeline import lower_workload, simulate

    corners = [[f"{f}={values[i]}" for f, values in grid.items()] for i in (0, -1)]
    try:
        workloads = [load_workload(path, [*overrides, *corner]) for corner in corners]
        counts = [lower_workload(w).instruction_count for w in workloads]
        started = time.perf_counter()
        simulate(workloads[counts.index(min(counts))])
        took = time.perf_counter() - started
    except SimulatorError:
        return 0.0, (0, 0), 0.0
    points = point_count(grid)
    per_point = took * (counts[0] + counts[1]) / 2 / max(1, min(counts))
    return points * per_point / max(1, min(workers, points)), (counts[0], counts[1]), took


def points(grid: dict[str, list[Any]]) -> list[dict[str, Any]]:
    """Every combination of the grid's values, the last field varying fastest."""
    fields = list(grid)
    return [dict(zip(fields, combo)) for combo in itertools.product(*grid.values())]


def columns(fields: Iterable[str]) -> list[str]:
    """The columns of every row of a sweep over `fields`, known before any point runs."""
    return [*fields, "error", *FIGURES]


def row_of(point: dict[str, Any], report: dict | None, error: str = "") -> dict[str, Any]:
    row = dict.fromkeys(columns(point))
    row.update(point, error=error)
    if report is None:
        return row
    us = us_per_cycle(report["clock_ghz"])
    roof = report["roofline"]
    hbm = report["traffic"]["HBM"]
    moved = hbm["read_bytes"] + hbm["write_bytes"]
    row.update({key: report[key] for key in (*REPORT_FIGURES, "instructions")})
    row.update(
        roofline_efficiency=roof["efficiency"],
        roofline_bound_us=roof["bound_cycles"] * us,
        compute_bound_us=roof["compute_cycles"] * us,
        memory_bound_us=roof["memory_cycles"] * us,
        arithmetic_intensity=report["flops"] / moved if moved else None,
        hbm_read_bytes=hbm["read_bytes"],
        hbm_write_bytes=hbm["write_bytes"],
        l2_hit_bytes=report["traffic"]["L2"]["read_bytes"],
        launch_overhead_us=report["launch_overhead_cycles"] * us,
        kernels=len(report["kernels"]),
    )
    for unit, fraction in report["utilization"].items():
        row[f"util_{unit}"] = fraction
    return row


def run_point(args: tuple[str, list[str], dict[str, Any], int | None]) -> dict[str, Any]:
    """One grid point, in a worker process: a row, or a row with the reason it is illegal."""
    from ..config.workload import load_workload
    from ..step_cache import simulate_cached

    path, base, point, max_cycles = args
    overrides = [*base, *(f"{field}={value}" for field, value in point.items())]
    try:
        report = simulate_cached(load_workload(path, overrides), max_cycles).to_dict()
    except SimulatorError as exc:
        return row_of(point, None, " | ".join(str(exc).splitlines()))
    return row_of(point, report)


def sweep(
    path: str,
    grid: dict[str, list[Any]] | Iterable[str],
    overrides: Iterable[str] = (),
    workers: int | None = None,
    progress: bool = False,
    scheduler: str | None = None,
    max_cycles: int | None = None,
    on_row: Callable[[int, dict[str, Any]], None] | None = None,
) -> list[dict[str, Any]]:
    """Simulate every grid point; rows in grid order, ready for `pandas.DataFrame(rows)`.

    `grid` maps a field path to its values ({'params.tokens': [1, 64]}) or is a list of
    'FIELD=V1,V2' strings. `workers` defaults to the core count; 1 runs in this process.
    With `scheduler` (a Dask scheduler address) the points run on that cluster instead.
    `on_row(index, row)` is called as each point finishes, in whatever order they finish
    (so a caller can save rows before the whole grid is done)."""
    if not isinstance(grid, dict):
        grid = parse_grid(grid)
    for field, values in grid.items():
        if not isinstance(values, (list, tuple)) or not values:
            raise TypeError(
                f"grid[{field!r}] must be a non-empty list of values, got {quote(values)}"
            )
    check_count("workers", workers, optional=True)
    jobs = [(os.path.realpath(path), list(overrides), point, max_cycles) for point in points(grid)]
    workers = workers or os.cpu_count() or 1
    bar = _progress(len(jobs), str(path)) if progress else None
    rows: list = [None] * len(jobs)

    def finished(index: int, row: dict[str, Any]) -> None:
        rows[index] = row
        if on_row:
            on_row(index, row)
        if bar is not None:
            bar.update()

    try:
        if scheduler:
            _on_dask(scheduler, jobs, finished)
        elif workers == 1 or len(jobs) == 1:
            for index, job in enumerate(jobs):
                finished(index, run_point(job))
        else:
            _in_processes(min(workers, len(jobs)), jobs, finished)
    finally:
        if bar is not None:
            bar.close()
    return rows


def _in_processes(workers: int, jobs: list, finished: Callable) -> None:
    """The points in worker processes, each row handed on as it finishes; an interrupt or a
    SIGTERM stops every worker at once (workers.worker_pool)."""
    with worker_pool(workers) as pool:
        for index, row in pool.imap_unordered(_run_indexed, enumerate(jobs)):
            finished(index, row)


def _run_indexed(indexed_job: tuple[int, tuple]) -> tuple[int, dict[str, Any]]:
    index, job = indexed_job
    return index, run_point(job)


def _on_dask(address: str, jobs: list, finished: Callable) -> None:
    """Run the points on an existing Dask cluster."""
    from distributed import as_completed

    with dask_client(address) as client:
        futures = client.map(run_point, jobs, pure=False)
        index = {future.key: i for i, future in enumerate(futures)}
        for future in as_completed(futures):
            finished(index[future.key], future.result())


def _progress(total: int, label: str):
    from tqdm import tqdm

    return tqdm(total=total, desc=f"sweep {label}", unit="point", leave=False)
