"""Sampled kernels: a matmul block's K chunks repeat, so most of them need not be simulated.

A core computes each output block of a matmul as a run of K chunks that stage, move and
multiply the same bytes at the same rates; after the first chunks fill the pipeline, each
takes about the time of the one before it, give or take where its bytes come from.
Lowering asks `chunk_plan` which chunks of a block to simulate: the first WARM_UP_CHUNKS
(the pipeline fills, the first reads find what was left in L2, cores drift apart), a window
of WINDOW_CHUNKS that is measured, and the tail (the last chunk may be short, and the
block's drain follows it). The chunks between the window and the tail are not lowered;
they are taken to repeat the window `skipped` times over:

- time (`extension_cycles`, called by the engine at the kernel's end): each core adds its
  skipped windows at its pace (the mean of the n-th windows of all cores, plus the part of
  its own window's difference from the mean that chance, measured by the difference between
  a window's halves, does not explain), and the kernel ends when its slowest core would,
  never sooner than the skipped chunks' HBM fetches (as their warming reads found them)
  take at HBM's sustained rate;
- work: the analysis counts every instruction of a window 1 + `skipped` times (its bytes,
  busy cycles and stalls), so bytes stay whole and conserved, except that what the skipped
  reads found in L2 or fetched from HBM splits as their warming reads did;
- L2: the first load after a skip, on the last core to get there (so that no core's window
  loses what a peer fetched for it), warms L2 with the regions the skipped chunks read on
  every core, chunk by chunk across the cores as they run side by side, so later reads and
  later kernels find what the skipped chunks would have left there.

The error estimate: per block, twice the standard deviation of a window by chance and of
the mean, times the windows skipped; plus whatever the HBM floor added. Exact runs (and the
reference twin) lower every chunk.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Mapping, Sequence

from .region import Region

# A block's first chunks are not its steady state: they may find what the block before left
# in L2, and while other cores finish their blocks this one runs ahead (LLaMA-2-7B's 2048-
# token q_proj on h100: a block's first 6-8 chunks take 2,108 cycles, the rest 2,610), so
# the window opens after 8 of them
WARM_UP_CHUNKS = 8
WINDOW_CHUNKS = 4  # an even number: a ping-pong of two buffers repeats every two chunks
TAIL_CHUNKS = 2
WINDOW_PIPES = ("MTE2", "MTE1", "VECTOR", "CUBE")  # the pipes a K chunk's instructions use
TIMED_PIPE = "CUBE"  # whose chunk ends time a window
OPENS, CLOSES = "opens", "closes"  # a chunk's place in its block's window


@dataclass(frozen=True, slots=True)
class ChunkPlan:
    """Which of a block's K chunks are simulated: `kept` (chunk indices, in order), of which
    kept[window : window + WINDOW_CHUNKS] are measured and stand for `skipped` more windows
    of chunks that are not simulated."""

    chunks: int
    kept: tuple[int, ...]
    window: int
    skipped: int

    def mark(self, index: int) -> str:
        """Whether the kept chunk at `index` opens or closes the measured window."""
        if index == self.window:
            return OPENS
        return CLOSES if index == self.window + WINDOW_CHUNKS - 1 else ""

    def skipped_before(self, index: int) -> range:
        """The chunks not simulated just before the kept chunk at `index`."""
        return range(self.kept[index - 1] + 1 if index else 0, self.kept[index])


def chunk_plan(chunks: int) -> ChunkPlan | None:
    """The sampled chunks of a block of `chunks` K chunks, or None when no whole window could
    be skipped (the block runs whole)."""
    skipped = (chunks - WARM_UP_CHUNKS - WINDOW_CHUNKS - TAIL_CHUNKS) // WINDOW_CHUNKS
    if skipped < 1:
        return None
    measured_end = WARM_UP_CHUNKS + WINDOW_CHUNKS
    tail_start = measured_end + skipped * WINDOW_CHUNKS
    return ChunkPlan(
        chunks, (*range(measured_end), *range(tail_start, chunks)), WARM_UP_CHUNKS, skipped
    )


def warm_groups(
    skips: Sequence[Sequence[tuple[Region, ...]]], sides: int
) -> tuple[tuple[tuple[Region, ...], ...], tuple[int, ...]]:
    """Per skip (the n-th of every core), the regions its chunks read on all cores, chunk
    by chunk across the cores, and how many cores skip there; `skips[core][n]` holds the
    n-th skip's regions on a core, `sides` of them per chunk."""
    groups, cores = [], []
    for n in range(max(map(len, skips), default=0)):
        on = [core[n] for core in skips if len(core) > n]
        groups.append(
            tuple(
                region
                for chunk in range(0, max(map(len, on)), sides)
                for regions in on
                for region in regions[chunk : chunk + sides]
            )
        )
        cores.append(len(on))
    return tuple(groups), tuple(cores)


@dataclass(frozen=True, slots=True)
class Window:
    """The measured chunks of one block on one core: per pipe, the queue positions
    [start, end) of their instructions; `skipped` windows like it were not simulated."""

    core: int
    spans: Mapping[str, tuple[int, int]]
    skipped: int


@dataclass(frozen=True, slots=True)
class KernelSampling:
    """What was sampled in a kernel: its blocks' chunks simulated of all, and every window."""

    chunks: int  # K chunks per block
    kept: int  # simulated per block
    windows: tuple[Window, ...]
    # per skip (the n-th of every core), the regions its chunks read on all cores, chunk by
    # chunk as the cores would have read them side by side, and how many cores skip there
    warm_groups: tuple[tuple[Region, ...], ...] = ()
    warm_cores: tuple[int, ...] = ()

    def weights(self, core: int, pipe: str, length: int) -> list[int] | None:
        """How many times each instruction of a pipe's queue counts (None: each once)."""
        spans = [
            (w.spans[pipe], w.skipped) for w in self.windows if w.core == core and pipe in w.spans
        ]
        if not spans:
            return None
        weights = [1] * length
        for (start, end), skipped in spans:
            weights[start:end] = [1 + skipped] * (end - start)
        return weights


@dataclass(frozen=True, slots=True)
class Extension:
    """The time a sampled kernel's skipped windows add, and its error estimate, in cycles."""

    cycles: int
    error_cycles: int


def extension_cycles(
    sampling: KernelSampling,
    core_ends: Sequence[int],
    timed_ends: Mapping[int, Sequence[int]],
    floor_cycles: int,
) -> Extension:
    """The cycles a sampled kernel runs beyond its simulated end. Each window's duration is
    read on its core's TIMED_PIPE (`timed_ends[core]`: the end cycle of each instruction).
    The n-th windows of all cores differ by their cores (one reads from a slower place) and
    by chance (a window catches a stall its core's other chunks do not); the difference
    between a window's halves measures chance, so each core's pace is the mean of the n-th
    windows plus the share of its own difference that chance does not explain (the slowest
    of a hundred windows is otherwise an outlier, not a pace). Each core adds its skipped
    windows at its pace; the kernel ends when its slowest core would, but never sooner than
    `floor_cycles` (its skipped chunks' HBM fetches at HBM's rate). The error: per block,
    twice the standard deviation of a window by chance and of the mean, times the windows
    skipped; plus what the floor added."""
    half = WINDOW_CHUNKS // 2
    paces: dict[int, list[tuple[Window, int, int]]] = {}  # n -> (window, duration, halves' gap)
    ordinal = dict.fromkeys(range(len(core_ends)), 0)
    for window in sampling.windows:
        start, end = window.spans[TIMED_PIPE]
        ends = timed_ends[window.core]
        per_chunk = (end - start) // WINDOW_CHUNKS  # Cube calls per chunk
        before, middle, last = ends[start - 1], ends[start - 1 + half * per_chunk], ends[end - 1]
        gap = abs((last - middle) - (middle - before))
        paces.setdefault(ordinal[window.core], []).append((window, last - before, gap))
        ordinal[window.core] += 1
    added = dict.fromkeys(range(len(core_ends)), 0.0)
    error = 0.0
    for samples in paces.values():
        durations = [duration for _, duration, _ in samples]
        mean = sum(durations) / len(durations)
        spread = sum((d - mean) ** 2 for d in durations) / len(durations)
        noise = sum(g * g for _, _, g in samples) / len(samples)  # var(h2 - h1) = var(h1 + h2)
        kept = 0.0 if spread <= noise else 1 - noise / spread  # of a core's own difference
        skipped = max(window.skipped for window, _, _ in samples)
        error += skipped * 2 * math.sqrt(noise + spread / len(durations))
        for window, duration, _ in samples:
            added[window.core] += window.skipped * (mean + kept * (duration - mean))
    finished = max(core_ends)
    cycles = max(0, round(max(end + added[core] for core, end in enumerate(core_ends))) - finished)
    raised = max(0, floor_cycles - cycles)
    return Extension(cycles + raised, math.ceil(error) + raised)
