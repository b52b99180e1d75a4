"""Serving: a deployment's requests through a batching scheduler and a paged KV cache, each
engine step timed from whole-model steps the simulator ran (issue 24).

    serve(model, hardware, requests) -> ServingReport
    find_capacity(deployment, requests_at, slo, first_rate_per_s) -> Capacity

`requests` come from `load_trace` or `generate` (requests.py); a `Deployment`
(deployment.py) sizes the KV cache and the step model for them, the engine (engine.py)
forms steps one at a time, `StepTimes` (step_times.py) says what each costs, and the report
(report.py) gives latency percentiles, throughput, goodput and how the cache ran.
"""

from __future__ import annotations

from typing import Any

from .capacity import Capacity, find_capacity
from .deployment import Deployment
from .report import ServingReport, Slo
from .requests import Lengths, Request, generate, load_trace

__all__ = [
    "serve",
    "find_capacity",
    "Capacity",
    "Deployment",
    "load_trace",
    "generate",
    "Lengths",
    "Request",
    "Slo",
    "ServingReport",
]


def serve(
    model,
    hardware,
    requests: tuple[Request, ...],
    slo: Slo | None = None,
    workload: str = "",
    **options: Any,
) -> ServingReport:
    """Serve `requests` on a Deployment of `model` and `hardware` with `options` (its
    keyword arguments: chips, policy, max_batch, max_step_tokens, block_tokens,
    kv_cache_bytes_per_chip, fusion, weights, kv_cache, sample, runtime, workers, scheduler,
    on_step), each request judged against `slo`."""
    with Deployment(model, hardware, requests, **options) as deployment:
        return deployment.serve(requests, slo, workload)
