"""The simulator's own speed: engine event rate against a bare SimPy loop, wall time of the
standard workloads, how wall time scales with the instruction count, and peak memory.

    python benchmarks/engine_speed.py [--quick]

Startup (issue 12): `python -m simulator --help` well under half a second, and the main job's
whole-process wall time beside a bare SimPy loop of 200,000 timeouts run the same way.

Targets (issue 5): engine >= 30% of the bare SimPy event rate; ffn_decode < 0.5 s;
llama7b_decode_layer < 1 s; a 32-layer decode step < 10 s; ffn_prefill < 10 s; wall time
linear in instructions (fitted exponent near 1).

The engine's pipes time on-chip work without SimPy events (see simulator/engine/world.py),
so one engine event carries several instructions: the rate is reported both in events per
second (the SimPy steps it takes) and in instructions per second (the work it does), each
against the bare loop's events per second, and beside the event rate of the same run with
a SimPy process per pipe (simulator/engine/reference.py, same times).
"""

from __future__ import annotations

import argparse
import math
import resource
import subprocess
import sys
import time
from pathlib import Path

import simpy

from simulator import load_workload
from simulator.analysis.report import analyse
from simulator.engine.reference import ProcessPerPipeWorld
from simulator.engine.world import World
from simulator.gc_pause import gc_paused
from simulator.pipeline import lower_workload

ROOT = Path(__file__).resolve().parents[1]


class CountingEnvironment(simpy.Environment):
    """An Environment that counts the events it processes (public API only)."""

    def __init__(self):
        super().__init__()
        self.events_processed = 0

    def step(self) -> None:
        self.events_processed += 1
        super().step()


def run(path: Path, overrides=(), world_class=World, replay: bool = False) -> dict:
    """The phases of `simulate`, timed one by one (with the collector paused, as there); the
    wall time includes the collection that follows when the collector resumes. Every kernel
    is simulated unless `replay` (engine/replay.py), so the rates are the engine's own."""
    start = time.perf_counter()
    with gc_paused():
        workload = load_workload(path, list(overrides))
        program = lower_workload(workload)
        lowered = time.perf_counter()
        env = CountingEnvironment()
        trace = world_class(program, workload.hardware, env, replay=replay).run()
        simulated = time.perf_counter()
        analyse(trace, program, workload.hardware, workload.name)
    done = time.perf_counter()
    return {
        "instructions": trace.instructions,
        "events": env.events_processed,
        "lower_s": lowered - start,
        "engine_s": simulated - lowered,
        "wall_s": done - start,
    }


def bare_simpy_rate(events: int) -> float:
    """Events per second of a bare SimPy loop: 64 processes yielding 1-cycle timeouts."""
    env = CountingEnvironment()
    per_process = max(1, events // 64)

    def ticker():
        for _ in range(per_process):
            yield env.timeout(1)

    for _ in range(64):
        env.process(ticker())
    start = time.perf_counter()
    env.run()
    return env.events_processed / (time.perf_counter() - start)


def layers_workload(layers: int) -> Path:
    """A decode step of `layers` LLaMA-7B decoder layers, written next to the benchmarks."""
    import yaml

    base = yaml.safe_load((ROOT / "workloads" / "llama7b_decode_layer.yaml").read_text())
    ops, tensors = [], dict(base["tensors"])
    for layer in range(layers):
        rename = {}
        for op in base["ops"]:
            rename[op["output"]] = f"L{layer}_{op['output']}"
        rename["x"] = "x" if layer == 0 else f"L{layer - 1}_out"
        for op in base["ops"]:
            new = dict(
                op,
                name=f"L{layer}_{op['name']}",
                output=rename[op["output"]],
                inputs=[rename.get(i, i) for i in op["inputs"]],
            )
            ops.append(new)
    base.update(name=f"llama7b-decode-{layers}-layers", ops=ops, tensors=tensors)
    path = Path("/tmp") / f"npu-memsim-decode-{layers}-layers.yaml"
    path.write_text(yaml.safe_dump(base, sort_keys=False))
    return path


BARE_LOOP = """
import simpy
env = simpy.Environment()
def ticks(env):
    for _ in range(200_000):
        yield env.timeout(1)
env.process(ticks(env))
env.run()
"""


def process_wall_s(args: list[str]) -> float:
    """The whole-process wall time of a Python command (interpreter start and imports
    included), the best of three."""
    best = math.inf
    for _ in range(3):
        start = time.perf_counter()
        subprocess.run([sys.executable, *args], cwd=ROOT, check=True, capture_output=True)
        best = min(best, time.perf_counter() - start)
    return best


def startup() -> None:
    """What a user waits for at the prompt: --help, and the main job as a whole process,
    beside a bare SimPy loop of 200,000 timeouts run the same way (issue 12's aim: the main
    job no slower than that loop)."""
    help_s = process_wall_s(["-m", "simulator", "--help"])
    main_s = process_wall_s(["-m", "simulator", "run", "workloads/ffn_decode.yaml"])
    bare_s = process_wall_s(["-c", BARE_LOOP])
    print(
        f"whole process: --help {help_s:.2f} s (target < 0.5 s); main job (run "
        f"ffn_decode.yaml) {main_s:.2f} s; bare SimPy loop of 200,000 timeouts {bare_s:.2f} s"
        f" (main job / loop: {main_s / bare_s:.2f}, aim <= 1)\n"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="skip the 32-layer step")
    args = parser.parse_args()

    startup()
    run(ROOT / "workloads" / "ffn_decode.yaml")  # warm up (imports, the L2's cut cache)
    decode = run(ROOT / "workloads" / "ffn_decode.yaml")
    event_rate = decode["events"] / decode["engine_s"]
    instruction_rate = decode["instructions"] / decode["engine_s"]
    bare_rate = bare_simpy_rate(decode["events"])
    reference = run(ROOT / "workloads" / "ffn_decode.yaml", world_class=ProcessPerPipeWorld)
    reference_rate = reference["events"] / reference["engine_s"]
    print(
        f"bare SimPy: {bare_rate:,.0f} events/s (target: engine >= 0.30 of it)\n"
        f"engine on ffn_decode: {event_rate:,.0f} events/s (ratio {event_rate / bare_rate:.2f}),"
        f" {instruction_rate:,.0f} instructions/s (ratio {instruction_rate / bare_rate:.2f})"
        f", {decode['events']:,} events in {decode['engine_s']:.3f} s\n"
        f"a SimPy process per pipe, same run: {reference_rate:,.0f} events/s (ratio "
        f"{reference_rate / bare_rate:.2f}), {reference['events']:,} events in "
        f"{reference['engine_s']:.3f} s ({reference['engine_s'] / decode['engine_s']:.1f}x the "
        "engine's time)"
    )

    print(
        f"\n{'workload':<34}{'instructions':>13}{'events':>11}{'lower s':>9}{'engine s':>10}"
        f"{'wall s':>8}  target"
    )
    cases = [
        ("ffn_decode", ROOT / "workloads/ffn_decode.yaml", (), 0.5),
        ("llama7b_decode_layer", ROOT / "workloads/llama7b_decode_layer.yaml", (), 1.0),
        ("ffn_prefill (2048 tokens)", ROOT / "workloads/ffn_prefill.yaml", (), 10.0),
    ]
    if not args.quick:
        cases.append(("decode step, 32 layers", layers_workload(32), (), 10.0))
    for name, path, overrides, target in cases:
        for replay in (False, True) if "layers" in name else (False,):
            r = run(path, overrides, replay=replay)
            print(
                f"{name + (', replayed' if replay else ''):<34}{r['instructions']:>13,}"
                f"{r['events']:>11,}{r['lower_s']:>9.2f}{r['engine_s']:>10.2f}{r['wall_s']:>8.2f}"
                f"  < {target} s {'ok' if r['wall_s'] < target else 'MISSED'}"
            )

    print("\nscaling (ffn_decode over tokens):")
    sizes = []
    for tokens in (64, 128, 256, 512, 1024):
        r = run(ROOT / "workloads/ffn_decode.yaml", [f"params.tokens={tokens}"])
        sizes.append((r["instructions"], r["wall_s"]))
        print(f"  tokens {tokens:>5}: {r['instructions']:>9,} instructions, {r['wall_s']:.2f} s")
    xs = [math.log(n) for n, _ in sizes]
    ys = [math.log(s) for _, s in sizes]
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)
    print(f"  fitted exponent of wall time in instructions: {slope:.2f} (linear = 1.00)")
    peak_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"\npeak memory of this process: {peak_mib:,.0f} MiB")


if __name__ == "__main__":
    main()
