"""Global-memory transfers: one transfer to or from HBM through L2, stepped by SimPy
callbacks. The engine (world.py) and its reference twin (reference.py) both start them, so
both time them alike: its L2 lookup, its legs over the shared memories, its place in its
engine's queue and, on a chip that serialises them, behind other readers of its block."""

from __future__ import annotations

import math
from collections import deque
from typing import Callable, Protocol

import simpy
from simpy.events import EventPriority

from ..cost import l2_port_bytes, multicast_share
from ..errors import InvariantError
from ..schedule.program import GlobalTransfer, Program, Region
from .bandwidth import Channel
from .l2cache import L2Cache
from .skips import Skips


class World(Protocol):
    """What a transfer needs of the engine that starts it (world.World, and its reference
    twin): the clock, the routes and shared memories, the L2, and its place in time."""

    env: simpy.Environment
    program: Program
    l2: L2Cache
    channels: dict[str, Channel]
    routes: dict[tuple[str, str], tuple[int, float]]
    l2_latency: int
    hbm_latency: int
    serialise_same_address: bool
    same_address: dict[Region, deque[TransferInFlight]]

    def begin_at(self, cycle: int, transfer: TransferInFlight) -> None: ...

    def shaped(self, instr: GlobalTransfer, bytes_per_cycle: float) -> float: ...

    skips: Skips


class AfterTheCycle(simpy.events.Event):
    """An event processed after every ordinary event of its cycle: SimPy runs the events of
    one time by priority (urgent 0, normal 1), and this one has 2."""

    def __init__(self, env: simpy.Environment, delay: float):
        super().__init__(env)
        self._ok, self._value = True, None
        env.schedule(self, EventPriority(2), delay)


class _Fetch:
    """Cells on their way from HBM into L2. A reader that hits them waits until they land;
    only such a reader makes a SimPy event of it."""

    __slots__ = ("triggered", "event")

    def __init__(self) -> None:
        self.triggered = False
        self.event: simpy.Event | None = None

    def landing(self, env: simpy.Environment) -> simpy.Event:
        if self.event is None:
            self.event = env.event()
        return self.event

    def land(self) -> None:
        self.triggered = True
        if self.event is not None:
            self.event.succeed()


class TransferInFlight:
    """One transfer to or from global memory, stepped by SimPy callbacks (a process per
    transfer would cost an event and a generator more): at its start cycle it looks up L2,
    waits its latency, then moves its bytes over each shared memory they cross, at the
    shared rate.

    A global-memory read: hits cross the L2 port (after any other core's fetch of the same
    cells has landed), misses are fetched over HBM (filling L2). A write goes through to HBM
    and allocates in L2; it is complete once L2 holds it (L2 is where global memory is
    coherent: the next kernel reads it there), so it waits L2's latency, not HBM's, while its
    bytes cross HBM at HBM's rate. An engine keeps several transfers in flight, so a
    transfer's start-up overlaps the data of the ones before it, but it moves the data of one
    stream in order: a transfer's bytes start moving once the transfer before it in its
    stream (`after`) has landed (see EngineQueue). It reports landing after the transfer
    issued before it on its engine (`prior`) has, so an engine retires its transfers in the
    order it issued them. On a chip whose L2 serialises same-address reads, readers of one
    block cross the L2 port one after another, in the order they got there. The time beyond
    the uncontended cycles is waiting on the shared memories and on the engine."""

    __slots__ = (
        "world",
        "instr",
        "start",
        "landed",
        "legs",
        "leg",
        "hit_bytes",
        "hbm_bytes",
        "ideal",
        "fill",
        "in_flight",
        "after",
        "follower",
        "finished",
        "queued",
        "order",
        "prior",
        "successor",
        "reported",
    )
    finished: bool
    reported: bool
    legs: tuple[tuple[str, int, float], ...]  # (shared memory, bytes, rate cap) in turn

    def __init__(
        self,
        world: World,
        instr: GlobalTransfer,
        start: int,
        landed: Callable[[TransferInFlight], None],
        after: TransferInFlight | None,
        prior: TransferInFlight | None,
        order: tuple,
    ):
        self.world, self.instr, self.start, self.landed = world, instr, start, landed
        self.order = order  # (kernel, core, pipe, position): see World.begin_at
        self.after = None if after is None or after.finished else after
        self.follower: TransferInFlight | None = None  # the next of its stream
        self.prior = None if prior is None or prior.reported else prior
        self.successor: TransferInFlight | None = None  # the next its engine issued
        self.finished = False  # its data has landed
        self.reported = False  # and so has every transfer its engine issued before it
        self.queued = False  # among the readers of its block (World.same_address)
        env = world.env
        if start < env.now:
            raise InvariantError(
                f"{instr.label} would start at cycle {start}, before the global clock ({env.now})"
            )
        world.begin_at(start, self)

    def begin(self) -> None:
        """At its start cycle (World.begin_at): look L2 up, then wait the latency."""
        world, instr = self.world, self.instr
        src, dst = instr.src, instr.dst
        latency, rate = world.routes[(src, dst)]
        rate = world.shaped(instr, rate)
        self.fill = self.in_flight = None
        skips, core = world.skips, self.order[1]
        l2 = skips.l2_of(core) if skips.pending else world.l2  # engine/skips.py
        if src == "HBM":
            self.fill = _Fetch()
            self.hit_bytes, self.hbm_bytes, self.in_flight = l2.read(instr.region, self.fill)
            factor = world.program.read_factor(instr.region.tensor)
            if factor > 1:  # a strided slice: whole sectors around the elements it keeps
                self.hit_bytes, self.hbm_bytes = self.hit_bytes * factor, self.hbm_bytes * factor
            latency += world.l2_latency + (world.hbm_latency if self.hbm_bytes else 0)
            port_bytes, l2_rate = self.hit_bytes, world.shaped(instr, world.routes[("L2", dst)][1])
            if instr.multicast > 1:  # the cluster's one read: this core's share of it
                port_bytes = l2_port_bytes(self.hit_bytes, instr.multicast)
                l2_rate = multicast_share(l2_rate, instr.multicast)
            self.legs = (("HBM", self.hbm_bytes, rate), ("L2", port_bytes, l2_rate))
        else:
            l2.write(instr.region)
            self.hit_bytes, self.hbm_bytes = 0, instr.nbytes
            latency += world.l2_latency  # a posted store: done when L2 holds it
            self.legs = (("HBM", self.hbm_bytes, rate),)
        if skips.pending:  # some cores of a sampled kernel passed a skip, others not yet
            skips.touched(core, instr.region)
        self.ideal: int = latency + sum(math.ceil(nbytes / cap) for _, nbytes, cap in self.legs)
        self.leg = 0
        world.env.timeout(latency).callbacks.append(self._next_leg)

    def _next_leg(self, _event) -> None:
        """Start the next leg that has bytes to move; when none is left, finish."""
        after = self.after
        if after is not None:  # the engine is still moving an earlier transfer
            self.after = None
            if not after.finished:
                after.follower = self
                return
        while self.leg < len(self.legs):
            channel, nbytes, cap = self.legs[self.leg]
            if channel == "L2" and self.in_flight:  # hits wait for fetches of their cells
                env, in_flight, self.in_flight = self.world.env, self.in_flight, None
                pending = [fetch.landing(env) for fetch in in_flight if not fetch.triggered]
                if pending:
                    env.all_of(pending).callbacks.append(self._next_leg)
                    return
            if nbytes:
                world = self.world
                if channel == "L2" and world.serialise_same_address and not self.queued:
                    self.queued = True
                    queue = world.same_address.setdefault(self.instr.region, deque())
                    queue.append(self)
                    if len(queue) > 1:
                        return  # the reader before it moves it on
                self.world.channels[channel].transfer(nbytes, cap).callbacks.append(self._leg_done)
                return
            self._leg_done(None)
        self._finish()

    def _leg_done(self, _event) -> None:
        if self.legs[self.leg][0] == "HBM" and self.fill is not None:
            self.fill.land()  # the fetched cells are in L2
            self.fill = None
        elif self.queued:  # the next reader of the block crosses the L2 port
            readers = self.world.same_address
            queue = readers[self.instr.region]
            queue.popleft()
            if queue:
                queue[0]._next_leg(None)
            else:
                del readers[self.instr.region]
        self.leg += 1
        if _event is not None:
            self._next_leg(None)

    def _finish(self) -> None:
        if self.fill is not None:
            self.fill.land()
        self.finished = True
        self._report()
        if self.follower is not None:
            self.follower._next_leg(None)

    def _report(self) -> None:
        """Land, unless a transfer its engine issued before it is still moving (on an engine
        of several streams): that one reports this one after itself."""
        prior = self.prior
        if prior is not None and not prior.reported:
            prior.successor = self
            return
        self.prior = None  # links no longer needed: a long run keeps no chain of them
        self.reported = True
        self.landed(self)
        successor, self.successor = self.successor, None
        if successor is not None and successor.finished:
            successor._report()


class EngineQueue:
    """The global transfers one core's engine has issued, as streams. On an engine of one
    stream (a DMA queue, Ascend's MTE) each transfer's data moves after the one issued before
    it; on an engine of a stream per tensor (a GPU's TMA or cp.async copies, issued for A and
    B of one stage together) the tiles of different tensors move side by side, each tensor's
    in order. Either way the engine retires them in the order it issued them."""

    __slots__ = ("per_tensor", "last", "last_of_stream")

    def __init__(self, per_tensor: bool):
        self.per_tensor = per_tensor
        self.last: TransferInFlight | None = None
        self.last_of_stream: dict[str | None, TransferInFlight] = {}

    def issue(
        self,
        world: World,
        instr: GlobalTransfer,
        start: int,
        landed: Callable[[TransferInFlight], None],
        order: tuple,
    ) -> TransferInFlight:
        stream = instr.region.tensor if self.per_tensor else None
        transfer = TransferInFlight(
            world, instr, start, landed, self.last_of_stream.get(stream), self.last, order
        )
        self.last = self.last_of_stream[stream] = transfer
        return transfer


def landing_delay(transfer: TransferInFlight, previous_landing: int) -> int:
    """How much later than it could have a transfer landed: beyond its uncontended time and
    beyond the landing of the transfer before it on its engine. These delays never overlap on
    one engine, so they add up to time, like every other stall."""
    return max(
        0, int(transfer.world.env.now) - max(transfer.start + transfer.ideal, previous_landing)
    )
