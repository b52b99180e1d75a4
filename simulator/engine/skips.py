"""The L2 a sampled kernel's cores meet as they pass its skips (schedule/sampling.py).

A core that passes a skip would first have run the skipped units, and so would its peers,
side by side: in the exact run, every read a core makes after a skip comes after what the
skipped units of every core touched, and every read a core makes before its skip comes
before them. Cores reach a skip at different cycles, so both kinds of read happen while
the skip is pending (some cores past it, some not). The chip's L2 serves the cores not yet
past it; the cores past it read a view, built at the first read of one of them: a copy of
that L2 (or of the view of the skip before, while that one is pending too) warmed with
every core's skipped units, in the order they would have run had the cores not yet there
got there with the last that did. So a core past the skip fetches again a block its peers'
skipped units evicted, as it would have. When the last core passes it, the chip's L2 is
warmed with the skipped units in the cores' order (`warm_order`, from the cycles they got
there), and what the cores past it read in the meantime is read again after that, the most
recently used: what later reads and kernels meet. The view's lookups join the L2's counts,
and a block it is still fetching is one a reader of the chip's L2 waits for too; its warm
is a model of what the peers' skipped units left, so what that found is not counted (the
L2's own warm counts them, once).
"""

from __future__ import annotations

from collections.abc import Mapping

from ..schedule.program import Region
from ..schedule.sampling import KernelSampling, Skip, warm_order
from .l2cache import L2Cache


class _Pending:
    """A skip some cores have passed and others not yet."""

    __slots__ = ("arrivals", "since", "skipping", "view")

    def __init__(self, skipping: dict[int, Skip]):
        self.arrivals: dict[int, int] = {}  # core -> the cycle it passed the skip
        self.since: list[Region] = []  # what the cores past it touched since, in turn
        self.skipping = skipping  # every core's skip there
        self.view: L2Cache | None = None  # the L2 the cores past it read (built on first use)


class Skips:
    """The skips of the running kernel as its cores pass them (see the module docstring)."""

    def __init__(self, l2: L2Cache, sampling: KernelSampling | None, started_cycle: int):
        self.l2 = l2
        self.sampling = sampling
        self.started_cycle = started_cycle
        self.pending: dict[int, _Pending] = {}  # by skip, in the order cores first got there
        self.passed_at: dict[tuple[int, int], int] = {}  # (core, skip) -> the cycle it passed

    def passed(self, group: int, core: int, cycle: int) -> None:
        """`core` passed the `group`-th skip at `cycle`; the last core to pass it warms L2."""
        if self.sampling is None:
            return
        pending = self.pending.get(group)
        if pending is None:
            pending = self.pending[group] = _Pending(self.sampling.skipping(group))
        pending.arrivals[core] = self.passed_at[core, group] = cycle
        if len(pending.arrivals) < len(pending.skipping):
            return
        del self.pending[group]
        order = warm_order(pending.skipping, pending.arrivals, self.started_cycle)
        self.l2.warm(order, pending.since)
        if pending.view is not None:  # its lookups count; its fetches still land
            self.l2.hits += pending.view.hits
            self.l2.misses += pending.view.misses
            self.l2.await_fetches(pending.view)

    def l2_of(self, core: int) -> L2Cache:
        """The L2 `core` reads now: the view of the latest pending skip it has passed, or the
        chip's L2."""
        l2 = self.l2
        for pending in self.pending.values():
            if core not in pending.arrivals:
                break  # skips are passed in order: it has passed none later
            if pending.view is None:
                pending.view = _warmed_copy(l2, pending, self.started_cycle)
            l2 = pending.view
        return l2

    def touched(self, core: int, region: Region) -> None:
        """A transfer of `core` touched `region` after the core passed a pending skip."""
        for pending in self.pending.values():
            if core in pending.arrivals:
                pending.since.append(region)


def _warmed_copy(l2: L2Cache, pending: _Pending, started_cycle: int) -> L2Cache:
    """A copy of `l2` warmed with the pending skip's units on every core, the cores not yet
    there taken to get there with the last that did."""
    last = max(pending.arrivals.values())
    arrivals: Mapping[int, int] = {core: last for core in pending.skipping} | pending.arrivals
    view = l2.copy()
    view.warm(warm_order(pending.skipping, arrivals, started_cycle))
    view.warmed = {}  # a model of the peers' units: the chip's L2 counts them (passed)
    return view
