"""Fused against unfused attention at long contexts (issue 13): one layer of LLaMA-2-7B's
attention (32 heads of 128), prefill (causal, the prompt attending to itself) and decode (one
new token against the KV cache), at 2k, 8k and 32k tokens.

    python benchmarks/long_attention.py [--hardware ascend910 h100] [--contexts 2048 8192]
                                        [--phases prefill decode]

Unfused, the scores and probabilities go to HBM and back: their size grows with the square
of the prompt, and at 32k all 32 heads' scores (68.7 GB) no longer fit in HBM. Fused, only
Q, K, V and O do.

A prefill's instructions grow with the square of the prompt too: at 32k one layer would
need some 15 million, twice what a run holds. The heads are independent and equal, so beyond
8k tokens fewer heads are simulated (as many as keep the instructions at twice the 8k level:
4 of 32 at 32k) and the time scaled by 32 / heads; the row says so. Checked at 8k
(`--heads 4 --contexts 8192 --phases prefill`), 4 heads scaled by 8 overstate all 32 heads'
fused time by 2.1% on ascend910 and 7.3% on h100: with fewer units, the cores' work evens out
less well at the end. The HBM bytes do not scale (fewer heads at once share L2 better), so a
scaled row shows none.
"""

from __future__ import annotations

import argparse
import time

from validation_cases import attention_ops  # benchmarks/, on the path as this script's folder

from simulator.config.hardware import load_hardware
from simulator.config.workload import parse_workload
from simulator.errors import SimulatorError
from simulator.pipeline import plan_kernels, simulate
from simulator.schedule.footprint import refuse_if_over_capacity, tensor_roles
from simulator.units import format_bytes_decimal

HEADS, HEAD_DIM = 32, 128  # LLaMA-2-7B
FULL_TO = 8192  # prompts up to this long are simulated with every head


def heads_simulated(context: int) -> int:
    return max(1, min(HEADS, 2 * HEADS * FULL_TO**2 // context**2))


def attention(hw, phase: str, context: int, fusion: str, heads: int = HEADS):
    queries = context if phase == "prefill" else 1
    raw = {
        "name": f"attention_{phase}_{context}",
        "hardware": hw.name,
        "tensors": {
            "q": {"shape": [heads, queries, HEAD_DIM], "dtype": "fp16"},
            "k": {"shape": [heads, context, HEAD_DIM], "dtype": "fp16", "kind": "cache"},
            "v": {"shape": [heads, context, HEAD_DIM], "dtype": "fp16", "kind": "cache"},
        },
        "ops": attention_ops(causal=phase == "prefill"),
        "schedule": {"fusion": fusion},
    }
    return parse_workload(raw, f"<{phase} attention, {context} tokens>", hw)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hardware", nargs="+", default=["ascend910", "h100"])
    parser.add_argument("--contexts", nargs="+", type=int, default=[2048, 8192, 32768])
    parser.add_argument("--phases", nargs="+", default=["prefill", "decode"])
    parser.add_argument("--heads", type=int, help="heads simulated (default: see above)")
    args = parser.parse_args()
    print(
        f"{'chip':10} {'phase':8} {'tokens':>6}  {'unfused us':>11} {'fused us':>10} "
        f"{'speedup':>7}  {'HBM unfused':>11} {'HBM fused':>10}  wall s"
    )
    for chip in args.hardware:
        hw = load_hardware(chip)
        for phase in args.phases:
            for context in args.contexts:
                heads = args.heads or (heads_simulated(context) if phase == "prefill" else HEADS)
                started = time.perf_counter()
                runs = {}
                for fusion in ("none", "auto"):
                    try:
                        runs[fusion] = simulate(attention(hw, phase, context, fusion, heads))
                    except SimulatorError as exc:
                        runs[fusion] = exc
                wall_s = time.perf_counter() - started
                note = ""
                if heads < HEADS:
                    note = f"   ({heads} of {HEADS} heads simulated, scaled by {HEADS // heads})"
                    every_head = attention(hw, phase, context, "none")
                    try:
                        refuse_if_over_capacity(
                            every_head, tensor_roles(every_head, plan_kernels(every_head))
                        )
                    except SimulatorError:
                        note += f"; unfused, {HEADS} heads at once do not fit in HBM"
                scale = HEADS // heads
                print(_row(chip, phase, context, runs, scale, wall_s, note), flush=True)


def _row(
    chip: str,
    phase: str,
    context: int,
    runs: dict,
    scale: int,
    wall_s: float,
    note: str,
) -> str:
    """One row: the time of the heads simulated, times `scale` for every head."""

    def us(run) -> str:
        if isinstance(run, Exception):
            return "refused"
        return f"{scale * run.time_us:.1f}"  # a run the power cap held counts its own clock

    def hbm(run) -> str:
        if isinstance(run, Exception) or scale > 1:
            return "-"
        traffic = run["traffic"]["HBM"]
        return format_bytes_decimal(traffic["read_bytes"] + traffic["write_bytes"])

    unfused, fused = runs["none"], runs["auto"]
    both = not isinstance(unfused, Exception) and not isinstance(fused, Exception)
    speedup = f"{unfused.time_us / fused.time_us:.2f}x" if both else "-"
    line = (
        f"{chip:10} {phase:8} {context:6d}  {us(unfused):>11} {us(fused):>10} {speedup:>7}  "
        f"{hbm(unfused):>11} {hbm(fused):>10}  {wall_s:6.0f}{note}"
    )
    for fusion, run in runs.items():
        if isinstance(run, Exception):
            line += f"\n    {fusion}: {str(run).splitlines()[0]}"
    return line


if __name__ == "__main__":
    main()
