"""Published silicon measurements against the simulator, case by case.

    python benchmarks/validate.py [--split calibration|holdout] [--only G1 V1 ...] [--tune]

Each case is a row of benchmarks/validation_sources.md (its ID there, with the source and
its conditions): a GEMM at a stated shape, dtype and chip, and the throughput the source
measured; or a few kernels (vector ops, fused attention) and the time the source measured for
them; or a whole model's request (`infer`) and its time to the first token, per output token,
end to end, or its energy per token; or a deployment serving a closed loop of clients
(`serve --concurrency`) and the mean TTFT, time per output token or output tokens a second
the source measured. The simulator runs the same work on the matching preset
and the table prints measured, simulated and the signed error: positive when the simulator is
faster (or spends less energy) than the silicon, that is, optimistic.

The rows come in two splits. `calibration` rows (validation_cases.py) were in view while
preset figures were chosen; a figure fitted to some of them names them (`python -m simulator
figures --class fitted`), and its rows are no evidence for it. `holdout` rows
(holdout_cases.py) land before any figure they could check changes and are never fitted to:
their error is the one to believe. Each split reports its median and largest absolute error
and its signed mean (the bias).

A case whose source states the tile shape it measured runs that tiling (in this simulator's
words: base block and staged K); the others use the tiling the simulator derives from the
shape, or with `--tune` the tiling search's pick, as a vendor library autotunes (slower). A
GEMM source that reports a time is shown in TFLOPS (2·M·N·K / t). A GEMM source that timed
the kernel alone with a profiler (`timed="kernel"`) is compared with the simulated time less
the launch the run waits on; the others, with the whole run, as a call's time includes it.
A serving row's mean is over the steady state: of 8 x concurrency requests, those from the
2 x concurrency-th to the 7 x concurrency-th sent (the first ones start together, the last
ones see fewer clients), its throughput by Little's law (concurrency x output tokens over
their mean end-to-end time).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from dataclasses import replace
from functools import partial
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from holdout_cases import HOLDOUT  # noqa: E402  (benchmarks/, this script's folder)
from validation_cases import (  # noqa: E402
    CALIBRATION,
    REQUEST_METRICS,
    SERVING_METRICS,
    Case,
    KernelsCase,
    RequestCase,
    ServingCase,
)

from simulator import infer, load_hardware, load_model, simulate  # noqa: E402
from simulator.config.runtime import load_runtime  # noqa: E402
from simulator.config.transformer import WEIGHT_DTYPES  # noqa: E402
from simulator.config.workload import parse_workload  # noqa: E402
from simulator.errors import SimulatorError  # noqa: E402
from simulator.gc_pause import gc_paused  # noqa: E402
from simulator.studies.search import tune, tuned_workload  # noqa: E402
from simulator.studies.serving import Deployment, Lengths, generate  # noqa: E402
from simulator.workers import worker_pool  # noqa: E402

SPLITS = {"calibration": CALIBRATION, "holdout": HOLDOUT}


def request_value(case: RequestCase, sample: bool = False):
    """What `infer` says of the request, in the unit of the case's metric (with `sample`:
    sampled, and with the report's method, which states the sampling's error estimate)."""
    report = infer(
        load_model(case.model),
        load_hardware(case.hardware, case.overrides),
        case.batch,
        case.prompt,
        case.generate,
        weights=case.dtype if case.dtype in WEIGHT_DTYPES else "fp16",  # bf16: fp16's bytes
        chips=case.chips,
        runtime=case.runtime,
        sample=sample,
    )
    if case.metric == "energy":
        value = report.energy_j()["per_token"]
    else:
        tpot = (report.tpot_us or {}).get("mean")
        value = {"ttft": report.ttft_us, "tpot": tpot, "e2e": report.e2e_us}[case.metric] / 1e3
    return (value, report.method) if sample else value


def serving_values(cases: list[ServingCase]) -> list[float]:
    """What `serve` says of each row of one deployment (see the module docstring), one
    closed-loop run a concurrency, in the unit of each row's metric."""
    first = cases[0]
    prompt = Lengths.parse("prompt", f"fixed:{first.prompt}")
    output = Lengths.parse("output", f"fixed:{first.generate}")

    def requests(concurrency: int):
        return generate(1.0, 8 * concurrency, prompt, output, 0)  # arrivals unused

    steady = {}
    with Deployment(
        load_model(first.model),
        load_hardware(first.hardware),
        requests(max(c.concurrency for c in cases)),
        chips=first.chips,
        policy=first.policy,
        max_step_tokens=first.max_step_tokens,
        weights=first.dtype,
        kv_cache=first.kv_cache,
        runtime=first.runtime,
    ) as deployment:
        for concurrency in sorted({c.concurrency for c in cases}):
            report = deployment.serve(requests(concurrency), concurrency=concurrency)
            rows = sorted(report.rows(), key=lambda row: row["id"])
            window = rows[2 * concurrency : 7 * concurrency]
            mean = {
                f: statistics.fmean(row[f] for row in window) for f in ("ttft_s", "tpot_s", "e2e_s")
            }
            steady[concurrency] = {
                "ttft": 1e3 * mean["ttft_s"],
                "itl": 1e3 * mean["tpot_s"],
                "tput": concurrency * first.generate / mean["e2e_s"],
            }
    return [steady[c.concurrency][c.metric] for c in cases]


def kernels(case: KernelsCase):
    hardware = load_hardware(case.hardware)
    if case.runtime is not None:
        hardware = load_runtime(case.runtime).on(hardware)
    raw = {
        "name": case.id,
        "hardware": case.hardware,
        "dtype": case.dtype,
        "tensors": case.tensors,
        "ops": case.ops,
        "schedule": {"fusion": case.fusion},
    }
    return parse_workload(raw, "<validate>", hardware)


def gemm(case: Case):
    b_shape = [case.n, case.k] if case.transpose_b else [case.k, case.n]
    raw = {
        "name": f"{case.id}-{case.m}x{case.n}x{case.k}",
        "hardware": case.hardware,
        "dtype": case.dtype,
        "tensors": {
            "a": {"shape": [case.m, case.k]},
            "b": {"shape": b_shape, "kind": "weight", "layout": case.b_layout},
        },
        "ops": [
            {
                "name": "mm",
                "op": "matmul",
                "inputs": ["a", "b"],
                "output": "c",
                **({"attrs": {"transpose_b": True}} if case.transpose_b else {}),
            }
        ],
    }
    if case.tiling:
        raw["schedule"] = {"tiling": {"mm": case.tiling}}
    return parse_workload(raw, "<validate>", load_hardware(case.hardware, case.overrides))


def measure(case, tuned: bool) -> tuple[str, str, str, str, float]:
    """(shape, measured, simulated, binding, signed error) of one case; the error is positive
    when the simulator is faster, or spends less, than the silicon."""
    if isinstance(case, RequestCase):
        unit = REQUEST_METRICS[case.metric]
        simulated = request_value(case)
        return (
            case.shape,
            f"{case.measured:>7.2f} {unit}",
            f"{simulated:>7.2f} {unit}",
            case.metric,  # a request has many kernels, each bound its own way
            case.measured / simulated - 1,
        )
    if isinstance(case, KernelsCase):
        report = simulate(kernels(case)).to_dict()
        time_us = report["time_us"]
        if case.timed == "last":  # what the last kernel adds to the ones before it
            time_us -= simulate(kernels(replace(case, ops=case.ops[:-1]))).to_dict()["time_us"]
        return (
            case.shape,
            f"{case.measured_us:>7.1f} us",
            f"{time_us:>7.1f} us",
            report["kernels"][-1]["binding"] if case.timed == "last" else report["binding"],
            case.measured_us / time_us - 1,
        )
    workload = gemm(case)
    if tuned and not case.tiling:
        workload = tuned_workload(workload, tune(workload, top=2))
    report = simulate(workload).to_dict()
    cycles = report["cycles"]
    if case.timed == "kernel":  # a profiler's kernel time: the launch waited on is not in it
        cycles -= report["launch_overhead_cycles"]
    tflops = report["flops"] / (cycles / (report["clock_ghz"] * 1e9)) / 1e12
    return (
        f"{case.m} x {case.n} x {case.k}",
        f"{case.measured_tflops:>7.1f} TF",
        f"{tflops:>7.1f} TF",
        report["binding"],
        tflops / case.measured_tflops - 1,
    )


def serving_rows(cases: list[ServingCase]) -> list[tuple[str, str, str, str, float]]:
    """`measure`'s rows for the serving rows of one deployment; the error is positive when the
    simulator is faster (a shorter time, more tokens a second)."""
    rows = []
    for case, simulated in zip(cases, serving_values(cases)):
        unit = SERVING_METRICS[case.metric]
        faster = simulated / case.measured if unit == "t/s" else case.measured / simulated
        rows.append(
            (
                case.shape,
                f"{case.measured:>7.2f} {unit}",
                f"{simulated:>7.2f} {unit}",
                case.metric,
                faster - 1,
            )
        )
    return rows


def outcomes(cases: list, tuned: bool) -> list[tuple]:
    """What `measure` says of a case (or `serving_rows` of a deployment's), or why the
    simulator refused it. Each runs in a fresh worker process, so no case's memory stays with
    the next."""
    try:
        if isinstance(cases[0], ServingCase):
            return serving_rows(cases)
        return [measure(cases[0], tuned)]
    except SimulatorError as exc:  # a row the simulator cannot run is shown, not hidden
        return [(str(exc).splitlines()[0],)] * len(cases)


def tasks(cases: list) -> list[list]:
    """The cases one at a time, but a deployment's serving rows together (in their order)."""
    together: dict = {}
    for case in cases:
        key = case.deployment if isinstance(case, ServingCase) else case.id
        together.setdefault(key, []).append(case)
    return list(together.values())


def summary(split: str, errors: dict[str, float]) -> str:
    """A split's median and largest absolute error, and its signed mean (the bias)."""
    if not errors:
        return f"{split}: no case ran"
    worst = max(errors, key=lambda id: abs(errors[id]))
    median = statistics.median(abs(e) for e in errors.values())
    bias = statistics.fmean(errors.values())
    return (
        f"{split}: {len(errors)} case{'s' * (len(errors) != 1)}, median absolute error "
        f"{median * 100:.1f}%, largest {abs(errors[worst]) * 100:.1f}% ({worst}), signed mean "
        f"{bias * 100:+.1f}%"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="+", metavar="ID", help="run only these cases")
    parser.add_argument("--split", choices=SPLITS, help="run only this split's cases")
    parser.add_argument("--tune", action="store_true", help="tune each GEMM's tiling first")
    args = parser.parse_args()
    started, count, lines = time.perf_counter(), 0, []
    for split, every in SPLITS.items():
        cases = [c for c in every if (not args.only or c.id in args.only)]
        if not cases or args.split not in (None, split):
            continue
        print(
            f"{split}\n{'case':<8} {'chip':<11} {'dtype':<5} {'shape M x N x K':>20} "
            f"{'measured':>10} {'simulated':>10} {'error':>8}  binding  source",
            flush=True,
        )
        errors, refused = {}, []
        with worker_pool(1, tasks_per_worker=1) as pool:
            jobs = tasks(cases)
            results = pool.imap(partial(outcomes, tuned=args.tune), jobs)
            for case, result in (pair for job in jobs for pair in zip(job, next(results))):
                chip = case.hardware + ("*" * bool(getattr(case, "overrides", ())))
                if len(result) == 1:
                    refused.append(case.id)
                    print(f"{case.id:<8} {chip:<11} refused: {result[0]}", flush=True)
                    continue
                shape, measured, simulated, binding, errors[case.id] = result
                print(
                    f"{case.id:<8} {chip:<11} {case.dtype:<5} {shape:>20} {measured:>10} "
                    f"{simulated:>10} {errors[case.id] * 100:>+7.1f}%  {binding:<8} "
                    f"{case.source}"
                    + (f" [{case.runtime}]" if getattr(case, "runtime", None) else ""),
                    flush=True,
                )
        print()
        lines.append(
            summary(split, errors) + (f"; refused: {', '.join(refused)}" if refused else "")
        )
        count += len(cases)
    print(
        "\n".join(lines)
        + f"\n{count} case{'s' * (count != 1)} in {time.perf_counter() - started:.0f} s "
        "(error: positive when the simulator is faster than silicon; tiling: the source's where "
        f"it gives one, else {'tuned' if args.tune else 'derived from the shape'})"
    )


if __name__ == "__main__":
    with gc_paused():  # the collector would rescan every record of every run
        main()
