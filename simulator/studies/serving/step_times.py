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
  are powers of two and halfway between them (and the trace's shortest prompt and the
  step's largest), interpolated linearly between them (a GEMM's time rises in steps, a wave
  of tiles at a time: for LLaMA-2-7B's prefill on h100 the line between the powers of two
  either side is 6.5% slower than the simulated one at 384 tokens and 6.7% faster at
  1,536, hence the halves);
- a step that mixes B decodes with prefill chunks (chunked prefill): the decode step, plus
  what the chunks' K tokens add to the GEMMs (those of B + K tokens less those of B), plus
  each chunk's attention (its prompt's attention up to the chunk's end less up to its
  start).

A step draws the average power of the simulated steps it is interpolated from. How far the
lines can be off is measured, not assumed: each simulated anchor with simulated neighbours
on both sides is compared with the line through them (`checks`), a gap twice as wide as any
interpolation spans.
"""

from __future__ import annotations

import bisect
import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from functools import partial

from ...config.transformer import Step
from ..inference import spread  # the contexts decode steps are simulated at, as infer's
from ..inference_report import StepTime

ATTENTION = "attention"


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


def grid(low: int, high: int, halves: bool = False) -> tuple[int, ...]:
    """The points anchors may sit at: `low`, `high` and the powers of two between (and, with
    `halves`, the points halfway between those: 3, 6, 12, 24, ...)."""
    powers = [1 << k for k in range(high.bit_length() + 1)]
    if halves:
        powers += [3 << k for k in range(high.bit_length())]
    return tuple(sorted({low, high, *(p for p in powers if low < p < high)}))


class StepTimes:
    """Costs of prefill and decode steps (see the module docstring). `time_steps` runs the
    whole-model step model (inference.StepTimer) on a list of steps (side by side where it
    can: the anchors a step needs are asked for together); `fewest_tokens` and
    `most_tokens` bound the prefills it may need (the shortest prompt, or 1 where a step
    mixes decodes and chunks, to the largest step or prompt), `batch` is the most sequences
    a decode holds and `contexts` the range of their contexts."""

    def __init__(
        self,
        time_steps: Callable[[list[Step]], list[StepTime]],
        clock_hz: float,
        chips: int,
        fewest_tokens: int,
        most_tokens: int,
        batch: int,
        contexts: tuple[int, int],
    ):
        self._time_steps, self._clock_hz, self._chips = time_steps, clock_hz, chips
        self.prefill_grid = grid(fewest_tokens, most_tokens, halves=True)
        self.batch_grid = grid(1, batch)
        self.context_grid = spread(contexts[0], max(contexts))  # none: a trace of one token each
        self._anchors: dict[Step, _Anchor] = {}
        self._decoded: set[int] = set()  # batch sizes simulated at every context of the grid
        self._pending: dict[Step, threading.Event] = {}  # being simulated, by whichever thread
        self._lock = threading.Lock()

    def step(self, decodes: Sequence[int], chunks: Sequence[tuple[int, int]]) -> Cost:
        """A step that decodes a token at each context in `decodes` and prefills each chunk
        (offset, tokens): the decode step, plus what the chunks' tokens add to its GEMMs,
        norms and launches (those of all its tokens less those of its decodes alone), plus
        each chunk's attention (a prompt's attention up to the chunk's end less up to its
        start)."""
        cost = self.decode(decodes) if decodes else Cost(0.0, 0.0)
        if not chunks:
            return cost
        batch, total = len(decodes), len(decodes) + sum(k for _, k in chunks)
        points = {total, batch, *(o + k for o, k in chunks), *(o for o, _ in chunks)} - {0}
        self._simulate(
            _prefill_step(t)
            for value in sorted(points)
            for t in _bracket(self.prefill_grid, value)[:2]
        )
        added = (
            self._prefill_at(total, _rest_s)
            - self._prefill_at(batch, _rest_s)
            + sum(
                self._prefill_at(o + k, _attention_s) - self._prefill_at(o, _attention_s)
                for o, k in chunks
            )
        )
        return Cost(cost.seconds + added, cost.joules + added * self._prefill_at(total, _watts))

    def simulate_prompts(self, prompts: Iterable[int]) -> None:
        """Simulate at once the prefills either side of every prompt length in `prompts`:
        every step that finishes a prompt needs its attention from them, so they are needed
        anyway, and asked for together they run side by side (the largest first, so the
        workers end together) instead of a few at a time as the steps find them."""
        points = {t for p in set(prompts) for t in _bracket(self.prefill_grid, p)[:2]}
        self._simulate(_prefill_step(t) for t in sorted(points, reverse=True))

    def prefill(self, prompts: Sequence[int]) -> Cost:
        """Whole prompts, prefilled together."""
        return self.step([], [(0, p) for p in prompts])

    def decode(self, contexts: Sequence[int]) -> Cost:
        batch = len(contexts)
        b_low, b_high, b_share = _bracket(self.batch_grid, batch)
        c_low, c_high, c_share = _bracket(self.context_grid, sum(contexts) / batch)
        if not self._decoded.issuperset((b_low, b_high)):  # asked on every engine step
            # every context of the batch sizes used: the middle one checks the line through
            # the others, and a batch's mean context moves over the whole range as it runs
            self._simulate(_decode_step(b, c) for b in (b_low, b_high) for c in self.context_grid)
            self._decoded.update((b_low, b_high))

        def at(b: int) -> tuple[float, float]:
            """Batch `b`'s seconds and watts at the mean context."""
            low, high = self._decode(b, c_low), self._decode(b, c_high)
            return _lerp(low.seconds, high.seconds, c_share), _lerp(low.watts, high.watts, c_share)

        (seconds, watts), (seconds_high, watts_high) = at(b_low), at(b_high)
        seconds = _lerp(seconds, seconds_high, b_share)
        return Cost(seconds, seconds * _lerp(watts, watts_high, b_share))

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

    def _prefill_at(self, tokens: int, field: Callable[[_Anchor], float]) -> float:
        """A prefill anchor's `field` at `tokens` (0: none), interpolated between anchors."""
        if tokens == 0:
            return 0.0
        low, high, share = _bracket(self.prefill_grid, tokens)
        return _mix(self._prefill(low), self._prefill(high), share, field)

    def _prefill(self, tokens: int) -> _Anchor:
        return self._anchor(_prefill_step(tokens))

    def _decode(self, batch: int, context: int) -> _Anchor:
        return self._anchor(_decode_step(batch, context))

    def _anchor(self, step: Step) -> _Anchor:
        return self._anchors[step]

    def _simulate(self, steps: Iterable[Step]) -> None:
        """Simulate the steps among `steps` not simulated yet, together, in their order. Safe
        from several threads (a capacity search's points): a step another thread is
        simulating is waited for, not simulated twice."""
        wanted = list(dict.fromkeys(steps))
        if all(s in self._anchors for s in wanted):
            return
        with self._lock:
            missing = [s for s in wanted if s not in self._anchors and s not in self._pending]
            waiting = [self._pending[s] for s in wanted if s in self._pending]
            done = threading.Event()
            self._pending.update((s, done) for s in missing)
        try:
            for step, time in zip(missing, self._time_steps(missing) if missing else ()):
                seconds = time.cycles / self._clock_hz
                joules = sum((time.energy or {}).values()) * self._chips
                self._anchors[step] = _Anchor(
                    seconds,
                    time.by_class_cycles.get(ATTENTION, 0.0) / self._clock_hz,
                    joules / seconds if seconds > 0 else 0.0,
                )
        finally:
            with self._lock:
                for step in missing:
                    del self._pending[step]
            done.set()
        for event in waiting:
            event.wait()
        if any(s not in self._anchors for s in wanted):  # another thread's simulation failed
            self._simulate(wanted)


def _rest_s(anchor: _Anchor) -> float:
    return anchor.seconds - anchor.attention_s


def _attention_s(anchor: _Anchor) -> float:
    return anchor.attention_s


def _watts(anchor: _Anchor) -> float:
    return anchor.watts


def _mix(low: _Anchor, high: _Anchor, share: float, field: Callable[[_Anchor], float]) -> float:
    return _lerp(field(low), field(high), share)


def _lerp(low: float, high: float, share: float) -> float:
    """`share` of the way from `low` to `high` (`low` itself at 0)."""
    return low if share == 0.0 else low + share * (high - low)


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
