"""The highest arrival rate a deployment serves within an SLO: a bracketing search over the
rate of one trace of requests (the same lengths, arrivals spread in time as the rate says),
each point a serving simulation, on one Deployment so every point reuses the whole-model steps
the others simulated.

A rate meets the SLO when at least `attainment` of its requests have TTFT and TPOT within
the targets. From the first guess the rate doubles (or halves) until one point meets it and
the next does not, then the bracket is halved until its ends are within `tolerance` of each
other; the capacity is the highest rate found to meet it. That takes attainment to fall as
the rate rises, which queueing makes so but a trace's chance arrivals may dent: every point
is reported.

With `parallel` points at a time (threads: a point's engine is cheap, the whole-model steps
it asks for run on the deployment's workers or Dask cluster, and points asking at once keep
more of them busy), each round tries the next `parallel` doublings (or halvings), then
splits the bracket into `parallel + 1` equal parts; one at a time, that is the search above.
The points tried, and so the answer, depend on `parallel` but not on which thread ends first.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from .deployment import Deployment
from .report import ServingReport, Slo
from .requests import Request

ATTAINMENT = 0.9  # the share of requests that must meet the SLO (DistServe's 90%)
TOLERANCE = 0.05  # the bracket's ends within 5% of each other
MAX_DOUBLINGS = 12  # a first guess 4,096 times off


@dataclass(frozen=True)
class Point:
    rate_per_s: float
    attainment: float  # the share of requests that met the SLO
    report: ServingReport


@dataclass(frozen=True)
class Capacity:
    """The highest rate found to meet the SLO (None: not even the lowest tried) and every
    point tried, in the order they were."""

    rate_per_s: float | None
    slo: Slo
    attainment: float
    points: tuple[Point, ...]

    @property
    def at_capacity(self) -> Point | None:
        met = [p for p in self.points if p.attainment >= self.attainment]
        return max(met, key=lambda p: p.rate_per_s) if met else None

    def to_dict(self) -> dict:
        best = self.at_capacity
        return {
            "capacity_requests_per_s": self.rate_per_s,
            "slo": {"ttft_s": self.slo.ttft_s, "tpot_s": self.slo.tpot_s},
            "attainment": self.attainment,
            "points": [
                {
                    "rate_per_s": p.rate_per_s,
                    "attainment": p.attainment,
                    "latency": p.report.latencies(),
                }
                for p in sorted(self.points, key=lambda p: p.rate_per_s)
            ],
            "at_capacity": None if best is None else best.report.to_dict(),
        }

    def summary(self) -> list[str]:
        lines = [
            f"capacity search: {self.attainment:.0%} of requests within {self.slo}",
            f"  {'rate/s':>10s}{'met':>8s}{'TTFT p90 ms':>14s}{'TPOT p90 ms':>14s}",
        ]
        for p in sorted(self.points, key=lambda p: p.rate_per_s):
            latency = p.report.latencies()
            tpot = latency["tpot_s"]
            lines.append(
                f"  {p.rate_per_s:10.3g}{p.attainment:8.1%}"
                f"{1e3 * (latency['ttft_s'] or {})['p90']:14.2f}"
                + (f"{1e3 * tpot['p90']:14.2f}" if tpot else f"{'-':>14s}")
            )
        if self.rate_per_s is None:
            lowest = min(p.rate_per_s for p in self.points)
            lines.append(f"  no rate tried meets it, down to {lowest:.3g} requests/s")
        elif all(p.attainment >= self.attainment for p in self.points):
            lines.append(
                f"  capacity: at least {self.rate_per_s:.3g} requests/s (every rate met it)"
            )
        else:
            lines.append(f"  capacity: {self.rate_per_s:.3g} requests/s")
        return lines


def find_capacity(
    deployment: Deployment,
    requests_at: Callable[[float], tuple[Request, ...]],
    slo: Slo,
    first_rate_per_s: float,
    attainment: float = ATTAINMENT,
    tolerance: float = TOLERANCE,
    on_point: Callable[[float, float], None] | None = None,
    parallel: int = 1,
) -> Capacity:
    """Search the rate (see the module docstring); `requests_at(rate)` is the trace at that
    rate, `on_point(rate, attainment)` hears of each point as it ends (from its thread)."""
    points: list[Point] = []

    def point(rate: float) -> Point:
        report = deployment.serve(requests_at(rate), slo, f"{rate:.4g} requests/s")
        met = sum(slo.met(s) for s in report.served) / len(report.served)
        if on_point:
            on_point(rate, met)
        return Point(rate, met, report)

    def meets(rates: Sequence[float]) -> list[bool]:
        if len(rates) == 1:
            tried = [point(rates[0])]
        else:
            with ThreadPoolExecutor(len(rates)) as threads:
                tried = list(threads.map(point, rates))
        points.extend(tried)
        return [p.attainment >= attainment for p in tried]

    def done(low: float | None) -> Capacity:
        # each report names every step the search simulated, whenever it ended
        stamped = tuple(
            Point(p.rate_per_s, p.attainment, deployment.stamped(p.report)) for p in points
        )
        return Capacity(low, slo, attainment, stamped)

    low, high = _bracket(meets, first_rate_per_s, parallel)
    if low is None or high is None:
        return done(low)
    while high / low - 1 > tolerance:
        inside = [low + (high - low) * i / (parallel + 1) for i in range(1, parallel + 1)]
        met = meets(inside)
        first_miss = met.index(False) if False in met else len(inside)
        low = inside[first_miss - 1] if first_miss else low
        high = inside[first_miss] if first_miss < len(inside) else high
    return done(low)


def _bracket(
    meets: Callable[[Sequence[float]], list[bool]], rate: float, parallel: int
) -> tuple[float | None, float | None]:
    """A rate that meets the SLO and twice it, which does not, from `rate` up or down (None
    for an end not found in MAX_DOUBLINGS), trying `parallel` rates a round."""
    up = [rate * 2**i for i in range(MAX_DOUBLINGS + 1)]
    miss = _first(meets, up, False, parallel)
    if miss is None:
        return up[-1], None
    if miss > 0:
        return up[miss - 1], up[miss]
    down = [rate / 2**i for i in range(MAX_DOUBLINGS + 1)]  # down[0] missed
    hit = _first(meets, down[1:], True, parallel)
    return (None, down[-1]) if hit is None else (down[hit + 1], down[hit])


def _first(
    meets: Callable[[Sequence[float]], list[bool]],
    rates: list[float],
    wanted: bool,
    parallel: int,
) -> int | None:
    """The index of the first of `rates` whose outcome is `wanted`, trying `parallel` at a
    time in order (None: none)."""
    for start in range(0, len(rates), parallel):
        met = meets(rates[start : start + parallel])
        if wanted in met:
            return start + met.index(wanted)
    return None
