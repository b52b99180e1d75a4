"""`compare`: one workload simulated under several sets of overrides, side by side."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..errors import quote
from ..pipeline import simulate


def compare(
    path: str,
    variants: list[tuple[str, list[str]]],
    common: Sequence[str] = (),
    max_cycles: int | None = None,
) -> dict:
    """Simulate one workload under several sets of overrides, side by side.

    Returns {"workload", "variants": [{"label", "overrides", "report"}], "speedups"}: each
    speedup is the first variant's time over that variant's time."""
    from ..config.workload import load_workload

    if (
        not isinstance(variants, (list, tuple))
        or not variants
        or not all(isinstance(v, (list, tuple)) and len(v) == 2 for v in variants)
    ):
        raise ValueError(
            "compare() takes at least one variant, each (label, [overrides]), in a list, got "
            f"{quote(variants)}"
        )
    workloads = [
        (label, overrides, load_workload(path, [*common, *overrides]))
        for label, overrides in variants
    ]  # every mistake before any run
    rows: list[dict[str, Any]] = []
    for label, overrides, workload in workloads:
        rows.append(
            {
                "label": label,
                "overrides": list(overrides),
                "report": simulate(workload, max_cycles).to_dict(),
            }
        )
    base = rows[0]["report"]["time_us"]
    return {
        "workload": rows[0]["report"]["workload"],
        "common_overrides": list(common),
        "variants": rows,
        "speedups": [base / r["report"]["time_us"] for r in rows],
    }
