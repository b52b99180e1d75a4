"""A whole-model request's report: its steps' times (simulated, and between them taken on
the line), its footprint, and the figures a user reads (time to first token, time per output
token, energy per token), with what produced them."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..version import format_mark

# The classes a step's time is broken down into: each kernel's time after its launch goes to
# the class of the work it does; the launch waits are their own class.
TIME_CLASSES = ("gemm", "attention", "norm", "other", "launch", "communication", "host")


@dataclass(frozen=True)
class StepTime:
    """One step of the whole model: simulated, or (decode) interpolated between two that were."""

    phase: str
    context: int
    cycles: float
    by_class_cycles: Mapping[str, float]
    hbm_bytes: float
    layers_simulated: int  # 0: interpolated
    energy: Mapping[str, float] | None  # one chip's joules by where they went; None: no figures


@dataclass(frozen=True)
class Footprint:
    """HBM bytes the run needs on each chip: the weights, the KV cache at the longest context
    and the activations of the largest step's layer."""

    weight_bytes: int
    kv_cache_bytes: int
    activation_bytes: int
    hbm_capacity_bytes: int

    @property
    def total_bytes(self) -> int:
        return self.weight_bytes + self.kv_cache_bytes + self.activation_bytes

    def to_dict(self) -> dict[str, int]:
        return {
            "weight_bytes": self.weight_bytes,
            "kv_cache_bytes": self.kv_cache_bytes,
            "activation_bytes": self.activation_bytes,
            "total_bytes": self.total_bytes,
            "hbm_capacity_bytes": self.hbm_capacity_bytes,
        }


@dataclass(frozen=True)
class InferenceReport:
    """A request's time, end to end. Times in µs, from the simulated cycles."""

    model: str
    hardware: str
    clock_ghz: float
    batch: int
    prompt: int
    generate: int
    fusion: str
    weights: str
    chips: int  # in tensor parallel; times are the group's, the footprint one chip's
    prefill: StepTime
    # the decode steps simulated, by context: the first and the last of the request's, and
    # (unless every one is) some between; the steps between two are taken on the line
    # between them (decode_sum), so a long generation holds no record per step
    decode: tuple[StepTime, ...]
    footprint: Footprint
    method: str  # how much was simulated, and what was reused or interpolated
    notes: tuple[str, ...] = field(default=())  # what a reader must know to trust the figures
    provenance: Mapping[str, Any] = field(default_factory=dict)  # what produced it: enough to rerun
    runtime: str | None = None  # the runtime profile that drove the chip (None: its own figures)
    kv_cache: str = "fp16"  # the dtype K and V are cached in

    def us(self, cycles: float) -> float:
        return cycles / (self.clock_ghz * 1e3)

    @property
    def ttft_us(self) -> float:
        return self.us(self.prefill.cycles)

    @property
    def decode_steps(self) -> int:
        """Decode steps in the request: one per generated token after the first."""
        return self.decode[-1].context - self.decode[0].context + 1 if self.decode else 0

    def decode_sum(self, value: Callable[[StepTime], float]) -> float:
        """`value` summed over every decode step, those between two simulated steps taken on
        the line between them."""
        return line_sum(self.decode, value)

    @property
    def interpolation_error(self) -> float | None:
        """See `interpolation_error` (the function)."""
        return interpolation_error(self.decode)

    @property
    def tpot_us(self) -> dict[str, float] | None:
        """Time per output token after the first: first, last and mean decode step (None: no
        decode step, see `undefined`)."""
        if not self.decode:
            return None
        return {
            "first": self.us(self.decode[0].cycles),
            "last": self.us(self.decode[-1].cycles),
            "mean": self.us(self.decode_sum(lambda s: s.cycles) / self.decode_steps),
        }

    @property
    def undefined(self) -> dict[str, str]:
        """The figures this request does not define (null in the JSON), each with why."""
        if self.decode:
            return {}
        why = f"no decode step: generate {self.generate} is the prefill alone"
        return {"tpot_us": why, "tokens_per_s": why, "energy_j.per_token": why}

    @property
    def e2e_us(self) -> float:
        return self.ttft_us + self.us(self.decode_sum(lambda s: s.cycles))

    def energy_j(self) -> dict[str, Any] | None:
        """Joules of the whole group: the prefill, all decode steps, and per output token
        (a decode step's over the sequences it serves), that last also by where it went."""
        if self.prefill.energy is None or any(s.energy is None for s in self.decode):
            return None
        parts = self.decode[0].energy or {} if self.decode else {}
        per_token = {  # every step's joules of the group, per sequence it serves
            part: self.decode_sum(_energy_part(part)) * self.chips / self.batch for part in parts
        }
        steps = self.decode_steps
        return {
            "prefill": sum(self.prefill.energy.values()) * self.chips,
            "decode": sum(per_token.values()) * self.batch,
            "per_token": sum(per_token.values()) / steps if steps else None,
            "per_token_by_part": {part: j / steps for part, j in per_token.items()}
            if steps
            else None,
        }

    def summary(self) -> str:
        from ..viz.inference import render_inference

        return render_inference(self.to_dict())

    def to_dict(self) -> dict[str, Any]:
        decode_cycles = self.decode_sum(lambda s: s.cycles)
        tpot = self.tpot_us
        return {
            "format": format_mark("inference"),
            "model": self.model,
            "hardware": self.hardware,
            "batch": self.batch,
            "prompt": self.prompt,
            "generate": self.generate,
            "fusion": self.fusion,
            "weights": self.weights,
            "kv_cache": self.kv_cache,
            "chips": self.chips,
            "runtime": self.runtime,
            "ttft_us": self.ttft_us,
            "tpot_us": tpot,
            "tokens_per_s": None if tpot is None else self.batch * 1e6 / tpot["mean"],
            "e2e_us": self.e2e_us,
            "breakdown_us": {
                "prefill": {c: self.us(v) for c, v in self.prefill.by_class_cycles.items()},
                "decode": {c: self.us(self.decode_sum(_class_cycles(c))) for c in TIME_CLASSES},
            },
            "hbm_bytes_per_token": self.chips  # every chip of the group reads its share
            * (
                self.decode_sum(lambda s: s.hbm_bytes) / self.decode_steps / self.batch
                if self.decode
                else self.prefill.hbm_bytes / (self.batch * self.prompt)
            ),
            "memory_footprint": self.footprint.to_dict(),
            "energy_j": self.energy_j(),
            "decode_cycles": decode_cycles,
            "decode_interpolation_error": self.interpolation_error,
            "steps": [
                {
                    "phase": s.phase,
                    "context": s.context,
                    "time_us": self.us(s.cycles),
                    "layers_simulated": s.layers_simulated,
                }
                for s in (self.prefill, *self.decode)
                if s.layers_simulated
            ],
            "method": self.method,
            "notes": list(self.notes),
            "undefined": self.undefined,
            "provenance": dict(self.provenance),
        }


def line_sum(steps: Sequence[StepTime], value: Callable[[StepTime], float]) -> float:
    """`value` summed over every context from the first of `steps` to the last, a stretch
    between two of them taken on the line between: n steps from a (included) to b (not)
    sum to n·a + (b − a)(n − 1)/2."""
    total = 0.0
    for a, b in zip(steps, steps[1:]):
        n, first, after = b.context - a.context, value(a), value(b)
        total += n * first + (after - first) * (n - 1) / 2
    return total + (value(steps[-1]) if steps else 0.0)


def interpolation_error(decode: Sequence[StepTime]) -> float | None:
    """The most the line between simulated decode contexts can be off the decode time, as a
    share of it, if no step takes less time at a longer context: between a step of a cycles
    and one of b, n steps later, the steps' sum lies within (b − a)(n − 1)/2 of the line's
    (all of the rise at one end or the other). A decode step's time is a staircase in the
    context (attention reads the cache in blocks), which no count of points shows straight
    or not. None: every context was simulated."""
    if not decode or decode[-1].context - decode[0].context + 1 == len(decode):
        return None
    cycles = line_sum(decode, lambda s: s.cycles)
    off = sum(
        abs(b.cycles - a.cycles) * (b.context - a.context - 1) / 2
        for a, b in zip(decode, decode[1:])
    )
    return off / cycles if cycles else 0.0


def interpolation_note(decode: Sequence[StepTime]) -> str:
    """What a request's method says of the line between its simulated decode contexts."""
    error = interpolation_error(decode)
    return (
        ""
        if error is None
        else f" (the line is within {100 * error:.2g}% of the decode time if no step is "
        "quicker at a longer context)"
    )


def _class_cycles(name: str) -> Callable[[StepTime], float]:
    return lambda step: step.by_class_cycles[name]


def _energy_part(name: str) -> Callable[[StepTime], float]:
    return lambda step: (step.energy or {})[name]
