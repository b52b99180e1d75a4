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
- `chunked` (Sarathi's, vLLM's chunked prefill): a step has a token budget; every running
  request's decode comes first, and what is left of the budget prefills the waiting (and
  part-prefilled) requests in order, a prompt over several steps if it must, so decodes
  never wait behind a long prompt. A request's first token follows its prompt's last chunk.
- `static`: when nothing runs, the requests waiting (up to a batch) start together, their
  blocks for prompt and output reserved at once, and the batch decodes until the last of
  them finishes; nobody joins a running batch.

A runtime whose prefill stops a token short (`first_token: decode`, as `infer` runs it)
prefills all but the last of a request's positions and gives its next token from its first
decode step, at the context of them all.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field, replace

import simpy

from .requests import Request
from .step_times import StepTimes

POLICIES = ("continuous", "chunked", "static")


@dataclass(eq=False)  # one per request: compared by identity
class Served:
    """What happened to one request (times in seconds from the start)."""

    request: Request
    admitted_s: float = math.nan  # first taken into a step
    first_token_s: float = math.nan
    finish_s: float = math.nan
    generated: int = 0
    preempted: int = 0
    prefilled: int = 0  # tokens of its current prefill done
    target: int = 0  # tokens its current prefill covers (on a recompute, what it generated too)

    @property
    def decoding(self) -> bool:
        return self.prefilled == self.target > 0


@dataclass(frozen=True, slots=True)
class StepRecord:
    """One engine step, as the timeline shows it."""

    start_s: float
    end_s: float
    phase: str  # prefill, decode or mixed (decodes and prefill chunks)
    batch: int  # sequences in the step
    tokens: int  # tokens it processed (prompts or chunks at prefill, one each at decode)
    generated: int  # tokens it gave requests (a chunk short of its prompt's end gives none)
    waiting: int  # requests queued as it started
    kv_blocks: int  # KV blocks held as it ended
    joules: float


class PagedKVCache:
    """KV blocks of `block_tokens` positions each, `blocks` of them: a request holds
    ceil(context / block_tokens) blocks, taken as its context grows and freed when it ends."""

    def __init__(self, blocks: int, block_tokens: int):
        self.blocks, self.block_tokens = blocks, block_tokens
        self.held: dict[int, int] = {}
        self.used = 0

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
        self.used += more
        return True

    def free(self, request: int) -> None:
        self.used -= self.held.pop(request, 0)


@dataclass
class _Plan:
    """One step: the running requests that decode a token, and prefill chunks (a request
    and the tokens of its prefill this step covers)."""

    decodes: list[Served]
    chunks: list[tuple[Served, int]]

    @property
    def phase(self) -> str:
        return "mixed" if self.decodes and self.chunks else "decode" if self.decodes else "prefill"


@dataclass
class _State:
    waiting: deque[Served] = field(default_factory=deque)
    running: list[Served] = field(default_factory=list)  # in the order they were admitted
    leave_last: bool = False  # a prefill stops a position short; a decode step gives the token


def run_engine(
    requests: tuple[Request, ...],
    times: StepTimes,
    cache: PagedKVCache,
    policy: str,
    max_batch: int,
    max_step_tokens: int,
    concurrency: int | None = None,
    leave_last: bool = False,
) -> tuple[list[Served], list[StepRecord]]:
    """Serve every request; each is finished once, in the order the policy runs them. Open
    loop (`concurrency` None): each arrives at its `arrival_s`. Closed loop: `concurrency`
    clients each send a request (the next of `requests`, in order, arriving as it is sent),
    wait for its last token and send the next, as benchmarks at a fixed concurrency do.
    `leave_last`: prefills stop a position short (see the module docstring)."""
    env = simpy.Environment()
    served: list[Served] = []
    state = _State(leave_last=leave_last)
    steps: list[StepRecord] = []
    arrived = [env.event()]  # fired at each arrival, for an engine with nothing to do
    finished: dict[int, simpy.Event] = {}  # a closed-loop client waits on its request's
    plan_step = {"continuous": _continuous, "chunked": _chunked, "static": _static}[policy]

    def arrive(s: Served) -> None:
        served.append(s)
        state.waiting.append(s)
        arrived[0].succeed()
        arrived[0] = env.event()

    def open_loop():
        for request in requests:
            if request.arrival_s > env.now:
                yield env.timeout(request.arrival_s - env.now)
            arrive(Served(request))

    def client(unsent: Iterator[Request]):
        for request in unsent:  # shared by the clients: each takes the next unsent
            finished[request.id] = env.event()
            arrive(Served(replace(request, arrival_s=env.now)))
            yield finished[request.id]

    def engine():
        done = 0
        while done < len(requests):
            if not state.waiting and not state.running:
                yield arrived[0]
                continue
            queued = len(state.waiting)
            plan = plan_step(state, cache, max_batch, max_step_tokens)
            for s, _ in plan.chunks:
                if math.isnan(s.admitted_s):
                    s.admitted_s = env.now
            cost = times.step(
                [_tokens(s) for s in plan.decodes], [(s.prefilled, k) for s, k in plan.chunks]
            )
            start = env.now
            yield env.timeout(cost.seconds)
            given = list(plan.decodes)
            for s, k in plan.chunks:
                s.prefilled += k
                if s.decoding and s.prefilled == _tokens(s):  # every position: its next token
                    given.append(s)
            for s in given:
                s.generated += 1
                if s.generated == 1:
                    s.first_token_s = env.now
                if s.generated == s.request.output_tokens:
                    s.finish_s = env.now
                    cache.free(s.request.id)
                    state.running.remove(s)
                    done += 1
                    if s.request.id in finished:
                        finished[s.request.id].succeed()
            steps.append(
                StepRecord(
                    start,
                    env.now,
                    plan.phase,
                    len(plan.decodes) + len(plan.chunks),
                    len(plan.decodes) + sum(k for _, k in plan.chunks),
                    len(given),
                    queued,
                    cache.used,
                    cost.joules,
                )
            )

    if concurrency is None:
        env.process(open_loop())
    else:
        unsent = iter(requests)
        for _ in range(concurrency):
            env.process(client(unsent))
    env.process(engine())
    env.run()
    return served, steps


def _tokens(s: Served) -> int:
    """A request's prompt and the tokens it has generated: what a prefill that admits it
    covers (a recomputed request prefills them all again), or the positions its next decode
    step attends over (the newest token's among them); either way what its KV cache then
    holds."""
    return s.request.prompt_tokens + s.generated


def longest(request: Request) -> int:
    """The most positions a request's KV cache holds: its prompt and every token but the last
    (which no step feeds back in)."""
    return request.prompt_tokens + request.output_tokens - 1


def prefill_tokens(positions: int, leave_last: bool) -> int:
    """What a prefill over `positions` covers: all of them, or (`leave_last`, as a runtime
    whose first token comes from a decode step runs it) all but the last, for a decode step
    to feed in; a single position is prefilled."""
    return positions - 1 if leave_last and positions > 1 else positions


def _admit(state: _State, s: Served) -> None:
    state.waiting.popleft()
    s.prefilled, s.target = 0, prefill_tokens(_tokens(s), state.leave_last)
    state.running.append(s)


def _continuous(state: _State, cache: PagedKVCache, max_batch: int, budget: int) -> _Plan:
    chunks: list[tuple[Served, int]] = []
    tokens = 0
    while state.waiting and len(state.running) < max_batch:
        s = state.waiting[0]
        if chunks and tokens + _tokens(s) > budget:
            break
        if not cache.hold(s.request.id, _tokens(s)):
            break
        _admit(state, s)
        chunks.append((s, s.target))
        tokens += s.target
    if chunks:
        return _Plan([], chunks)
    _make_room(state, cache, state.running)
    return _Plan(list(state.running), [])


def _chunked(state: _State, cache: PagedKVCache, max_batch: int, budget: int) -> _Plan:
    admit = True
    while True:
        plan = _chunked_once(state, cache, max_batch, budget, admit)
        if plan.decodes or plan.chunks or not state.running:
            return plan
        # every running request is part-prefilled and none finds a block for its next
        # chunk: the newest gives its blocks back, as a preempted request does, and they go
        # to the oldest (nobody new is admitted), so the oldest prefill always moves on
        _preempt(state, cache, state.running[-1])
        admit = False


def _chunked_once(
    state: _State, cache: PagedKVCache, max_batch: int, budget: int, admit: bool
) -> _Plan:
    decodes = [s for s in state.running if s.decoding]
    preempted = _make_room(state, cache, decodes)
    decodes = [s for s in decodes if s.decoding]  # less those preempted
    left = budget - len(decodes)
    chunks: list[tuple[Served, int]] = []
    for s in [s for s in state.running if not s.decoding]:  # part-prefilled, oldest first
        if left <= 0:
            break
        k = min(left, s.target - s.prefilled)
        if cache.hold(s.request.id, s.prefilled + k):
            chunks.append((s, k))
            left -= k
    admit = admit and not preempted
    while admit and left > 0 and state.waiting and len(state.running) < max_batch:
        s = state.waiting[0]
        k = min(left, prefill_tokens(_tokens(s), state.leave_last))
        if not cache.hold(s.request.id, k):
            break
        _admit(state, s)
        chunks.append((s, k))
        left -= k
    return _Plan(decodes, chunks)


def _make_room(state: _State, cache: PagedKVCache, decodes: list[Served]) -> int:
    """Each decoding request, oldest first, takes a block for its next token if it needs
    one; when none is free the newest running request is preempted (its blocks freed, it
    waits at the front of the queue to be prefilled again), until the request has its
    block or was itself the newest. Returns how many were preempted (a step that preempts
    admits nobody new)."""
    preempted = 0
    for s in list(decodes):
        if not s.decoding:
            continue  # preempted below, to make room for an older one
        while not cache.hold(s.request.id, _tokens(s)):
            newest = state.running[-1]
            _preempt(state, cache, newest)
            preempted += 1
            if newest is s:
                break
    return preempted


def _preempt(state: _State, cache: PagedKVCache, s: Served) -> None:
    """`s` gives its blocks back and waits at the front of the queue, to be prefilled again
    over its prompt and what it had generated (recompute)."""
    state.running.remove(s)
    cache.free(s.request.id)
    s.preempted += 1
    s.prefilled = s.target = 0
    state.waiting.appendleft(s)


def _static(state: _State, cache: PagedKVCache, max_batch: int, budget: int) -> _Plan:
    if state.running:
        return _Plan(list(state.running), [])
    chunks: list[tuple[Served, int]] = []
    tokens = 0
    while state.waiting and len(chunks) < max_batch:
        s = state.waiting[0]
        if chunks and tokens + s.request.prompt_tokens > budget:
            break
        if not cache.hold(s.request.id, longest(s.request)):
            break
        _admit(state, s)
        chunks.append((s, s.target))
        tokens += s.target
    return _Plan([], chunks)
