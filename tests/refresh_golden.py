"""Rewrite the golden reports after a deliberate change, and show what moved:

    python -m tests.refresh_golden [WORKLOAD@CHIP ...]

For each changed report it prints the leaves that differ (path: old -> new, the first few),
then writes it. Commit the files with the change that explains them.
"""

import json
import sys

from .golden import CASES, GOLDEN_DIR, as_text, differences, golden_path, report_of

SHOWN = 12  # differing leaves printed per report


def main(selected: list[str]) -> None:
    GOLDEN_DIR.mkdir(exist_ok=True)
    changed = 0
    for workload, chip in CASES:
        if selected and f"{workload}@{chip}" not in selected:
            continue
        path = golden_path(workload, chip)
        new = report_of(workload, chip)
        old = json.loads(path.read_text()) if path.exists() else None
        if old == new:
            continue
        changed += 1
        lines = ["new file"] if old is None else differences(old, new)
        print(f"{path.name}: {len(lines)} change{'s' * (len(lines) != 1)}")
        for line in lines[:SHOWN]:
            print(f"    {line}")
        if len(lines) > SHOWN:
            print(f"    ... and {len(lines) - SHOWN} more")
        path.write_text(as_text(new))
    print(f"{changed} golden report{'s' * (changed != 1)} rewritten in {GOLDEN_DIR}")


if __name__ == "__main__":
    main(sys.argv[1:])
