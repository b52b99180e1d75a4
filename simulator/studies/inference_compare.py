"""Inference requests side by side: `infer MODEL --compare FIELD=V1,V2,...`.

Each --compare names one field of the request and the values to try; several of them
combine (every value of one with every value of the other). The first request is the
baseline the speed-ups are against. The same rows go to the terminal table, to a CSV (one
row per request, ready for pandas) and to a plot."""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..config.transformer import KV_CACHE_DTYPES, WEIGHT_DTYPES
from ..errors import SimulatorError, quote
from .inference_report import TIME_CLASSES

MAX_REQUESTS = 12  # what a side-by-side table can show; a sweep of more is a script's job
COUNTS = {"batch": 1, "prompt": 1, "generate": 0, "chips": 1}  # the least each may be
CHOICES = {"weights": WEIGHT_DTYPES, "kv_cache": KV_CACHE_DTYPES, "fusion": ("none", "auto")}
NAMES = ("hardware", "model", "runtime")  # a preset, shipped model or profile, or a file
FIELDS = (*NAMES, *COUNTS, *CHOICES)
CSV_COLUMNS = (
    "label",
    "model",
    "hardware",
    "chips",
    "batch",
    "prompt",
    "generate",
    "fusion",
    "weights",
    "kv_cache",
    "runtime",
    "ttft_us",
    "tpot_first_us",
    "tpot_mean_us",
    "tpot_last_us",
    "tokens_per_s",
    "e2e_us",
    "energy_per_token_j",
    "hbm_bytes_per_token",
    "memory_bytes",
    "hbm_capacity_bytes",
    *(f"{phase}_{name}_us" for phase in ("prefill", "decode") for name in TIME_CLASSES),
    "speedup",
)


@dataclass(frozen=True)
class Request:
    """One request of a comparison: its label and the fields it changes."""

    label: str
    changes: dict[str, Any]


def parse_compare(texts: Sequence[str]) -> list[Request]:
    """The requests a list of --compare FIELD=V1,V2,... asks for, in order (the last field
    varying fastest), each value checked as its own option would check it."""
    axes: dict[str, list[Any]] = {}
    for text in texts:
        field, _, values = text.partition("=")
        field = field.strip().replace("-", "_")
        option = f"--compare {quote(text)}"
        if field not in FIELDS:
            raise SimulatorError(
                f"{option}: {quote(field)} is not a field of a request (compare one of: "
                f"{', '.join(FIELDS)})"
            )
        if field in axes:
            raise SimulatorError(f"{option}: {field} is compared twice; give its values once")
        parts = [part.strip() for part in values.split(",")]
        if not values.strip() or any(not part for part in parts):
            raise SimulatorError(f"{option}: give {field}=V1,V2,... with no empty value")
        if len(set(parts)) < len(parts):
            raise SimulatorError(f"{option}: a value is given twice")
        axes[field] = [_value(option, field, part) for part in parts]
    combos = list(itertools.product(*axes.values()))
    if len(combos) > MAX_REQUESTS:
        raise SimulatorError(
            f"--compare: {len(combos):,} requests are more than the {MAX_REQUESTS} a "
            "side-by-side table can show; compare fewer values"
        )
    single = len(axes) == 1
    return [
        Request(
            ", ".join(str(v) if single else f"{f}={v}" for f, v in zip(axes, combo)),
            dict(zip(axes, combo)),
        )
        for combo in combos
    ]


def _value(option: str, field: str, text: str) -> Any:
    if field in COUNTS:
        least = COUNTS[field]
        if not (text.isascii() and text.isdigit()) or int(text) < least:
            raise SimulatorError(
                f"{option}: {field} takes whole numbers of at least {least}, got {quote(text)}"
            )
        return int(text)
    if field in CHOICES and text not in CHOICES[field]:
        raise SimulatorError(
            f"{option}: {field} is one of {', '.join(CHOICES[field])}, got {quote(text)}"
        )
    return text


def rows_of(results: Sequence[tuple[Request, dict]]) -> list[dict[str, Any]]:
    """One CSV row per request; the speed-up is the first request's end-to-end time over
    this one's."""
    rows = []
    baseline = results[0][1]["e2e_us"] if results else 0.0
    for request, d in results:
        tpot = d["tpot_us"] or {}
        energy = d["energy_j"] or {}
        footprint = d["memory_footprint"]
        row: dict[str, Any] = {
            "label": request.label,
            **{f: d[f] for f in ("model", "hardware", "chips", "batch", "prompt", "generate")},
            **{f: d[f] for f in ("fusion", "weights", "kv_cache", "runtime", "ttft_us")},
            "tpot_first_us": tpot.get("first"),
            "tpot_mean_us": tpot.get("mean"),
            "tpot_last_us": tpot.get("last"),
            "tokens_per_s": d["tokens_per_s"],
            "e2e_us": d["e2e_us"],
            "energy_per_token_j": energy.get("per_token"),
            "hbm_bytes_per_token": d["hbm_bytes_per_token"],
            "memory_bytes": footprint["total_bytes"],
            "hbm_capacity_bytes": footprint["hbm_capacity_bytes"],
            "speedup": baseline / d["e2e_us"] if d["e2e_us"] else None,
        }
        for phase in ("prefill", "decode"):
            for name in TIME_CLASSES:
                row[f"{phase}_{name}_us"] = d["breakdown_us"][phase].get(name, 0.0)
        rows.append(row)
    return rows
