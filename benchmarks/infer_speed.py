"""Whole-model inference speed (issues 13 and 23): the wall time of one request simulated end
to end, then of the same request again, its steps read from the cache of simulated runs;
each beside a bare SimPy loop of 200,000 timeouts timed in the same run, so the ratios hold
on any machine.

    python benchmarks/infer_speed.py [--quick] [--hardware ascend910] [--sample]
                                     [--model llama2-7b] [--chips 1] [--prompt 2048]

The request: `python -m simulator infer llama2-7b --prompt 2048 --generate 128` (`--quick`:
a 128-token prompt), whole process, in a cache folder of its own that starts empty.
Targets (issue 23): the request within 10x the loop (a 70B model on 8 chips with a 4,096-
token prompt: 20x), the repeated one within 1 s, and the peak memory (RSS) of either under
1 GB. llama2-70b attends over 4,096 positions at most, so the 70B request is llama3-70b's:
`--model llama3-70b --hardware h100 --chips 8 --prompt 4096`.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time

import simpy

LOOP_TIMEOUTS = 200_000
REQUEST_LOOPS = 10  # the request's target, in loops
GROUP_REQUEST_LOOPS = 20  # a 70B model's on 8 chips
REPEAT_TARGET_S = 1.0
PEAK_TARGET_BYTES = 1 << 30


def bare_loop_s() -> float:
    """Seconds for one SimPy process to wait on 200,000 timeouts: the engine's floor."""

    def waiter(env: simpy.Environment):
        for _ in range(LOOP_TIMEOUTS):
            yield env.timeout(1)

    env = simpy.Environment()
    env.process(waiter(env))
    started = time.perf_counter()
    env.run()
    return time.perf_counter() - started


def timed_request(command: list[str], cache: str) -> tuple[float, dict]:
    """Wall seconds and the report of the request, run in a process of its own."""
    started = time.perf_counter()
    result = subprocess.run(
        command,
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "NPU_MEMSIM_CACHE": cache},
    )
    return time.perf_counter() - started, json.loads(result.stdout)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a 128-token prompt")
    parser.add_argument("--hardware", default="ascend910", help="a preset (default ascend910)")
    parser.add_argument("--sample", action="store_true", help="the request with --sample")
    parser.add_argument("--model", default="llama2-7b", help="a model (default llama2-7b)")
    parser.add_argument("--chips", type=int, default=1, help="chips in tensor parallel (1)")
    parser.add_argument("--prompt", type=int, default=2048, help="prompt tokens (2048)")
    args = parser.parse_args()
    prompt = 128 if args.quick else args.prompt
    command = [sys.executable, "-m", "simulator", "infer", args.model, "--hardware"]
    command += [args.hardware, "--prompt", str(prompt), "--generate", "128", "--json", "-"]
    command += ["--chips", str(args.chips), "--yes", *["--sample"] * args.sample]
    loop_s = bare_loop_s()
    with tempfile.TemporaryDirectory() as cache:
        cold_s, report = timed_request(command, cache)
        warm_s, again = timed_request(command, cache)
    assert again == report, "a request read from the cache differs from the one simulated"
    peak_bytes = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024  # Linux: KiB
    print(
        f"infer {args.model} --prompt {prompt} --generate 128 on {args.chips} x "
        f"{args.hardware}" + " --sample" * args.sample
    )
    print(f"  bare SimPy loop    {loop_s:8.2f} s   ({LOOP_TIMEOUTS:,} timeouts)")
    print(
        f"  request            {cold_s:8.1f} s   {cold_s / loop_s:6.1f} loops "
        f"(target {GROUP_REQUEST_LOOPS if args.chips > 1 else REQUEST_LOOPS} loops)"
    )
    print(
        f"  again, from cache  {warm_s:8.2f} s   {warm_s / loop_s:6.1f} loops "
        f"(target < {REPEAT_TARGET_S:.0f} s)"
    )
    print(
        f"  peak memory        {peak_bytes / 2**30:8.2f} GiB (the larger process; "
        f"target < {PEAK_TARGET_BYTES / 2**30:.0f} GiB)"
    )
    print(f"  steps simulated    {len(report['steps']):8d}     of {report['generate']}")
    print(f"  {report['method']}")
    print(
        f"  time to first token {report['ttft_us'] / 1e3:.2f} ms, per token "
        f"{report['tpot_us']['mean'] / 1e3:.2f} ms (simulated)"
    )


if __name__ == "__main__":
    main()
