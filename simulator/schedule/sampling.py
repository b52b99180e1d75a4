"""Sampled kernels: a matmul's K chunks and blocks repeat, so most need not be simulated.

A core computes each output block of a matmul as a run of K chunks that stage, move and
multiply the same bytes at the same rates, and a row of blocks (its cell's inner loop) as
blocks that do the same work on other columns (or rows). Lowering samples both:

- a block of many K chunks (`chunk_plan`): its first WARM_UP_CHUNKS are simulated (the
  pipeline fills, the first reads find what was left in L2, cores drift apart), then a
  window of WINDOW_CHUNKS that is measured, and at its end a second window and the tail
  (the last chunk may be short, and the block's drain follows it); the chunks between the
  windows are not lowered;
- a row of many blocks (`kept_blocks`, `block_plan`): its first blocks, a window of
  whole blocks (as wide as the period of the blocks' shapes: an edge block may be cut), a
  second window and its last block; the blocks between the windows, with their drains,
  are not lowered (the chunks of
  the blocks kept are sampled as above: a window of chunks inside a window of blocks
  stands for its chunks in every block that window stands for). Each row is sampled on
  its own: its blocks share one operand and find the other as the row before left it in
  L2, so a window stands only for blocks of its own row.

What is not lowered is taken to repeat the windows, each `skipped` times over: half the
units between the two windows run at the first's pace and half at the second's, as their
pace goes from one to the other (a GEMM streaming its weights evicts, part way, what its
first chunks found in L2, and its later chunks wait on HBM):

- time (`extension_cycles`, called by the engine at the kernel's end): each core adds its
  skipped windows at its pace (the mean of the n-th windows of all cores, plus the part of
  its own window's difference from the mean that chance, measured by the difference between
  a window's halves, does not explain), less what the cores that end before it stop
  taking of the bandwidth they shared (`fluid_ends`; a window measured after peers had
  ended, their units skipped, first gets back the sharing they took from it:
  `_at_full_sharing`), and the kernel ends when its slowest core would, never sooner than
  the skipped units' HBM fetches (as their warming reads found them) take at HBM's
  sustained rate;
- work: the analysis counts every instruction of a window 1 + `skipped` times (its bytes,
  busy cycles and stalls), so bytes stay whole and conserved, except that what the skipped
  reads found in L2 or fetched from HBM splits as their warming reads did;
- L2: the first load after a skip, on the last core to get there (so that no core's window
  loses what a peer fetched for it; cores that get there in the same cycle look L2 up
  after it), warms L2 with what the skipped units touched on every
  core (their reads, their blocks' stores), in the order the cores would have run them
  (`warm_order`: side by side, each from the cycle it got there); what the cores that got
  there first touched since is held again after it, the most recently used (they would have
  touched it after the skipped units), so later reads and later kernels find what the
  skipped units would have left. Until then those cores read a view of L2 warmed so
  (engine/skips.py): they find what their peers' skipped units would have left, not what
  L2 held before them.

The error estimate: per n-th window, twice the standard deviation of a window by chance and
of the mean, times the windows skipped; plus, per pair of windows, the difference of their
mean paces times the windows the larger half stands for (the pace between them lies
anywhere between theirs); plus whatever the HBM floor added. Exact runs (and the reference
twin) lower every chunk.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Hashable, Iterable, Iterator, Mapping, Sequence, TypeVar

from .region import Region

# A block's first chunks are not its steady state: they may find what the block before left
# in L2, and while other cores finish their blocks this one runs ahead (LLaMA-2-7B's 2048-
# token q_proj on h100: a block's first 6-8 chunks take 2,108 cycles, the rest 2,610), so
# the window opens after 8 of them
WARM_UP_CHUNKS = 8
WINDOW_CHUNKS = 4  # an even number: a ping-pong of two buffers repeats every two chunks
TAIL_CHUNKS = 2
# a core's blocks, sampled when each has too few chunks: the first blocks warm up (at least
# two, and WARM_UP_CHUNKS chunks), a window of whole blocks (an even number, at least
# WINDOW_CHUNKS chunks) is measured, and the last block (the kernel's drain) is the tail
WARM_UP_BLOCKS = 2
TAIL_BLOCKS = 1
MAX_WINDOW_BLOCKS = 16  # a window widens to the period of its blocks' shapes, up to this
TIMED_PIPE = "CUBE"  # whose instruction ends time a window
OPENS, CLOSES = "opens", "closes"  # a unit's place in the measured window

Touch = tuple[Region, bool]  # a region a skipped unit read (False) or wrote (True)
Unit = TypeVar("Unit")


@dataclass(frozen=True, slots=True)
class Measured:
    """A measured window of a plan: kept[first : first + width] (the plan's width), standing
    for `skipped` windows of the units skipped next to it: after it, or (`late`) before it."""

    first: int
    skipped: int
    late: bool = False


@dataclass(frozen=True, slots=True)
class SamplePlan:
    """Which repeating units (a block's K chunks, or a row's blocks) are simulated: `kept`
    (indices, in order), in which two windows of `width` units are measured, one before the
    units not simulated and one after them (`windows`): the skipped units' pace runs from
    the first window's to the second's (a kernel streaming weights may evict, part way, what
    its first chunks found in L2), so each window stands for half of them."""

    kept: tuple[int, ...]
    width: int
    windows: tuple[Measured, Measured]

    @property
    def skipped(self) -> int:
        """The windows of units not simulated."""
        return sum(window.skipped for window in self.windows)

    def mark(self, index: int) -> tuple[str, Measured | None]:
        """Whether the kept unit at `index` opens or closes a measured window, and which."""
        for window in self.windows:
            if index == window.first:
                return OPENS, window
            if index == window.first + self.width - 1:
                return CLOSES, window
        return "", None

    def skipped_before(self, index: int) -> range:
        """The units not simulated just before the kept unit at `index`."""
        return range(self.kept[index - 1] + 1 if index else 0, self.kept[index])


def _plan(units: int, warm_up: int, width: int, tail: int) -> SamplePlan | None:
    """Keep `warm_up` units, a window of `width`, and the last ones: a second window and at
    least `tail` more; skip whole windows between the two windows."""
    skipped = (units - warm_up - 2 * width - tail) // width
    if skipped < 1:
        return None
    early_end = warm_up + width
    late_start = early_end + skipped * width
    early, late = Measured(warm_up, skipped // 2), Measured(early_end, skipped - skipped // 2, True)
    return SamplePlan((*range(early_end), *range(late_start, units)), width, (early, late))


def chunk_plan(chunks: int) -> SamplePlan | None:
    """The sampled chunks of a block of `chunks` K chunks, or None when no whole window could
    be skipped (the block runs whole)."""
    return _plan(chunks, WARM_UP_CHUNKS, WINDOW_CHUNKS, TAIL_CHUNKS)


def block_plan(
    shapes: Sequence[Hashable], chunks: int, tail: int = TAIL_BLOCKS
) -> SamplePlan | None:
    """The sampled blocks of a row of blocks of `chunks` K chunks each, given each block's
    shape (its extent: an edge block may be cut), at least its last `tail` kept, or None
    when no whole window could be skipped. The skipped blocks and the late window must
    repeat the early window's shapes in turn, so the windows widen to the shapes' period (up
    to MAX_WINDOW_BLOCKS)."""
    warm_up = max(WARM_UP_BLOCKS, -(-WARM_UP_CHUNKS // chunks))
    width = 2 * -(-WINDOW_CHUNKS // (2 * chunks))
    for wide in range(width, MAX_WINDOW_BLOCKS + 1, width):
        plan = _plan(len(shapes), warm_up, wide, tail)
        if plan is None:
            return None
        early, late = plan.windows
        window = shapes[early.first : early.first + wide]
        repeated = range(early.first + wide, plan.kept[late.first] + wide)  # to the late one
        if all(shapes[i] == window[(i - early.first) % wide] for i in repeated):
            return plan
    return None


def kept_blocks(
    shapes: Sequence[Hashable], rows: Sequence[int], chunks: int, last: int = 0
) -> Iterator[tuple[int, SamplePlan | None, str, Measured | None, range]]:
    """Each block a core lowers, sampled by blocks (of `chunks` K chunks; `shapes`: each
    one's extent), its `last` blocks all kept (`covering_tail`): its index, its row's plan
    (None: the row runs whole), its place in a measured window of the row and which, and the
    blocks skipped just before it. A row (the blocks of a cell's inner loop; `rows`: the first
    block of each) is sampled on its own: its blocks reuse one operand and meet the other
    as the row before left it in L2, so a window stands only for blocks of its own row."""
    for first, end in zip(rows, [*rows[1:], len(shapes)]):
        tail = max(TAIL_BLOCKS, end - max(first, len(shapes) - last))
        plan = block_plan(shapes[first:end], chunks, tail)
        if plan is None:
            yield from ((block, None, "", None, range(0)) for block in range(first, end))
            continue
        for index, block in enumerate(plan.kept):
            gap = plan.skipped_before(index)
            place, window = plan.mark(index)
            yield first + block, plan, place, window, range(first + gap.start, first + gap.stop)


def covering_tail(
    cores: Sequence[Sequence[Unit]],
    touched: Callable[[Unit], Iterable[Region]],
    capacity_bytes: int,
    nbytes: Callable[[Region], int],
) -> int:
    """How many of each core's last blocks (`cores`: per core, its blocks in order, each
    `touched`: the regions it reads and writes) must be simulated whole for them to touch,
    together, at least the L2's capacity in distinct bytes: what later kernels meet in L2
    is then what simulated blocks left, not the warm of skipped ones. (LLaMA-2-7B's
    1024-token gate+up on ascend910 kept its last two blocks on each of 32 cores; sharing
    operands, they touch 26 of L2's 32 MiB, and the down GEMM after it ran 9% slow.)"""
    seen: set[Region] = set()
    covered, longest = 0, max((len(blocks) for blocks in cores), default=0)
    for last in range(1, longest + 1):
        for blocks in cores:
            for region in touched(blocks[-last]) if last <= len(blocks) else ():
                if region not in seen:
                    seen.add(region)
                    covered += nbytes(region)
        if covered >= capacity_bytes:
            return last
    return longest


@dataclass(frozen=True, slots=True)
class Skip:
    """Units a core did not simulate: what each K chunk of them touched (a block's drain
    with its last chunk), after `chunks_before` chunks the core did simulate."""

    chunks_before: int
    steps: tuple[tuple[Touch, ...], ...]


def warm_order(
    skips: Mapping[int, Skip], arrivals: Mapping[int, int], started_cycle: int
) -> list[Touch]:
    """What the cores' skipped chunks touch, in the order they would have run side by side:
    core c's j-th skipped chunk at its arrival at the skip (`arrivals[c]`, a cycle) plus j
    chunks at the cores' mean pace so far (from `started_cycle`, the kernel's start). Cores
    that arrive far apart stop sharing what they read in L2, as they would have; their
    paces are not extrapolated apart (cores that read the same data keep each other
    together: the first to read it waits for HBM, the others find it in L2)."""
    paces = [
        (arrivals[core] - started_cycle) / max(skip.chunks_before, 1)
        for core, skip in skips.items()
    ]
    pace = sum(paces) / len(paces)
    timed = sorted(
        (arrivals[core] + j * pace, core, j)
        for core, skip in skips.items()
        for j in range(len(skip.steps))
    )
    return [touch for _, core, j in timed for touch in skips[core].steps[j]]


@dataclass(frozen=True, slots=True)
class Window:
    """The measured units (`width` of them) on one core: per pipe, the queue positions
    [start, end) of their instructions; `skipped` windows like it were not simulated."""

    core: int
    spans: Mapping[str, tuple[int, int]]
    skipped: int
    width: int
    repeats: int = 1  # how many times it runs: a window of K chunks in a window of blocks
    unit: str = "chunk"  # what it measures: K chunks of a block, or blocks of a row
    skip: int = 0  # which of its core's skips (in order) the units it stands for lie at
    late: bool = False  # measured after that skip (with the window before it, it stands for it)


@dataclass(frozen=True, slots=True)
class KernelSampling:
    """What was sampled in a kernel: the K chunks of all its blocks on all cores, those
    simulated, and every window."""

    chunks: int
    kept: int
    windows: tuple[Window, ...]
    skips: tuple[tuple[Skip, ...], ...] = ()  # per core, in order

    def skipping(self, group: int) -> dict[int, Skip]:
        """The `group`-th skip of every core that skips that often, by core."""
        return {core: skips[group] for core, skips in enumerate(self.skips) if len(skips) > group}

    def weights(self, core: int, pipe: str, length: int) -> list[int] | None:
        """How many times each instruction of a pipe's queue counts (None: each once)."""
        spans = [
            (w.spans[pipe], w.skipped) for w in self.windows if w.core == core and pipe in w.spans
        ]
        if not spans:
            return None
        weights = [1] * length
        for (start, end), skipped in spans:  # a window in a window counts for both
            for position in range(start, end):
                weights[position] *= 1 + skipped
        return weights


@dataclass(frozen=True, slots=True)
class Extension:
    """The time a sampled kernel's skipped windows add, and its error estimate, in cycles."""

    cycles: int
    error_cycles: int


@dataclass(frozen=True, slots=True)
class Load:
    """What a measured window needs of its core with no other core running (the cycles of
    its busiest pipe, or engine stream: its global transfers' bytes at their own rates),
    and the bytes it moved through each shared memory (HBM, then L2's port); the engine
    measures both from the window's instructions."""

    alone_cycles: int
    shared_bytes: tuple[int, int]


def extension_cycles(
    sampling: KernelSampling,
    core_ends: Sequence[int],
    timed_ends: Mapping[int, Sequence[int]],
    floor_cycles: int,
    loads: Sequence[Load] = (),
    skipped_at: Mapping[tuple[int, int], int] = {},
    bandwidths: Sequence[float] = (),
) -> Extension:
    """The cycles a sampled kernel runs beyond its simulated end. Each window's duration is
    read on its core's TIMED_PIPE (`timed_ends[core]`: the end cycle of each instruction).
    The n-th windows of all cores differ by their cores (one reads from a slower place) and
    by chance (a window catches a stall its core's other chunks do not); the difference
    between a window's halves measures chance, so each core's pace is the mean of the n-th
    windows plus the share of its own difference that chance does not explain (the slowest
    of a hundred windows is otherwise an outlier, not a pace). Each core adds its skipped
    windows at its pace (as many times over as a window runs: one of K chunks inside a
    window of blocks stands for its chunks in every block that window stands for), each at
    the skip it stands for (`skipped_at`: the cycle each (core, skip) was passed; the end,
    if not given), less what the cores that end before it stop taking of the bandwidth they
    shared (`loads`, one per window: `fluid_ends`); the kernel ends when its slowest core
    would, but never sooner than `floor_cycles` (its skipped units' HBM fetches at HBM's
    rate). The error: per n-th window, twice the standard deviation of a window by chance
    and of the mean, times the windows skipped; plus, for a late window, how far its mean
    is from the window before's, times the windows the larger of them stands for; plus
    what the relief took off (the cores'
    pace once others end is modelled, not simulated), what the sharing given back to windows
    measured after peers ended added, and what the floor added. `bandwidths` (bytes per
    cycle of HBM and L2's port) say how busy each memory is: see fluid_ends."""
    timed = [_timed(window, timed_ends[window.core]) for window in sampling.windows]
    durations = [last - before for before, last, _ in timed]
    gaps = [gap for *_, gap in timed]
    extend = (sampling, gaps, core_ends, loads, skipped_at, bandwidths)
    ends, error = _extend(durations, *extend)
    if loads:  # a window measured while peers had ended shared less than its skip would
        spans = [(before, last) for before, last, _ in timed]
        full = _at_full_sharing(sampling, durations, spans, loads, core_ends, ends, bandwidths)
        if full != durations:  # modelled, not simulated: what it adds is stated as error
            first = max(ends)
            ends, error = _extend(full, *extend)
            error += abs(max(ends) - first)
    cycles = max(0, round(max(ends)) - max(core_ends))
    raised = max(0, floor_cycles - cycles)
    return Extension(cycles + raised, math.ceil(error) + raised)


def _timed(window: Window, ends: Sequence[int]) -> tuple[int, int, int]:
    """A window's first and last cycle on its core's TIMED_PIPE (`ends`: the end cycle of
    each instruction), and the gap between its halves' durations."""
    start, end = window.spans[TIMED_PIPE]
    per_unit = (end - start) // window.width  # Cube calls per unit
    middle = ends[start - 1 + window.width // 2 * per_unit]
    before, last = ends[start - 1], ends[end - 1]
    return before, last, abs((last - middle) - (middle - before))


def _extend(
    durations: Sequence[float],
    sampling: KernelSampling,
    gaps: Sequence[int],
    core_ends: Sequence[int],
    loads: Sequence[Load],
    skipped_at: Mapping[tuple[int, int], int],
    bandwidths: Sequence[float],
) -> tuple[list[float], float]:
    """When each core would end with its skipped windows (each window lasting `durations`,
    its halves `gaps` apart), and the error of that: see extension_cycles."""
    # (unit, n) -> the n-th windows of that unit on every core: (window, duration, halves' gap)
    paces: dict[tuple[str, int], list[tuple[int, Window, float, int]]] = {}
    ordinal: dict[tuple[int, str], int] = {}
    for index, window in enumerate(sampling.windows):
        n = ordinal[window.core, window.unit] = ordinal.get((window.core, window.unit), -1) + 1
        paces.setdefault((window.unit, n), []).append(
            (index, window, durations[index], gaps[index])
        )
    # per core, per skip: the skipped windows' cycles side by side, and with no other core
    skips: dict[int, dict[int, list[float]]] = {}
    error = 0.0
    means: dict[tuple[str, int], tuple[float, int]] = {}  # the mean, and the windows it stands for
    for (unit, n), samples in paces.items():
        window_cycles = [duration for _, _, duration, _ in samples]
        mean = sum(window_cycles) / len(window_cycles)
        spread = sum((d - mean) ** 2 for d in window_cycles) / len(window_cycles)
        noise = sum(g * g for _, _, _, g in samples) / len(samples)  # var(h2 - h1) = var(h1 + h2)
        kept = 0.0 if spread <= noise else 1 - noise / spread  # of a core's own difference
        skipped = max(window.skipped * window.repeats for _, window, _, _ in samples)
        error += skipped * 2 * math.sqrt(noise + spread / len(window_cycles))
        means[unit, n] = mean, skipped
        if samples[0][1].late and (unit, n - 1) in means:  # the pace between the two windows
            early_mean, early_skipped = means[unit, n - 1]
            error += max(skipped, early_skipped) * abs(mean - early_mean)
        for index, window, duration, _ in samples:
            pace = mean + kept * (duration - mean)
            times = window.skipped * window.repeats
            alone = loads[index].alone_cycles if loads else duration
            segment = skips.setdefault(window.core, {}).setdefault(window.skip, [0.0, 0.0])
            segment[0] += times * pace
            segment[1] += times * min(pace, alone)
    segments = {
        core: sorted(
            (skipped_at.get((core, skip), core_ends[core]), shared, alone)
            for skip, (shared, alone) in by_skip.items()
        )
        for core, by_skip in skips.items()
    }
    fluid = fluid_ends(core_ends, segments, _demand(sampling, durations, loads), bandwidths)
    side_by_side = max(
        end + sum(shared for _, shared, _ in segments.get(core, ()))
        for core, end in enumerate(core_ends)
    )
    relief = side_by_side - max(fluid)  # a model of what was not simulated: stated as error
    return fluid, error + relief


def _demand(
    sampling: KernelSampling, durations: Sequence[float], loads: Sequence[Load]
) -> dict[int, tuple[float, ...]]:
    """Per core with windows, the bytes per cycle its windows moved through each shared
    memory (HBM, then L2's port)."""
    measured: dict[int, float] = {}
    moved: dict[int, list[int]] = {}
    for index, window in enumerate(sampling.windows):
        measured[window.core] = measured.get(window.core, 0) + durations[index]
        shared = loads[index].shared_bytes if loads else (0, 0)
        moved[window.core] = [a + b for a, b in zip(moved.get(window.core, [0, 0]), shared)]
    return {
        core: tuple(nbytes / cycles for nbytes in moved[core])
        for core, cycles in measured.items()
        if cycles
    }


def _at_full_sharing(
    sampling: KernelSampling,
    durations: Sequence[float],
    spans: Sequence[tuple[int, int]],
    loads: Sequence[Load],
    core_ends: Sequence[int],
    projected_ends: Sequence[float],
    bandwidths: Sequence[float],
) -> list[float]:
    """Each window's duration had the other cores run as long as they would have with
    their skipped windows (`projected_ends`), not only as long as they were simulated
    (`core_ends`): a window measured (over `spans`, its first and last cycle) while peers
    had already ended shared less than the units it stands for would; the part of its time
    beyond its time alone grows with the share of the other cores' demand running."""
    demand = _demand(sampling, durations, loads)
    totals = [sum(d[level] for d in demand.values()) for level in range(2)]
    busy = _busy(totals, bandwidths)
    simulated = {core: core_ends[core] for core in demand}
    projected = {core: projected_ends[core] for core in demand}
    first_end = min(simulated.values(), default=float("inf"))
    full = []
    for duration, (begin, end), load, window in zip(durations, spans, loads, sampling.windows):
        if end <= first_end:  # every core ran all through it, as it would have: as measured
            full.append(duration)
            continue
        own = demand.get(window.core, (0.0, 0.0))
        measured = _mean_sharing(own, begin, end, simulated, demand, totals, busy)
        would = _mean_sharing(own, begin, end, projected, demand, totals, busy)
        contended = duration - load.alone_cycles
        full.append(
            load.alone_cycles + contended * would / measured
            if contended > 0 and measured > 0 and would > measured
            else duration
        )
    return full


def _mean_sharing(
    own: Sequence[float],
    begin: int,
    end: int,
    ends: Mapping[int, float],
    demand: Mapping[int, Sequence[float]],
    totals: Sequence[float],
    busy: Sequence[float],
) -> float:
    """The mean over cycles [begin, end) of the share of the other cores' demand running
    (see _others), the cores running until their `ends`."""
    cuts = sorted({begin, end, *(e for e in ends.values() if begin < e < end)})
    if len(cuts) < 2:
        cuts = [begin, begin + 1]
    shared = 0.0
    for at, until in zip(cuts, cuts[1:]):
        still = [sum(demand[c][level] for c, e in ends.items() if e > at) for level in range(2)]
        shared += (until - at) * _others(own, still, totals, busy)
    return shared / (cuts[-1] - cuts[0])


def fluid_ends(
    core_ends: Sequence[int],
    segments: Mapping[int, Sequence[tuple[int, float, float]]],
    demand: Mapping[int, Sequence[float]],
    bandwidths: Sequence[float] = (),
) -> list[float]:
    """When each core would end, had it run its skipped windows at the skips they stand for
    (`segments[core]`: per skip, in order, the cycle it was passed, and the windows' cycles
    while every core runs and with no other), the rest as simulated: a skip's windows take
    the part of their time spent sharing scaled by what is still running of the other
    cores' demand on the memories it uses (`demand`: per memory, bytes per cycle in their
    windows), each memory weighed by its own share of its bytes and by how near the cores'
    demand comes to its bandwidth (`bandwidths`, bytes per cycle; none given: all the way):
    a memory with room to spare runs each transfer at its engine's rate however many share
    it. Cores sharing HBM or L2 run faster once those with less work (an edge block, a
    shorter share) are done."""
    ends = [float(end) for end in core_ends]  # a core without skipped windows: as simulated
    totals = [sum(d[level] for d in demand.values()) for level in range(2)]
    busy = _busy(totals, bandwidths)
    cores = [core for core in demand if segments.get(core)]
    delay = dict.fromkeys(cores, 0.0)  # cycles its skipped windows so far took
    step_of = dict.fromkeys(cores, 0)  # its next (or current) skip
    left: dict[int, float] = {}  # of the skip it is running, by core
    running = dict.fromkeys(cores, float("inf"))  # until its end, a core's demand counts
    now = float(min((segments[core][0][0] for core in cores), default=0))
    while any(end == float("inf") for end in running.values()):
        for core in cores:  # a core that reached its next skip starts it
            if core not in left and running[core] == float("inf"):
                if segments[core][step_of[core]][0] + delay[core] <= now:
                    left[core] = 1.0
        still = [
            sum(demand[core][level] for core, end in running.items() if end > now)
            for level in range(2)
        ]
        rates = {}
        for core in left:  # of its skip's windows per cycle
            _, shared, alone = segments[core][step_of[core]]
            cycles = alone + (shared - alone) * _others(demand[core], still, totals, busy)
            rates[core] = 1 / max(cycles, 1.0)
        step = min(
            [
                *(left[core] / rate for core, rate in rates.items()),
                *(
                    segments[core][step_of[core]][0] + delay[core] - now
                    for core in cores
                    if core not in left and running[core] == float("inf")
                ),
                *(end - now for end in running.values() if now < end < float("inf")),
            ]
        )
        now += step
        for core, rate in rates.items():
            left[core] -= rate * step
            if left[core] > 1e-9:
                continue
            del left[core]
            delay[core] = now - segments[core][step_of[core]][0]
            step_of[core] += 1
            if step_of[core] == len(segments[core]):
                ends[core] = running[core] = core_ends[core] + delay[core]
    return ends


def _busy(totals: Sequence[float], bandwidths: Sequence[float]) -> list[float]:
    """How near the cores' demand comes to each memory's bandwidth (1: all of it)."""
    if not bandwidths:
        return [1.0] * len(totals)
    return [min(1.0, total / bandwidth) for total, bandwidth in zip(totals, bandwidths)]


def _others(
    own: Sequence[float], still: Sequence[float], totals: Sequence[float], busy: Sequence[float]
) -> float:
    """How much of its sharing a core still meets: per memory it uses (weighed by the
    core's own share of its demand, `own`), the share of the other cores' demand still
    running where the memory is busy, all of it where it has room to spare."""
    weight = sum(own) or 1
    return sum(
        mine / weight * (1 - near * (1 - ((left - mine) / (total - mine) if total > mine else 0)))
        for mine, left, total, near in zip(own, still, totals, busy)
    )
