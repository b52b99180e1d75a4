"""`serve`: a stream of requests through a batching scheduler, to the terminal, JSON and a
CSV of per-request rows. The requests, the model, the chip and every output are checked
before anything is simulated."""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path

from .cli_options import (
    MODEL_SETS,
    add_executor,
    add_no_cache,
    add_overrides,
    add_quiet,
    check_executor,
    count,
    file_name,
    split_overrides,
    whole,
    worker_count,
)
from .errors import SimulatorError
from .studies.outputs import Output, check_outputs, write_atomically, write_csv, write_json
from .units import UnitError, parse_size
from .version import format_mark

_TIME = re.compile(r"(?P<num>[0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)\s*(?P<unit>us|ms|s)")
_SECONDS = {"us": 1e-6, "ms": 1e-3, "s": 1.0}


def add_serve(sub, presets: str) -> None:
    """The `serve` command's grammar, on the commands' subparsers."""
    from .config.model import model_names
    from .config.runtime import runtime_names
    from .config.transformer import KV_CACHE_DTYPES, WEIGHT_DTYPES

    serve = sub.add_parser(
        "serve",
        help="simulate serving a stream of requests: latency percentiles, throughput, SLOs",
        description="Serve requests from a trace file or a Poisson generator with a batching "
        "scheduler and a paged KV cache; every engine step is timed from whole-model steps "
        "simulated at a few batch sizes, contexts and prompt lengths, interpolated between "
        "(the report says which, and how far the lines are off where it can check them).",
    )
    serve.add_argument(
        "model",
        help=f"a shipped model ({', '.join(model_names())}; any case) or a config.json path",
    )
    serve.add_argument(
        "--hardware",
        default="ascend910",
        help=f"a preset ({presets}; any case) or a hardware file (default ascend910)",
    )
    serve.add_argument(
        "--trace",
        type=file_name,
        metavar="FILE",
        help="requests from a .jsonl or .csv file with the fields arrival_s, prompt_tokens, "
        "output_tokens (arrivals in order)",
    )
    serve.add_argument(
        "--rate", type=float, metavar="R", help="or Poisson arrivals, R requests a second"
    )
    serve.add_argument(
        "--concurrency",
        type=count,
        metavar="N",
        help="or N clients, each sending the next request when its last one has finished "
        "(a closed loop, as benchmarks at a fixed concurrency run)",
    )
    serve.add_argument("--num", type=count, default=100, help="requests generated (default 100)")
    serve.add_argument(
        "--prompt-len",
        default="fixed:512",
        metavar="DIST",
        help="generated prompts' tokens: fixed:N, uniform:LOW-HIGH or lognormal:MEAN,SD "
        "(default fixed:512)",
    )
    serve.add_argument(
        "--output-len",
        default="fixed:128",
        metavar="DIST",
        help="generated outputs' tokens, as --prompt-len (default fixed:128)",
    )
    serve.add_argument("--seed", type=whole, default=0, help="the generator's seed (default 0)")
    serve.add_argument(
        "--policy",
        choices=("continuous", "chunked", "static"),
        default="continuous",
        help="continuous batching (vLLM's: prefills first, preempting the newest request "
        "when the KV cache is full), chunked prefill (Sarathi's: decodes first, prompts in "
        "chunks filling a step's token budget) or static batches (default continuous)",
    )
    serve.add_argument(
        "--max-batch", type=count, default=256, help="sequences a step holds (default 256)"
    )
    serve.add_argument(
        "--max-step-tokens",
        type=count,
        metavar="N",
        help="tokens a prefill step holds (default 2,048 or the longest prompt; chunked: 512)",
    )
    serve.add_argument(
        "--block-tokens", type=count, default=16, help="KV cache positions a block (default 16)"
    )
    serve.add_argument(
        "--kv-cache-memory",
        metavar="SIZE",
        help="HBM a chip gives the KV cache, e.g. 20GB (default: all that the weights and "
        "activations leave)",
    )
    serve.add_argument(
        "--slo",
        metavar="ttft=T,tpot=T",
        help="latency targets for goodput, e.g. ttft=500ms,tpot=50ms (ms, s or us)",
    )
    serve.add_argument(
        "--find-capacity",
        action="store_true",
        help="find the highest --rate whose requests meet --slo (a bracketing search from "
        "--rate, each point a simulation of the same requests at another rate)",
    )
    serve.add_argument(
        "--attainment",
        type=float,
        default=0.9,
        help="the share of requests that must meet --slo for a rate to count (default 0.9)",
    )
    serve.add_argument(
        "--rates-at-once",
        type=count,
        default=1,
        metavar="N",
        help="rates a capacity search tries at once, each round the next N doublings, then "
        "the bracket split in N + 1 (default 1; N points keep more --workers busy)",
    )
    serve.add_argument("--chips", type=count, default=1, help="chips in tensor parallel")
    serve.add_argument(
        "--runtime",
        metavar="RUNTIME",
        help=f"the software driving the chip, as infer's: a profile ({', '.join(runtime_names())}) "
        "or a runtime file; its launch costs and host time join every step",
    )
    serve.add_argument("--weights", choices=WEIGHT_DTYPES, default="fp16", help="as infer's")
    serve.add_argument("--kv-cache", choices=KV_CACHE_DTYPES, default="fp16", help="as infer's")
    serve.add_argument(
        "--sample", action="store_true", help="sample the simulated steps' matmuls (as infer's)"
    )
    serve.add_argument(
        "--workers",
        type=worker_count,
        default=None,
        help="processes simulating whole-model steps side by side (default: the number of cores)",
    )
    add_executor(serve, "the whole-model steps")
    add_overrides(serve, MODEL_SETS)
    add_quiet(serve)
    add_no_cache(serve, "simulated steps")
    serve.add_argument(
        "--json", type=file_name, metavar="FILE", help="also write the report as JSON ('-': stdout)"
    )
    serve.add_argument(
        "--csv", type=file_name, metavar="FILE", help="also write a CSV, one row per request"
    )
    serve.add_argument(
        "--timeline",
        type=file_name,
        metavar="FILE.json",
        help="also write a Perfetto timeline (ui.perfetto.dev or chrome://tracing): the "
        "engine's steps, and a track per request; FILE.json.gz gzips it",
    )
    serve.add_argument(
        "--plot",
        type=file_name,
        metavar="FILE.png",
        help="also draw the batch, the queue, the KV cache and each request's latency over "
        "time (with --find-capacity: latency and the share that met --slo against the rate)",
    )
    serve.add_argument(
        "--force", action="store_true", help="overwrite files there that differ from them"
    )


def run_serve(args) -> int:
    from tqdm import tqdm

    from .config.hardware import load_hardware
    from .config.model import load_model
    from .config.runtime import load_runtime
    from .studies.serving import Deployment, Lengths, find_capacity, generate, load_trace

    named = (
        ("--json", args.json, "json"),
        ("--csv", args.csv, "csv"),
        ("--timeline", args.timeline, "trace"),
        ("--plot", args.plot, "png"),
    )
    outputs = {
        kind: Output(option, Path(name), kind, args.force)
        for option, name, kind in named
        if name and name != "-"
    }
    slo = parse_slo(args.slo)
    kv_memory = None
    if args.kv_cache_memory is not None:
        try:
            kv_memory = parse_size(args.kv_cache_memory)
        except UnitError as exc:
            raise SimulatorError(f"--kv-cache-memory: {exc}") from None
    if sum(x is not None for x in (args.trace, args.rate, args.concurrency)) != 1:
        raise SimulatorError(
            "give the requests as --trace FILE, --rate R or --concurrency N (with --num N)"
        )
    if args.find_capacity and (args.rate is None or slo.ttft_s is None and slo.tpot_s is None):
        raise SimulatorError(
            "--find-capacity varies the rate of generated requests to meet a target: give "
            "--rate R (its first guess) and --slo ttft=T,tpot=T"
        )
    if not 0 < args.attainment <= 1:
        raise SimulatorError(
            f"--attainment: a share above 0 and at most 1, got {args.attainment:g}"
        )
    check_executor(args)
    model_sets, hardware_sets = split_overrides(args.overrides)
    model, hardware = (
        load_model(args.model, model_sets),
        load_hardware(args.hardware, hardware_sets),
    )
    runtime = None if args.runtime in (None, "none") else load_runtime(args.runtime)
    sources = (
        model.source,
        hardware.source,
        *([runtime.source] if runtime else []),
        *([args.trace] if args.trace else []),
    )
    check_outputs(list(outputs.values()), tuple(str(s) for s in sources))
    if args.trace is not None:
        requests = load_trace(args.trace)
        workload = f"trace {args.trace}"
    else:
        prompt = Lengths.parse("--prompt-len", args.prompt_len)
        output = Lengths.parse("--output-len", args.output_len)
        requests = generate(args.rate or 1.0, args.num, prompt, output, args.seed)
        arrivals = (
            f"Poisson {args.rate:g}/s"
            if args.concurrency is None
            else f"{args.concurrency} clients in a closed loop"
        )
        workload = f"{arrivals}, prompts {prompt}, outputs {output}, seed {args.seed}"
    tty = sys.stderr.isatty() and not args.quiet
    bar = tqdm(desc=f"serve {model.name}", unit="step", leave=False) if tty else None

    def on_step(what: str) -> None:
        if bar is not None:
            bar.set_postfix_str(what)
            bar.update(1)

    options = {
        "chips": args.chips,
        "policy": args.policy,
        "max_batch": args.max_batch,
        "max_step_tokens": args.max_step_tokens,
        "block_tokens": args.block_tokens,
        "kv_cache_bytes_per_chip": kv_memory,
        "weights": args.weights,
        "kv_cache": args.kv_cache,
        "sample": args.sample,
        "runtime": runtime,
        "workers": args.workers or os.cpu_count() or 1,
        "scheduler": args.scheduler,
        "on_step": on_step,
    }
    try:
        with Deployment(model, hardware, requests, **options) as deployment:
            if args.find_capacity:
                found = find_capacity(
                    deployment,
                    lambda rate: generate(rate, args.num, prompt, output, args.seed),
                    slo,
                    args.rate,
                    args.attainment,
                    parallel=args.rates_at_once,
                )
                best = found.at_capacity
                report, kind, data = (
                    None if best is None else best.report,
                    "serving-capacity",
                    found.to_dict(),
                )
                lines = [*found.summary(), ""]
            else:
                report = deployment.serve(requests, slo, workload, args.concurrency)
                kind, data, lines = "serving", report.to_dict(), []
    finally:
        if bar is not None:
            bar.close()
    if args.json == "-":
        print(json.dumps({"format": format_mark(kind), **data}, indent=2, allow_nan=False))
    else:
        print("\n".join(lines + ([] if report is None else report.summary())))
    written = []
    if "json" in outputs:
        write_json(outputs["json"], kind, data)
        written.append(f"report written to {args.json}")
    if args.find_capacity and "png" in outputs:
        from .viz.serving import plot_capacity

        write_atomically(outputs.pop("png"), lambda path: plot_capacity(found, path))
        written.append(f"latency against load plotted to {args.plot}")
    if report is not None:
        written += _write_views(report, outputs, args)
    elif set(outputs) - {"json"}:
        written.append("no rate met the target: no rows or timeline written")
    if written and args.json != "-":
        print("\n" + "\n".join(written))
    return 0


def _write_views(report, outputs: dict[str, Output], args) -> list[str]:
    """The report's rows, timeline and plot, where asked for; what was written."""
    from .studies.serving.report import CSV_COLUMNS

    written = []
    if "csv" in outputs:
        rows = report.rows()
        write_csv(outputs["csv"], CSV_COLUMNS, rows)
        written.append(f"{len(rows):,} rows written to {args.csv}")
    if "trace" in outputs:
        from .viz.serving import write_serving_trace

        write_atomically(outputs["trace"], lambda path: write_serving_trace(report, path))
        written.append(f"timeline written to {args.timeline}")
    if "png" in outputs:
        from .viz.serving import plot_serving

        write_atomically(outputs["png"], lambda path: plot_serving(report, path))
        written.append(f"plot written to {args.plot}")
    return written


def parse_slo(text: str | None):
    """`ttft=500ms,tpot=50ms` (either may be left out) as an Slo."""
    from .studies.serving import Slo

    if text is None:
        return Slo()
    found: dict[str, float] = {}
    for part in text.split(","):
        name, _, value = part.strip().partition("=")
        match = _TIME.fullmatch(value.strip())
        if name not in ("ttft", "tpot") or match is None or name in found:
            raise SimulatorError(
                f"--slo {text}: write ttft=TIME,tpot=TIME (each at most once, TIME in ms, s "
                f"or us, e.g. ttft=500ms,tpot=50ms); {part.strip()!r} is not one"
            )
        seconds = float(match["num"]) * _SECONDS[match["unit"]]
        if seconds <= 0:
            raise SimulatorError(f"--slo {text}: {name} must be above 0")
        found[name] = seconds
    return Slo(found.get("ttft"), found.get("tpot"))
