"""The one place where quantities with units are parsed and formatted.

Convention: binary prefixes (KiB, MiB, GiB, TiB) are powers of 1024, decimal
prefixes (KB, MB, GB, TB) are powers of 1000. Inside the simulator everything
is integer bytes and integer cycles; rates are bytes per cycle (float), and
converting between seconds and cycles needs the core clock.
"""

from __future__ import annotations

import math
import re

# Bytes per element of each data type a tensor or a Cube mode can have.
DTYPE_BYTES = {"fp16": 2, "bf16": 2, "fp32": 4, "fp8": 1, "int8": 1, "int32": 4}  # fp8: e4m3

MAX_SIZE_BYTES = 2**50  # 1 PiB: more than any memory a chip has

_BINARY = {"Ki": 1024, "Mi": 1024**2, "Gi": 1024**3, "Ti": 1024**4}
_DECIMAL = {"": 1, "K": 10**3, "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12}
_SIZE_PREFIX = {**_DECIMAL, **_BINARY}
_TIME_SCALE = {"s": 1.0, "ms": 1e-3, "us": 1e-6, "µs": 1e-6, "ns": 1e-9, "ps": 1e-12}
_CLOCK_SCALE = {"Hz": 1.0, "kHz": 1e3, "KHz": 1e3, "MHz": 1e6, "GHz": 1e9}

_NUMBER = r"(?P<num>[0-9]+(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?)\s*"
_SIZE_RE = re.compile(_NUMBER + r"(?P<prefix>Ki|Mi|Gi|Ti|K|k|M|G|T|)B$")
_PER_SECOND_RE = re.compile(_NUMBER + r"(?P<prefix>Ki|Mi|Gi|Ti|K|k|M|G|T|)B/s$")
_PER_CYCLE_RE = re.compile(_NUMBER + r"B/cycles?$")
_TIME_RE = re.compile(_NUMBER + r"(?P<unit>s|ms|us|µs|ns|ps)$")
_CYCLES_RE = re.compile(_NUMBER + r"cycles?$")
_CLOCK_RE = re.compile(_NUMBER + r"(?P<unit>Hz|kHz|KHz|MHz|GHz)$")
_ENERGY_SCALE = {"fJ": 1e-15, "pJ": 1e-12, "nJ": 1e-9}
_ENERGY_RE = re.compile(_NUMBER + r"(?P<unit>fJ|pJ|nJ)(?P<per>/B|/bit|/MAC)$")
_POWER_RE = re.compile(_NUMBER + r"(?P<unit>mW|W)$")


class UnitError(ValueError):
    """A value that is not a well-formed quantity of the expected kind."""


def _text(value: object, kind: str, example: str) -> str:
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise UnitError(f"expected a {kind} such as '{example}', got {_quoted(value)}")
    return str(value).strip()


def _quoted(value: object) -> str:
    """What the user wrote, quoted, and cut short if it is long (error lines stay short)."""
    text = value if isinstance(value, str) else repr(value)
    return f"'{text}'" if len(text) <= 40 else f"'{text[:40]}...' ({len(text):,} characters)"


def parse_size(value: object) -> int:
    """'64KiB' -> 65536, '1.5GB' -> 1500000000. A bare integer means bytes."""
    text = _text(value, "size", "64KiB")
    if isinstance(value, int):
        nbytes = float(min(value, 2 * MAX_SIZE_BYTES))
    else:
        match = _SIZE_RE.fullmatch(text)
        if not match:
            raise UnitError(
                f"{_quoted(text)} is not a size; write e.g. '64KiB', '32MiB', "
                "'1.5GB' (KiB = 1024 B, KB = 1000 B)"
            )
        nbytes = float(match["num"]) * _SIZE_PREFIX[match["prefix"]]
    if not math.isfinite(nbytes) or nbytes > MAX_SIZE_BYTES:
        raise UnitError(f"{_quoted(text)} is too large: no memory holds more than 1 PiB")
    if nbytes != int(nbytes):
        raise UnitError(f"{_quoted(text)} is not a whole number of bytes")
    if nbytes <= 0:
        raise UnitError(f"{_quoted(text)} must be a positive size")
    return int(nbytes)


def parse_rate(value: object, clock_hz: float) -> float:
    """'1.2TB/s' or '128B/cycle' -> bytes per cycle of a clock of clock_hz."""
    text = _text(value, "rate", "1.2TB/s")
    if match := _PER_CYCLE_RE.fullmatch(text):
        rate = float(match["num"])
    elif match := _PER_SECOND_RE.fullmatch(text):
        rate = float(match["num"]) * _SIZE_PREFIX[match["prefix"]] / clock_hz
    else:
        raise UnitError(f"{_quoted(text)} is not a rate; write e.g. '1.2TB/s' or '128B/cycle'")
    if not math.isfinite(rate):
        raise UnitError(f"{_quoted(text)} is too large to be a rate")
    if rate <= 0:
        raise UnitError(f"{_quoted(text)} must be a positive rate")
    return rate


def parse_time(value: object, clock_hz: float) -> int:
    """'500ns' or '200cycles' -> whole cycles (rounded up) of a clock of clock_hz."""
    text = _text(value, "time", "500ns")
    if isinstance(value, int) and not isinstance(value, bool):
        raise UnitError(
            f"{_quoted(text)} needs a unit; write e.g. '{text[:20]}cycles' or '{text[:20]}ns'"
        )
    if match := _CYCLES_RE.fullmatch(text):
        cycles = float(match["num"])
    elif match := _TIME_RE.fullmatch(text):
        cycles = float(match["num"]) * _TIME_SCALE[match["unit"]] * clock_hz
    else:
        raise UnitError(f"{_quoted(text)} is not a time; write e.g. '500ns', '3us' or '200cycles'")
    if not math.isfinite(cycles):
        raise UnitError(f"{_quoted(text)} is too large to be a time")
    # Round to the nearest picocycle first so '1ns' at 1 GHz is exactly 1 cycle.
    return math.ceil(round(cycles, 6))


def parse_energy(value: object, per: str) -> float:
    """'31pJ/B' or '3.9pJ/bit' (per='B') -> joules per byte; '0.4pJ/MAC' (per='MAC') ->
    joules per multiply-accumulate."""
    example = "0.4pJ/MAC" if per == "MAC" else "31pJ/B"
    text = _text(value, "energy", example)
    match = _ENERGY_RE.fullmatch(text)
    units = ("/MAC",) if per == "MAC" else ("/B", "/bit")
    if not match or match["per"] not in units:
        raise UnitError(f"{_quoted(text)} is not an energy per {per}; write e.g. '{example}'")
    joules = float(match["num"]) * _ENERGY_SCALE[match["unit"]]
    joules *= 8 if match["per"] == "/bit" else 1
    if not math.isfinite(joules) or joules <= 0:
        raise UnitError(f"{_quoted(text)} must be a positive, finite energy")
    return joules


def parse_power(value: object) -> float:
    """'60W' -> 60.0 (watts)."""
    text = _text(value, "power", "60W")
    match = _POWER_RE.fullmatch(text)
    if not match:
        raise UnitError(f"{_quoted(text)} is not a power; write e.g. '60W'")
    watts = float(match["num"]) * (1e-3 if match["unit"] == "mW" else 1.0)
    if not math.isfinite(watts):
        raise UnitError(f"{_quoted(text)} must be a finite power")
    return watts


def parse_clock(value: object) -> float:
    """'1.0GHz' -> 1e9 (Hz)."""
    text = _text(value, "clock", "1.0GHz")
    match = _CLOCK_RE.fullmatch(text)
    if not match:
        raise UnitError(f"{_quoted(text)} is not a clock; write e.g. '1.0GHz' or '800MHz'")
    hertz = float(match["num"]) * _CLOCK_SCALE[match["unit"]]
    if hertz <= 0 or not math.isfinite(hertz):
        raise UnitError(f"{_quoted(text)} must be a positive, finite clock")
    return hertz


def _format_bytes(nbytes: float, step: int, units: tuple[str, ...]) -> str:
    value, index = float(nbytes), 0
    while abs(value) >= step and index < len(units) - 1:
        value, index = value / step, index + 1
    return f"{value:.0f} B" if index == 0 else f"{value:.1f} {units[index]}"


def format_size(nbytes: float) -> str:
    """Bytes in binary prefixes, as capacities are quoted: 65536 -> '64.0 KiB'."""
    return _format_bytes(nbytes, 1024, ("B", "KiB", "MiB", "GiB"))


def format_bytes_decimal(nbytes: float) -> str:
    """Bytes in decimal prefixes, as traffic and bandwidth are quoted: 270532608 -> '270.5 MB'."""
    return _format_bytes(nbytes, 1000, ("B", "KB", "MB", "GB"))


def us_per_cycle(clock_ghz: float) -> float:
    """Microseconds per cycle of a clock of `clock_ghz`: the one conversion from a report's
    cycles to the time its readers see (tables, plots, traces, sweep rows)."""
    return 1e-3 / clock_ghz
