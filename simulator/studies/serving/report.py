"""A served trace's record: per-request latencies, their percentiles, throughput, goodput
under an SLO, how full the batch, the queue and the KV cache ran, energy per token, and how
the step times were obtained."""

from __future__ import annotations

import math
import textwrap
from dataclasses import dataclass
from typing import Any

import numpy as np

from .engine import Served, StepRecord
from .step_times import Check

PERCENTILES = (50, 90, 99)
CSV_COLUMNS = (
    "id",
    "arrival_s",
    "prompt_tokens",
    "output_tokens",
    "first_token_s",
    "finish_s",
    "ttft_s",
    "tpot_s",
    "e2e_s",
    "preempted",
    "met_slo",
)


@dataclass(frozen=True)
class Slo:
    """Targets a request meets when its TTFT and TPOT are both within them (None: no target)."""

    ttft_s: float | None = None
    tpot_s: float | None = None

    def met(self, s: Served) -> bool:
        return (self.ttft_s is None or _ttft(s) <= self.ttft_s) and (
            self.tpot_s is None or _tpot(s) <= self.tpot_s
        )

    def __str__(self) -> str:
        parts = [
            f"{name} <= {1e3 * value:g} ms"
            for name, value in (("TTFT", self.ttft_s), ("TPOT", self.tpot_s))
            if value is not None
        ]
        return ", ".join(parts)


@dataclass(frozen=True)
class ServingReport:
    model: str
    hardware: str
    chips: int
    policy: str
    workload: str  # where the requests came from
    served: tuple[Served, ...]
    steps: tuple[StepRecord, ...]
    kv_blocks: int
    block_tokens: int
    idle_watts: float  # what the group draws with nothing to run
    simulated_steps: int  # whole-model steps simulated for the step times
    simulated: tuple[str, ...]  # which, grouped
    checks: tuple[Check, ...]
    slo: Slo
    notes: tuple[str, ...]  # how the whole-model steps were simulated: sampling, capped clocks
    provenance: dict[str, Any]

    @property
    def start_s(self) -> float:
        return self.served[0].request.arrival_s

    @property
    def end_s(self) -> float:
        return max(s.finish_s for s in self.served)

    @property
    def output_tokens(self) -> int:
        return sum(s.request.output_tokens for s in self.served)

    def latencies(self) -> dict[str, dict[str, float] | None]:
        tpots = [_tpot(s) for s in self.served if s.request.output_tokens > 1]
        return {
            "ttft_s": _percentiles([_ttft(s) for s in self.served]),
            "tpot_s": _percentiles(tpots) if tpots else None,
            "e2e_s": _percentiles([s.finish_s - s.request.arrival_s for s in self.served]),
        }

    def joules(self) -> float:
        busy_s = sum(step.end_s - step.start_s for step in self.steps)
        idle_s = self.end_s - self.start_s - busy_s
        return sum(step.joules for step in self.steps) + self.idle_watts * max(0.0, idle_s)

    def to_dict(self) -> dict[str, Any]:
        duration = self.end_s - self.start_s
        met = sum(self.slo.met(s) for s in self.served)
        busy = [(step.end_s - step.start_s, step) for step in self.steps]
        busy_s = sum(d for d, _ in busy)
        joules = self.joules()
        return {
            "model": self.model,
            "hardware": self.hardware,
            "chips": self.chips,
            "policy": self.policy,
            "workload": self.workload,
            "requests": len(self.served),
            "output_tokens": self.output_tokens,
            "duration_s": duration,
            "latency": self.latencies(),
            "throughput": {
                "requests_per_s": len(self.served) / duration if duration else None,
                "output_tokens_per_s": self.output_tokens / duration if duration else None,
            },
            "slo": {
                "ttft_s": self.slo.ttft_s,
                "tpot_s": self.slo.tpot_s,
                "met": met,
                "goodput_requests_per_s": met / duration if duration else None,
            },
            "steps": {
                "count": len(self.steps),
                **{
                    phase: sum(step.phase == phase for step in self.steps)
                    for phase in ("prefill", "mixed", "decode")
                },
                "busy_share": busy_s / duration if duration else None,
                "mean_batch": sum(d * s.batch for d, s in busy) / busy_s if busy_s else None,
                "max_batch": max(s.batch for s in self.steps),
                "max_waiting": max(s.waiting for s in self.steps),
            },
            "kv_cache": {
                "blocks": self.kv_blocks,
                "block_tokens": self.block_tokens,
                "peak_blocks": max(s.kv_blocks for s in self.steps),
                "mean_blocks": sum(d * s.kv_blocks for d, s in busy) / busy_s if busy_s else None,
                "preemptions": sum(s.preempted for s in self.served),
            },
            "energy_j": {
                "total": joules,
                "per_output_token": joules / self.output_tokens,
            },
            "method": {
                "simulated_steps": self.simulated_steps,
                "simulated": list(self.simulated),
                "interpolation_checks": [
                    {
                        "anchor": c.what,
                        "simulated_s": c.simulated_s,
                        "interpolated_s": c.interpolated_s,
                    }
                    for c in self.checks
                ],
                "notes": list(self.notes),
            },
            "provenance": self.provenance,
        }

    def rows(self) -> list[dict[str, Any]]:
        return [
            {
                "id": s.request.id,
                "arrival_s": s.request.arrival_s,
                "prompt_tokens": s.request.prompt_tokens,
                "output_tokens": s.request.output_tokens,
                "first_token_s": s.first_token_s,
                "finish_s": s.finish_s,
                "ttft_s": _ttft(s),
                "tpot_s": _tpot(s) if s.request.output_tokens > 1 else None,
                "e2e_s": s.finish_s - s.request.arrival_s,
                "preempted": s.preempted,
                "met_slo": self.slo.met(s),
            }
            for s in self.served
        ]

    def summary(self) -> list[str]:
        data = self.to_dict()
        where = f"{self.chips} x {self.hardware}" if self.chips > 1 else self.hardware
        lines = [
            f"serve {self.model} on {where}: {len(self.served):,} requests"
            + (f" ({self.workload})" if self.workload else "")
            + f", {self.policy} batching",
            f"  {'':14s}{'p50':>10s}{'p90':>10s}{'p99':>10s}",
        ]
        for key, label in (("ttft_s", "TTFT (ms)"), ("tpot_s", "TPOT (ms)"), ("e2e_s", "E2E (s)")):
            values = data["latency"][key]
            if values is not None:
                scale = 1.0 if key == "e2e_s" else 1e3
                lines.append(
                    f"  {label:14s}"
                    + "".join(f"{scale * values[f'p{p}']:10.2f}" for p in PERCENTILES)
                )
        throughput, steps, kv = data["throughput"], data["steps"], data["kv_cache"]
        lines.append(
            f"  throughput: {throughput['requests_per_s']:.3g} requests/s, "
            f"{throughput['output_tokens_per_s']:,.1f} output tokens/s over "
            f"{data['duration_s']:.2f} s"
        )
        if self.slo.ttft_s is not None or self.slo.tpot_s is not None:
            met = data["slo"]["met"]
            lines.append(
                f"  goodput ({self.slo}): {data['slo']['goodput_requests_per_s']:.3g} requests/s "
                f"({met:,} of {len(self.served):,} met it)"
            )
        lines.append(
            f"  steps: {steps['count']:,} ({steps['prefill']:,} prefill"
            + (f", {steps['mixed']:,} mixed" if steps["mixed"] else "")
            + f"), busy "
            f"{100 * steps['busy_share']:.0f}% of the time; batch mean {steps['mean_batch']:.1f}, "
            f"max {steps['max_batch']}; queue max {steps['max_waiting']}"
        )
        lines.append(
            f"  KV cache: {kv['blocks']:,} blocks of {kv['block_tokens']} tokens, peak "
            f"{100 * kv['peak_blocks'] / kv['blocks']:.1f}%, "
            f"mean {100 * kv['mean_blocks'] / kv['blocks']:.1f}%; "
            f"preemptions {kv['preemptions']:,}"
        )
        lines.append(f"  energy: {data['energy_j']['per_output_token']:.3g} J per output token")
        worst = max(self.checks, key=lambda c: abs(c.error), default=None)
        method = (
            f"{self.simulated_steps} whole-model steps ({'; '.join(self.simulated)}); every "
            "serving step interpolated between them"
            + (
                f"; {len(self.checks)} of them checked against the line through their "
                f"neighbours: largest difference {100 * worst.error:+.2f}% ({worst.what})"
                if worst is not None
                else "; none has simulated neighbours on both sides to check the lines with"
            )
        )
        lines.append(
            textwrap.fill(method, 92, initial_indent="  simulated: ", subsequent_indent=" " * 13)
        )
        for note in self.notes:
            lines.append(
                textwrap.fill(note, 92, initial_indent="  note: ", subsequent_indent=" " * 8)
            )
        return lines


def _ttft(s: Served) -> float:
    return s.first_token_s - s.request.arrival_s


def _tpot(s: Served) -> float:
    if s.request.output_tokens == 1:
        return 0.0
    return (s.finish_s - s.first_token_s) / (s.request.output_tokens - 1)


def _percentiles(values: list[float]) -> dict[str, float]:
    found = np.percentile(np.asarray(values, dtype=float), PERCENTILES)
    return {f"p{p}": float(v) for p, v in zip(PERCENTILES, found)} | {
        "mean": float(math.fsum(values) / len(values))
    }
