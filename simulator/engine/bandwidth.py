"""Fluid bandwidth sharing of one shared memory among the transfers in flight.

The rule, stated once: transfers in flight share the memory's bandwidth
max-min fairly (water-filling), each also capped by its own engine's rate.
Rates change only when a transfer starts or ends, so the cost of simulating
grows with the number of transfers, not with the number of bytes. Completion
times are rounded up to whole cycles.
"""

from __future__ import annotations

import math
from bisect import insort

import simpy

_EPSILON = 1e-9


class _Flow:
    __slots__ = ("remaining", "cap", "rate", "finish", "done")

    def __init__(self, nbytes: float, cap: float, done: simpy.Event):
        self.remaining = float(nbytes)
        self.cap = cap
        self.rate = 0.0
        self.finish: float = 0  # the cycle it ends at, at the current rates
        self.done = done


class SharedChannel:
    """One shared memory port of `bytes_per_cycle`, with fair sharing among flows."""

    def __init__(self, env: simpy.Environment, name: str, bytes_per_cycle: float):
        self.env = env
        self.name = name
        self.bytes_per_cycle = bytes_per_cycle
        self.flows: list[_Flow] = []  # in the order they started (they finish in it)
        self.by_cap: list[_Flow] = []  # the same flows, ordered by cap for water-filling
        self.updated_at: float = 0
        self.version = 0  # of the timer that will end the next flows
        self.timer_at: float | None = None

    def transfer(self, nbytes: int, cap_bytes_per_cycle: float) -> simpy.Event:
        """An event that fires when `nbytes` have crossed this channel at the shared rate."""
        done = self.env.event()
        if nbytes <= 0:
            done.succeed()
            return done
        self._advance()
        flow = _Flow(nbytes, cap_bytes_per_cycle, done)
        self.flows.append(flow)
        insort(self.by_cap, flow, key=_cap_of)
        self._share()
        return done

    def _advance(self) -> None:
        elapsed = self.env.now - self.updated_at
        if elapsed:
            for flow in self.flows:
                flow.remaining -= flow.rate * elapsed
            self.updated_at = self.env.now

    def _share(self) -> None:
        """Water-fill: the most constrained flows take their cap, the rest split what is left
        equally."""
        left = self.bytes_per_cycle
        count = len(self.by_cap)
        for index, flow in enumerate(self.by_cap):
            share = left / (count - index)
            if flow.cap >= share:  # this flow and every later (larger) cap: equal shares
                for rest in self.by_cap[index:]:
                    rest.rate = share
                break
            flow.rate = flow.cap
            left -= flow.cap
        now = self.env.now
        soonest: float | None = None
        for flow in self.flows:
            flow.finish = finish = now + max(0, math.ceil(flow.remaining / flow.rate - _EPSILON))
            if soonest is None or finish < soonest:
                soonest = finish
        if soonest is not None and soonest != self.timer_at:  # else the timer set stands
            self.version += 1
            version = self.version
            self.timer_at = soonest
            timer = self.env.timeout(soonest - now)
            timer.callbacks.append(lambda _event: self._on_timer(version))

    def _on_timer(self, version: int) -> None:
        if version != self.version:
            return  # a start or end since then rescheduled the next completion
        self.timer_at = None
        self._advance()
        now = self.env.now
        finished = [f for f in self.flows if f.finish <= now]
        self.flows = [f for f in self.flows if f.finish > now]
        self.by_cap = [f for f in self.by_cap if f.finish > now]
        for flow in finished:
            flow.done.succeed()
        self._share()


def _cap_of(flow: _Flow) -> float:
    return flow.cap
