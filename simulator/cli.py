"""Command line: argument parsing and printing only; the work happens in the pipeline.

Exit codes: 0 success, 2 a mistake in the input (one line per problem, no
traceback), 1 anything else.
"""

from __future__ import annotations

import io
import json
import os
import re
import signal
import sys
from pathlib import Path

from .cli_args import MAX_ERROR_LINES, MAX_VARIANTS, build_parser, clip
from .cli_infer import run_infer
from .cli_options import check_executor
from .cli_serve import run_serve
from .errors import OVERRIDE_MARK, SimulatorError, printable, quote
from .gc_pause import gc_paused
from .step_cache import ENV, OFF
from .studies.outputs import (
    CsvRows,
    Output,
    check_outputs,
    check_plot_folder,
    real_path,
    write_atomically,
    write_json,
)
from .studies.sweep import FIGURES, PLOTTABLE
from .version import NAME
from .workers import Stopped, stopping_on_sigterm


def main(argv: list[str] | None = None) -> int:
    called = Path(sys.argv[0]).stem  # the console command, or python -m simulator
    parser = build_parser(NAME if called == NAME else "python -m simulator")
    args = parser.parse_args(argv)
    args.prog = parser.prog
    hardware = getattr(args, "hardware_override", None)
    if hardware:  # as --set hardware=NAME, a file's path taken from here
        if Path(hardware).suffix in (".yaml", ".yml"):
            hardware = os.path.abspath(hardware)
        args.overrides.insert(0, f"hardware={hardware}")
    try:
        commands = {
            "run": _run,
            "plan": _plan,
            "compare": _compare,
            "sweep": _sweep,
            "tune": _tune,
            "infer": run_infer,
            "serve": run_serve,
            "figures": _figures,
            "cache": _cache,
            "examples": _examples,
        }
        _check_workload_exists(getattr(args, "workload", None), parser.prog)
        if getattr(args, "no_cache", False):  # for this process and the workers it starts
            os.environ[ENV] = OFF
        # `kill` stops a run as Ctrl-C does: its workers and temporary files go with it
        with gc_paused(), stopping_on_sigterm():
            return commands[args.command](args)
    except SimulatorError as exc:
        lines = str(exc).split("\n") if str(exc) else [type(exc).__name__]
        for line in lines[:MAX_ERROR_LINES]:
            print(f"error: {clip(printable(line), len('error: '))}", file=sys.stderr)
        if len(lines) > MAX_ERROR_LINES:
            print(f"error: ... and {len(lines) - MAX_ERROR_LINES:,} more problems", file=sys.stderr)
        return 2
    except KeyboardInterrupt as exc:
        signum = exc.signum if isinstance(exc, Stopped) else signal.SIGINT
        print(f"interrupted ({signal.Signals(signum).name})", file=sys.stderr)
        return 128 + signum
    except BrokenPipeError:
        # the reader of our output went away (`| head`): stop quietly, as Unix tools do
        _discard_stdout()
        return 0
    except OSError as exc:
        # the system refused a write our checks could not foresee (a disk full since, or
        # standard output sent to one): say so in one line, as for any other failure
        _discard_stdout()
        where = f"{exc.filename}: " if exc.filename else ""
        print(
            f"error: {clip(printable(where + str(exc.strerror or exc)), len('error: '))}",
            file=sys.stderr,
        )
        return 1


def _discard_stdout() -> None:
    """Send what is left of standard output nowhere, so the interpreter exits without a
    second error when it flushes it."""
    try:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    except (OSError, ValueError, AttributeError, io.UnsupportedOperation):
        sys.stdout = open(os.devnull, "w")  # noqa: SIM115 - stays open until the exit


def _check_workload_exists(path: str | None, prog: str) -> None:
    """A workload file that is not there, named as a shipped example, says how to get it."""
    from .config.strict import ConfigError
    from .examples import missing_file_hint

    if path and not os.path.exists(path) and (hint := missing_file_hint(path, prog)):
        raise ConfigError(path, [f"file not found{hint}"])


def _examples(args) -> int:
    from .examples import copy_examples, listing

    print(copy_examples(Path(args.copy), args.force) if args.copy else listing(args.prog))
    return 0


def _run(args) -> int:
    from . import load_workload, simulate

    outputs = {}
    if args.json and args.json != "-":
        outputs["json"] = Output("--json", Path(args.json), "json", args.force)
    if args.trace:
        outputs["trace"] = Output("--trace", Path(args.trace), "trace", args.force)
    check_outputs(list(outputs.values()), (args.workload,))
    if args.plot:  # matplotlib only when plots are asked for: it is slow to import
        from .viz.plots import PLOT_FILES, write_plots

        check_plot_folder("--plot", Path(args.plot), PLOT_FILES, args.force, list(outputs.values()))
    workload = load_workload(args.workload, args.overrides)
    only = None
    if args.trace_cores is not None or args.trace_kernels is not None:
        if not args.trace:
            raise SimulatorError(
                "--trace-cores and --trace-kernels limit a trace: add --trace FILE"
            )
        from .viz.chrome_trace import trace_limits

        only = trace_limits(workload, args.trace_cores, args.trace_kernels)
    report = simulate(workload, args.max_cycles)
    if args.json == "-":
        print(report.to_json())
    else:
        print(report.summary())
    notes = []
    if "json" in outputs:
        write_json(outputs["json"], "report", report.to_dict())
        notes.append(f"report written to {args.json}")
    if "trace" in outputs:
        write_atomically(outputs["trace"], lambda path: report.write_chrome_trace(path, only))
        notes.append(f"Chrome trace written to {args.trace} (open it in https://ui.perfetto.dev)")
    if args.plot:
        paths = write_plots(
            report,
            args.plot,
            lambda path, draw: write_atomically(Output("--plot", path, "png", args.force), draw),
        )
        notes.append("plots written: " + ", ".join(str(p) for p in paths))
    for note in notes:
        print(
            ("\n" if note is notes[0] else "") + note,
            file=sys.stderr if args.json == "-" else sys.stdout,
        )
    return 0


def _plan(args) -> int:
    from . import load_workload
    from .pipeline import plan
    from .viz.compare import render_plan

    workload = load_workload(args.workload, args.overrides)
    print(render_plan(workload, plan(workload)))
    return 0


def _figures(args) -> int:
    from .config.hardware import load_hardware, preset_names
    from .config.runtime import load_runtime, runtime_names
    from .viz.figures import figures_dict, render_figures

    runtimes = runtime_names()
    names = args.hardware or [*preset_names(), *runtimes]
    chips = [load_runtime(n) if n in runtimes else load_hardware(n) for n in names]
    if args.json:
        data = {chip.name: figures_dict(chip, args.kind) for chip in chips}
        print(json.dumps(data, indent=2, allow_nan=False))
    else:
        print("\n\n".join(render_figures(chip, args.kind) for chip in chips))
    return 0


def _cache(args) -> int:
    from .step_cache import cache_state, clear_cache
    from .units import format_bytes_decimal as fmt_bytes

    state = clear_cache() if args.clear else cache_state()
    if state.folder is None:
        print(f"the cache of simulated runs is off (${ENV}={os.environ.get(ENV)!r})")
        return 0
    held = f"{state.entries:,} run{'s' * (state.entries != 1)}, {fmt_bytes(state.nbytes)}"
    print(f"{'removed' if args.clear else 'holds'} {held}: {state.folder}")
    return 0


def variants_from(overrides: list[str], explicit: list[str]) -> tuple[list, list[str]]:
    """(variants as (label, overrides), overrides common to all) from the command line.

    A field given several times with --set is an axis (its values combine with the other
    axes'); each --variant adds one variant. Labels are never empty and never repeat."""
    import itertools

    from .config.strict import parse_override

    values: dict[str, list[str]] = {}
    for text in overrides:
        path = text.partition("=")[0].strip()
        if text not in values.setdefault(path, []):
            values[path].append(text)
    common = [texts[0] for texts in values.values() if len(texts) == 1]
    axes = [texts for texts in values.values() if len(texts) > 1]
    combos = [list(combo) for combo in itertools.product(*axes)] if axes else []
    for text in explicit:
        # a comma starts the next override only where PATH= follows it, so that a value
        # may hold commas (schedule.fusion=[[mm, act]])
        parts = [p.strip() for p in re.split(r",(?=[^,=\[\]{}]+=)", text) if p.strip()]
        if not parts or any("=" not in part for part in parts):
            raise SimulatorError(
                f"--variant {quote(text)}: give one or more PATH=VALUE, separated by commas"
            )
        combos.append(parts)
    if not combos:
        combos = [["schedule.fusion=none"], ["schedule.fusion=auto"]]
    if len(combos) > MAX_VARIANTS:
        raise SimulatorError(
            f"{len(combos):,} variants are more than the {MAX_VARIANTS} a "
            "side-by-side table can show; use sweep for a grid of values"
        )
    variants = list(zip(_labels(combos), combos))
    seen: dict[frozenset, str] = {}
    for label, combo in variants:
        key = frozenset(repr(parse_override(part)) for part in combo)  # 16 and 0x10 alike
        if key in seen:
            raise SimulatorError(
                f"the variant {quote(label)} is given twice; each variant must differ"
            )
        seen[key] = label
    return variants, common


def _labels(combos: list[list[str]]) -> list[str]:
    """Each override shown as the shortest tail of its field path that no other varied path
    ends with ('bandwidth=2TB/s', or 'HBM.bandwidth=2TB/s' when L2.bandwidth varies too)."""
    paths = {part.partition("=")[0].strip() for combo in combos for part in combo}

    def short(path: str) -> str:
        parts = path.split(".")
        for n in range(1, len(parts) + 1):
            tail = ".".join(parts[-n:])
            if not any(other == tail or other.endswith("." + tail) for other in paths - {path}):
                return tail
        return path

    return [
        " ".join(
            f"{short(part.partition('=')[0].strip())}={part.partition('=')[2].strip()}"
            for part in combo
        )
        for combo in combos
    ]


def _compare(args) -> int:
    from .studies.compare import compare
    from .viz.compare import render_compare

    out = (
        Output("--json", Path(args.json), "json", args.force)
        if args.json and args.json != "-"
        else None
    )
    check_outputs([out] if out else [], (args.workload,))
    variants, common = variants_from(args.overrides, args.variant)
    result = compare(args.workload, variants, common, args.max_cycles)
    if args.json == "-":
        print(json.dumps(result, indent=2, allow_nan=False))
        return 0
    print(render_compare(result))
    if out:
        write_json(out, "compare", result)
        print(f"\ncomparison written to {args.json}")
    return 0


def _sweep(args) -> int:
    from . import load_workload
    from .studies.sweep import (
        CONFIRM_ABOVE_POINTS,
        check_grid,
        estimate_seconds,
        parse_grid,
        point_count,
        sweep,
    )

    grid = parse_grid(args.grid)
    fields = list(grid)
    if args.metric not in FIGURES:
        raise SimulatorError(
            f"--metric {quote(args.metric)}: not a figure of the sweep CSV "
            "(e.g. time_us, achieved_tflops, util_MTE2; 'sweep --help' lists "
            "them all)"
        )
    if args.plot and len(fields) > 2:
        raise SimulatorError(
            f"--plot draws one grid field (the metric against it, and the "
            f"roofline) or two (a heatmap); this grid has {len(fields)}: "
            f"{', '.join(fields)}. Plot a sweep of one or two of them, or load "
            "the CSV into pandas"
        )
    if args.plot and args.metric not in PLOTTABLE:
        raise SimulatorError(
            f"--metric {args.metric}: not a number, so it cannot be plotted "
            f"(plottable: {', '.join(PLOTTABLE)})"
        )
    check_executor(args)
    csv_out = Output(
        "--csv", Path(args.csv or f"{Path(args.workload).stem}-sweep.csv"), "csv", args.force
    )
    json_out = Output("--json", Path(args.json), "json", args.force) if args.json else None
    plot_out = Output("--plot", Path(args.plot), "png", args.force) if args.plot else None
    check_outputs([o for o in (csv_out, json_out, plot_out) if o], (args.workload,))
    load_workload(args.workload, args.overrides)  # fail fast on a broken base file
    check_grid(args.workload, grid, args.overrides)
    count = point_count(grid)
    workers = args.workers or os.cpu_count() or 1
    if count > CONFIRM_ABOVE_POINTS and not args.yes:
        seconds, (first, last), took = estimate_seconds(
            args.workload, grid, args.overrides, workers
        )
        estimate = (
            f" (about {_duration(seconds)} on {min(workers, count)} workers: its first and "
            f"last points lower to {first:,} and {last:,} instructions, and the smaller took "
            f"{took:.1f} s here)"
            if first
            else ""
        )
        raise SimulatorError(
            f"the grid has {count:,} points{estimate}; pass --yes to run "
            "them all, or sweep fewer values"
        )
    saved = CsvRows(csv_out, fields)
    try:
        rows = sweep(
            args.workload,
            grid,
            args.overrides,
            workers=workers,
            progress=sys.stderr.isatty() and not args.quiet,
            scheduler=args.scheduler,
            max_cycles=args.max_cycles,
            on_row=saved.add,
        )
    except KeyboardInterrupt:
        print(
            f"the {saved.written:,} of {count:,} points that finished are in {csv_out.path}"
            if saved.written
            else f"no point finished: nothing written to {csv_out.path}",
            file=sys.stderr,
        )
        raise
    finally:
        saved.close()
    saved.finish(rows)
    width = max(12, *(len(f) + 2 for f in fields))
    print(
        "".join(f"{f:>{width}}" for f in fields) + f"{'time µs':>12}{'TFLOPS':>9}"
        f"{'HBM TB/s':>10}{'bound':>9}  note"
    )
    for row in rows:
        cells = "".join(f"{str(row[f])[: width - 1]:>{width}}" for f in fields)
        if row["error"]:
            print(cells + f"{'-':>12}{'-':>9}{'-':>10}{'illegal':>9}  {row['error'][:80]}")
        else:
            print(
                cells + f"{row['time_us']:>12,.2f}{row['achieved_tflops']:>9.2f}"
                f"{row['achieved_hbm_tbps']:>10.3f}{row['bound']:>9}"
            )
    print(f"\n{len(rows)} points written to {csv_out.path}")
    if all(row["error"] for row in rows):
        print("note: every point is illegal; the reasons are in the note column and the CSV")
    if json_out:
        write_json(
            json_out,
            "sweep",
            {"workload": args.workload, "grid": grid, "overrides": args.overrides, "points": rows},
        )
        print(f"rows written to {args.json}")
    if plot_out and all(row["error"] for row in rows):
        print(f"no plot written to {args.plot}: no point is legal")
    elif plot_out:
        from .viz.plots import plot_sweep

        write_atomically(plot_out, lambda path: plot_sweep(rows, fields, args.metric, path))
        print(f"plot written to {args.plot}")
    return 0


def _duration(seconds: float) -> str:
    if seconds < 90:
        return f"{max(1, round(seconds))} s"
    if seconds < 5400:
        return f"{round(seconds / 60)} min"
    return f"{seconds / 3600:.1f} h"


def _tune(args) -> int:
    import time

    from tqdm import tqdm

    from . import load_workload
    from .config.strict import HARDWARE_PREFIX
    from .pipeline import plan
    from .studies.search import tune
    from .viz.table import describe_tiling

    out = Output("--write", Path(args.write), "yaml", args.force) if args.write else None
    changed = [o for o in args.overrides if o.strip().startswith(HARDWARE_PREFIX)]
    if out and changed:
        raise SimulatorError(
            f"--write cannot keep {OVERRIDE_MARK}{quote(changed[0])}: a "
            "workload names its hardware, it does not change it; write a "
            "hardware file with that value and name it in the workload's "
            "hardware field (a path ending in .yaml)"
        )
    workload = load_workload(args.workload, args.overrides)
    check_outputs([out] if out else [], (args.workload, workload.hardware.source))
    started = time.perf_counter()
    matmuls = sum(1 for k in plan(workload).kernels if k.gemms and not k.attention)
    bar = (
        tqdm(total=matmuls, desc=f"tune {args.workload}", unit="kernel", leave=False)
        if sys.stderr.isatty() and matmuls and not args.quiet
        else None
    )
    try:
        results = tune(
            workload,
            top=args.top,
            workers=args.workers or os.cpu_count() or 1,
            on_kernel=(lambda _: bar.update()) if bar is not None else None,
        )
    finally:
        if bar is not None:
            bar.close()
    elapsed = time.perf_counter() - started
    us = 1e6 / workload.hardware.clock_hz
    energy = workload.hardware.energy
    capped = (
        ", at the full clock: run holds one past the power cap at its capped clock"
        if energy is not None and energy.cap_clock_hz is not None
        else ""
    )
    print(
        f"{workload.name} on {workload.hardware.name}: {len(results)} matmul kernels tuned "
        f"in {elapsed:.1f} s (each kernel simulated alone, L2 cold{capped})\n"
    )
    for r in results:
        print(f"  {r.kernel}: {r.legal} legal tilings, {r.simulated} simulated")
        for label, cycles, tiling in (
            ("default", r.default_cycles, r.default),
            ("tuned", r.best_cycles, r.best),
        ):
            print(f"    {label:<8} {cycles * us:>10,.2f} µs  {describe_tiling(tiling.to_dict())}")
        print(
            f"    roofline {r.roofline_cycles * us:>10,.2f} µs  (tuned is "
            f"{r.best_cycles / r.roofline_cycles:.2f}x the bound; default "
            f"{r.default_cycles / r.roofline_cycles:.2f}x; speedup "
            f"{r.default_cycles / r.best_cycles:.2f}x)"
        )
    total_default = sum(r.default_cycles for r in results) * us
    total_best = sum(r.best_cycles for r in results) * us
    total_bound = sum(r.roofline_cycles for r in results) * us
    print(
        f"\n  matmul kernels together: default {total_default:,.2f} µs, tuned {total_best:,.2f} "
        f"µs, roofline {total_bound:,.2f} µs (tuned {total_best / total_bound:.2f}x the bound)"
    )
    if out:
        _write_tuned(args, results, out)
        print(f"\ntuned workload written to {args.write}")
    return 0


def _write_tuned(args, results, out: Output) -> None:
    """The workload as the user wrote it, with the overrides applied and the tuned tilings;
    a relative hardware path is rewritten so that it still leads to its file from `out`."""
    import shlex

    import yaml

    from .config.strict import apply_overrides, parse_override, read_yaml

    pairs = [parse_override(o) for o in args.overrides]
    raw = apply_overrides(read_yaml(args.workload), pairs, args.workload)
    hardware = Path(str(raw["hardware"]))
    if hardware.suffix in (".yaml", ".yml") and not hardware.is_absolute():
        target = real_path(real_path(args.workload).parent / hardware)
        try:
            raw["hardware"] = os.path.relpath(target, real_path(out.path).parent)
        except ValueError:  # another drive: only an absolute path leads there
            raw["hardware"] = str(target)
    schedule = raw["schedule"] = raw.get("schedule") or {}
    tiling = schedule["tiling"] = schedule.get("tiling") or {}
    for r in results:
        for name in r.joined_ops:
            tiling.pop(name, None)
        tiling[r.tiling_op] = r.best.to_dict()
    command = " ".join(
        shlex.quote(part)
        for part in [
            "python",
            "-m",
            "simulator",
            "tune",
            args.workload,
            *(f"--set={o}" for o in args.overrides),
        ]
    )
    header = f"# Tuned by {command}".replace("\n", "\\n").replace("\r", "\\r") + "\n"
    text = header + yaml.safe_dump(raw, sort_keys=False)
    write_atomically(out, lambda path: path.write_text(text, encoding="utf-8"))
