"""`serve`: a stream of requests through a batching scheduler, to the terminal, JSON and a
CSV of per-request rows. The requests, the model, the chip and every output are checked
before anything is simulated."""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path

from .errors import SimulatorError
from .outputs import Output, check_outputs, write_csv, write_json
from .units import UnitError, parse_size
from .version import format_mark

_TIME = re.compile(r"(?P<num>[0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)\s*(?P<unit>us|ms|s)")
_SECONDS = {"us": 1e-6, "ms": 1e-3, "s": 1.0}


def run_serve(args) -> int:
    from tqdm import tqdm

    from .config.hardware import load_hardware
    from .config.model import load_model
    from .serving import Lengths, generate, load_trace, serve
    from .serving.report import CSV_COLUMNS

    outputs = {
        kind: Output(option, Path(name), kind, args.force)
        for option, name, kind in (("--json", args.json, "json"), ("--csv", args.csv, "csv"))
        if name and name != "-"
    }
    slo = parse_slo(args.slo)
    kv_memory = None
    if args.kv_cache_memory is not None:
        try:
            kv_memory = parse_size(args.kv_cache_memory)
        except UnitError as exc:
            raise SimulatorError(f"--kv-cache-memory: {exc}") from None
    if (args.trace is None) == (args.rate is None):
        raise SimulatorError("give the requests as --trace FILE or as --rate R (with --num N)")
    model, hardware = load_model(args.model), load_hardware(args.hardware)
    sources = (model.source, hardware.source, *([args.trace] if args.trace else []))
    check_outputs(list(outputs.values()), tuple(str(s) for s in sources))
    if args.trace is not None:
        requests = load_trace(args.trace)
        workload = f"trace {args.trace}"
    else:
        prompt = Lengths.parse("--prompt-len", args.prompt_len)
        output = Lengths.parse("--output-len", args.output_len)
        requests = generate(args.rate, args.num, prompt, output, args.seed)
        workload = f"Poisson {args.rate:g}/s, prompts {prompt}, outputs {output}, seed {args.seed}"
    tty = sys.stderr.isatty() and not args.quiet
    bar = tqdm(desc=f"serve {model.name}", unit="step", leave=False) if tty else None

    def on_step(what: str) -> None:
        if bar is not None:
            bar.set_postfix_str(what)
            bar.update(1)

    try:
        report = serve(
            model,
            hardware,
            requests,
            chips=args.chips,
            policy=args.policy,
            max_batch=args.max_batch,
            max_step_tokens=args.max_step_tokens,
            block_tokens=args.block_tokens,
            kv_cache_bytes_per_chip=kv_memory,
            slo=slo,
            weights=args.weights,
            kv_cache=args.kv_cache,
            sample=args.sample,
            workload=workload,
            workers=args.workers or os.cpu_count() or 1,
            on_step=on_step,
        )
    finally:
        if bar is not None:
            bar.close()
    data = report.to_dict()
    if args.json == "-":
        print(json.dumps({"format": format_mark("serving"), **data}, indent=2, allow_nan=False))
    else:
        print("\n".join(report.summary()))
    written = []
    if "json" in outputs:
        write_json(outputs["json"], "serving", data)
        written.append(f"report written to {args.json}")
    if "csv" in outputs:
        rows = report.rows()
        write_csv(outputs["csv"], CSV_COLUMNS, rows)
        written.append(f"{len(rows):,} rows written to {args.csv}")
    if written and args.json != "-":
        print("\n" + "\n".join(written))
    return 0


def parse_slo(text: str | None):
    """`ttft=500ms,tpot=50ms` (either may be left out) as an Slo."""
    from .serving import Slo

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
