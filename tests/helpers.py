"""Small workloads and programs on the tiny teaching chip, built in code."""

from __future__ import annotations

from dataclasses import replace

from simulator.config.workload import parse_workload


def matmul_workload(hw, m, n, k, tiling=None, extra_ops=(), name="test"):
    """A one-matmul workload (plus optional elementwise ops on its result, which may read a
    `bias` of N values)."""
    uses_bias = any("bias" in op["inputs"] for op in extra_ops)
    raw = {
        "name": name,
        "hardware": hw.name,
        "params": {"m": m, "n": n, "k": k},
        "tensors": {
            "a": {"shape": ["m", "k"]},
            "b": {"shape": ["k", "n"], "kind": "weight"},
            **({"bias": {"shape": ["n"], "kind": "weight"}} if uses_bias else {}),
        },
        "ops": [{"name": "mm", "op": "matmul", "inputs": ["a", "b"], "output": "c"}, *extra_ops],
        "schedule": {"fusion": "none", "tiling": {"mm": tiling} if tiling else {}},
    }
    return parse_workload(raw, "<test>", hw)


def with_queue_depth(hw, depth, streams="one"):
    """The chip with every engine keeping `depth` global transfers in flight, moving them as
    `streams` (one, or one per tensor)."""
    engines = {
        name: replace(engine, queue_depth=depth, streams=streams)
        for name, engine in hw.engines.items()
    }
    return replace(hw, engines=engines)
