"""Report → a readable terminal table, with a few lines that explain the result."""

from __future__ import annotations

from ..units import format_bytes_decimal as fmt_bytes
from ..units import us_per_cycle

STALL_LABELS = {
    "data": "wait data",
    "buffer_slot": "wait slot",
    "shared_bandwidth": "wait bandwidth",
}


def _bar(fraction: float, width: int = 20) -> str:
    filled = round(max(0.0, min(1.0, fraction)) * width)
    return "█" * filled + "·" * (width - filled)


def _pct(fraction: float) -> str:
    if fraction == 0:
        return "0%"
    return f"{fraction * 100:5.1f}%" if fraction >= 0.001 else f"{fraction * 100:5.2f}%"


def _capped_clock_line(d: dict) -> list[str]:
    """A line for a run at a lower clock than its chip's: held there by its power cap
    (pipeline.simulate), or set so (Hardware.at_clock)."""
    hw = d["provenance"]["hardware"]
    if not hw.get("full_clock_hz"):
        return []
    cap = (hw.get("energy") or {}).get("cap_watts")
    why = (
        f"held by the {cap:,.0f} W power cap (at its full "
        f"{hw['full_clock_hz'] / 1e9:,.3f} GHz the run draws more)"
        if cap
        else f"lowered from its full {hw['full_clock_hz'] / 1e9:,.3f} GHz"
    )
    return [f"  clock       {hw['clock_hz'] / 1e9:12,.3f} GHz  {why}"]


def render_report(report) -> str:
    d = report.to_dict()
    cycles = d["cycles"]
    roof = d["roofline"]
    us = us_per_cycle(d["clock_ghz"])  # µs per cycle
    footprint = d["memory_footprint"]
    lines = [
        f"{d['workload']} on {d['hardware']}: {len(d['kernels'])} kernels, "
        f"{d['instructions']:,} instructions simulated",
        "",
        f"  time        {d['time_us']:12,.2f} µs   ({cycles:,} cycles)",
        f"  bound       {d['bound']:>12}      roofline {roof['bound_cycles'] * us:,.2f} µs"
        f"  →  efficiency {roof['efficiency'] * 100:.1f}%",
        *_capped_clock_line(d),
        f"  compute     {d['achieved_tflops']:12,.2f} TFLOPS of {d['peak_tflops']:.1f} peak "
        f"({d['mac_utilization'] * 100:.2f}%)",
        f"  HBM         {d['achieved_hbm_tbps']:12,.3f} TB/s   of "
        f"{d['hbm_bandwidth_tbps']:.2f} peak "
        f"({d['achieved_hbm_tbps'] / d['hbm_bandwidth_tbps'] * 100:.1f}%)",
        f"  launch      {d['launch_overhead_cycles'] * us:12,.2f} µs   "
        f"waited on ({len(d['kernels'])} kernel launch{'es' * (len(d['kernels']) != 1)})",
        f"  footprint   {fmt_bytes(footprint['total_bytes']):>12}   in HBM of "
        f"{fmt_bytes(footprint['hbm_capacity_bytes'])} "
        f"({footprint['total_bytes'] / footprint['hbm_capacity_bytes'] * 100:.1f}%)",
        *energy_lines(d["energy"]),
        "",
        "  traffic        read        write",
    ]
    for level, t in d["traffic"].items():
        extra = ""
        if level == "L2":
            global_read = t["read_bytes"] + d["traffic"]["HBM"]["read_bytes"]
            lookups = t["hits"] + t["misses"]
            extra = (
                f"   {t['read_bytes'] / global_read * 100:.1f}% of global reads hit "
                f"({t['hits']:,} of {lookups:,} lookups)"
                if global_read
                else ""
            )
        lines.append(
            f"  {level:<6} {fmt_bytes(t['read_bytes']):>11}  "
            f"{fmt_bytes(t['write_bytes']):>11}{extra}"
        )
    roles: dict[str, list[int]] = {}
    for t in d["tensors"].values():
        acc = roles.setdefault(t["role"], [0, 0, 0, 0])
        for i, key in enumerate(("bytes", "hbm_read_bytes", "l2_read_bytes", "hbm_write_bytes")):
            acc[i] += t[key]
    lines += ["", "  by tensor role     size    HBM read     L2 read   HBM write"]
    for role in (
        "weight",
        "cache",
        "activation",
        "viewed",
        "intermediate",
        "view",
        "on_chip",
        "output",
    ):
        if role in roles:
            size, hbm_read, l2_read, hbm_write = roles[role]
            lines.append(
                f"  {role:<12}{fmt_bytes(size):>11}{fmt_bytes(hbm_read):>12}"
                f"{fmt_bytes(l2_read):>12}{fmt_bytes(hbm_write):>12}"
            )
    lines += ["", "  utilization (busy fraction, averaged over the chip's cores)"]
    for unit, fraction in d["utilization"].items():
        lines.append(f"  {unit:<8} {_bar(fraction)} {_pct(fraction)}")
    core_cycles = cycles * d["cores"]
    lines += [
        "",
        f"  {'stalls (share of all core-cycles)':<40}"
        + "".join(f"{label:>16}" for label in STALL_LABELS.values()),
    ]
    for pipe, causes in d["stalls"].items():
        if any(causes.values()):
            lines.append(
                f"  {pipe:<40}"
                + "".join(f"{_pct(causes[c] / core_cycles):>16}" for c in STALL_LABELS)
            )
    width = max(10, *(len(k["name"]) + 2 for k in d["kernels"]))
    lines += [
        "",
        f"  {'kernel':<{width}}{'unit':<8}{'µs':>10}{'floor µs':>13}"
        f"  {'bound by':<9}{'HBM read':>10}{'HBM write':>12}  tiling",
    ]
    for k in d["kernels"]:
        bound_by = k["binding"] if k["bound"] != "latency" else "latency"
        lines.append(
            f"  {k['name']:<{width}}{k['unit']:<8}{k['cycles'] * us:>10,.2f}"
            f"{k['floor_cycles'] * us:>13,.2f}  {bound_by:<9}"
            f"{fmt_bytes(k['traffic']['HBM']['read_bytes']):>10}"
            f"{fmt_bytes(k['traffic']['HBM']['write_bytes']):>12}  "
            f"{describe_tiling(k['tiling'])}"
        )
    lines += ["", *explain(d)]
    return "\n".join(lines)


def energy_lines(energy: dict | None) -> list[str]:
    """The run's joules: total, then HBM, the on-chip memories, the units and static."""
    if energy is None:
        return []
    levels = energy["by_level_j"]
    on_chip = sum(j for level, j in levels.items() if level != "HBM")
    parts = (
        ("HBM", levels["HBM"]),
        ("on chip", on_chip),
        ("Cube", energy["cube_j"]),
        ("vector", energy["vector_j"]),
        ("static", energy["static_j"]),
    )
    return [
        f"  energy      {energy['total_j'] * 1e3:12,.3f} mJ   "
        + ", ".join(f"{name} {j / energy['total_j'] * 100:.0f}%" for name, j in parts)
    ]


def describe_tiling(t: dict | None) -> str:
    if t is None:
        return "vector tiles"
    if "row_chunk" in t:
        return f"vector tiles: rows in chunks of {t['row_chunk']}, {t['passes']} passes"
    if "block_q" in t:
        chunks = f", keys split {t['splits']} ways" if t["splits"] > 1 else ""
        return f"attention blocks {t['block_q']} queries x {t['block_kv']} keys{chunks}"
    split = t["split"]
    cores = "x".join(str(split[d]) for d in ("b", "m", "n") if d != "b" or split[d] > 1)
    if split.get("blocks"):
        cores = f"blocks {cores}"
    return (
        f"base {t['base']['m']}x{t['base']['n']}x{t['base']['k']} step.k {t['step']['k']} "
        f"order {t['order']} buffers {t['buffers']}"
        + (f" acc {t['acc_buffers']}" if t.get("acc_buffers", t["buffers"]) != t["buffers"] else "")
        + f" split {cores}"
    )


def explain(d: dict) -> list[str]:
    """A few sentences, all computed from the report, that say why the time is what it is."""
    util = d["utilization"]
    us = us_per_cycle(d["clock_ghz"])
    roof = d["roofline"]
    stalls = d["stalls"]
    out = []
    binding = d.get("binding", "hbm")
    nearest = roof.get("ceiling_cycles", {}).get(binding, 0.0)
    if d["bound"] == "memory" and binding != "hbm":
        what = "L2" if binding == "l2" else binding
        moved = (
            "serving L2 hits and fills at L2's peak bandwidth"
            if binding == "l2"
            else f"moving its bytes at its own path rates on all {d['cores']} cores"
        )
        out.append(
            f"Why: memory-bound, by {what}: {moved} takes at least "
            f"{nearest * us:,.1f} µs ({nearest / d['cycles'] * 100:.0f}% of the run), "
            f"more than the Cube's {roof['compute_cycles'] * us:,.1f} µs or HBM's "
            f"{roof['ceiling_cycles']['hbm'] * us:,.1f} µs for the bytes it served."
        )
        if binding in ("MTE2", "l2"):
            served = d["traffic"]["L2"]["read_bytes"], d["traffic"]["HBM"]["read_bytes"]
            out.append(
                f"     Each operand block is fetched again for every block it meets, "
                f"so larger base blocks move fewer bytes (L2 served "
                f"{fmt_bytes(served[0])}, HBM {fmt_bytes(served[1])})."
            )
    elif d["bound"] == "memory":
        by_role: dict[str, int] = {}
        for t in d["tensors"].values():
            by_role[t["role"]] = by_role.get(t["role"], 0) + t["hbm_read_bytes"]
        big = [
            f"{role}s {fmt_bytes(n)}"
            for role, n in sorted(by_role.items(), key=lambda i: -i[1])
            if n >= 0.1 * roof["compulsory_hbm_bytes"]
        ]
        out.append(
            f"Why: memory-bound. Moving {fmt_bytes(roof['compulsory_hbm_bytes'])} over HBM "
            f"({', '.join(big)}) takes at least {roof['memory_cycles'] * us:,.1f} µs "
            f"at peak, while the Cube's work needs only "
            f"{roof['compute_cycles'] * us:,.1f} µs."
        )
        out.append(
            f"     The Cube is busy {util['cube'] * 100:.1f}% of the time and does useful "
            f"MACs {d['mac_utilization'] * 100:.2f}% of the time (rows padded to the "
            "fractal count as busy); MTE2 spends "
            f"{_busy_share(stalls['MTE2']['shared_bandwidth'], 'MTE2', d)} of its busy "
            "time waiting for its share of HBM."
        )
    elif d["bound"] == "compute":

        def share(pipe: str, cause: str) -> str:
            return _pct(stalls[pipe][cause] / (d["cycles"] * d["cores"])).strip()

        vector_us = sum(k["cycles"] for k in d["kernels"] if k["unit"] == "vector") * us
        out.append(
            f"Why: compute-bound. The Cube is busy {util['cube'] * 100:.1f}% of the time "
            f"({d['mac_utilization'] * 100:.1f}% of peak MACs)."
        )
        out.append(
            f"     The rest: the Cube waits for operands in L0A/L0B {share('CUBE', 'data')} "
            f"of the time (MTE1 waits for L1 data {share('MTE1', 'data')}, MTE2 for its "
            f"share of HBM/L2 {share('MTE2', 'shared_bandwidth')}); vector kernels "
            f"take {vector_us:,.1f} µs and launches "
            f"{d['launch_overhead_cycles'] * us:,.1f} µs during which the Cube is idle."
        )
    else:
        out.append(
            "Why: latency-bound. No unit, memory or engine is near its peak (the "
            f"nearest, {binding}, needs {nearest / d['cycles'] * 100:.0f}% of the run): "
            f"fixed costs (launches {d['launch_overhead_cycles']:,} cycles, DMA start-up, "
            "pipeline fill) dominate."
        )
    out.append(f"     Simulated time is {1 / roof['efficiency']:.2f}x the roofline bound.")
    return out


def _busy_share(cycles: int, pipe: str, d: dict) -> str:
    busy = d["utilization"][pipe] * d["cycles"] * d["cores"]
    return f"{cycles / busy * 100:.0f}%" if busy else "n/a"
