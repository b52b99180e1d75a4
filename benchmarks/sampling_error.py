"""Sampled simulation against exact (issue 23): for every shipped workload on every preset,
and for whole-model steps, the time and HBM bytes of a sampled run beside the exact run's,
the sampled run's own error estimate, whether that estimate covers the difference, and the
speed-up.

    python benchmarks/sampling_error.py [--quick | --validate]

Sampling (simulator/schedule/sampling.py) lowers a matmul block's first K chunks (or a row's
first blocks), a measured window and its last ones, and extrapolates those between from
the window.
Targets: within 1% on time and HBM bytes everywhere; the estimate covers the difference in
at least 95% of the rows. `--quick`: the shipped workloads on two presets, no model steps.
`--validate`: instead, every row of benchmarks/validate.py (its GEMMs and kernels as they
run there; a request's metric, sampled against exact, with no HBM column: `infer` reports
none per request).
"""

from __future__ import annotations

import argparse
import statistics
import time
from dataclasses import replace
from pathlib import Path

from simulator import load_hardware, load_model, load_workload
from simulator.config.transformer import Step, step_workload
from simulator.config.workload import Workload
from simulator.errors import SimulatorError
from simulator.pipeline import simulate

ROOT = Path(__file__).resolve().parents[1]
PRESETS = ("ascend910", "ascend910b", "a100", "h100", "h200")
TARGET = 0.01  # of time and of HBM bytes
# whole-model steps: (model, step, layers simulated)
STEPS = (
    ("llama2-7b", Step("prefill", 1, 2048, 2048), 1),
    ("llama2-7b", Step("prefill", 1, 512, 512), 1),
    ("llama2-7b", Step("prefill", 1, 128, 128), 1),  # validation row D5a's prompt (a100)
    ("llama2-7b", Step("decode", 1, 1, 2049), 4),
    ("llama2-13b", Step("prefill", 1, 512, 512), 1),
)


def cases(quick: bool):
    """(label, workload) of every row: shipped workloads on the presets, then model steps."""
    presets = PRESETS[:1] + PRESETS[3:4] if quick else PRESETS
    for path in sorted((ROOT / "workloads").glob("*.yaml")):
        for chip in presets:
            try:
                yield f"{path.stem}@{chip}", load_workload(path, [f"hardware={chip}"])
            except SimulatorError:
                continue  # a workload its preset refuses (the goldens record why)
    if quick:
        return
    for model, step, layers in STEPS:
        for chip in PRESETS:
            workload = step_workload(
                load_model(model), load_hardware(chip), step, layers, "auto", "fp16", "fp16"
            )
            yield f"{model} {step.phase} {step.new_tokens}x{layers}L@{chip}", workload


def validation_cases():
    """(label, workload or request) of every validate.py row, as validate.py runs it."""
    import validate  # benchmarks/, this script's folder

    for case in (*validate.CALIBRATION, *validate.HOLDOUT):
        shape = f"{case.m}x{case.n}x{case.k}" if isinstance(case, validate.Case) else case.shape
        label = f"{case.id} {case.hardware} {shape}"
        if isinstance(case, validate.RequestCase):
            yield label, case
            continue
        try:
            builder = validate.kernels if isinstance(case, validate.KernelsCase) else validate.gemm
            yield label, builder(case)
        except SimulatorError:
            continue  # a row the simulator refuses: validate.py shows why


def request_row(case) -> tuple[float, None, float, float] | None:
    """A request row: its metric sampled against exact, no HBM figure, the estimate `infer`
    states, and the speed-up; None if nothing of it was sampled."""
    import validate

    started = time.perf_counter()
    exact = validate.request_value(case)
    exact_s = time.perf_counter() - started
    started = time.perf_counter()
    sampled, method = validate.request_value(case, sample=True)
    sampled_s = time.perf_counter() - started
    stated = method.split("error estimate up to ")
    if len(stated) == 1:
        return None  # nothing was sampled
    estimate = float(stated[1].split("%")[0]) / 100
    return sampled / exact - 1, None, estimate, exact_s / sampled_s


def hbm_bytes(report) -> int:
    return report.traffic["HBM"].read_bytes + report.traffic["HBM"].write_bytes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer rows (see above)")
    parser.add_argument("--validate", action="store_true", help="validate.py's rows instead")
    args = parser.parse_args()
    print(f"{'row':44s} {'time':>8s} {'HBM':>8s} {'estimate':>9s} {'covers':>6s} {'speed-up':>8s}")
    rows = covered = within = 0
    time_errors: list[tuple[float, str]] = []  # per row: sampled against exact, and its label
    for label, workload in validation_cases() if args.validate else cases(args.quick):
        if not isinstance(workload, Workload):  # a validate.py request
            try:
                row = request_row(workload)
            except SimulatorError:
                continue
            if row is None:
                continue
            time_error, _, estimate, speed_up = row
            rows += 1
            time_errors.append((abs(time_error), label))
            covered += abs(time_error) <= estimate
            within += abs(time_error) <= TARGET
            print(
                f"{label:44s} {time_error:+8.3%} {'-':>8s} {estimate:9.3%} "
                f"{'yes' if abs(time_error) <= estimate else 'no':>6s} {speed_up:7.1f}x",
                flush=True,
            )
            continue
        try:
            started = time.perf_counter()
            exact = simulate(workload)
            exact_s = time.perf_counter() - started
            started = time.perf_counter()
            # on a hardware object of its own: a run replays the kernels of the last run on
            # the same one (engine/replay.py), which would flatter the sampled run's speed
            alone = replace(workload, hardware=replace(workload.hardware))
            sampled = simulate(alone, sample=True)
            sampled_s = time.perf_counter() - started
        except SimulatorError:
            continue
        kernels = [k.sampled for k in sampled.kernels if k.sampled is not None]
        if not kernels:
            continue  # nothing was sampled: the two runs are one
        rows += 1
        time_error = sampled.cycles / exact.cycles - 1
        time_errors.append((abs(time_error), label))
        hbm_error = hbm_bytes(sampled) / hbm_bytes(exact) - 1
        estimate = sum(k.error_cycles for k in kernels) / sampled.cycles
        covers = abs(time_error) <= estimate
        covered += covers
        within += abs(time_error) <= TARGET and abs(hbm_error) <= TARGET
        print(
            f"{label:44s} {time_error:+8.3%} {hbm_error:+8.3%} {estimate:9.3%} "
            f"{'yes' if covers else 'no':>6s} {exact_s / sampled_s:7.1f}x",
            flush=True,
        )
    if not rows:
        print("no row sampled anything")
        return
    largest, where = max(time_errors)
    print(
        f"{rows} sampled rows: {sum(e <= TARGET for e, _ in time_errors)} within {TARGET:.0%} "
        f"of the exact time (median {statistics.median(e for e, _ in time_errors):.3%}, largest "
        f"{largest:.3%}: {where.strip()}), {within} on time and HBM bytes; the estimate covers "
        f"the time difference in {covered} ({covered / rows:.0%}, target 95%)"
    )


if __name__ == "__main__":
    main()
