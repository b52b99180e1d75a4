"""The requests a deployment serves: read from a trace file, or drawn from a seeded generator.

A trace is JSON Lines or CSV (by its suffix), one request per line or row, with exactly the
fields `arrival_s` (seconds from the start, never decreasing), `prompt_tokens` and
`output_tokens` (whole numbers, at least 1): the first token comes from the prefill, each
later one from a decode step. Every problem is reported with its file, line and field, as
config files' are.
"""

from __future__ import annotations

import csv
import json
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ...errors import ConfigError, SimulatorError, quote

FIELDS = ("arrival_s", "prompt_tokens", "output_tokens")
SUFFIXES = (".jsonl", ".csv")
MAX_REQUESTS = 1_000_000
MAX_PROBLEMS = 20  # a trace wrong on every line says so in this many lines


@dataclass(frozen=True, slots=True)
class Request:
    """One request: it arrives, its prompt is prefilled, and it generates `output_tokens`."""

    id: int
    arrival_s: float
    prompt_tokens: int
    output_tokens: int


def load_trace(path: str | Path) -> tuple[Request, ...]:
    """The requests of a trace file (see the module docstring), checked strictly."""
    path = Path(path)
    if path.suffix not in SUFFIXES:
        raise SimulatorError(
            f"{path}: a trace is JSON Lines (.jsonl) or CSV (.csv) with the fields "
            f"{', '.join(FIELDS)}; got a {path.suffix or 'suffixless'} file"
        )
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise SimulatorError(f"{path}: no such trace file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise SimulatorError(f"{path}: cannot read the trace: {exc}") from None
    rows = _csv_rows(text) if path.suffix == ".csv" else _jsonl_rows(text)
    problems: list[str] = []
    requests: list[Request] = []
    for line, row in rows:
        if isinstance(row, str):  # the line could not be read at all
            problems.append(f"line {line}: {row}")
        else:
            request = _request(len(requests), line, row, problems)
            if request is not None:
                if requests and request.arrival_s < requests[-1].arrival_s:
                    problems.append(
                        f"line {line}: arrival_s: arrivals must not decrease, got "
                        f"{request.arrival_s:g} after {requests[-1].arrival_s:g}"
                    )
                requests.append(request)
        if len(problems) >= MAX_PROBLEMS:
            break
    if not problems and not requests:
        problems.append("the trace holds no requests")
    if len(requests) > MAX_REQUESTS:
        problems.append(f"{len(requests):,} requests, more than the {MAX_REQUESTS:,} a run takes")
    if problems:
        raise ConfigError(str(path), problems)
    return tuple(requests)


def _jsonl_rows(text: str):
    for line, raw in enumerate(text.splitlines(), 1):
        if not raw.strip():
            continue
        try:
            row = json.loads(raw)
        except json.JSONDecodeError as exc:
            yield line, f"not JSON: {exc.msg} at column {exc.colno}"
            continue
        yield (
            line,
            row if isinstance(row, dict) else f"a request is a JSON object, got {quote(row)}",
        )


def _csv_rows(text: str):
    reader = csv.reader(text.splitlines())
    header = next(reader, None)
    if header is None:
        return
    names = [name.strip() for name in header]
    if sorted(names) != sorted(FIELDS):
        yield 1, f"the header must name exactly {', '.join(FIELDS)}, got {', '.join(names)}"
        return
    for line, cells in enumerate(reader, 2):
        if not any(cell.strip() for cell in cells):
            continue
        if len(cells) != len(names):
            yield line, f"{len(cells)} cells, the header names {len(names)}"
            continue
        yield line, {name: _number(cell.strip()) for name, cell in zip(names, cells)}


def _number(cell: str) -> object:
    """A CSV cell as the number it spells (int where it is whole), or the text itself."""
    try:
        return int(cell)
    except ValueError:
        try:
            return float(cell)
        except ValueError:
            return cell


def _request(index: int, line: int, row: dict, problems: list[str]) -> Request | None:
    before = len(problems)
    for name in row:
        if name not in FIELDS:
            problems.append(f"line {line}: {name}: not a field of a request ({', '.join(FIELDS)})")
    for name in FIELDS:
        if name not in row:
            problems.append(f"line {line}: {name}: missing")
    arrival = row.get("arrival_s")
    if "arrival_s" in row and (
        isinstance(arrival, bool)
        or not isinstance(arrival, (int, float))
        or not math.isfinite(arrival)
        or arrival < 0
    ):
        problems.append(
            f"line {line}: arrival_s: a time in seconds, at least 0, got {quote(arrival)}"
        )
    for name in FIELDS[1:]:
        value = row.get(name)
        if name in row and (type(value) is not int or value < 1):
            problems.append(
                f"line {line}: {name}: a whole number of tokens, at least 1, got {quote(value)}"
            )
    if len(problems) > before:
        return None
    return Request(index, float(row["arrival_s"]), row["prompt_tokens"], row["output_tokens"])


@dataclass(frozen=True)
class Lengths:
    """A distribution of token counts: `fixed:N`, `uniform:LOW-HIGH` (both included) or
    `lognormal:MEAN,SD` (of the counts themselves, not their logs), each drawn count at
    least 1."""

    kind: str
    a: float
    b: float = 0.0

    @classmethod
    def parse(cls, option: str, text: str) -> Lengths:
        kind, _, rest = text.partition(":")
        try:
            if kind == "fixed":
                lengths = cls(kind, _positive(rest))
            elif kind == "uniform":
                low, _, high = rest.partition("-")
                lengths = cls(kind, _positive(low), _positive(high))
                if lengths.b < lengths.a:
                    raise ValueError(f"its high end {high} is below its low end {low}")
            elif kind == "lognormal":
                mean, _, sd = rest.partition(",")
                lengths = cls(kind, float(mean), float(sd))
                if not (lengths.a > 0 and lengths.b >= 0 and math.isfinite(lengths.a + lengths.b)):
                    raise ValueError("its mean must be above 0 and its sd at least 0")
            else:
                raise ValueError("it is not fixed:N, uniform:LOW-HIGH or lognormal:MEAN,SD")
        except ValueError as exc:
            raise SimulatorError(f"{option} {text}: {exc}") from None
        return lengths

    def draw(self, rng: np.random.Generator, count: int) -> np.ndarray:
        if self.kind == "fixed":
            return np.full(count, int(self.a), dtype=np.int64)
        if self.kind == "uniform":
            return rng.integers(int(self.a), int(self.b), count, endpoint=True)
        sigma2 = math.log1p((self.b / self.a) ** 2)  # the log-normal with this mean and sd
        drawn = rng.lognormal(math.log(self.a) - sigma2 / 2, math.sqrt(sigma2), count)
        return np.maximum(1, np.rint(drawn)).astype(np.int64)

    def __str__(self) -> str:
        return {
            "fixed": f"fixed:{self.a:g}",
            "uniform": f"uniform:{self.a:g}-{self.b:g}",
            "lognormal": f"lognormal:{self.a:g},{self.b:g}",
        }[self.kind]


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise ValueError(f"{text!r} is not a whole number of tokens") from None
    if value < 1:
        raise ValueError(f"token counts are at least 1, got {value}")
    return value


def generate(
    rate_per_s: float, count: int, prompt: Lengths, output: Lengths, seed: int
) -> tuple[Request, ...]:
    """`count` requests arriving as a Poisson process of `rate_per_s`, their lengths drawn
    from `prompt` and `output`: the same seed, the same requests."""
    if not (rate_per_s > 0 and math.isfinite(rate_per_s)):
        raise SimulatorError(f"--rate: requests per second above 0, got {rate_per_s:g}")
    if not 1 <= count <= MAX_REQUESTS:
        raise SimulatorError(f"--num: from 1 to {MAX_REQUESTS:,} requests, got {count:,}")
    rng = np.random.default_rng(seed)
    arrivals = np.cumsum(rng.exponential(1.0 / rate_per_s, count))
    prompts, outputs = prompt.draw(rng, count), output.draw(rng, count)
    return tuple(
        Request(i, float(arrivals[i]), int(prompts[i]), int(outputs[i])) for i in range(count)
    )
