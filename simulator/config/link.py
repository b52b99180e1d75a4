"""The link between chips that tensor parallelism's collectives cross (`link:` of a hardware
file), and its parsing."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from ..errors import Problems
from .strict import Fields, as_int


@dataclass(frozen=True)
class Link:
    """The chip-to-chip link a tensor-parallel all-reduce crosses: what one chip sends per
    cycle in one direction, the start-up of one collective and the latency of each of its
    ring's steps (a small collective's time is the start-up and its steps' latencies, so it
    grows with the chips). Chips may share it in groups (`group_chips`, None: any number),
    the groups joined by a slower link (`across`), up to `max_chips` in all (None: no
    limit)."""

    bytes_per_cycle: float
    latency_cycles: int
    group_chips: int | None = None
    max_chips: int | None = None
    across: Link | None = None
    hop_latency_cycles: int = 0

    def at_clock(self, ratio: float) -> Link:
        """This link timed in cycles of a clock `ratio` times the old one (its seconds kept)."""
        return replace(
            self,
            bytes_per_cycle=self.bytes_per_cycle / ratio,
            latency_cycles=math.ceil(self.latency_cycles * ratio),
            hop_latency_cycles=math.ceil(self.hop_latency_cycles * ratio),
            across=None if self.across is None else self.across.at_clock(ratio),
        )

    def refusal(self, chips: int) -> str | None:
        """Why `chips` chips cannot be joined by these links, or None if they can."""
        if self.max_chips is not None and chips > self.max_chips:
            return f"its links join at most {self.max_chips} chips (link.chips)"
        group = self.group_chips
        if group is not None and chips > group:
            if self.across is None:
                return f"its link joins groups of at most {group} chips and nothing joins groups"
            if chips % group:
                return f"{chips} chips are not whole groups of {group} (link.group)"
        return None


def parse_link(
    top: Fields,
    rate: Callable[[Any], float],
    latency: Callable[[Any], int],
    problems: Problems,
) -> Link:
    """`link:` of a hardware file (and its `across:`), rates and times in the chip's cycles."""
    link_f = top.sub("link")
    across = None
    if "across" in link_f.raw:
        across_f = link_f.sub("across")
        across = Link(
            across_f.get("bandwidth", rate),
            across_f.get("latency", latency),
            hop_latency_cycles=across_f.get("hop_latency", latency, default=0),
        )
        across_f.finish()
    link = Link(
        link_f.get("bandwidth", rate),
        link_f.get("latency", latency),
        link_f.get("group", as_int(1, 1 << 16), default=None),
        link_f.get("chips", as_int(1, 1 << 16), default=None),
        across,
        link_f.get("hop_latency", latency, default=0),
    )
    if across is not None and link.group_chips is None:
        problems.add("link.across", "joins groups of chips: give link.group, their size")
    link_f.finish()
    return link
