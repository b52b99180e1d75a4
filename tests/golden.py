"""Golden reports: every shipped workload on every shipped chip, as the simulator reports it
today, kept in tests/golden/ so that any change to a number is seen and meant.

    python -m tests.refresh_golden

rewrites them after a deliberate change and prints what moved (tests/test_golden.py fails on
any difference until then). A workload a chip cannot run is kept as its one-line refusal.
"""

from __future__ import annotations

import json
from pathlib import Path

from simulator import load_workload, simulate
from simulator.errors import SimulatorError

ROOT = Path(__file__).resolve().parents[1]
GOLDEN_DIR = Path(__file__).resolve().parent / "golden"
WORKLOADS = sorted(p.stem for p in (ROOT / "workloads").glob("*.yaml"))
CHIPS = sorted(p.stem for p in (ROOT / "hw_models").glob("*.yaml") if p.stem != "tiny")
CASES = [(workload, chip) for workload in WORKLOADS for chip in CHIPS]
# where a checkout or a release puts things, not what the model says
UNSTABLE_PROVENANCE = ("simulator_version", "workload_file", "hardware_file")


def golden_path(workload: str, chip: str) -> Path:
    return GOLDEN_DIR / f"{workload}@{chip}.json"


def report_of(workload: str, chip: str) -> dict:
    """The report of a shipped workload on a shipped chip, or its refusal."""
    try:
        loaded = load_workload(ROOT / "workloads" / f"{workload}.yaml", [f"hardware={chip}"])
        report = simulate(loaded).to_dict()
    except SimulatorError as exc:
        # the message names the file: relative to the checkout, wherever that is
        return {"refused": str(exc).splitlines()[0].replace(f"{ROOT}/", "")}
    for key in UNSTABLE_PROVENANCE:
        report["provenance"].pop(key, None)
    return json.loads(json.dumps(report))  # as its file reads back: lists, string keys


def as_text(report: dict) -> str:
    return json.dumps(report, indent=1, sort_keys=True) + "\n"


def differences(old, new, path: str = "") -> list[str]:
    """Every leaf that differs between two reports, as 'path: old -> new'."""
    if isinstance(old, dict) and isinstance(new, dict):
        return [
            line
            for key in sorted(old.keys() | new.keys(), key=str)
            for line in differences(
                old.get(key, "<absent>"),
                new.get(key, "<absent>"),
                f"{path}.{key}" if path else str(key),
            )
        ]
    if isinstance(old, list) and isinstance(new, list) and len(old) == len(new):
        return [
            line
            for i, (a, b) in enumerate(zip(old, new))
            for line in differences(a, b, f"{path}[{i}]")
        ]
    return [] if old == new else [f"{path}: {old!r} -> {new!r}"]
