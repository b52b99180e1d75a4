"""The terminal summary of a whole-model inference report (its JSON form)."""

from __future__ import annotations

import textwrap
from typing import Any

from ..units import format_bytes_decimal as fmt_bytes


def _grouped(parts: dict[str, float]) -> dict[str, float]:
    """Joules by where they went, the on-chip memories together."""
    on_chip = ("L2", "L1", "L0A", "L0B", "L0C", "UB")
    grouped = {"HBM": parts.get("HBM", 0.0), "on chip": sum(parts.get(p, 0.0) for p in on_chip)}
    return {**grouped, **{p: j for p, j in parts.items() if p != "HBM" and p not in on_chip}}


def _set_line(overrides: list[str]) -> list[str]:
    """The --set overrides a run was given, wrapped under the header (none: no line)."""
    if not overrides:
        return []
    return textwrap.wrap(
        "--set " + ", ".join(overrides), 88, initial_indent="  ", subsequent_indent="    "
    )


def render_inference(d: dict[str, Any]) -> str:
    tpot = d["tpot_us"]
    footprint = d["memory_footprint"]
    chips = f"{d['chips']} x " if d["chips"] > 1 else ""
    lines = [
        f"{d['model']} on {chips}{d['hardware']}: batch {d['batch']}, prompt {d['prompt']:,}, "
        f"generate {d['generate']:,}, fusion {d['fusion']}, {d['weights']} weights"
        + (f", {d['kv_cache']} KV cache" if d.get("kv_cache", "fp16") != "fp16" else "")
        + (f", runtime {d['runtime']}" if d.get("runtime") else ""),
        *_set_line(d.get("provenance", {}).get("overrides", [])),
        "",
        f"  time to first token  {d['ttft_us'] / 1e3:10,.2f} ms",
    ]
    if tpot is None:
        lines.append(f"  time per token       {'-':>10}      ({d['undefined']['tpot_us']})")
    else:
        lines += [
            f"  time per token       {tpot['mean'] / 1e3:10,.2f} ms   (first "
            f"{tpot['first'] / 1e3:,.2f}, last {tpot['last'] / 1e3:,.2f})",
            f"  tokens per second    {d['tokens_per_s']:10,.1f}",
        ]
    lines += [
        f"  request, end to end  {d['e2e_us'] / 1e3:10,.2f} ms",
        *(
            [
                f"  energy per token     {d['energy_j']['per_token']:10,.3f} J    "
                + ", ".join(
                    f"{part} {j / d['energy_j']['per_token'] * 100:.0f}%"
                    for part, j in _grouped(d["energy_j"]["per_token_by_part"]).items()
                )
            ]
            if d["energy_j"] and d["energy_j"]["per_token"] is not None
            else []
        ),
        f"  HBM per token        {fmt_bytes(d['hbm_bytes_per_token']):>10}"
        + ("   (all chips)" if d["chips"] > 1 else ""),
        "",
        "  where the time goes (ms)",
        f"    {'':<14}{'prefill':>10}{'decode':>10}",
    ]
    breakdown = d["breakdown_us"]
    for name in breakdown["prefill"]:
        prefill, decode = breakdown["prefill"][name], breakdown["decode"][name]
        if prefill or decode:
            lines.append(f"    {name:<14}{prefill / 1e3:>10,.2f}{decode / 1e3:>10,.2f}")
    used = footprint["total_bytes"] / footprint["hbm_capacity_bytes"]
    per_chip = " per chip" if d["chips"] > 1 else ""
    lines += [
        "",
        f"  memory{per_chip}: {fmt_bytes(footprint['total_bytes'])} of "
        f"{fmt_bytes(footprint['hbm_capacity_bytes'])} HBM ({used:.0%}): weights "
        f"{fmt_bytes(footprint['weight_bytes'])}, KV cache "
        f"{fmt_bytes(footprint['kv_cache_bytes'])}, activations "
        f"{fmt_bytes(footprint['activation_bytes'])}",
        "",
        textwrap.fill(d["method"], 92, initial_indent="  simulated: ", subsequent_indent=" " * 13),
        *(
            textwrap.fill(note, 92, initial_indent="  note: ", subsequent_indent=" " * 8)
            for note in d["notes"]
        ),
    ]
    return "\n".join(lines)


def render_comparison(title: str, rows: list[dict[str, Any]]) -> str:
    """Requests side by side (inference_compare.rows_of), one line each: its times, energy,
    HBM bytes per token and memory, and its speed-up over the first."""

    def ms(us: float | None) -> str:
        return "-" if us is None else f"{us / 1e3:,.2f}"

    header = (
        "request",
        "TTFT ms",
        "TPOT ms",
        "tokens/s",
        "end to end ms",
        "J/token",
        "HBM/token",
        "memory",
        "speed-up",
    )
    cells = [
        (
            row["label"],
            ms(row["ttft_us"]),
            ms(row["tpot_mean_us"]),
            "-" if row["tokens_per_s"] is None else f"{row['tokens_per_s']:,.1f}",
            ms(row["e2e_us"]),
            "-" if row["energy_per_token_j"] is None else f"{row['energy_per_token_j']:,.3f}",
            fmt_bytes(row["hbm_bytes_per_token"]),
            f"{fmt_bytes(row['memory_bytes'])} "
            f"({row['memory_bytes'] / row['hbm_capacity_bytes']:.0%})",
            "-" if row["speedup"] is None else f"{row['speedup']:.2f}x",
        )
        for row in rows
    ]
    widths = [max(len(line[i]) for line in (header, *cells)) for i in range(len(header))]
    lines = [title, ""]
    for line in (header, *cells):
        lines.append(
            "  "
            + "  ".join(
                cell.ljust(w) if i == 0 else cell.rjust(w)
                for i, (cell, w) in enumerate(zip(line, widths))
            )
        )
    return "\n".join(lines)
