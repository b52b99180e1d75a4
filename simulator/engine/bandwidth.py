"""Fluid bandwidth sharing of one shared memory among the transfers in flight.

The rule, stated once: transfers in flight share the memory's bandwidth
max-min fairly (water-filling), each also capped by its own engine's rate.
Rates change only when a transfer starts or ends, so the cost of simulating
grows with the number of transfers, not with the number of bytes. Completion
times are rounded up to whole cycles.

Every start or end re-rates every flow in flight: a few dozen on an NPU of 32 cores, a few
hundred on a GPU of 132 SMs. `SharedChannel` works flow by flow; `VectorChannel` keeps the
flows' bytes left, caps, rates and ends in numpy arrays and works on them whole, in the same
IEEE arithmetic element for element (so the same cycles: tests/test_properties.py). numpy's
cost per call makes it slower below about 40 flows and 3x faster at 200, so `channel` gives
a chip of VECTOR_FROM_CORES cores or more the second.
"""

from __future__ import annotations

import math
from bisect import insort

import numpy as np
import simpy

_EPSILON = 1e-9
VECTOR_FROM_CORES = 64  # a chip of this many cores keeps a hundred flows or more in flight


class _Flow:
    __slots__ = ("remaining", "cap", "rate", "finish", "done")

    def __init__(self, nbytes: float, cap: float, done: simpy.Event):
        self.remaining = float(nbytes)
        self.cap = cap
        self.rate = 0.0
        self.finish: float = 0  # the cycle it ends at, at the current rates
        self.done = done


def channel(env: simpy.Environment, name: str, bytes_per_cycle: float, cores: int) -> Channel:
    """The channel of a shared memory on a chip of `cores` cores (see the module docstring)."""
    kind = VectorChannel if cores >= VECTOR_FROM_CORES else SharedChannel
    return kind(env, name, bytes_per_cycle)


class Channel:
    """One shared memory port of `bytes_per_cycle`, with fair sharing among flows: the API and
    the timer of the next end; its subclasses keep the flows and re-rate them (`_add`,
    `_advance`, `_share`, `_finished`)."""

    def __init__(self, env: simpy.Environment, name: str, bytes_per_cycle: float):
        self.env = env
        self.name = name
        self.bytes_per_cycle = bytes_per_cycle
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
        self._add(nbytes, cap_bytes_per_cycle, done)
        self._share()
        return done

    def _time(self, soonest: float | None) -> None:
        """Set the timer for the next end, at cycle `soonest` (None: no flow), unless set."""
        if soonest is not None and soonest != self.timer_at:  # else the timer set stands
            self.version += 1
            version = self.version
            self.timer_at = soonest
            timer = self.env.timeout(soonest - self.env.now)
            timer.callbacks.append(lambda _event: self._on_timer(version))

    def _on_timer(self, version: int) -> None:
        if version != self.version:
            return  # a start or end since then rescheduled the next completion
        self.timer_at = None
        self._advance()
        for done in self._finished():
            done.succeed()
        self._share()

    def _add(self, nbytes: int, cap: float, done: simpy.Event) -> None:
        raise NotImplementedError

    def _advance(self) -> None:
        """Move every flow's bytes on to now at its current rate."""
        raise NotImplementedError

    def _share(self) -> None:
        """Water-fill: the most constrained flows take their cap, the rest split what is left
        equally; then time the next end."""
        raise NotImplementedError

    def _finished(self) -> list[simpy.Event]:
        """Take the flows that have ended out; their events, in the order they started."""
        raise NotImplementedError


class SharedChannel(Channel):
    """A Channel that works flow by flow."""

    def __init__(self, env: simpy.Environment, name: str, bytes_per_cycle: float):
        super().__init__(env, name, bytes_per_cycle)
        self.flows: list[_Flow] = []  # in the order they started (they finish in it)
        self.by_cap: list[_Flow] = []  # the same flows, ordered by cap for water-filling

    def _add(self, nbytes: int, cap: float, done: simpy.Event) -> None:
        flow = _Flow(nbytes, cap, done)
        self.flows.append(flow)
        insort(self.by_cap, flow, key=_cap_of)

    def _advance(self) -> None:
        elapsed = self.env.now - self.updated_at
        if elapsed:
            for flow in self.flows:
                flow.remaining -= flow.rate * elapsed
            self.updated_at = self.env.now

    def _share(self) -> None:
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
        self._time(soonest)

    def _finished(self) -> list[simpy.Event]:
        now = self.env.now
        finished = [f.done for f in self.flows if f.finish <= now]
        self.flows = [f for f in self.flows if f.finish > now]
        self.by_cap = [f for f in self.by_cap if f.finish > now]
        return finished


def _cap_of(flow: _Flow) -> float:
    return flow.cap


class VectorChannel(Channel):
    """A Channel for many flows at once: the same rule in the same arithmetic as
    SharedChannel, each re-rating done by numpy over every flow in flight (see the module
    docstring)."""

    def __init__(self, env: simpy.Environment, name: str, bytes_per_cycle: float):
        super().__init__(env, name, bytes_per_cycle)
        self.done: list[simpy.Event] = []  # per flow in flight, in the order they started
        # per flow, in the first len(done) places: bytes left, its engine's rate, its share
        # now and the cycle it ends at, at the current rates
        self.remaining, self.cap, self.rate, self.finish = np.zeros((4, 16))

    def _add(self, nbytes: int, cap: float, done: simpy.Event) -> None:
        flow = len(self.done)
        if flow == len(self.remaining):  # full: twice the room
            self.remaining, self.cap, self.rate, self.finish = (
                np.concatenate((values, np.zeros(flow)))
                for values in (self.remaining, self.cap, self.rate, self.finish)
            )
        self.remaining[flow], self.cap[flow] = nbytes, cap
        self.done.append(done)

    def _advance(self) -> None:
        elapsed = self.env.now - self.updated_at
        if elapsed:
            flows = len(self.done)
            self.remaining[:flows] -= self.rate[:flows] * elapsed
            self.updated_at = self.env.now

    def _share(self) -> None:
        count = len(self.done)
        if not count:
            return
        cap, rate = self.cap[:count], self.rate[:count]
        left = self.bytes_per_cycle
        if cap.min() >= left / count:  # no flow is held below an equal share
            rate.fill(left / count)
        else:
            by_cap = np.argsort(cap, kind="stable")
            for index, (flow, flow_cap) in enumerate(zip(by_cap.tolist(), cap[by_cap].tolist())):
                share = left / (count - index)
                if flow_cap >= share:  # this flow and every later (larger) cap: equal shares
                    rate[by_cap[index:]] = share
                    break
                rate[flow] = flow_cap
                left -= flow_cap
        cycles = np.ceil(self.remaining[:count] / rate - _EPSILON)  # to each one's end
        np.maximum(cycles, 0, out=cycles)
        now = self.env.now
        np.add(cycles, now, out=self.finish[:count])
        self._time(now + int(cycles.min()))

    def _finished(self) -> list[simpy.Event]:
        count = len(self.done)
        running = self.finish[:count] > self.env.now
        runs = running.tolist()
        finished = [done for done, on in zip(self.done, runs) if not on]
        self.done = [done for done, on in zip(self.done, runs) if on]
        kept = len(self.done)
        self.remaining[:kept] = self.remaining[:count][running]
        self.cap[:kept] = self.cap[:count][running]
        return finished
