"""The third tier: each shipped workload on each shipped chip reports exactly what its golden
file says (tests/golden.py). Slow (about three minutes in all), so CI runs it and a local
`-m "not slow"` run skips it."""

import json

import pytest

from .golden import CASES, differences, golden_path, report_of


@pytest.mark.slow
@pytest.mark.parametrize("workload, chip", CASES, ids=[f"{w}@{c}" for w, c in CASES])
def test_the_report_is_the_golden_one(workload, chip):
    path = golden_path(workload, chip)
    assert path.exists(), f"no golden report {path.name}: run python -m tests.refresh_golden"
    moved = differences(json.loads(path.read_text()), report_of(workload, chip))
    assert not moved, (
        f"{path.name} differs in {len(moved)} places, first: "
        + "; ".join(moved[:5])
        + ". If the change is meant, run python -m tests.refresh_golden and "
        "commit the files with it"
    )


def test_every_golden_file_belongs_to_a_case():
    """A workload or chip that was renamed or removed leaves no stale golden file behind."""
    expected = {golden_path(w, c).name for w, c in CASES}
    present = {p.name for p in golden_path("x", "y").parent.glob("*.json")}
    assert present <= expected, f"stale golden files: {sorted(present - expected)}"
