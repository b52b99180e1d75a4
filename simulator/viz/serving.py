"""A served trace drawn: a Perfetto (Chrome trace) timeline with the engine's steps and a
track per request, and a plot of how the batch, the queue, the KV cache and the latencies
ran over time, each from a serving report (serving/report.py) and nothing else; and a
capacity search's latency against load, from its points (serving/capacity.py)."""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
from matplotlib.ticker import NullFormatter, ScalarFormatter

from .chrome_trace import write_events
from .plots import _finish

ENGINE_PID, REQUESTS_PID = 1, 2
US = 1e6  # trace timestamps are microseconds of simulated time


def serving_trace_events(report) -> list[dict]:
    """The engine's steps as slices on one track, with counters for the batch, the queue
    and the KV blocks held; each request on a track of its own: queued, prefill (admitted
    to first token, recomputes included), decode (first token to finish)."""
    events: list[dict] = [
        {"ph": "M", "pid": ENGINE_PID, "name": "process_name", "args": {"name": "engine"}},
        {"ph": "M", "pid": REQUESTS_PID, "name": "process_name", "args": {"name": "requests"}},
        {"ph": "M", "pid": ENGINE_PID, "tid": 0, "name": "thread_name", "args": {"name": "steps"}},
    ]
    for step in report.steps:
        events.append(
            {
                "ph": "X",
                "pid": ENGINE_PID,
                "tid": 0,
                "name": step.phase,
                "ts": step.start_s * US,
                "dur": (step.end_s - step.start_s) * US,
                "args": {"batch": step.batch, "tokens": step.tokens, "waiting": step.waiting},
            }
        )
        events.append(
            {
                "ph": "C",
                "pid": ENGINE_PID,
                "name": "load",
                "ts": step.start_s * US,
                "args": {"batch": step.batch, "waiting": step.waiting},
            }
        )
        events.append(
            {
                "ph": "C",
                "pid": ENGINE_PID,
                "name": "KV blocks held",
                "ts": step.end_s * US,
                "args": {"blocks": step.kv_blocks},
            }
        )
    for s in report.served:
        request = s.request
        events.append(
            {
                "ph": "M",
                "pid": REQUESTS_PID,
                "tid": request.id,
                "name": "thread_name",
                "args": {"name": f"request {request.id}"},
            }
        )
        spans = (
            ("queued", request.arrival_s, s.admitted_s),
            ("prefill", s.admitted_s, s.first_token_s),
            ("decode", s.first_token_s, s.finish_s),
        )
        for name, start, end in spans:
            if end > start:
                events.append(
                    {
                        "ph": "X",
                        "pid": REQUESTS_PID,
                        "tid": request.id,
                        "name": name,
                        "ts": start * US,
                        "dur": (end - start) * US,
                        "args": {
                            "prompt_tokens": request.prompt_tokens,
                            "output_tokens": request.output_tokens,
                            "preempted": s.preempted,
                        },
                    }
                )
    return events


def write_serving_trace(report, path: str | Path) -> None:
    other = {"model": report.model, "hardware": report.hardware, "policy": report.policy}
    write_events(path, other, serving_trace_events(report))


def plot_serving(report, path=None):
    """Over simulated time: the batch and the queue at each step, the KV cache held, and
    each request's TTFT and TPOT at its arrival."""
    steps = report.steps
    starts = [step.start_s for step in steps]
    fig, (load, cache, latency) = plt.subplots(3, 1, figsize=(9, 7.5), sharex=True)
    load.step(starts, [step.batch for step in steps], where="post", label="batch")
    load.step(starts, [step.waiting for step in steps], where="post", label="queued")
    load.set_ylabel("requests")
    load.set_title(f"{report.model} on {report.hardware}: {report.policy} batching")
    load.legend(fontsize=8, loc="upper right")
    cache.step(
        [step.end_s for step in steps],
        [100 * step.kv_blocks / report.kv_blocks for step in steps],
        where="post",
    )
    cache.set_ylabel("KV cache held, %")
    rows = report.rows()
    for key, name in (("ttft_s", "TTFT"), ("tpot_s", "TPOT")):
        timed = [row for row in rows if row[key] is not None]  # no TPOT of a one-token output
        latency.scatter(
            [row["arrival_s"] for row in timed], [1e3 * row[key] for row in timed], s=6, label=name
        )
    _latency_axis(latency, report.slo, 0)
    latency.set_xlabel("simulated seconds (requests at their arrival)")
    latency.legend(fontsize=8, loc="upper right")
    return _finish(fig, path)


def plot_capacity(found, path=None):
    """A capacity search's latency against load: TTFT and TPOT (p50 and p90) at each rate
    tried, the targets and the capacity found; below, the share of requests that met them."""
    points = sorted(found.points, key=lambda p: p.rate_per_s)
    rates = [p.rate_per_s for p in points]
    latencies = [p.report.latencies() for p in points]
    fig, (latency, met) = plt.subplots(
        2, 1, figsize=(9, 6), sharex=True, gridspec_kw={"height_ratios": (2, 1)}
    )
    for key, name, marker in (("ttft_s", "TTFT", "o"), ("tpot_s", "TPOT", "s")):
        for percentile, style in (("p50", ":"), ("p90", "-")):
            values = [1e3 * (lat[key] or {}).get(percentile, float("nan")) for lat in latencies]
            latency.plot(rates, values, style, marker=marker, label=f"{name} {percentile}")
    _latency_axis(latency, found.slo, rates[0])
    capacity = "" if found.rate_per_s is None else f", capacity {found.rate_per_s:.3g}/s"
    latency.set_title(f"{points[0].report.model}: latency against load{capacity}")
    latency.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1))
    met.plot(rates, [100 * p.attainment for p in points], "o-")
    met.axhline(100 * found.attainment, linestyle="--", linewidth=0.8, color="grey")
    met.set_ylabel("met the targets, %")
    met.set_xlabel("arrival rate, requests/s")
    met.set_xscale("log")
    met.xaxis.set_major_formatter(ScalarFormatter())
    if found.rate_per_s is not None:
        for axis in (latency, met):
            axis.axvline(found.rate_per_s, color="green", linewidth=0.8)
    return _finish(fig, path)


def _latency_axis(axis, slo, x: float) -> None:
    """Milliseconds on a log scale, with the SLO's targets drawn across (labelled at `x`)."""
    for value, name in ((slo.ttft_s, "TTFT target"), (slo.tpot_s, "TPOT target")):
        if value is not None:
            axis.axhline(1e3 * value, linestyle="--", linewidth=0.8, color="grey")
            axis.annotate(name, (x, 1e3 * value), fontsize=7, color="grey")
    axis.set_yscale("log")
    axis.yaxis.set_major_formatter(ScalarFormatter())
    axis.yaxis.set_minor_formatter(NullFormatter())
    axis.set_ylabel("ms")
