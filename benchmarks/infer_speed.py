"""Whole-model inference speed (issue 13): the wall time of one request simulated end to end.

    python benchmarks/infer_speed.py [--quick]

Target: `python -m simulator infer llama2-7b --prompt 2048 --generate 128` on ascend910 in
under 60 s on 2 cores, whole process. `--quick` runs a 128-token prompt instead.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time

TARGET_S = 60.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a 128-token prompt")
    args = parser.parse_args()
    prompt = 128 if args.quick else 2048
    command = [sys.executable, "-m", "simulator", "infer", "llama2-7b", "--hardware", "ascend910"]
    command += ["--prompt", str(prompt), "--generate", "128", "--json", "-"]
    started = time.perf_counter()
    result = subprocess.run(command, capture_output=True, text=True, check=True)
    wall_s = time.perf_counter() - started
    report = json.loads(result.stdout)
    simulated = len(report["steps"])
    print(f"infer llama2-7b --prompt {prompt} --generate 128 on ascend910")
    print(f"  wall time        {wall_s:8.1f} s   (target < {TARGET_S:.0f} s for prompt 2048)")
    print(f"  steps simulated  {simulated:8d}     of {report['generate']}")
    print(f"  {report['method']}")
    print(
        f"  time to first token {report['ttft_us'] / 1e3:.2f} ms, per token "
        f"{report['tpot_us']['mean'] / 1e3:.2f} ms (simulated)"
    )


if __name__ == "__main__":
    main()
