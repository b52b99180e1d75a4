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

    plan = sub.add_parser("plan", help="show the kernels the fusion pass forms, and why",
                          description="Print the kernels, the ops in each, and for every op "
                                      "left unfused the reason.")
    plan.add_argument("workload")
    plan.add_argument("--set", dest="overrides", action="append", default=[],
                      metavar="PATH=VALUE", help="override any field (repeatable)")

    compare = sub.add_parser(
        "compare", help="simulate variants of a workload side by side",
        description="Simulate variants of one workload side by side. A field given several "
                    "times with --set is a variant axis (one variant per value, or per "
                    "combination when several fields vary); fields given once apply to all. "
                    "Without any axis the variants are schedule.fusion=none and =auto.")
    compare.add_argument("workload")
    compare.add_argument("--set", dest="overrides", action="append", default=[],
                         metavar="PATH=VALUE", help="a value for all variants, or (repeated "
                         "with other values) a variant axis")
    compare.add_argument("--variant", action="append", default=[], metavar="P=V[,P=V...]",
                         help="one explicit variant: overrides separated by commas")
    compare.add_argument("--json", metavar="FILE", help="also write the comparison as JSON "
                         "('-' for standard output)")
    compare.add_argument("--force", action="store_true",
                         help="overwrite an existing --json file that is not a report of ours")
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    try:
        if args.command == "run":
            return _run(args)
        if args.command == "plan":
            return _plan(args)
        if args.command == "compare":
            return _compare(args)
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


def _plan(args) -> int:
    from . import load_workload
    from .pipeline import plan
    from .viz.compare import render_plan

    workload = load_workload(args.workload, args.overrides)
    print(render_plan(workload, plan(workload)))
    return 0


def variants_from(overrides: list[str], explicit: list[str]) -> tuple[list, list[str]]:
    """(variants as (label, overrides), overrides common to all) from the command line."""
    import itertools

    values: dict[str, list[str]] = {}
    for text in overrides:
        path = text.partition("=")[0].strip()
        if text not in values.setdefault(path, []):
            values[path].append(text)
    common = [texts[0] for texts in values.values() if len(texts) == 1]
    axes = [texts for texts in values.values() if len(texts) > 1]
    variants = [(" ".join(t.rpartition(".")[2] if "." in t.partition("=")[0] else t
                          for t in combo), list(combo)) for combo in itertools.product(*axes)
                if axes]
    for text in explicit:
        parts = [p.strip() for p in text.split(",") if p.strip()]
        variants.append((" ".join(p.partition("=")[0].rpartition(".")[2] + "="
                                  + p.partition("=")[2] for p in parts), parts))
    if not variants:
        variants = [("fusion=none", ["schedule.fusion=none"]),
                    ("fusion=auto", ["schedule.fusion=auto"])]
    return variants, common


def _compare(args) -> int:
    from .pipeline import compare
    from .viz.compare import render_compare

    if args.json and args.json != "-":
        _check_writable(Path(args.json), args.force)
    variants, common = variants_from(args.overrides, args.variant)
    result = compare(args.workload, variants, common)
    if args.json == "-":
        print(json.dumps(result, indent=2))
        return 0
    print(render_compare(result))
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
        print(f"\ncomparison written to {args.json}")
    return 0


def _check_writable(path: Path, force: bool) -> None:
    """Refuse to overwrite a file that is not one of our own reports, unless forced."""
    if not path.exists() or force:
        if path.parent != Path("") and not path.parent.is_dir():
            raise SimulatorError(f"--json {path}: folder '{path.parent}' does not exist")
        return
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        ours = "provenance" in data or "variants" in data
    except (OSError, ValueError, TypeError):
        ours = False
    if not ours:
        raise SimulatorError(f"--json {path}: the file exists and is not a report written by "
                             "this simulator; choose another name or pass --force to overwrite it")
