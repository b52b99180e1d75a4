"""The command line's grammar: its commands, their options and what each option accepts.
A mistake in it is one line and exit 2, like every other mistake."""

from __future__ import annotations

import argparse

from .cli_options import (
    MODEL_SETS,
    add_executor,
    add_no_cache,
    add_overrides,
    add_quiet,
    count,
    file_name,
    whole,
    worker_count,
)
from .cli_serve import add_serve
from .config.figures import CLASSES, OVERRIDE, UNCLASSIFIED
from .config.hardware import preset_names
from .config.model import model_names
from .config.runtime import runtime_names
from .config.transformer import KV_CACHE_DTYPES, WEIGHT_DTYPES
from .errors import printable
from .step_cache import ENV, OFF
from .studies.sweep import PLOTTABLE
from .version import NAME, __version__

FIGURE_CLASSES = (*CLASSES, OVERRIDE, UNCLASSIFIED)


def build_parser(prog: str = "python -m simulator") -> argparse.ArgumentParser:
    """The grammar; `prog` is how the user called it (the console command npu-memsim, or
    python -m simulator)."""
    parser = _Parser(prog=prog, description="Cycle-approximate NPU memory-hierarchy simulator.")
    parser.add_argument("--version", action="version", version=f"{NAME} {__version__}")
    presets = ", ".join(preset_names())  # read once: six commands name them
    sub = parser.add_subparsers(
        dest="command", required=True, metavar="COMMAND", parser_class=_Parser
    )
    run = sub.add_parser(
        "run",
        help="simulate a workload and print its report",
        description="Simulate a workload on its hardware and print the report.",
    )
    run.add_argument("workload", help="workload YAML file, e.g. workloads/ffn_decode.yaml")
    _hardware(run, presets)
    add_overrides(
        run,
        "override any field, e.g. params.tokens=2048 or "
        "hardware.HBM.bandwidth=2.4TB/s (repeatable)",
    )
    run.add_argument(
        "--json",
        type=file_name,
        metavar="FILE",
        help="also write the full report as JSON ('-' for standard output)",
    )
    run.add_argument(
        "--force",
        action="store_true",
        help="overwrite an existing --json/--trace file that is not ours",
    )
    run.add_argument(
        "--trace",
        type=file_name,
        metavar="FILE",
        help="write a Chrome trace (open it in Perfetto "
        "or chrome://tracing): one track per pipe per core; FILE.json.gz gzips it",
    )
    run.add_argument(
        "--trace-cores",
        type=_core_list,
        metavar="LIST",
        help="keep only these cores in the trace, e.g. 0-3,8 (numbered from 0)",
    )
    run.add_argument(
        "--trace-kernels",
        metavar="NAMES",
        help="keep only these kernels in the trace: names or shell patterns, comma-"
        "separated, e.g. 'l0_*,lm_head'",
    )
    run.add_argument(
        "--plot",
        type=file_name,
        metavar="DIR",
        help="write roofline, timeline, traffic and utilization PNGs into DIR",
    )
    _max_cycles(run)

    plan = sub.add_parser(
        "plan",
        help="show the kernels the fusion pass forms, and why",
        description="Print the kernels, the ops in each, and for every op left unfused the reason.",
    )
    plan.add_argument("workload")
    _hardware(plan, presets)
    add_overrides(plan, "override any field (repeatable)")

    compare = sub.add_parser(
        "compare",
        help="simulate variants of a workload side by side",
        description="Simulate variants of one workload side by side. A field given several "
        "times with --set is a variant axis (one variant per value, or per "
        "combination when several fields vary); fields given once apply to all. "
        "Without any axis the variants are schedule.fusion=none and =auto.",
    )
    compare.add_argument("workload")
    _hardware(compare, presets)
    add_overrides(
        compare, "a value for all variants, or (repeated with other values) a variant axis"
    )
    compare.add_argument(
        "--variant",
        action="append",
        default=[],
        metavar="P=V[,P=V...]",
        help="one explicit variant: overrides separated by commas",
    )
    compare.add_argument(
        "--json",
        type=file_name,
        metavar="FILE",
        help="also write the comparison as JSON ('-' for standard output)",
    )
    compare.add_argument(
        "--force",
        action="store_true",
        help="overwrite an existing --json file that is not a report of ours",
    )
    _max_cycles(compare)

    figures = sub.add_parser(
        "figures",
        help="list a chip's figures by class: datasheet, measured, fitted, assumed",
        description="List every figure of the presets and runtime profiles (or of the "
        "hardware files given) by class: datasheet, microbenchmark, vendor model, fitted "
        "(with the validation rows it was fitted on, which cannot then validate it) or "
        "assumption, with the sources cited.",
    )
    figures.add_argument(
        "hardware",
        nargs="*",
        help="presets, runtime profiles or hardware files (default: every preset and runtime)",
    )
    figures.add_argument(
        "--class", dest="kind", choices=FIGURE_CLASSES, help="only the figures of this class"
    )
    figures.add_argument("--json", action="store_true", help="print JSON instead of tables")

    infer = sub.add_parser(
        "infer",
        help="simulate a model's inference: time to first token, time per token, memory",
        description="Generate every step of one inference request from a model config "
        "(a shipped name or a Hugging Face config.json), simulate it and report the time to "
        "first token, the time per output token, where the time goes and the memory it "
        "needs. Layers that repeat and decode contexts between simulated ones are reused and "
        "interpolated (the report says how); --exact simulates everything.",
    )
    infer.add_argument(
        "model",
        help=f"a shipped model ({', '.join(model_names())}; any case) or a config.json path",
    )
    infer.add_argument(
        "--hardware",
        default="ascend910",
        help=f"a preset ({presets}; any case) or a hardware file (default ascend910)",
    )
    infer.add_argument("--batch", type=count, default=1, help="sequences at once (default 1)")
    infer.add_argument(
        "--prompt", type=count, default=128, help="prompt tokens per sequence (default 128)"
    )
    infer.add_argument(
        "--generate",
        type=whole,
        default=128,
        help="tokens generated per sequence (default 128; 0: the prefill alone)",
    )
    infer.add_argument(
        "--fusion", choices=("none", "auto"), default="auto", help="fusion pass (default auto)"
    )
    infer.add_argument(
        "--weights",
        choices=WEIGHT_DTYPES,
        default="fp16",
        help="weights: fp16 (default), int8 (W8A8: activations quantized too), w8a16 (int8 "
        "weights alone, converted to fp16 as they reach the matrix unit) or fp8 (W8A8 in fp8 "
        "e4m3, on a chip whose matrix unit has an fp8 mode: h100, h200)",
    )
    infer.add_argument(
        "--kv-cache",
        choices=KV_CACHE_DTYPES,
        default="fp16",
        help="the KV cache's dtype: fp16 (default), fp8 (e4m3) or int8, one scale per "
        "tensor; new K and V rows are quantized as they are written, cached blocks converted "
        "to fp16 on chip as the attention reads them (on any chip)",
    )
    infer.add_argument(
        "--chips",
        type=count,
        default=1,
        help="chips in tensor parallel: heads and MLP columns split, an all-reduce after "
        "attention and after the MLP over the preset's link (default 1)",
    )
    infer.add_argument(
        "--runtime",
        metavar="RUNTIME",
        help=f"the software driving the chip: a profile ({', '.join(runtime_names())}; "
        "python -m simulator figures RUNTIME shows its figures) or a runtime file; "
        "its launch costs replace the hardware file's and its host time joins every step "
        "(default: the hardware file's launch figures, no host time)",
    )
    infer.add_argument(
        "--exact", action="store_true", help="simulate every layer of every decode step"
    )
    infer.add_argument(
        "--sample",
        action="store_true",
        help="simulate a matmul's repeating K chunks or blocks in part and extrapolate the rest "
        "(faster; each kernel states an error estimate; not yet the default: see README)",
    )
    infer.add_argument(
        "--yes",
        action="store_true",
        help="run a request of more than 2,000 simulated layer-steps without asking",
    )
    add_quiet(infer)
    add_no_cache(infer, "steps")
    add_overrides(infer, MODEL_SETS)
    infer.add_argument(
        "--compare",
        action="append",
        metavar="FIELD=V1,V2,...",
        help="simulate a request per value and show them side by side (hardware, model, "
        "batch, prompt, generate, chips, weights, kv_cache, fusion or runtime; repeat to "
        "combine fields, up to 12 requests): --compare hardware=a100,h100",
    )
    infer.add_argument(
        "--json", type=file_name, metavar="FILE", help="also write the report as JSON ('-': stdout)"
    )
    infer.add_argument(
        "--csv", type=file_name, metavar="FILE", help="also write a CSV, one row per request"
    )
    infer.add_argument(
        "--plot",
        type=file_name,
        metavar="FILE.png",
        help="also draw the times and where they go, one bar per request",
    )

    infer.add_argument(
        "--force",
        action="store_true",
        help="overwrite an existing --json, --csv or --plot file that is not ours",
    )

    add_serve(sub, presets)

    tune = sub.add_parser(
        "tune",
        help="search the tiling of every matmul kernel",
        description="For each matmul kernel: enumerate the legal tilings, rank them with the "
        "analytic model, simulate the most promising and the default (each kernel "
        "alone), and report the chosen tiling against the default and the roofline.",
    )
    tune.add_argument("workload")
    _hardware(tune, presets)
    add_overrides(tune, "override any field first (repeatable)")
    tune.add_argument(
        "--top",
        type=count,
        default=4,
        help="how many of the best-ranked tilings to simulate (default 4)",
    )
    tune.add_argument(
        "--workers",
        type=worker_count,
        default=None,
        help="worker processes (default: the number of cores)",
    )
    tune.add_argument(
        "--write", type=file_name, metavar="FILE", help="save the workload with the tuned tilings"
    )
    tune.add_argument("--force", action="store_true", help="overwrite FILE if it exists")
    add_quiet(tune)
    add_no_cache(tune, "kernel runs")

    sweep = sub.add_parser(
        "sweep",
        help="simulate a grid of overrides in parallel; write a tidy CSV",
        description="Simulate every combination of the --grid values (any workload, schedule "
        "or hardware field) in worker processes, and write one CSV row per point. "
        "Illegal points (a tile that does not fit) are rows with their reason.",
    )
    sweep.add_argument("workload")
    _hardware(sweep, presets)
    sweep.add_argument(
        "--grid",
        action="append",
        default=[],
        metavar="FIELD=V1,V2,...",
        help="a field and its values, e.g. params.tokens=1,8,64 (repeatable; "
        "two fields make a heatmap)",
    )
    add_overrides(sweep, "a value for every point (repeatable)")
    sweep.add_argument(
        "--workers",
        type=worker_count,
        default=None,
        help="worker processes (default: the number of cores)",
    )
    add_executor(sweep, "the points")
    sweep.add_argument(
        "--csv", type=file_name, metavar="FILE", help="CSV path (default: <workload>-sweep.csv)"
    )
    sweep.add_argument("--json", type=file_name, metavar="FILE", help="also write the rows as JSON")
    sweep.add_argument(
        "--plot",
        type=file_name,
        metavar="FILE.png",
        help="line plot and roofline (one field) or heatmap (two fields)",
    )
    sweep.add_argument(
        "--metric",
        default="time_us",
        help="the figure to plot, a column of the CSV (default time_us): " + ", ".join(PLOTTABLE),
    )
    sweep.add_argument(
        "--force", action="store_true", help="overwrite output files that are not ours"
    )
    sweep.add_argument(
        "--yes", action="store_true", help="run a grid of more than 100 points without asking"
    )
    add_quiet(sweep)
    add_no_cache(sweep, "points")
    _max_cycles(sweep)

    cache = sub.add_parser(
        "cache",
        help="say what the cache of simulated runs holds, or empty it",
        description="infer's steps, sweep's points and tune's kernel runs are kept once "
        "simulated, keyed by "
        "their whole content and the simulator's code, so a repeated one costs a file "
        f"read. The folder: ${ENV} if set ('{OFF}' turns the cache off), else "
        "$XDG_CACHE_HOME/npu-memsim, else ~/.cache/npu-memsim.",
    )
    cache.add_argument("--clear", action="store_true", help="remove every cached run")

    examples = sub.add_parser(
        "examples",
        help="list the example workloads and labs that ship with the package, or copy them",
        description="The workloads (run, plan, sweep, tune, compare take them) and the labs "
        "(Jupyter notebooks) ship inside the package; --copy puts them in a folder of your "
        "own, the labs beside the workloads they read.",
    )
    examples.add_argument(
        "--copy",
        metavar="DIR",
        help="copy them into DIR/workloads and DIR/notebooks (created if missing)",
    )
    examples.add_argument(
        "--force", action="store_true", help="overwrite files there that differ from them"
    )
    return parser


MAX_VARIANTS = 32


class _Parser(argparse.ArgumentParser):
    """A command-line mistake is one line and exit 2, like every other mistake."""

    def error(self, message: str):
        see = f" (see '{self.prog} --help')"
        self.exit(2, f"error: {clip(printable(message), len('error: ') + len(see))}{see}\n")


def _core_list(text: str) -> frozenset[int]:
    """Core numbers and ranges: 0-3,8."""
    cores: set[int] = set()
    for part in text.split(","):
        first, _, last = part.strip().partition("-")
        try:
            low, high = int(first), int(last or first)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"{part.strip()[:40]!r} is not a core number or a range like 0-3"
            ) from None
        if not 0 <= low <= high:
            raise argparse.ArgumentTypeError(
                f"{part.strip()!r}: cores are numbered from 0, a range low-high"
            )
        cores.update(range(low, high + 1))
    return frozenset(cores)


def _cycle_budget(text: str) -> int:
    from .engine.world import MAX_RUN_CYCLES

    value = count(text)
    if value > MAX_RUN_CYCLES:
        raise argparse.ArgumentTypeError(
            f"{value:,} is more than the {MAX_RUN_CYCLES:,} cycles the simulator can follow"
        )
    return value


def _max_cycles(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--max-cycles",
        type=_cycle_budget,
        metavar="N",
        help="stop a run that "
        "passes N simulated cycles (default: 1000 x the roofline bound + 10 "
        "million)",
    )


def _hardware(parser: argparse.ArgumentParser, presets: str) -> None:
    """`--hardware NAME`: the workload run on another chip (main passes it on as --set
    hardware=NAME, so a --set of another hardware beside it is refused as any two are)."""
    parser.add_argument(
        "--hardware",
        dest="hardware_override",
        metavar="NAME",
        help=f"a preset ({presets}; any case) or a hardware file, in place "
        "of the workload's (as --set hardware=NAME)",
    )


MAX_ERROR_LINES = 20  # problems printed; the rest are counted
MAX_ERROR_CHARS = 300  # one problem's line, whatever the user wrote


def clip(text: str, beside: int = 0) -> str:
    """`text` cut in its middle (a long path or value) to fit an error line of
    MAX_ERROR_CHARS with `beside` characters of its own, keeping the end, where the rule is."""
    room = MAX_ERROR_CHARS - beside
    if len(text) <= room:
        return text
    keep = room - len(f" [... {len(text):,} characters ...] ")
    return (
        f"{text[: keep // 2]} [... {len(text) - keep:,} characters ...] "
        f"{text[len(text) - (keep - keep // 2) :]}"
    )
