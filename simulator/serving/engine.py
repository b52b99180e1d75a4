"""The serving engine as a SimPy model: requests arrive, a scheduler forms one step at a time,
each step takes what `StepTimes` says it costs, and a paged KV cache holds every running
request's context.

Policies:
- `continuous` (vLLM's): a step prefills the waiting requests at the front of the queue
  that fit (a slot of the batch, the token budget of a step, KV blocks for their prompts);
  when none can start, it decodes every running request by a token. A decode that needs a
  block when none is free preempts the newest running request: its blocks are freed and it
  waits at the front of the queue, to be prefilled again over its prompt and the tokens it
  had generated (recompute).
- `static`: when nothing runs, the requests waiting (up to a batch) start together, their
  blocks for prompt and output reserved at once, and the batch decodes until the last of
  them finishes; nobody joins a running batch.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field

import simpy

from .requests import Request
from .step_times import StepTimes

POLICIES = ("continuous", "static")


@dataclass
class Served:
    """What happened to one request (times in seconds from the start)."""

    request: Request
    first_token_s: float = math.nan
    finish_s: float = math.nan
    generated: int = 0
    preempted: int = 0


@dataclass(frozen=True, slots=True)
class StepRecord:
    """One engine step, as the timeline shows it."""

    start_s: float
    end_s: float
    phase: str
    batch: int  # sequences in the step
    tokens: int  # tokens it processed (prompts at prefill, one each at decode)
    waiting: int  # requests queued as it started
    kv_blocks: int  # KV blocks held as it ended
    joules: float


class PagedKVCache:
    """KV blocks of `block_tokens` positions each, `blocks` of them: a request holds
    ceil(context / block_tokens) blocks, taken as its context grows and freed when it ends."""

    def __init__(self, blocks: int, block_tokens: int):
        self.blocks, self.block_tokens = blocks, block_tokens
        self.held: dict[int, int] = {}

    @property
    def used(self) -> int:
        return sum(self.held.values())

    def need(self, tokens: int) -> int:
        return -(-tokens // self.block_tokens)

    def more(self, request: int, tokens: int) -> int:
        """Blocks a request must take to hold `tokens` positions."""
        return max(0, self.need(tokens) - self.held.get(request, 0))

    def hold(self, request: int, tokens: int) -> bool:
        more = self.more(request, tokens)
        if self.used + more > self.blocks:
            return False
        self.held[request] = self.held.get(request, 0) + more
        return True

    def free(self, request: int) -> None:
        self.held.pop(request, None)


@dataclass
class _State:
    waiting: deque[Served] = field(default_factory=deque)
    running: list[Served] = field(default_factory=list)
    steps: list[StepRecord] = field(default_factory=list)


def run_engine(
    requests: tuple[Request, ...],
    times: StepTimes,
    cache: PagedKVCache,
    policy: str,
    max_batch: int,
    max_step_tokens: int,
) -> tuple[list[Served], list[StepRecord]]:
    """Serve every request; each is finished once, in the order the policy runs them."""
    env = simpy.Environment()
    served = [Served(r) for r in requests]
    state = _State()
    arrived = [env.event()]  # fired at each arrival, for an engine with nothing to do

    def arrivals():
        for s in served:
            if s.request.arrival_s > env.now:
                yield env.timeout(s.request.arrival_s - env.now)
            state.waiting.append(s)
            arrived[0].succeed()
            arrived[0] = env.event()

    def engine():
        done = 0
        while done < len(served):
            if not state.waiting and not state.running:
                yield arrived[0]
                continue
            queued = len(state.waiting)
            if policy == "static":
                phase, batch = _static(state, cache, max_batch, max_step_tokens)
            else:
                phase, batch = _continuous(state, cache, max_batch, max_step_tokens)
            tokens = [_tokens(s) for s in batch]
            cost = times.prefill(tokens) if phase == "prefill" else times.decode(tokens)
            start = env.now
            yield env.timeout(cost.seconds)
            for s in batch:
                s.generated += 1
                if s.generated == 1:
                    s.first_token_s = env.now
                if s.generated == s.request.output_tokens:
                    s.finish_s = env.now
                    cache.free(s.request.id)
                    state.running.remove(s)
                    done += 1
            state.steps.append(
                StepRecord(
                    start,
                    env.now,
                    phase,
                    len(batch),
                    sum(tokens) if phase == "prefill" else len(batch),
                    queued,
                    cache.used,
                    cost.joules,
                )
            )

    env.process(arrivals())
    env.process(engine())
    env.run()
    return served, state.steps


def _tokens(s: Served) -> int:
    """A request's prompt and the tokens it has generated: what its next step prefills (a
    recomputed request prefills them all again), or the positions its next decode step
    attends over (the newest token's among them); either way what its KV cache then holds."""
    return s.request.prompt_tokens + s.generated


def longest(request: Request) -> int:
    """The most positions a request's KV cache holds: its prompt and every token but the last
    (which no step feeds back in)."""
    return request.prompt_tokens + request.output_tokens - 1


def _continuous(
    state: _State, cache: PagedKVCache, max_batch: int, max_step_tokens: int
) -> tuple[str, list[Served]]:
    admitted: list[Served] = []
    tokens = 0
    while state.waiting and len(state.running) + len(admitted) < max_batch:
        s = state.waiting[0]
        prefill = _tokens(s)
        if admitted and tokens + prefill > max_step_tokens:
            break
        if not cache.hold(s.request.id, prefill):
            break
        state.waiting.popleft()
        admitted.append(s)
        tokens += prefill
    if admitted:
        state.running.extend(admitted)
        return "prefill", admitted
    for s in list(state.running):  # oldest first: each takes a block for its next token
        if s not in state.running:
            continue  # preempted below, to make room for an older one
        while not cache.hold(s.request.id, _tokens(s)):
            newest = state.running[-1]
            state.running.remove(newest)
            cache.free(newest.request.id)
            newest.preempted += 1
            state.waiting.appendleft(newest)
            if newest is s:
                break
    return "decode", list(state.running)


def _static(
    state: _State, cache: PagedKVCache, max_batch: int, max_step_tokens: int
) -> tuple[str, list[Served]]:
    if state.running:
        return "decode", list(state.running)
    admitted: list[Served] = []
    tokens = 0
    while state.waiting and len(admitted) < max_batch:
        s = state.waiting[0]
        if admitted and tokens + s.request.prompt_tokens > max_step_tokens:
            break
        if not cache.hold(s.request.id, longest(s.request)):
            break
        state.waiting.popleft()
        admitted.append(s)
        tokens += s.request.prompt_tokens
    state.running.extend(admitted)
    return "prefill", admitted
