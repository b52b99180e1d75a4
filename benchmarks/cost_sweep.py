"""Is the simulator's cost monotonic in the work it is asked for (issue 23)? The wall time,
peak memory and layers simulated of one request at prompt lengths doubling from 128 to
8,192 tokens, each in a process of its own with an empty cache of simulated runs, and every
step down in wall time named.

    python benchmarks/cost_sweep.py [--hardware ascend910] [--model qwen2-7b] [--sample]
                                    [--longest 8192] [--generate 16]

A longer prompt is more work (more tokens through every GEMM, quadratically more in
attention), so its request should never cost less to simulate: a step down means a rule
chose to simulate less (fewer layers, fewer contexts) and a reader of the two results gets
numbers of different quality. Wall times within 10% of the point before count as level
(timing noise on a shared machine). qwen2-7b is the default model because it attends over
more than 8,192 positions without a sliding window.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

NOISE = 0.10  # a wall time this much below the point before still counts as level


def timed_request(command: list[str], cache: str) -> tuple[float, int, dict]:
    """Wall seconds, peak memory (bytes) and the report of one request in a process of its
    own."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        started = time.perf_counter()
        child = subprocess.Popen(
            command, stdout=out, stderr=err, env={**os.environ, "NPU_MEMSIM_CACHE": cache}
        )
        _, status, usage = os.wait4(child.pid, 0)
        wall_s = time.perf_counter() - started
        child.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        if child.returncode:
            sys.exit(f"{' '.join(command)} failed:\n{err.read().decode()}")
        return wall_s, usage.ru_maxrss * 1024, json.loads(out.read())  # Linux: KiB


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hardware", default="ascend910", help="a preset (default ascend910)")
    parser.add_argument("--model", default="qwen2-7b", help="a model (default qwen2-7b)")
    parser.add_argument("--sample", action="store_true", help="each request with --sample")
    parser.add_argument("--longest", type=int, default=8192, help="the longest prompt")
    parser.add_argument("--generate", type=int, default=16, help="tokens generated (16)")
    args = parser.parse_args()
    prompts = [128]
    while prompts[-1] * 2 <= args.longest:
        prompts.append(prompts[-1] * 2)
    print(
        f"infer {args.model} --hardware {args.hardware} --generate {args.generate}"
        + " --sample" * args.sample
        + ", each prompt in a fresh process with an empty cache"
    )
    print(f"{'prompt':>7} {'wall s':>8} {'peak GiB':>9} {'layers':>7} {'TTFT ms':>9}  cost")
    before = None
    steps_down = []
    for prompt in prompts:
        command = [sys.executable, "-m", "simulator", "infer", args.model, "--hardware"]
        command += [args.hardware, "--prompt", str(prompt), "--generate", str(args.generate)]
        command += ["--json", "-", "--yes", *["--sample"] * args.sample]
        with tempfile.TemporaryDirectory() as cache:
            wall_s, peak_bytes, report = timed_request(command, cache)
        layers = report["steps"][0]["layers_simulated"]
        verdict = ""
        if before is not None:
            verdict = f"{wall_s / before:5.2f}x the point before"
            if wall_s < (1 - NOISE) * before:
                verdict += "  STEP DOWN"
                steps_down.append(prompt)
        print(
            f"{prompt:7,d} {wall_s:8.1f} {peak_bytes / 2**30:9.2f} {layers:7d} "
            f"{report['ttft_us'] / 1e3:9.2f}  {verdict}",
            flush=True,
        )
        before = wall_s
    print(
        "monotonic: wall time never fell by more than 10% from one prompt to the next"
        if not steps_down
        else f"NOT monotonic: the cost steps down at prompt {', '.join(map(str, steps_down))}"
    )


if __name__ == "__main__":
    main()
