"""Exploration tools: sweeps, the tiling search, Chrome traces, plots."""

import csv
import json
import tempfile
from collections import defaultdict
from dataclasses import replace
from pathlib import Path

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

import simulator as sim
from simulator.config.workload import parse_workload
from simulator.schedule.fusion import plan_kernels
from simulator.studies.search import legal_tilings, simulate_kernel, tune_kernel

from .test_cli import ROOT, run_cli

PNG = b"\x89PNG\r\n\x1a\n"


@pytest.mark.slow
def test_sweep_rows_are_in_grid_order_and_identical_across_worker_counts():
    grid = {"params.tokens": [1, 16], "schedule.fusion": ["none", "auto"]}
    serial = sim.sweep("workloads/ffn_decode.yaml", grid, workers=1)
    parallel = sim.sweep("workloads/ffn_decode.yaml", grid, workers=2)
    assert serial == parallel
    assert [(r["params.tokens"], r["schedule.fusion"]) for r in serial] == [
        (1, "none"),
        (1, "auto"),
        (16, "none"),
        (16, "auto"),
    ]
    assert all(r["error"] == "" and r["time_us"] > 0 for r in serial)


@settings(max_examples=10, deadline=None)
@given(
    tokens=st.lists(st.integers(1, 96), min_size=1, max_size=3, unique=True),
    widths=st.lists(st.integers(1, 128), min_size=1, max_size=2, unique=True),
    base_n=st.sampled_from([16, 32, 64, 4096]),
    workers=st.integers(2, 3),
)
def test_sweeps_give_the_same_rows_for_any_worker_count(tokens, widths, base_n, workers):
    """Random grids on the tiny chip (illegal tilings included): every row, bit for bit."""
    raw = {
        "name": "linear",
        "hardware": "tiny",
        "params": {"m": 1, "n": 64, "k": 96},
        "tensors": {
            "x": {"shape": ["m", "k"]},
            "w": {"shape": ["k", "n"], "kind": "weight"},
            "bias": {"shape": ["n"], "kind": "weight"},
        },
        "ops": [
            {"name": "mm", "op": "matmul", "inputs": ["x", "w"], "output": "y"},
            {"name": "b", "op": "bias_add", "inputs": ["y", "bias"], "output": "z"},
            {"name": "g", "op": "gelu", "inputs": ["z"], "output": "out"},
        ],
    }
    grid = {
        "params.m": tokens,
        "params.n": widths,
        "schedule.fusion": ["none", "auto"],
        "schedule.tiling.mm.base.n": [base_n],
    }
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "linear.yaml"
        path.write_text(yaml.safe_dump(raw))
        serial = sim.sweep(str(path), grid, workers=1)
        assert serial == sim.sweep(str(path), grid, workers=workers)
        assert serial == sim.sweep(str(path), grid, workers=1)


def test_an_illegal_point_is_a_row_with_its_reason():
    rows = sim.sweep(
        "workloads/ffn_decode.yaml", ["schedule.tiling.default.base.k=64,4096"], workers=1
    )
    assert rows[0]["error"] == "" and rows[0]["time_us"] > 0
    assert "does not fit L0A" in rows[1]["error"] and rows[1]["time_us"] is None


def test_sweep_cli_writes_csv_and_plot(tmp_path):
    out, plot = tmp_path / "s.csv", tmp_path / "s.png"
    result = run_cli(
        "sweep",
        "workloads/ffn_decode.yaml",
        "--grid",
        "params.tokens=1,8",
        "--grid",
        "schedule.fusion=none,auto",
        "--csv",
        str(out),
        "--plot",
        str(plot),
        "--workers",
        "2",
    )
    assert result.returncode == 0, result.stderr
    rows = list(csv.DictReader(out.open()))
    assert len(rows) == 4 and {
        "params.tokens",
        "schedule.fusion",
        "time_us",
        "bound",
        "error",
    } <= set(rows[0])
    assert plot.read_bytes()[:8] == PNG


def test_sweep_cli_refuses_bad_grids():
    result = run_cli("sweep", "workloads/ffn_decode.yaml", "--grid", "params.tokens")
    assert result.returncode == 2 and "FIELD=V1,V2" in result.stderr


def small_gemm(tiny, m=64, n=64, k=128):
    raw = {
        "name": "g",
        "hardware": "tiny",
        "tensors": {"a": {"shape": [m, k]}, "b": {"shape": [k, n]}},
        "ops": [{"name": "mm", "op": "matmul", "inputs": ["a", "b"], "output": "c"}],
    }
    return parse_workload(raw, "g.yaml", tiny)


@pytest.mark.parametrize("shape", [(64, 64, 128), (48, 96, 64), (16, 128, 256)])
def test_tuner_is_within_5_percent_of_the_exhaustive_best(tiny, shape):
    w = small_gemm(tiny, *shape)
    kernel = plan_kernels(w).kernels[0]
    legal = legal_tilings(kernel, w)
    assert len(legal) > 20
    exhaustive = min(simulate_kernel((w, kernel, t)) for t in legal)
    result = tune_kernel(kernel, w, top=4)
    assert result.best_cycles <= 1.05 * exhaustive
    assert result.best_cycles <= result.default_cycles
    assert result.simulated <= 5


def test_tune_cli_writes_a_tuned_workload_that_loads(tmp_path):
    out = tmp_path / "tuned.yaml"
    unfused = ("--set", "schedule.fusion=none")  # fused attention derives its own blocks
    result = run_cli(
        "tune", "workloads/attention_decode.yaml", *unfused, "--top", "2", "--write", str(out)
    )
    assert result.returncode == 0, result.stderr
    assert "roofline" in result.stdout and "tuned" in result.stdout
    tuned = sim.load_workload(out)
    assert set(tuned.tiling) >= {"qk", "pv"}
    again = run_cli("tune", "workloads/attention_decode.yaml", *unfused, "--write", str(out))
    assert again.returncode == 2 and "--force" in again.stderr


def test_tune_write_into_another_folder_keeps_the_hardware_file(tmp_path):
    """A relative hardware path is taken from the workload's folder, from any directory, and
    a tuned copy written elsewhere still leads to the same hardware file."""
    from .test_hostile import BASE, HW

    (tmp_path / "project" / "chips").mkdir(parents=True)
    (tmp_path / "project" / "chips" / "mine.yaml").write_text(
        HW.replace("name: tiny", "name: mine")
    )
    workload = tmp_path / "project" / "w.yaml"
    workload.write_text(BASE.replace("hardware: tiny", "hardware: chips/mine.yaml"))
    (tmp_path / "results" / "tuned").mkdir(parents=True)
    out = tmp_path / "results" / "tuned" / "w.yaml"
    result = run_cli(
        "tune",
        str(workload),
        "--workers",
        "1",
        "--write",
        str(out),
        "--set",
        "params.m=16",
        cwd=tmp_path / "results",
    )
    assert result.returncode == 0, result.stderr
    assert "hardware: ../../project/chips/mine.yaml" in out.read_text()
    tuned = sim.load_workload(out)
    assert tuned.hardware.name == "mine" and tuned.params["m"] == 16
    assert tuned.tiling["mm"].base_m is not None
    elsewhere = run_cli("run", str(out), cwd=tmp_path)
    assert elsewhere.returncode == 0, elsewhere.stderr


def test_chrome_trace_structure_and_busy_cycles(tmp_path):
    path = tmp_path / "trace.json"
    result = run_cli(
        "run",
        "workloads/matmul_residual_rmsnorm.yaml",
        "--trace",
        str(path),
        "--json",
        str(tmp_path / "r.json"),
    )
    assert result.returncode == 0, result.stderr
    trace = json.loads(path.read_text())
    report = json.loads((tmp_path / "r.json").read_text())
    events = trace["traceEvents"]
    slices = [e for e in events if e["ph"] == "X"]
    assert slices and all({"pid", "tid", "ts", "dur", "name", "args"} <= set(e) for e in slices)
    names = {
        (e["pid"], e["tid"]): e["args"]["name"]
        for e in events
        if e["ph"] == "M" and e["name"] == "thread_name"
    }
    assert {name for name in names.values()} >= {"MTE2", "MTE1", "CUBE", "FIXPIPE"}
    counters = {e["name"] for e in events if e["ph"] == "C"}
    assert "HBM bandwidth (GB/s)" in counters and any("occupancy" in c for c in counters)
    cycles_per_us = report["clock_ghz"] * 1e3
    by_track = defaultdict(list)
    for e in slices:
        by_track[(e["pid"], e["tid"])].append((e["ts"], e["ts"] + e["dur"]))
    for spans in by_track.values():  # slices on one track never overlap
        spans.sort()
        assert all(end <= next_start + 1e-9 for (_, end), (next_start, _) in zip(spans, spans[1:]))
    for pipe, unit in (("CUBE", "cube"), ("MTE2", "MTE2"), ("MTE1", "MTE1")):
        busy = (
            sum(
                _union_length(
                    [
                        (e["ts"], e["ts"] + e["dur"])
                        for e in slices
                        if e["cat"] == pipe and e["pid"] == pid
                    ]
                )
                for pid in {e["pid"] for e in slices}
            )
            * cycles_per_us
        )
        expected = report["utilization"][unit] * report["cycles"] * report["cores"]
        assert busy == pytest.approx(expected, rel=1e-9)


def _union_length(spans):
    """The length of the union of (start, end) spans."""
    total, covered = 0.0, float("-inf")
    for start, end in sorted(spans):
        total += max(0.0, end - max(start, covered))
        covered = max(covered, end)
    return total


def test_run_plot_writes_four_pictures(tmp_path):
    result = run_cli("run", "workloads/attention_decode.yaml", "--plot", str(tmp_path / "p"))
    assert result.returncode == 0, result.stderr
    for name in ("roofline", "timeline", "traffic", "utilization"):
        assert (tmp_path / "p" / f"{name}.png").read_bytes()[:8] == PNG


def test_roofline_labels_never_overlap_and_name_every_kernel():
    """LLaMA-7B's decode layer puts seven kernels at one place on the roofline and its
    ceilings close together: each label is drawn once, clear of every other, and names the
    kernels it stands for (or how many more)."""
    from simulator.viz.plots import plot_roofline

    report = sim.simulate(sim.load_workload(ROOT / "workloads/llama7b_decode_layer.yaml"))
    figure = plot_roofline(report)
    figure.canvas.draw()
    renderer = figure.canvas.get_renderer()
    (ax,) = figure.axes
    labels = [t for t in ax.texts if not t.get_text().startswith("ridge")]
    boxes = [t.get_window_extent(renderer) for t in labels]
    for i, box in enumerate(boxes):
        for other in boxes[i + 1 :]:
            assert not box.overlaps(other), [t.get_text() for t in labels]
    text = " ".join(t.get_text() for t in labels)
    named = sum(k.name in text for k in report.kernels)
    more = sum(int(word[1:]) for word in text.split() if word.startswith("+"))
    assert named + more == len(report.kernels)


def test_report_api_for_notebooks(tmp_path):
    r = sim.simulate(sim.load_workload(ROOT / "workloads/kv_cache_update.yaml"))
    assert "kv-cache-update" in r._repr_html_()
    fig = r.plot_timeline(tmp_path / "t.png", cores=(0,))
    assert fig is not None and (tmp_path / "t.png").exists()
    assert replace(r, trace=None).to_dict() == r.to_dict()


@pytest.mark.slow
def test_sweep_on_a_dask_cluster_gives_the_local_rows(tmp_path):
    distributed = pytest.importorskip("distributed")
    grid = ["params.tokens=1,16", "schedule.fusion=none,auto"]
    local = sim.sweep("workloads/ffn_decode.yaml", grid, workers=1)
    with distributed.LocalCluster(
        n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None
    ) as cluster:
        remote = sim.sweep("workloads/ffn_decode.yaml", grid, scheduler=cluster.scheduler_address)
        out = tmp_path / "dask.csv"
        result = run_cli(
            "sweep",
            "workloads/ffn_decode.yaml",
            "--grid",
            grid[0],
            "--grid",
            grid[1],
            "--executor",
            "dask",
            "--scheduler",
            cluster.scheduler_address,
            "--csv",
            str(out),
        )
    assert remote == local
    assert result.returncode == 0, result.stderr
    assert len(list(csv.DictReader(out.open()))) == 4


def test_gpu_calibration_exits_cleanly_without_cuda():
    import subprocess
    import sys

    result = subprocess.run(
        [sys.executable, "benchmarks/calibrate_gpu.py", "--shapes", "1"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr
    assert "calibrate_gpu" in result.stdout or "median absolute error" in result.stdout


def test_the_validation_table_runs_and_reports_its_error():
    """benchmarks/validate.py: one GEMV case, measured against simulated, with the median."""
    import subprocess
    import sys

    result = subprocess.run(
        [sys.executable, "benchmarks/validate.py", "--only", "V2"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr
    [row] = [line for line in result.stdout.splitlines() if line.startswith("V2 ")]
    assert "2.9 TF" in row and "%" in row
    assert "1 case in" in result.stdout and "median absolute error" in result.stdout
    # the README's table shows this row as the simulator prints it today
    readme = (Path(ROOT) / "README.md").read_text(encoding="utf-8")
    assert row in readme.splitlines(), "refresh the README's table: benchmarks/validate.py"


def test_an_interrupted_sweep_keeps_the_points_that_finished(tmp_path, monkeypatch, capsys):
    """Rows reach the CSV as points finish, after the header; Ctrl-C keeps them."""
    import importlib

    from simulator.cli import main

    from .test_hostile import BASE

    workload = tmp_path / "w.yaml"
    workload.write_text(BASE)
    out = tmp_path / "s.csv"
    sweeps = importlib.import_module(
        "simulator.studies.sweep"
    )  # the package's `sweep` is the function
    run_point = sweeps.run_point
    calls = []

    def interrupted_at_the_third(job):
        calls.append(job)
        if len(calls) == 3:
            raise KeyboardInterrupt
        return run_point(job)

    monkeypatch.setattr(sweeps, "run_point", interrupted_at_the_third)
    code = main(
        [
            "sweep",
            str(workload),
            "--grid",
            "params.m=16,32,48,64",
            "--workers",
            "1",
            "--csv",
            str(out),
        ]
    )
    assert code == 130
    assert "the 2 of 4 points that finished are in" in capsys.readouterr().err
    rows = list(csv.DictReader(out.open()))
    assert [r["params.m"] for r in rows] == ["16", "32"] and all(r["time_us"] for r in rows)


def test_a_finished_sweep_csv_is_in_grid_order(tmp_path):
    from .test_hostile import BASE

    workload = tmp_path / "w.yaml"
    workload.write_text(BASE)
    out = tmp_path / "s.csv"
    result = run_cli(
        "sweep",
        str(workload),
        "--grid",
        "params.m=64,16,48,32",
        "--grid",
        "params.n=32,16",
        "--workers",
        "2",
        "--csv",
        str(out),
    )
    assert result.returncode == 0, result.stderr
    rows = list(csv.DictReader(out.open()))
    assert [(r["params.m"], r["params.n"]) for r in rows] == [
        (m, n) for m in ("64", "16", "48", "32") for n in ("32", "16")
    ]


def test_a_large_grid_asks_first_and_says_how_long_from_a_point_it_timed():
    """Past 100 points a sweep runs only with --yes; the refusal estimates the wall time from
    the grid's first and last points' instructions and the time one of them took here."""
    tokens = ",".join(str(t) for t in range(1, 102))
    small = ["--set", "params.hidden=256", "--set", "params.ffn=512"]
    ffn = str(ROOT / "workloads" / "ffn_decode.yaml")
    result = run_cli(
        "sweep", ffn, "--hardware", "tiny", *small, "--grid", f"params.tokens={tokens}"
    )
    assert result.returncode == 2
    assert "the grid has 101 points (about " in result.stderr
    assert "its first and last points lower to " in result.stderr and " took " in result.stderr
    assert "pass --yes" in result.stderr
