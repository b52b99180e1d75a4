"""What a chip's work costs in joules (`energy:` of a hardware file), and its parsing."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..errors import Problems, quote
from ..units import parse_energy as joules
from ..units import parse_power
from .strict import Fields

MAX_STATIC_W = 10_000.0  # a chip's idle draw; a whole rack's is a slip


@dataclass(frozen=True)
class Energy:
    """What work costs in joules, for the energy report: each byte read or written at each
    level, each multiply-accumulate of the Cube by dtype, each byte of vector work (bytes x
    cost factor, as vector timing counts it), and the static power drawn for the whole run."""

    joules_per_byte: dict[str, float]  # by level: HBM, L2 and the buffers
    joules_per_mac: dict[str, float]  # by Cube dtype
    vector_joules_per_byte: float
    static_watts: float
    # a board power cap: a run's work draws at most what it leaves beside static power; and
    # the clock the chip holds under it (None: its clock already is): a run that passes the
    # cap runs again at that clock (pipeline.simulate)
    cap_watts: float | None = None
    cap_clock_hz: float | None = None


def parse_energy(
    top: Fields,
    levels: Sequence[str],
    dtypes: Mapping[str, Any],
    clock: Callable[[Any], float],
    problems: Problems,
) -> Energy:
    """`energy:` of a hardware file: joules per byte at each of `levels`, per MAC of each of
    the Cube's `dtypes`, per byte of vector work; static power, and a power cap with the
    clock (parsed by `clock`) the chip holds under it."""
    energy_f = top.sub("energy")
    per_byte = {level: energy_f.get(level, lambda v: joules(v, "B")) for level in levels}
    mac_f = energy_f.sub("mac")
    per_mac = {d: mac_f.get(d, lambda v: joules(v, "MAC")) for d in dtypes}
    mac_f.finish()
    vector_j = energy_f.get("vector", lambda v: joules(v, "B"))
    static = energy_f.get("static", _power)
    cap = energy_f.get("cap", _power, default=None)
    cap_clock = energy_f.get("cap_clock", clock, default=None)
    if cap_clock is not None and cap is None:
        problems.add("energy.cap_clock", "is the clock under a power cap: give energy.cap")
    energy_f.finish()
    return Energy(per_byte, per_mac, vector_j, static, cap, cap_clock)


def _power(value: Any) -> float:
    watts = parse_power(value)
    if watts > MAX_STATIC_W:
        raise ValueError(
            f"{quote(value)} is more than the {MAX_STATIC_W:,.0f} W one chip can sensibly "
            "draw (is the unit right?)"
        )
    return watts
