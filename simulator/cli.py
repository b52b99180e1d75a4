"""Command line: argument parsing and printing only; the work happens in the pipeline.

Exit codes: 0 success, 2 a mistake in the input (one line per problem, no
traceback), 1 anything else.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from . import __version__
from .errors import SimulatorError


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="python -m simulator",
        description="Cycle-approximate NPU memory-hierarchy simulator.")
    parser.add_argument("--version", action="version", version=f"npu-memsim {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND",
                                parser_class=_Parser)
    run = sub.add_parser("run", help="simulate a workload and print its report",
                         description="Simulate a workload on its hardware and print the report.")
    run.add_argument("workload", help="workload YAML file, e.g. workloads/ffn_decode.yaml")
    _overrides(run, "override any field, e.g. params.tokens=2048 or "
                    "hardware.HBM.bandwidth=2.4TB/s (repeatable)")
    run.add_argument("--json", metavar="FILE", help="also write the full report as JSON "
                     "('-' for standard output)")
    run.add_argument("--force", action="store_true",
                     help="overwrite an existing --json/--trace file that is not ours")
    run.add_argument("--trace", metavar="FILE", help="write a Chrome trace (open it in Perfetto "
                     "or chrome://tracing): one track per pipe per core")
    run.add_argument("--plot", metavar="DIR", help="write roofline, timeline, traffic and "
                     "utilization PNGs into DIR")
    _max_cycles(run)

    plan = sub.add_parser("plan", help="show the kernels the fusion pass forms, and why",
                          description="Print the kernels, the ops in each, and for every op "
                                      "left unfused the reason.")
    plan.add_argument("workload")
    _overrides(plan, "override any field (repeatable)")

    compare = sub.add_parser(
        "compare", help="simulate variants of a workload side by side",
        description="Simulate variants of one workload side by side. A field given several "
                    "times with --set is a variant axis (one variant per value, or per "
                    "combination when several fields vary); fields given once apply to all. "
                    "Without any axis the variants are schedule.fusion=none and =auto.")
    compare.add_argument("workload")
    _overrides(compare, "a value for all variants, or (repeated with other values) a "
                        "variant axis")
    compare.add_argument("--variant", action="append", default=[], metavar="P=V[,P=V...]",
                         help="one explicit variant: overrides separated by commas")
    compare.add_argument("--json", metavar="FILE", help="also write the comparison as JSON "
                         "('-' for standard output)")
    compare.add_argument("--force", action="store_true",
                         help="overwrite an existing --json file that is not a report of ours")
    _max_cycles(compare)

    tune = sub.add_parser(
        "tune", help="search the tiling of every matmul kernel",
        description="For each matmul kernel: enumerate the legal tilings, rank them with the "
                    "analytic model, simulate the most promising and the default (each kernel "
                    "alone), and report the chosen tiling against the default and the roofline.")
    tune.add_argument("workload")
    _overrides(tune, "override any field first (repeatable)")
    tune.add_argument("--top", type=_count, default=4,
                      help="how many of the best-ranked tilings to simulate (default 4)")
    tune.add_argument("--workers", type=_workers, default=None,
                      help="worker processes (default: the number of cores)")
    tune.add_argument("--write", metavar="FILE", help="save the workload with the tuned tilings")
    tune.add_argument("--force", action="store_true", help="overwrite FILE if it exists")

    sweep = sub.add_parser(
        "sweep", help="simulate a grid of overrides in parallel; write a tidy CSV",
        description="Simulate every combination of the --grid values (any workload, schedule "
                    "or hardware field) in worker processes, and write one CSV row per point. "
                    "Illegal points (a tile that does not fit) are rows with their reason.")
    sweep.add_argument("workload")
    sweep.add_argument("--grid", action="append", default=[], metavar="FIELD=V1,V2,...",
                       help="a field and its values, e.g. params.tokens=1,8,64 (repeatable; "
                            "two fields make a heatmap)")
    _overrides(sweep, "a value for every point (repeatable)")
    sweep.add_argument("--workers", type=_workers, default=None,
                       help="worker processes (default: the number of cores)")
    sweep.add_argument("--executor", choices=("local", "dask"), default="local",
                       help="local worker processes (default) or an existing Dask cluster")
    sweep.add_argument("--scheduler", metavar="ADDRESS",
                       help="the Dask scheduler, e.g. tcp://10.0.0.5:8786 (with --executor dask)")
    sweep.add_argument("--csv", metavar="FILE", help="CSV path (default: <workload>-sweep.csv)")
    sweep.add_argument("--json", metavar="FILE", help="also write the rows as JSON")
    sweep.add_argument("--plot", metavar="FILE.png", help="line plot and roofline (one field) "
                       "or heatmap (two fields)")
    sweep.add_argument("--metric", default="time_us", help="the figure to plot (a CSV column; "
                       "default time_us)")
    sweep.add_argument("--force", action="store_true",
                       help="overwrite output files that are not ours")
    return parser


class _Parser(argparse.ArgumentParser):
    """A command-line mistake is one line and exit 2, like every other mistake."""

    def error(self, message: str):
        self.exit(2, f"error: {clip(message)} (see '{self.prog} --help')\n")


MAX_WORKERS = 256


def _count(text: str) -> int:
    """A positive integer option."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text[:40]!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} must be at least 1")
    return value


def _workers(text: str) -> int:
    value = _count(text)
    if value > MAX_WORKERS:
        raise argparse.ArgumentTypeError(f"{value} is more worker processes than the "
                                         f"{MAX_WORKERS} this machine could sensibly run")
    return value


def _max_cycles(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--max-cycles", type=_count, metavar="N", help="stop a run that passes N "
                        "simulated cycles (default: 1000 x the roofline bound + 10 million)")


def _overrides(parser: argparse.ArgumentParser, help_text: str) -> None:
    parser.add_argument("--set", dest="overrides", action="append", default=[],
                        metavar="PATH=VALUE", help=help_text)


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    try:
        commands = {"run": _run, "plan": _plan, "compare": _compare, "sweep": _sweep,
                    "tune": _tune}
        return commands[args.command](args)
    except SimulatorError as exc:
        lines = str(exc).splitlines() or [type(exc).__name__]
        for line in lines[:MAX_ERROR_LINES]:
            print(f"error: {clip(line)}", file=sys.stderr)
        if len(lines) > MAX_ERROR_LINES:
            print(f"error: ... and {len(lines) - MAX_ERROR_LINES:,} more problems",
                  file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # the reader of our output went away (`| head`): stop quietly, as Unix tools do
        sys.stdout = open(os.devnull, "w")  # noqa: SIM115 - lets the interpreter exit cleanly
        return 0


MAX_ERROR_LINES = 20          # problems printed; the rest are counted
MAX_ERROR_CHARS = 300         # one problem's line, whatever the user wrote


def clip(line: str) -> str:
    if len(line) <= MAX_ERROR_CHARS:
        return line
    return f"{line[:MAX_ERROR_CHARS]}... ({len(line) - MAX_ERROR_CHARS:,} more characters)"


def _run(args) -> int:
    from . import load_workload, simulate

    if args.json and args.json != "-":
        _check_writable(Path(args.json), args.force)
    if args.trace:
        _check_writable(Path(args.trace), args.force)
    workload = load_workload(args.workload, args.overrides)
    report = simulate(workload, args.max_cycles)
    if args.json == "-":
        print(report.to_json())
    else:
        print(report.summary())
    notes = []
    if args.json and args.json != "-":
        Path(args.json).write_text(report.to_json() + "\n", encoding="utf-8")
        notes.append(f"report written to {args.json}")
    if args.trace:
        report.write_chrome_trace(args.trace)
        notes.append(f"Chrome trace written to {args.trace} (open it in https://ui.perfetto.dev)")
    if args.plot:
        from .viz.plots import write_plots
        paths = write_plots(report, args.plot)
        notes.append("plots written: " + ", ".join(str(p) for p in paths))
    for note in notes:
        print(("\n" if note is notes[0] else "") + note, file=sys.stderr if args.json == "-"
              else sys.stdout)
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
    result = compare(args.workload, variants, common, args.max_cycles)
    if args.json == "-":
        print(json.dumps(result, indent=2))
        return 0
    print(render_compare(result))
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
        print(f"\ncomparison written to {args.json}")
    return 0


def _sweep(args) -> int:
    from .sweep import METRICS, parse_grid, sweep, write_csv

    grid = parse_grid(args.grid)
    if args.metric not in METRICS:
        raise SimulatorError(f"--metric {args.metric}: not a sweep figure (figures: "
                             f"{', '.join(METRICS)})")
    csv_path = Path(args.csv or f"{Path(args.workload).stem}-sweep.csv")
    outputs = [p for p in (csv_path, args.json and Path(args.json),
                           args.plot and Path(args.plot)) if p]
    for path in outputs:
        _check_writable(path, args.force)
    from . import load_workload
    load_workload(args.workload, args.overrides)          # fail fast on a broken base file
    if (args.executor == "dask") != bool(args.scheduler):
        raise SimulatorError("--executor dask and --scheduler ADDRESS go together")
    rows = sweep(args.workload, grid, args.overrides, workers=args.workers,
                 progress=sys.stderr.isatty(), scheduler=args.scheduler)
    fields = list(grid)
    width = max(12, *(len(f) + 2 for f in fields))
    print("".join(f"{f:>{width}}" for f in fields) + f"{'time µs':>12}{'TFLOPS':>9}"
          f"{'HBM TB/s':>10}{'bound':>9}  note")
    for row in rows:
        cells = "".join(f"{str(row[f]):>{width}}" for f in fields)
        if row["error"]:
            print(cells + f"{'-':>12}{'-':>9}{'-':>10}{'illegal':>9}  {row['error'][:80]}")
        else:
            print(cells + f"{row['time_us']:>12,.2f}{row['achieved_tflops']:>9.2f}"
                  f"{row['achieved_hbm_tbps']:>10.3f}{row['bound']:>9}")
    write_csv(rows, csv_path)
    print(f"\n{len(rows)} points written to {csv_path}")
    if args.json:
        Path(args.json).write_text(json.dumps({"workload": args.workload, "grid": grid,
                                               "overrides": args.overrides, "points": rows},
                                              indent=2) + "\n", encoding="utf-8")
        print(f"rows written to {args.json}")
    if args.plot:
        from .viz.plots import plot_sweep
        plot_sweep(rows, fields, args.metric, args.plot)
        print(f"plot written to {args.plot}")
    return 0


def _tune(args) -> int:
    import os
    import time

    from . import load_workload
    from .schedule.search import tune
    from .viz.table import describe_tiling

    if args.write:
        path = Path(args.write)
        if path.exists() and not args.force:
            raise SimulatorError(f"--write {path}: the file exists; choose another name or pass "
                                 "--force to overwrite it")
        if path.resolve() == Path(args.workload).resolve():
            raise SimulatorError(f"--write {path}: that is the workload being tuned; write the "
                                 "tuned copy to a new file")
    workload = load_workload(args.workload, args.overrides)
    started = time.perf_counter()
    results = tune(workload, top=args.top, workers=args.workers or os.cpu_count() or 1)
    elapsed = time.perf_counter() - started
    us = 1e6 / workload.hardware.clock_hz
    print(f"{workload.name} on {workload.hardware.name}: {len(results)} matmul kernels tuned "
          f"in {elapsed:.1f} s (each kernel simulated alone, L2 cold)\n")
    for r in results:
        print(f"  {r.kernel}: {r.legal} legal tilings, {r.simulated} simulated")
        for label, cycles, tiling in (("default", r.default_cycles, r.default),
                                      ("tuned", r.best_cycles, r.best)):
            print(f"    {label:<8} {cycles * us:>10,.2f} µs  {describe_tiling(tiling.to_dict())}")
        print(f"    roofline {r.roofline_cycles * us:>10,.2f} µs  (tuned is "
              f"{r.best_cycles / r.roofline_cycles:.2f}x the bound; default "
              f"{r.default_cycles / r.roofline_cycles:.2f}x; speedup "
              f"{r.default_cycles / r.best_cycles:.2f}x)")
    total_default = sum(r.default_cycles for r in results) * us
    total_best = sum(r.best_cycles for r in results) * us
    total_bound = sum(r.roofline_cycles for r in results) * us
    print(f"\n  matmul kernels together: default {total_default:,.2f} µs, tuned {total_best:,.2f} "
          f"µs, roofline {total_bound:,.2f} µs (tuned {total_best / total_bound:.2f}x the bound)")
    if args.write:
        _write_tuned(args, results)
        print(f"\ntuned workload written to {args.write}")
    return 0


def _write_tuned(args, results) -> None:
    import yaml

    from .config.strict import apply_overrides, read_yaml
    from .config.workload import parse_override

    pairs = [parse_override(o) for o in args.overrides if not o.startswith("hardware.")]
    raw = apply_overrides(read_yaml(args.workload), pairs, args.workload)
    schedule = raw.setdefault("schedule", {})
    tiling = schedule.setdefault("tiling", {}) or {}
    schedule["tiling"] = tiling
    for r in results:
        tiling[r.tiling_op] = r.best.to_dict()
    header = (f"# Tuned by `python -m simulator tune {args.workload}"
              + "".join(f" --set {o}" for o in args.overrides) + "`\n")
    Path(args.write).write_text(header + yaml.safe_dump(raw, sort_keys=False), encoding="utf-8")


def _check_writable(path: Path, force: bool) -> None:
    """Refuse to overwrite a file that is not one of our own reports, unless forced."""
    if not path.exists() or force:
        if path.parent != Path("") and not path.parent.is_dir():
            raise SimulatorError(f"--json {path}: folder '{path.parent}' does not exist")
        return
    ours = False
    if path.suffix == ".png":
        ours = path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"   # a picture, ours to redraw
    elif path.suffix == ".csv":
        header = path.read_text(encoding="utf-8", errors="replace").split("\n", 1)[0]
        ours = ",error,time_us," in f",{header},"
    else:
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            ours = any(key in data for key in ("provenance", "variants", "traceEvents",
                                               "points"))
        except (OSError, ValueError, TypeError):
            ours = False
    if not ours:
        raise SimulatorError(f"--json {path}: the file exists and is not a report written by "
                             "this simulator; choose another name or pass --force to overwrite it")
