"""The tiling search against simulating every legal tiling: quality and wall time.

    python benchmarks/tune_vs_exhaustive.py [--hardware tiny] [--shapes 64x64x128 ...]
    python benchmarks/tune_vs_exhaustive.py --hardware h100 --shapes 8192x8192x8192 \
        --sample 24 --pool 400

For each GEMM shape: the number of legal tilings, the best simulated cycles found by
simulating all of them (exhaustive), the tuner's pick, the ratio, and both wall times. Where
a chip has more legal tilings than `--sample` (a GPU-sized one has about 100,000), the best
of a fixed random sample of that many stands in for the exhaustive search. A uniform sample
of 100,000 mostly finds poor tilings; `--pool P` draws it from the P tilings the analytic
estimate ranks best instead (a wide sample around the tuner's own few simulations).
"""

from __future__ import annotations

import argparse
import os
import random
import time

from simulator import load_hardware
from simulator.config.workload import parse_workload
from simulator.gc_pause import gc_paused
from simulator.schedule.fusion import plan_kernels
from simulator.step_cache import ENV, OFF
from simulator.studies.search import (
    TilingError,
    estimate_cycles,
    legal_tilings,
    simulate_kernel,
    tune_kernel,
)


def gemm(hw_name: str, m: int, n: int, k: int):
    hw = load_hardware(hw_name)
    raw = {
        "name": f"gemm-{m}x{n}x{k}",
        "hardware": hw_name,
        "tensors": {"a": {"shape": [m, k]}, "b": {"shape": [k, n], "kind": "weight"}},
        "ops": [{"name": "mm", "op": "matmul", "inputs": ["a", "b"], "output": "c"}],
    }
    return parse_workload(raw, "<benchmark>", hw)


def _simulated(w, kernel, legal: list, sample: int):
    """Cycles of every legal tiling, or of `sample` of them in a seeded random order when
    there are more; a tiling too fine to simulate (past the instruction cap) is passed over."""
    order = legal if len(legal) <= sample else random.Random(0).sample(legal, len(legal))
    done = 0
    for t in order:
        if done == sample:
            return
        try:
            yield simulate_kernel((w, kernel, t))
        except TilingError:
            continue
        done += 1


def main() -> None:
    os.environ[ENV] = OFF  # both searches' wall times are simulations', not cache reads
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hardware", default="tiny")
    parser.add_argument(
        "--shapes", nargs="+", default=["64x64x128", "48x96x64", "16x128x256", "128x128x256"]
    )
    parser.add_argument("--top", type=int, default=4)
    parser.add_argument(
        "--sample",
        type=int,
        default=5000,
        help="simulate at most this many legal tilings (a seeded random sample)",
    )
    parser.add_argument(
        "--pool",
        type=int,
        default=0,
        help="sample from the analytic ranking's best P tilings (0: all)",
    )
    args = parser.parse_args()
    print(
        f"{'shape':>14} {'legal':>6} {'exhaustive':>11} {'tuned':>8} {'ratio':>6} "
        f"{'exh. s':>8} {'tune s':>7} {'speedup':>8}"
    )
    for text in args.shapes:
        m, n, k = map(int, text.split("x"))
        w = gemm(args.hardware, m, n, k)
        kernel = plan_kernels(w).kernels[0]
        start = time.perf_counter()
        legal = legal_tilings(kernel, w)
        candidates = legal
        if args.pool:
            candidates = sorted(legal, key=lambda t: estimate_cycles(kernel, w, t))[: args.pool]
        best = min(_simulated(w, kernel, candidates, args.sample))
        exhaustive_s = time.perf_counter() - start
        start = time.perf_counter()
        tuned = tune_kernel(kernel, w, top=args.top)
        tune_s = time.perf_counter() - start
        print(
            f"{text:>14} {len(legal):>6} {best:>11,} {tuned.best_cycles:>8,} "
            f"{tuned.best_cycles / best:>6.3f} {exhaustive_s:>8.2f} {tune_s:>7.2f} "
            f"{exhaustive_s / tune_s:>7.0f}x"
        )


if __name__ == "__main__":
    with gc_paused():  # the collector would rescan every record of every run
        main()
