"""Plots drawn from Reports (never from the engine): roofline, timeline, traffic,
utilization and stalls, and sweep results. Each returns a matplotlib Figure and
saves it as PNG when given a path."""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Callable

import matplotlib.pyplot as plt
from matplotlib.patches import Patch

from ..schedule.program import PIPES
from ..units import us_per_cycle
from ..version import PNG_SOFTWARE

PIPE_COLORS = {
    "MTE2": "#4C72B0",
    "MTE1": "#55A868",
    "CUBE": "#C44E52",
    "FIXPIPE": "#8172B2",
    "VECTOR": "#CCB974",
    "MTE3": "#64B5CD",
}
STALL_COLORS = {"data": "#F2B880", "buffer_slot": "#E07A5F", "shared_bandwidth": "#9E9E9E"}
STALL_LABELS = {
    "data": "waiting for data",
    "buffer_slot": "waiting for a free slot",
    "shared_bandwidth": "waiting for shared bandwidth",
}


def _data(report) -> dict:
    return report.to_dict() if hasattr(report, "to_dict") else report


def _finish(fig, path):
    fig.tight_layout()
    if path is not None:
        fig.savefig(Path(path), dpi=110, metadata={"Software": PNG_SOFTWARE})
        plt.close(fig)
    return fig


def plot_roofline(reports, path=None, labels=None):
    """Achieved TFLOPS against arithmetic intensity (FLOPs per HBM byte), one point per kernel
    and one star per report, under the chip's roofline with the ridge point marked."""
    reports = [_data(r) for r in (reports if isinstance(reports, (list, tuple)) else [reports])]
    labels = labels or [r["workload"] for r in reports]
    first = reports[0]
    peak, bw = first["peak_tflops"], first["hbm_bandwidth_tbps"]
    ridge = peak / bw  # FLOPs per byte where the roofs meet
    fig, ax = plt.subplots(figsize=(7.5, 5))
    points = [
        (
            max(r["flops"], 1)
            / max(1, r["traffic"]["HBM"]["read_bytes"] + r["traffic"]["HBM"]["write_bytes"]),
            max(r["achieved_tflops"], 1e-6),
        )
        for r in reports
    ]
    kernel_points = []
    for r in reports:
        us = us_per_cycle(r["clock_ghz"])
        for k in r["kernels"]:
            t = k["traffic"]["HBM"]
            moved = t["read_bytes"] + t["write_bytes"]
            if k["flops"] and moved and k["cycles"]:
                kernel_points.append(
                    (k["flops"] / moved, k["flops"] / (k["cycles"] * us) / 1e6, k["name"])
                )
    xs = [p[0] for p in points + kernel_points] + [ridge]
    lo, hi = min(xs) / 4, max(xs) * 4
    grid = [lo * (hi / lo) ** (i / 200) for i in range(201)]
    ax.plot(grid, [min(peak, bw * x) for x in grid], color="black", lw=2, label="roofline")
    ax.axvline(ridge, color="grey", ls="--", lw=1)
    ax.annotate(
        f"ridge {ridge:.0f} FLOP/B",
        (ridge, peak),
        textcoords="offset points",
        xytext=(5, -15),
        fontsize=8,
        color="grey",
    )
    for x, y, _ in kernel_points:
        ax.scatter(x, y, s=25, color="#4C72B0", alpha=0.7, zorder=3)
    ladder = _ceiling_ladder(ax, first, points[0][0])
    star_colors = ("#C44E52", "#DD8452", "#8172B2", "#55A868", "#937860", "#DA8BC3")
    for index, ((x, y), label) in enumerate(zip(points, labels)):
        ax.scatter(
            x,
            y,
            s=140,
            marker="*",
            color=star_colors[index % len(star_colors)],
            zorder=4,
            label=label,
        )
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("arithmetic intensity (FLOPs per HBM byte)")
    ax.set_ylabel("achieved TFLOPS")
    ax.set_title(f"Roofline of {first['hardware']}: {peak:.0f} TFLOPS, {bw:.2f} TB/s HBM")
    ax.legend(fontsize=7, loc="lower right")
    ax.grid(True, which="both", alpha=0.2)
    fig.tight_layout()  # the labels below are placed in pixels: fix the axes first
    ax.autoscale_view()
    _place_labels(ax, [(x, y, name, "black", 1) for x, y, name in kernel_points])
    _place_labels(ax, ladder)
    return _finish(fig, path)


LABEL_GAP_PIXELS = 11  # between the baselines of two labels stacked apart
MAX_NAMES = 3  # a label of points that coincide names this many, then "+N"


def _place_labels(ax, items) -> None:
    """Label points without overlaps: `items` are (x, y, text, colour, side: 1 right of the
    point, -1 left of it). Points that coincide on screen share one label; labels of one
    side are pushed apart vertically, each with a thin line to its point when moved."""
    to_pixels = ax.transData.transform
    groups: list[list] = []  # points within a few pixels of each other
    for item in sorted(items, key=lambda i: tuple(to_pixels((i[0], i[1])))):
        px, py = to_pixels((item[0], item[1]))
        for group in groups:
            gx, gy = to_pixels((group[0][0], group[0][1]))
            if group[0][4] == item[4] and abs(gx - px) < 6 and abs(gy - py) < 6:
                group.append(item)
                break
        else:
            groups.append([item])
    for side in (1, -1):
        placed = sorted(
            (g for g in groups if g[0][4] == side), key=lambda g: to_pixels((g[0][0], g[0][1]))[1]
        )
        level = -float("inf")
        for group in placed:
            x, y, _, color, _ = group[0]
            names = [item[2] for item in group]
            text = ", ".join(names[:MAX_NAMES]) + (
                f" +{len(names) - MAX_NAMES}" if len(names) > MAX_NAMES else ""
            )
            py = to_pixels((x, y))[1]
            level = max(py, level + LABEL_GAP_PIXELS)
            ax.annotate(
                text,
                (x, y),
                xytext=(6 * side, level - py),
                textcoords="offset pixels",
                fontsize=7,
                color=color,
                ha="left" if side > 0 else "right",
                va="center",
                arrowprops=(dict(arrowstyle="-", lw=0.5, color="grey") if level - py > 3 else None),
            )


def _ceiling_ladder(ax, report: dict, x: float) -> list:
    """The run's ceilings as the TFLOPS each would allow it alone (its FLOPs over the
    ceiling's time): short bars over the run's star; the lowest is the binding one. Returns
    their labels, to place left of the bars (see _place_labels)."""
    ceilings = report["roofline"].get("ceiling_cycles", {})
    us = us_per_cycle(report["clock_ghz"])
    labels = []
    for name, cycles in ceilings.items():
        if not cycles or not report["flops"] or name == "launch":
            continue
        cap = report["flops"] / (cycles * us) / 1e6
        binding = name == report.get("binding")
        ax.plot(
            [x / 2.5, x * 2.5],
            [cap, cap],
            color="#C44E52" if binding else "grey",
            lw=2 if binding else 1,
            ls="-" if binding else ":",
            zorder=2,
        )
        color = "#C44E52" if binding else "grey"
        labels.append((x / 2.5, cap, name + (" (binds)" if binding else ""), color, -1))
    return labels


def plot_timeline(report, path=None, cores=(0, 1), window_cycles=None):
    """One row per pipe of each chosen core: busy slices in the pipe's colour, the wait before
    each instruction shaded by its cause."""
    if report.trace is None:
        raise ValueError("this report carries no trace (it was loaded from JSON)")
    us = us_per_cycle(report.clock_ghz)
    start, end = window_cycles or (0, report.cycles)
    rows = [(core, pipe) for core in cores for pipe in PIPES]
    busy = {row: [] for row in rows}
    waits = {(row, cause): [] for row in rows for cause in STALL_COLORS}
    for r in report.trace.records:
        row = (r.core, r.pipe)
        if row not in busy or r.end_cycle < start or r.start_cycle > end:
            continue
        busy[row].append((r.start_cycle * us, (r.end_cycle - r.start_cycle) * us))
        t = r.start_cycle
        for cause, cycles in (("buffer_slot", r.wait_slot_cycles), ("data", r.wait_data_cycles)):
            if cycles:
                waits[(row, cause)].append(((t - cycles) * us, cycles * us))
                t -= cycles
        if r.wait_bandwidth_cycles:
            waits[(row, "shared_bandwidth")].append(
                ((r.end_cycle - r.wait_bandwidth_cycles) * us, r.wait_bandwidth_cycles * us)
            )
    fig, ax = plt.subplots(figsize=(11, 0.32 * len(rows) + 1.6))
    for y, row in enumerate(rows):
        for cause, color in STALL_COLORS.items():
            if waits[(row, cause)]:
                ax.broken_barh(waits[(row, cause)], (y - 0.4, 0.8), color=color, alpha=0.6)
        if busy[row]:
            ax.broken_barh(busy[row], (y - 0.3, 0.6), color=PIPE_COLORS[row[1]])
    ax.set_yticks(range(len(rows)))
    ax.set_yticklabels([f"core {c} {p}" for c, p in rows], fontsize=7)
    ax.invert_yaxis()
    ax.set_xlim(start * us, end * us)
    ax.set_xlabel("time (µs)")
    ax.set_title(f"{report.workload}: timeline of cores {', '.join(map(str, cores))}")
    ax.legend(
        handles=[Patch(color=c, alpha=0.6, label=STALL_LABELS[k]) for k, c in STALL_COLORS.items()],
        fontsize=7,
        loc="upper center",
        bbox_to_anchor=(0.5, -0.1),
        ncol=3,
    )
    return _finish(fig, path)


def plot_traffic(reports: dict, path=None):
    """Bytes read and written per memory level, one bar group per level, one bar per report
    (e.g. {"unfused": r1, "fused": r2})."""
    reports = {label: _data(r) for label, r in reports.items()}
    levels = list(next(iter(reports.values()))["traffic"])
    fig, ax = plt.subplots(figsize=(9, 4.5))
    width = 0.8 / (2 * len(reports))  # reads and writes side by side: a log axis can't stack
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for i, (label, r) in enumerate(reports.items()):
        color = colors[i % len(colors)]
        for k, kind in enumerate(("read", "write")):
            xs = [j + (2 * i + k) * width for j in range(len(levels))]
            megabytes = [r["traffic"][lv][f"{kind}_bytes"] / 1e6 for lv in levels]
            ax.bar(
                xs,
                megabytes,
                width,
                color=color,
                alpha=1.0 if kind == "read" else 0.5,
                hatch="" if kind == "read" else "//",
                edgecolor="white" if kind == "read" else color,
                label=f"{label}: {kind}",
            )
    ax.set_xticks([j + width * (2 * len(reports) - 1) / 2 for j in range(len(levels))])
    ax.set_xticklabels(levels)
    ax.set_yscale("log")
    ax.set_ylabel("MB (log scale; none: no bar)")
    ax.set_title("Traffic per memory level")
    ax.legend(fontsize=7)
    return _finish(fig, path)


def plot_inference(rows: list[dict], path=None):
    """Inference requests side by side (inference_compare.rows_of): time to first token and
    per token, and where each request's time goes, by class of work."""
    labels = [textwrap.fill(str(row["label"]), 14) for row in rows]
    fig, (times, parts) = plt.subplots(1, 2, figsize=(10, 0.9 + 0.5 * max(3, len(rows))))
    ys = range(len(rows))
    height = 0.4
    for offset, (key, name) in enumerate(
        (("ttft_us", "first token"), ("tpot_mean_us", "per token"))
    ):
        values = [(row[key] or 0.0) / 1e3 for row in rows]
        times.barh([y + (offset - 0.5) * height for y in ys], values, height, label=name)
    times.set_yticks(list(ys), labels)
    times.invert_yaxis()
    times.set_xlabel("ms")
    times.set_title("Time to first token and per token")
    times.legend(fontsize=8)
    classes = [c[len("decode_") : -len("_us")] for c in rows[0] if c.startswith("decode_")]
    left = [0.0] * len(rows)
    for name in classes:
        values = [(row[f"prefill_{name}_us"] + row[f"decode_{name}_us"]) / 1e3 for row in rows]
        if any(values):
            parts.barh(list(ys), values, 0.6, left=left, label=name)
            left = [a + b for a, b in zip(left, values)]
    parts.set_yticks(list(ys), [""] * len(rows))
    parts.invert_yaxis()
    parts.set_xlabel("ms, prefill and every decode step")
    parts.set_title("Where the request's time goes")
    parts.legend(fontsize=8, loc="best")
    return _finish(fig, path)


def plot_utilization(report, path=None):
    """Busy fraction of every unit, engine and memory; stall share of every pipe by cause."""
    d = _data(report)
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    names = list(d["utilization"])
    left.barh(names, [d["utilization"][n] * 100 for n in names], color="#4C72B0")
    left.set_xlim(0, 100)
    left.set_xlabel("busy (% of time)")
    left.invert_yaxis()
    left.set_title("Utilization")
    core_cycles = d["cycles"] * d["cores"]
    pipes = list(d["stalls"])
    offset = [0.0] * len(pipes)
    for cause, color in STALL_COLORS.items():
        shares = [d["stalls"][p][cause] / core_cycles * 100 for p in pipes]
        right.barh(pipes, shares, left=offset, color=color, label=STALL_LABELS[cause])
        offset = [o + s for o, s in zip(offset, shares)]
    right.invert_yaxis()
    right.set_xlim(0, 100)
    right.set_xlabel("stalled (% of core-cycles)")
    right.set_title("Stalls by cause")
    right.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.22), ncol=3)
    fig.suptitle(d["workload"])
    return _finish(fig, path)


BOUND_COLORS = {"memory": "#4C72B0", "compute": "#C44E52", "latency": "#9E9E9E"}


def plot_sweep(rows: list[dict], fields: list[str], metric: str = "time_us", path=None):
    """One field: `metric` against it, and every point on the chip's roofline (so the move
    from memory- to compute-bound shows). Two fields: a heatmap of `metric` (× = illegal)."""
    good = [r for r in rows if not r.get("error") and r.get(metric) is not None]
    if len(fields) == 1:
        field = fields[0]
        fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.6))
        good.sort(key=lambda r: _order(r[field]))
        xs = [r[field] for r in good]
        left.plot(
            range(len(xs)) if not _numeric(xs) else xs,
            [r[metric] for r in good],
            color="black",
            lw=1,
            zorder=1,
        )
        for i, r in enumerate(good):
            left.scatter(
                r[field] if _numeric(xs) else i,
                r[metric],
                zorder=2,
                color=BOUND_COLORS.get(r["bound"], "black"),
            )
        if xs and _numeric(xs) and min(xs) > 0 and max(xs) / min(xs) >= 16:
            left.set_xscale("log", base=2)
        if not _numeric(xs):
            left.set_xticks(range(len(xs)))
            left.set_xticklabels([str(x) for x in xs], rotation=45)
        left.set_xlabel(field)
        left.set_ylabel(metric)
        left.grid(True, alpha=0.3)
        left.legend(
            handles=[Patch(color=c, label=f"{b}-bound") for b, c in BOUND_COLORS.items()],
            fontsize=7,
        )
        illegal = [r for r in rows if r.get("error")]
        if illegal:
            left.set_title(f"{len(illegal)} illegal point(s) not shown", fontsize=8)
        _sweep_roofline(right, good, field)
    else:
        fx, fy = fields[:2]
        fig, ax = plt.subplots(figsize=(7.5, 5.2))
        xs = sorted({r[fx] for r in rows}, key=_order)
        ys = sorted({r[fy] for r in rows}, key=_order)
        grid = [[float("nan")] * len(xs) for _ in ys]
        for r in good:
            grid[ys.index(r[fy])][xs.index(r[fx])] = r[metric]
        image = ax.imshow(grid, origin="lower", aspect="auto", cmap="viridis_r")
        fig.colorbar(image, ax=ax, label=metric)
        ax.set_xticks(range(len(xs)))
        ax.set_xticklabels([str(x) for x in xs], rotation=45)
        ax.set_yticks(range(len(ys)))
        ax.set_yticklabels([str(y) for y in ys])
        ax.set_xlabel(fx)
        ax.set_ylabel(fy)
        for j in range(len(ys)):
            for i in range(len(xs)):
                value = grid[j][i]
                ax.text(
                    i,
                    j,
                    "×" if value != value else f"{value:.3g}",
                    ha="center",
                    va="center",
                    fontsize=8,
                    color="#C44E52" if value != value else _ink_on(image, value),
                )
        ax.set_title(
            "\n".join(textwrap.wrap(f"{metric} over {fx} × {fy} (× = illegal)", 60)), fontsize=10
        )
    return _finish(fig, path)


def _ink_on(image, value: float) -> str:
    """Black or white, whichever reads on the colour `image` gives `value`."""
    red, green, blue, _ = image.cmap(image.norm(value))
    return "black" if 0.299 * red + 0.587 * green + 0.114 * blue > 0.5 else "white"


def _sweep_roofline(ax, rows: list[dict], field: str) -> None:
    rows = [r for r in rows if r["arithmetic_intensity"] > 0 and r["achieved_tflops"] > 0]
    if not rows:  # no point does any FLOPs (only casts, say): none has a place
        ax.text(
            0.5,
            0.5,
            "no point does FLOPs:\nnothing to place on the roofline",
            ha="center",
            va="center",
            transform=ax.transAxes,
            color="grey",
        )
        return
    peak, bw = rows[0]["peak_tflops"], rows[0]["hbm_bandwidth_tbps"]
    ridge = peak / bw
    xs = [r["arithmetic_intensity"] for r in rows] + [ridge]
    lo, hi = min(xs) / 4, max(xs) * 4
    grid = [lo * (hi / lo) ** (i / 200) for i in range(201)]
    ax.plot(grid, [min(peak, bw * x) for x in grid], color="black", lw=2)
    ax.axvline(ridge, color="grey", ls="--", lw=1)
    ax.annotate(
        f"ridge = peak / HBM = {ridge:.0f} FLOP/B",
        (ridge, peak),
        textcoords="offset points",
        xytext=(-4, 6),
        ha="right",
        fontsize=8,
        color="grey",
    )
    for r in rows:
        ax.scatter(
            r["arithmetic_intensity"],
            r["achieved_tflops"],
            zorder=3,
            color=BOUND_COLORS.get(r["bound"], "black"),
        )
        ax.annotate(
            str(r[field]),
            (r["arithmetic_intensity"], r["achieved_tflops"]),
            textcoords="offset points",
            xytext=(4, -10),
            fontsize=7,
        )
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_ylim(top=peak * 6)  # room for the ridge's note above the roof
    ax.set_xlabel("arithmetic intensity (FLOPs per HBM byte)")
    ax.set_ylabel("achieved TFLOPS")
    ax.set_title(f"each point on the roofline ({field} labelled)")
    ax.grid(True, which="both", alpha=0.2)


def _numeric(values) -> bool:
    return all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values)


def _order(value):
    return (0, value, "") if isinstance(value, (int, float)) else (1, 0, str(value))


PLOT_FILES = ("roofline.png", "timeline.png", "traffic.png", "utilization.png")


def write_plots(report, directory, save: Callable | None = None) -> list[Path]:
    """`run --plot DIR`: the roofline, timeline, traffic and utilization PNGs.

    `save(path, draw)` writes one file by calling `draw(some_path)` (the CLI writes each
    through a temporary file); by default each is drawn straight to its path."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    cores = sorted({r.core for r in report.trace.records})[:2] if report.trace else (0,)
    draws = (
        lambda path: plot_roofline(report, path),
        lambda path: plot_timeline(report, path, cores=tuple(cores)),
        lambda path: plot_traffic({report.workload: report}, path),
        lambda path: plot_utilization(report, path),
    )
    paths = [directory / name for name in PLOT_FILES]
    for path, draw in zip(paths, draws):
        (save or (lambda path, draw: draw(path)))(path, draw)
    return paths
