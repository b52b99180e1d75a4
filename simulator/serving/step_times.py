"""What each step of a serving engine costs, from whole-model steps simulated at a few anchors.

A serving step is a batch the simulator's step model does not generate as such (prompts of
different lengths, decodes at different contexts), so it is composed from steps it does,
each simulated (through the cache of runs) only when a step first needs it:

- decode of B sequences at contexts c_i: the decode step of B sequences all at the mean
  context, which does the same attention work (it grows linearly with each context) and the
  same GEMMs; between simulated batch sizes (powers of two) and contexts (a few, spread
  over the trace's, as `infer` spreads a request's) the time is interpolated linearly;
- prefill of prompts p_i: the GEMMs, norms and launches of one prompt of T = sum(p_i)
  tokens (their work grows with the tokens, not with how they split into prompts) plus the
  attention of each prompt on its own (it grows with each prompt's square): time(T) less
  its attention, plus attention(p_i) for each, from prefills simulated at token counts that
  are powers of two (and the trace's shortest prompt and the step's largest), interpolated
  linearly between them.

A step draws the average power of the simulated steps it is interpolated from. How far the
lines can be off is measured, not assumed: each simulated anchor with simulated neighbours
on both sides is compared with the line through them (`checks`), a gap twice as wide as any
interpolation spans.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial

from ..config.transformer import Step
from ..inference_report import StepTime

ATTENTION = "attention"
DECODE_CONTEXTS = 3  # contexts simulated per decode batch size, as `infer` does


@dataclass(frozen=True, slots=True)
class Cost:
    """A step's wall time and the energy the chip group draws over it."""

    seconds: float
    joules: float


@dataclass(frozen=True, slots=True)
class _Anchor:
    seconds: float
    attention_s: float
    watts: float  # the whole group's


@dataclass(frozen=True, slots=True)
class Check:
    """A simulated anchor against the line through its simulated neighbours."""

    what: str
    simulated_s: float
    interpolated_s: float

    @property
    def error(self) -> float:
        return self.interpolated_s / self.simulated_s - 1


def grid(low: int, high: int) -> tuple[int, ...]:
    """The points anchors may sit at: `low`, `high` and the powers of two between."""
    powers = [1 << k for k in range(high.bit_length() + 1) if low < 1 << k < high]
    return tuple(sorted({low, high, *powers}))


def spread(low: int, high: int, points: int = DECODE_CONTEXTS) -> tuple[int, ...]:
    """`points` values spread evenly from `low` to `high`, both included."""
    if high - low + 1 <= points:
        return tuple(range(low, high + 1))
    return tuple(sorted({low + round(i * (high - low) / (points - 1)) for i in range(points)}))


class StepTimes:
    """Costs of prefill and decode steps (see the module docstring). `time_step` is the
    whole-model step model (inference.StepTimer); `prefill_tokens` and `batch` the largest a
    step may hold, `contexts` the range of decode contexts and `shortest_prompt` the
    smallest prefill."""

    def __init__(
        self,
        time_step: Callable[[Step], StepTime],
        clock_hz: float,
        chips: int,
        shortest_prompt: int,
        prefill_tokens: int,
        batch: int,
        contexts: tuple[int, int],
    ):
        self._time_step, self._clock_hz, self._chips = time_step, clock_hz, chips
        self.prefill_grid = grid(shortest_prompt, prefill_tokens)
        self.batch_grid = grid(1, batch)
        self.context_grid = spread(contexts[0], max(contexts))  # none: a trace of one token each
        self._anchors: dict[Step, _Anchor] = {}

    def prefill(self, prompts: Sequence[int]) -> Cost:
        total = sum(prompts)
        low, high, share = _bracket(self.prefill_grid, total)
        rest = _mix(
            self._prefill(low), self._prefill(high), share, lambda a: a.seconds - a.attention_s
        )
        attention = sum(self._prefill_attention_s(p) for p in prompts)
        watts = _mix(self._prefill(low), self._prefill(high), share, lambda a: a.watts)
        return Cost(rest + attention, (rest + attention) * watts)

    def decode(self, contexts: Sequence[int]) -> Cost:
        batch = len(contexts)
        b_low, b_high, b_share = _bracket(self.batch_grid, batch)
        c_low, c_high, c_share = _bracket(self.context_grid, sum(contexts) / batch)

        def at(b: int, field: Callable[[_Anchor], float]) -> float:
            return _mix(self._decode(b, c_low), self._decode(b, c_high), c_share, field)

        def both(field: Callable[[_Anchor], float]) -> float:
            low = at(b_low, field)
            return low if b_high == b_low else low + b_share * (at(b_high, field) - low)

        seconds = both(lambda a: a.seconds)
        return Cost(seconds, seconds * both(lambda a: a.watts))

    @property
    def simulated(self) -> tuple[Step, ...]:
        """The whole-model steps simulated so far, in order."""
        return tuple(self._anchors)

    def checks(self) -> list[Check]:
        """Each simulated anchor with simulated neighbours on its grid, against their line."""
        found = list(self._checks("prefill {}", self.prefill_grid, _prefill_step))
        for b in self.batch_grid:
            found += self._checks(f"decode {b} @ {{}}", self.context_grid, partial(_decode_step, b))
        for c in self.context_grid:
            at_context = partial(_decode_step, context=c)
            found += self._checks(f"decode {{}} @ {c}", self.batch_grid, at_context)
        return found

    def _checks(self, label: str, points: tuple[int, ...], step_at: Callable[[int], Step]):
        present = [p for p in points if step_at(p) in self._anchors]
        for low, mid, high in zip(present, present[1:], present[2:]):
            at = {p: self._anchors[step_at(p)].seconds for p in (low, mid, high)}
            line = at[low] + (mid - low) / (high - low) * (at[high] - at[low])
            yield Check(label.format(mid), at[mid], line)

    def _prefill_attention_s(self, prompt: int) -> float:
        low, high, share = _bracket(self.prefill_grid, prompt)
        return _mix(self._prefill(low), self._prefill(high), share, lambda a: a.attention_s)

    def _prefill(self, tokens: int) -> _Anchor:
        return self._anchor(_prefill_step(tokens))

    def _decode(self, batch: int, context: int) -> _Anchor:
        return self._anchor(_decode_step(batch, context))

    def _anchor(self, step: Step) -> _Anchor:
        anchor = self._anchors.get(step)
        if anchor is None:
            time = self._time_step(step)
            seconds = time.cycles / self._clock_hz
            joules = sum((time.energy or {}).values()) * self._chips
            anchor = _Anchor(
                seconds,
                time.by_class_cycles.get(ATTENTION, 0.0) / self._clock_hz,
                joules / seconds if seconds > 0 else 0.0,
            )
            self._anchors[step] = anchor
        return anchor


def _mix(low: _Anchor, high: _Anchor, share: float, field: Callable[[_Anchor], float]) -> float:
    value = field(low)
    return value if share == 0.0 else value + share * (field(high) - value)


def _bracket(points: tuple[int, ...], value: float) -> tuple[int, int, float]:
    """The grid points either side of `value` (clamped to the grid) and its share of the
    way from the lower to the upper."""
    value = min(max(value, points[0]), points[-1])
    index = bisect.bisect_left(points, value)
    if points[index] == value:
        return points[index], points[index], 0.0
    low, high = points[index - 1], points[index]
    return low, high, (value - low) / (high - low)


def _prefill_step(tokens: int) -> Step:
    return Step("prefill", 1, tokens, tokens)


def _decode_step(batch: int, context: int) -> Step:
    return Step("decode", batch, 1, context)
