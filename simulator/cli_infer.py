"""`infer`: one request, or several side by side (--compare), to the terminal, JSON, CSV and
a plot. Every file a request names is loaded, and every output checked, before anything is
simulated, so a mistake in the fourth request costs a line, not three simulations."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from .cli_options import split_overrides
from .studies.inference_compare import COUNTS, CSV_COLUMNS, Request, parse_compare, rows_of
from .studies.outputs import Output, check_outputs, write_atomically, write_csv, write_json
from .version import format_mark


def run_infer(args) -> int:
    from tqdm import tqdm

    from .config.hardware import load_hardware
    from .config.model import load_model
    from .config.runtime import load_runtime
    from .studies.inference import WORK_LIMIT_LAYER_STEPS, infer
    from .viz.inference import render_comparison, render_inference

    compared = bool(args.compare)
    requests = parse_compare(args.compare) if compared else [Request("", {})]
    named = (
        ("--json", args.json, "json"),
        ("--csv", args.csv, "csv"),
        ("--plot", args.plot, "png"),
    )
    outputs = {
        kind: Output(option, Path(name), kind, args.force)
        for option, name, kind in named
        if name and name != "-"
    }
    model_sets, hardware_sets = split_overrides(args.overrides)

    def field(request: Request, name: str):
        return request.changes.get(name, getattr(args, name))

    loaded = []
    for request in requests:
        runtime = field(request, "runtime")
        loaded.append(
            (
                load_model(field(request, "model"), model_sets),
                load_hardware(field(request, "hardware"), hardware_sets),
                None if runtime in (None, "none") else load_runtime(runtime),
            )
        )
    sources = {
        str(source)
        for model, hardware, runtime in loaded
        for source in (model.source, hardware.source, *([runtime.source] if runtime else []))
    }
    check_outputs(list(outputs.values()), tuple(sorted(sources)))
    tty = sys.stderr.isatty() and not args.quiet
    results = []
    for request, (model, hardware, runtime) in zip(requests, loaded):
        label = request.label or model.name
        bar = tqdm(desc=f"infer {label}", unit="step", leave=False) if tty else None

        def on_step(what: str, step: int, steps: int, bar=bar) -> None:
            if bar is not None:
                bar.total = steps
                bar.set_postfix_str(what)
                bar.update(step - 1 - bar.n)  # the steps before this one are done

        try:
            report = infer(
                model,
                hardware,
                batch=field(request, "batch"),
                prompt=field(request, "prompt"),
                generate=field(request, "generate"),
                fusion=field(request, "fusion"),
                weights=field(request, "weights"),
                kv_cache=field(request, "kv_cache"),
                chips=field(request, "chips"),
                runtime=runtime,
                exact=args.exact,
                sample=args.sample,
                on_step=on_step,
                work_limit=None if args.yes else WORK_LIMIT_LAYER_STEPS,
            )
        finally:
            if bar is not None:
                bar.close()
        results.append((Request(label, request.changes), report.to_dict()))
    rows = rows_of(results)
    if compared:
        kind = "inference-comparison"
        data = {
            "requests": [
                {"label": request.label, "changes": request.changes, "report": report}
                for request, report in results
            ]
        }
    else:
        kind = "inference"
        data = {key: value for key, value in results[0][1].items() if key != "format"}
    if args.json == "-":
        print(json.dumps({"format": format_mark(kind), **data}, indent=2, allow_nan=False))
    elif compared:
        print(render_comparison(_title(args, requests, *loaded[0][:2]), rows))
    else:
        print(render_inference(results[0][1]))
    written = []
    if "json" in outputs:
        write_json(outputs["json"], kind, data)
        written.append(f"report written to {args.json}")
    if "csv" in outputs:
        write_csv(outputs["csv"], CSV_COLUMNS, rows)
        written.append(f"{len(rows)} row{'s' * (len(rows) != 1)} written to {args.csv}")
    if "png" in outputs:
        from .viz.plots import plot_inference

        write_atomically(outputs["png"], lambda path: plot_inference(rows, path))
        written.append(f"plot written to {args.plot}")
    if written and args.json != "-":
        print("\n" + "\n".join(written))
    return 0


def _title(args, requests: list[Request], model, hardware) -> str:
    """What the compared requests share (`model` and `hardware`: the first's), and what they
    vary."""
    fields = list(requests[0].changes)
    shared = [
        f"{name} {getattr(args, name):,}" if name in COUNTS else f"{name} {getattr(args, name)}"
        for name in ("batch", "prompt", "generate", "fusion", "weights", "chips")
        if name not in fields
    ]
    named = "" if "model" in fields else f"{model.name} "
    on = "" if "hardware" in fields else f"on {hardware.name} "
    return f"{named}{on}({', '.join(shared)}), by {', '.join(fields)}"
