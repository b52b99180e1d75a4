"""Command line: argument parsing and printing only; the work happens in the pipeline.

Exit codes: 0 success, 2 a mistake in the input (one line per problem, no
traceback), 1 anything else.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from .errors import SimulatorError


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m simulator",
        description="Cycle-approximate NPU memory-hierarchy simulator.")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    run = sub.add_parser("run", help="simulate a workload and print its report",
                         description="Simulate a workload on its hardware and print the report.")
    run.add_argument("workload", help="workload YAML file, e.g. workloads/ffn_decode.yaml")
    run.add_argument("--set", dest="overrides", action="append", default=[], metavar="PATH=VALUE",
                     help="override any field, e.g. params.tokens=2048 or "
                          "hardware.HBM.bandwidth=2.4TB/s (repeatable)")
    run.add_argument("--json", metavar="FILE", help="also write the full report as JSON "
                     "('-' for standard output)")
    run.add_argument("--force", action="store_true",
                     help="overwrite an existing --json file that is not a report of ours")
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    try:
        if args.command == "run":
            return _run(args)
    except SimulatorError as exc:
        for line in str(exc).splitlines():
            print(f"error: {line}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    return 1


def _run(args) -> int:
    from . import load_workload, simulate

    if args.json and args.json != "-":
        _check_writable(Path(args.json), args.force)
    workload = load_workload(args.workload, args.overrides)
    report = simulate(workload)
    if args.json == "-":
        print(report.to_json())
        return 0
    print(report.summary())
    if args.json:
        Path(args.json).write_text(report.to_json() + "\n", encoding="utf-8")
        print(f"\nreport written to {args.json}")
    return 0


def _check_writable(path: Path, force: bool) -> None:
    """Refuse to overwrite a file that is not one of our own reports, unless forced."""
    if not path.exists() or force:
        if path.parent != Path("") and not path.parent.is_dir():
            raise SimulatorError(f"--json {path}: folder '{path.parent}' does not exist")
        return
    try:
        ours = "provenance" in json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, TypeError):
        ours = False
    if not ours:
        raise SimulatorError(f"--json {path}: the file exists and is not a report written by "
                             "this simulator; choose another name or pass --force to overwrite it")
