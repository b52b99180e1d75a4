"""Capacity search speed (issue 24): `find_capacity` over serve_speed.py's 1,000-request trace,
one rate at a time and then `--workers` rates at a time, both on `--workers` processes and
each from an empty cache, with the points each tried and the capacity each found.

    python benchmarks/capacity_speed.py [--hardware h100] [--workers N] [--exact]

The SLO: TTFT <= 200 ms and TPOT <= 20 ms for 90% of the requests; the first guess 4/s;
the steps sampled (`--sample`) unless `--exact`.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from simulator.step_cache import ENV  # noqa: E402
from simulator.studies.serving import Deployment, Lengths, Slo, find_capacity, generate  # noqa: E402

PROMPT, OUTPUT = (
    Lengths.parse("prompt", "lognormal:512,256"),
    Lengths.parse("output", "lognormal:128,64"),
)
SLO = Slo(ttft_s=0.2, tpot_s=0.02)


def trace(rate: float):
    return generate(rate, 1000, PROMPT, OUTPUT, 0)


def search(hardware: str, workers: int, parallel: int, sample: bool) -> tuple[float, object]:
    """Wall seconds and the search's outcome, from an empty cache of runs."""
    with tempfile.TemporaryDirectory() as cache:
        os.environ[ENV] = cache
        started = time.perf_counter()
        with Deployment(
            "llama2-7b", hardware, trace(4.0), workers=workers, sample=sample
        ) as deployment:
            found = find_capacity(deployment, trace, SLO, 4.0, parallel=parallel)
        return time.perf_counter() - started, found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hardware", default="h100", help="a preset (default h100)")
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--exact", action="store_true", help="simulate the steps exactly")
    args = parser.parse_args()
    timed = {}
    for parallel in dict.fromkeys((1, args.workers)):
        seconds, found = search(args.hardware, args.workers, parallel, not args.exact)
        timed[parallel] = seconds
        rates = ", ".join(f"{p.rate_per_s:.3g}" for p in found.points)
        print(
            f"{parallel} at a time: {seconds:6.1f} s, {len(found.points)} points ({rates}), "
            f"{found.points[-1].report.simulated_steps} whole-model steps, capacity "
            f"{found.rate_per_s:.3g} requests/s"
        )
    if len(timed) > 1:
        print(f"speed-up {timed[1] / timed[args.workers]:.2f}x on {args.workers} workers")


if __name__ == "__main__":
    main()
