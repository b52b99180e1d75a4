"""Plans and comparisons as terminal tables."""

from __future__ import annotations

from ..units import format_bytes_decimal as fmt_bytes
from ..units import us_per_cycle


def render_plan(workload, plan) -> str:
    ops = len(workload.ops)
    fusion = workload.fusion if isinstance(workload.fusion, str) else "explicit groups"
    lines = [
        f"{workload.name} on {workload.hardware.name}: {ops} ops in {len(plan.kernels)} "
        f"kernels (fusion: {fusion})",
        "",
    ]
    rows = []
    for index, kernel in enumerate(plan.kernels, 1):
        produced = {op.output for op in kernel.ops}
        reads = ", ".join(sorted({n for op in kernel.ops for n in op.inputs} - produced))
        kind = (
            "fused attention"
            if kernel.attention
            else "dual GEMM"
            if len(kernel.gemms) > 1
            else ("GEMM" if kernel.gemms else "vector")
        )
        chain = " → ".join(op.op for op in kernel.ops)
        rows.append((str(index), kernel.name, kind, chain, reads, kernel.output))
    header = ("#", "kernel", "kind", "ops", "reads from HBM", "writes")
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    for row in [header, *rows]:
        lines.append("  " + "  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip())
    if plan.reasons:
        lines += ["", "  not fused:"]
        for name, why in plan.reasons.items():
            lines.append(f"    {name}: {why}")
    return "\n".join(lines)


def render_compare(result: dict) -> str:
    rows = result["variants"]
    labels = [r["label"] for r in rows]
    width = max(14, *(len(label) + 2 for label in labels))
    reports = [r["report"] for r in rows]
    us = [us_per_cycle(rep["clock_ghz"]) for rep in reports]

    def line(name: str, cells: list[str]) -> str:
        return f"  {name:<28}" + "".join(f"{cell:>{width}}" for cell in cells)

    out = [
        f"{result['workload']}: {len(rows)} variants"
        + (
            f" (common: {' '.join(result['common_overrides'])})"
            if result["common_overrides"]
            else ""
        ),
        "",
    ]
    out.append(line("", labels))
    out.append(line("time (µs)", [f"{rep['time_us']:,.2f}" for rep in reports]))
    out.append(line("speedup vs first", [f"{s:.2f}x" for s in result["speedups"]]))
    out.append(line("bound", [rep["bound"] for rep in reports]))
    out.append(line("kernels", [str(len(rep["kernels"])) for rep in reports]))
    out.append(
        line(
            "launch overhead (µs)",
            [f"{rep['launch_overhead_cycles'] * u:,.2f}" for rep, u in zip(reports, us)],
        )
    )
    out.append(
        line("HBM read", [fmt_bytes(rep["traffic"]["HBM"]["read_bytes"]) for rep in reports])
    )
    out.append(
        line("HBM write", [fmt_bytes(rep["traffic"]["HBM"]["write_bytes"]) for rep in reports])
    )
    out.append(
        line(
            "L2 hits (read bytes)",
            [fmt_bytes(rep["traffic"]["L2"]["read_bytes"]) for rep in reports],
        )
    )
    mid = [rep["intermediates"] for rep in reports]
    out.append(line("intermediates written", [fmt_bytes(m["hbm_write_bytes"]) for m in mid]))
    out.append(line("  read back from HBM", [fmt_bytes(m["hbm_read_bytes"]) for m in mid]))
    out.append(line("  absorbed by L2", [fmt_bytes(m["l2_read_bytes"]) for m in mid]))
    out.append(line("Cube busy", [f"{rep['utilization']['cube'] * 100:.1f}%" for rep in reports]))
    out.append(
        line(
            "roofline efficiency",
            [f"{rep['roofline']['efficiency'] * 100:.1f}%" for rep in reports],
        )
    )
    for row, rep, u in zip(rows, reports, us):
        out += ["", f"  {row['label']}: kernels"]
        name_width = max(len(k["name"]) for k in rep["kernels"])
        for k in rep["kernels"]:
            t = k["traffic"]["HBM"]
            out.append(
                f"    {k['name']:<{name_width}}  {k['cycles'] * u:>10,.2f} µs  "
                f"HBM read {fmt_bytes(t['read_bytes']):>9}  "
                f"write {fmt_bytes(t['write_bytes']):>9}"
            )
    return "\n".join(out)
