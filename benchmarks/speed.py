"""The simulator's own speed on ffn_decode: wall time and simulated instructions per second.

    python benchmarks/speed.py [--tokens 1 2048] [--repeat 3]

Wall time is split into load+lower (building the Program) and simulate (the
SimPy run plus analysis); the best of --repeat runs is reported.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from simulator import load_workload
from simulator.analysis.report import analyse
from simulator.engine.world import simulate_program
from simulator.pipeline import lower_workload

WORKLOAD = Path(__file__).resolve().parents[1] / "workloads" / "ffn_decode.yaml"


def measure(tokens: int) -> dict:
    start = time.perf_counter()
    workload = load_workload(WORKLOAD, [f"params.tokens={tokens}"])
    program = lower_workload(workload)
    lowered = time.perf_counter()
    trace = simulate_program(program, workload.hardware)
    report = analyse(trace, program, workload.hardware, workload.name, {})
    done = time.perf_counter()
    return {"tokens": tokens, "instructions": trace.instructions,
            "lower_s": lowered - start, "simulate_s": done - lowered, "wall_s": done - start,
            "simulated_us": report["time_us"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, nargs="+", default=[1, 2048])
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    print(f"{'tokens':>7} {'instructions':>13} {'lower s':>9} {'simulate s':>11} {'wall s':>8} "
          f"{'instr/s':>10} {'simulated µs':>13}")
    for tokens in args.tokens:
        best = min((measure(tokens) for _ in range(args.repeat)), key=lambda r: r["wall_s"])
        print(f"{best['tokens']:>7} {best['instructions']:>13,} {best['lower_s']:>9.3f} "
              f"{best['simulate_s']:>11.3f} {best['wall_s']:>8.3f} "
              f"{best['instructions'] / best['wall_s']:>10,.0f} {best['simulated_us']:>13,.1f}")


if __name__ == "__main__":
    main()
