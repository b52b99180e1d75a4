"""Calibrate the GPU presets against a real GPU: measured vs simulated, shape by shape.

    python benchmarks/calibrate_gpu.py [--preset h100|h200] [--repeat 20]

With torch and a CUDA device: times fp16 GEMMs (x[M, K] @ W[K, N]) and GEMM + bias + GELU,
eager (unfused: three kernels) and torch.compile (fused epilogue), over 32 shapes from decode
(M = 1) to prefill (M = 4096); simulates the same shapes on the matching preset; prints
measured and simulated times, the error per shape and the median absolute error. Without
torch or CUDA it says so and exits 0. Never required by the test suite.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SHAPES = [
    (m, n, k)
    for m in (1, 4, 16, 64, 256, 1024, 2048, 4096)
    for n, k in ((4096, 4096), (11008, 4096), (4096, 11008), (12288, 4096))
]


def workload_raw(preset: str, m: int, n: int, k: int, epilogue: bool, fused: bool) -> dict:
    ops = [{"name": "mm", "op": "matmul", "inputs": ["x", "w"], "output": "y"}]
    if epilogue:
        ops += [
            {"name": "bias", "op": "bias_add", "inputs": ["y", "b"], "output": "yb"},
            {"name": "act", "op": "gelu", "inputs": ["yb"], "output": "z"},
        ]
    return {
        "name": f"gemm-{m}x{n}x{k}",
        "hardware": preset,
        "tensors": {
            "x": {"shape": [m, k]},
            "w": {"shape": [k, n], "kind": "weight"},
            "b": {"shape": [n], "kind": "weight"},
        },
        "ops": ops,
        "schedule": {"fusion": "auto" if fused else "none"},
    }


def simulated_us(preset: str, m: int, n: int, k: int, epilogue: bool, fused: bool) -> float:
    from simulator import load_hardware, simulate
    from simulator.config.workload import parse_workload

    raw = workload_raw(preset, m, n, k, epilogue, fused)
    return simulate(parse_workload(raw, "<calibration>", load_hardware(preset)))["time_us"]


def measured_us(fn, repeat: int) -> float:
    import torch

    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    samples = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        samples.append((time.perf_counter() - start) * 1e6)
    return statistics.median(samples)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--preset", choices=("h100", "h200"), default=None, help="default: from the device name"
    )
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--shapes", type=int, default=len(SHAPES), help="first N shapes only")
    args = parser.parse_args()
    try:
        import torch
    except ImportError:
        print("calibrate_gpu: torch is not installed; nothing to measure here (exit 0)")
        return 0
    if not torch.cuda.is_available():
        print("calibrate_gpu: no CUDA device; nothing to measure here (exit 0)")
        return 0
    device = torch.cuda.get_device_name()
    preset = args.preset or ("h200" if "H200" in device else "h100")
    print(f"device: {device}; preset: hw_models/{preset}.yaml; median of {args.repeat} runs\n")
    gelu = torch.nn.functional.gelu

    def unfused(x, w, b):
        return gelu(x @ w + b, approximate="tanh")

    fused = torch.compile(unfused)
    rows = []
    print(
        f"{'M':>5} {'N':>6} {'K':>6}  {'case':<16}{'measured us':>12}{'simulated us':>13}"
        f"{'error':>8}"
    )
    for m, n, k in SHAPES[: args.shapes]:
        x = torch.randn(m, k, device="cuda", dtype=torch.float16)
        w = torch.randn(k, n, device="cuda", dtype=torch.float16)
        b = torch.randn(n, device="cuda", dtype=torch.float16)
        cases = [
            ("gemm", lambda x=x, w=w: x @ w, False, False),
            ("gemm+bias+gelu", lambda x=x, w=w, b=b: unfused(x, w, b), True, False),
            ("compiled (fused)", lambda x=x, w=w, b=b: fused(x, w, b), True, True),
        ]
        for name, fn, epilogue, is_fused in cases:
            measured = measured_us(fn, args.repeat)
            simulated = simulated_us(preset, m, n, k, epilogue, is_fused)
            error = (simulated - measured) / measured
            rows.append(error)
            print(
                f"{m:>5} {n:>6} {k:>6}  {name:<16}{measured:>12.1f}{simulated:>13.1f}{error:>+8.0%}"
            )
            sys.stdout.flush()
    print(
        f"\nmedian absolute error over {len(rows)} measurements: "
        f"{statistics.median(abs(e) for e in rows):.0%}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
