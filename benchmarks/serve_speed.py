"""Serving speed (issue 24): the wall time of `serve` over a Poisson trace of 1,000 requests,
from an empty cache and then again from the cache, beside a bare SimPy loop of 200,000
timeouts timed in the same run, with the peak memory.

    python benchmarks/serve_speed.py [--hardware h100] [--num 1000] [--rate 4] [--sample]
                                     [--workers N]

The trace: llama2-7b, prompts lognormal:512,256 and outputs lognormal:128,64 tokens, seed 0.
Target (issue 24): under a minute on a 2-core machine.
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import tempfile

from infer_speed import LOOP_TIMEOUTS, bare_loop_s, timed_request

TARGET_S = 60.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hardware", default="h100", help="a preset (default h100)")
    parser.add_argument("--num", type=int, default=1000, help="requests (default 1000)")
    parser.add_argument("--rate", type=float, default=4.0, help="requests a second (default 4)")
    parser.add_argument("--sample", action="store_true", help="serve with --sample")
    parser.add_argument("--workers", type=int, help="serve's --workers (default: the cores)")
    args = parser.parse_args()
    command = [sys.executable, "-m", "simulator", "serve", "llama2-7b", "--hardware"]
    command += [args.hardware, "--rate", str(args.rate), "--num", str(args.num)]
    command += ["--prompt-len", "lognormal:512,256", "--output-len", "lognormal:128,64"]
    command += ["--json", "-", *["--sample"] * args.sample]
    command += ["--workers", str(args.workers)] if args.workers else []
    loop_s = bare_loop_s()
    with tempfile.TemporaryDirectory() as cache:
        cold_s, report = timed_request(command, cache)
        warm_s, again = timed_request(command, cache)
    assert again == report, "a trace served from the cache differs from the one simulated"
    peak_bytes = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024  # Linux: KiB
    method = report["method"]
    print(" ".join(c for c in command[3:] if c not in ("--json", "-")))
    print(f"  bare SimPy loop    {loop_s:8.2f} s   ({LOOP_TIMEOUTS:,} timeouts)")
    print(
        f"  served             {cold_s:8.1f} s   {cold_s / loop_s:6.1f} loops "
        f"(target {TARGET_S:.0f} s)"
    )
    print(f"  again, from cache  {warm_s:8.2f} s   {warm_s / loop_s:6.1f} loops")
    print(f"  peak memory        {peak_bytes / 2**30:8.2f} GiB (the largest process)")
    print(
        f"  whole-model steps simulated {method['simulated_steps']}, engine steps "
        f"{report['steps']['count']:,}, simulated time {report['duration_s']:.1f} s"
    )
    checks = method["interpolation_checks"]
    if checks:
        worst = max(checks, key=lambda c: abs(c["interpolated_s"] / c["simulated_s"] - 1))
        error = worst["interpolated_s"] / worst["simulated_s"] - 1
        print(
            f"  interpolation checked at {len(checks)} anchors: largest {100 * error:+.2f}% "
            f"({worst['anchor']})"
        )
    print(json.dumps(report["latency"]["ttft_s"]))


if __name__ == "__main__":
    main()
