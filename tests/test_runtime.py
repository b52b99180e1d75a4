"""Runtime profiles: how the host drives the chip. Their figures are classed as a preset's,
their launch figures replace the chip's, and their host time joins every step once."""

import json
import math
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from simulator.cli import main
from simulator.config.figures import CITED, CLASSES
from simulator.config.hardware import preset_names
from simulator.config.runtime import Runtime, load_runtime, parse_runtime, runtime_names
from simulator.config.transformer import Step, step_workload
from simulator.cost import launch_bound_cycles
from simulator.errors import ConfigError
from simulator.pipeline import simulate
from simulator.studies.inference import infer

from .test_inference import TOY, toy

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

from holdout_cases import HOLDOUT  # noqa: E402
from validation_cases import CALIBRATION  # noqa: E402


def profile(**changes) -> Runtime:
    base = Runtime("test", "<test>", "a test profile", True, 1000, 500, 0)
    return replace(base, **changes)


@pytest.mark.parametrize("name", runtime_names())
def test_every_runtime_figure_has_a_class_and_a_cited_class_its_source(name):
    runtime = load_runtime(name)
    assert runtime.name == name and runtime.name not in preset_names()
    paths = {f.path for f in runtime.figures}
    assert {"launch", "launch_overhead", "kernel_gap", "step_host"} <= paths
    optional = {"layer_host", "prefill_layer_host", "first_token"}
    assert paths <= {"launch", "launch_overhead", "kernel_gap", "step_host", *optional}
    assert ("layer_host" in paths) == (runtime.layer_host_ns > 0)
    assert ("prefill_layer_host" in paths) == (runtime.prefill_layer_host_ns > 0)
    assert ("first_token" in paths) == (runtime.first_token != "prefill")
    calibration = {case.id for case in CALIBRATION}
    for figure in runtime.figures:
        assert figure.kind in CLASSES, figure
        assert figure.references or figure.kind not in CITED, figure
        # a fit names the calibration rows it was fitted on, never a holdout row
        assert bool(figure.rows) == (figure.kind == "fitted"), figure
        assert set(figure.rows) <= calibration, figure


def test_every_validation_row_names_a_runtime_that_exists():
    named = {c.runtime for c in (*CALIBRATION, *HOLDOUT) if getattr(c, "runtime", None)}
    assert named and named <= set(runtime_names())


def test_a_runtimes_host_time_joins_every_step_once(tiny):
    """Prefill and each decode step wait `step_host` on the host, in a class of their own,
    drawing the chip's static power; nothing else moves."""
    host_ns = 5000
    bare = infer(toy(), tiny, prompt=16, generate=3, runtime=profile())
    hosted = infer(toy(), tiny, prompt=16, generate=3, runtime=profile(step_host_ns=host_ns))
    host_cycles = math.ceil(host_ns * tiny.clock_hz / 1e9)
    steps = (bare.prefill, *bare.decode), (hosted.prefill, *hosted.decode)
    for before, after in zip(*steps):
        assert after.cycles - before.cycles == host_cycles
        assert after.by_class_cycles["host"] == host_cycles
        assert before.by_class_cycles["host"] == 0
        assert after.hbm_bytes == before.hbm_bytes
        static = tiny.energy.static_watts * host_cycles / tiny.clock_hz
        assert after.energy["static"] - before.energy["static"] == pytest.approx(static)
    assert hosted.e2e_us - bare.e2e_us == pytest.approx(3 * host_ns / 1e3, rel=1e-3)
    assert hosted.to_dict()["runtime"] == "test"


def test_a_prefills_host_time_per_layer_joins_the_prefill_alone(tiny):
    """`prefill_layer_host` (an engine that prepares every layer before a prefill) holds the
    prefill back by that figure times the layers; decode steps are untouched."""
    per_layer_ns = 7000
    bare = infer(toy(), tiny, prompt=16, generate=3, runtime=profile())
    hosted = infer(
        toy(), tiny, prompt=16, generate=3, runtime=profile(prefill_layer_host_ns=per_layer_ns)
    )
    host_cycles = math.ceil(per_layer_ns * TOY["num_hidden_layers"] * tiny.clock_hz / 1e9)
    assert hosted.prefill.cycles - bare.prefill.cycles == host_cycles
    assert hosted.prefill.by_class_cycles["host"] == host_cycles
    assert hosted.decode == bare.decode


def test_an_eager_host_binds_a_step_only_when_it_is_slower_than_the_device(tiny):
    """The device runs behind an eager host: a step takes the longer of its device time and
    the host's layer_host x layers, the difference as host time at static power."""
    bare = infer(toy(), tiny, prompt=16, generate=3, runtime=profile())
    device = [s.cycles for s in (bare.prefill, *bare.decode)]
    slow_ns = 1_000_000  # 1 ms a layer: longer than any step of the toy
    slow = infer(toy(), tiny, prompt=16, generate=3, runtime=profile(layer_host_ns=slow_ns))
    issue = math.ceil(slow_ns * TOY["num_hidden_layers"] * tiny.clock_hz / 1e9)
    assert issue > max(device)
    for before, after in zip((bare.prefill, *bare.decode), (slow.prefill, *slow.decode)):
        assert after.cycles == issue
        assert after.by_class_cycles["host"] == issue - before.cycles
        assert after.hbm_bytes == before.hbm_bytes
        static = tiny.energy.static_watts * (issue - before.cycles) / tiny.clock_hz
        assert after.energy["static"] - before.energy["static"] == pytest.approx(static)
    fast = infer(toy(), tiny, prompt=16, generate=3, runtime=profile(layer_host_ns=1))
    assert [s.cycles for s in (fast.prefill, *fast.decode)] == device
    assert load_runtime("eager").to_dict()["layer_host_ns"] == 900_000


@pytest.mark.parametrize("prompt", [1, 16])
def test_a_first_token_from_a_decode_step_waits_for_the_short_prefill_and_that_step(tiny, prompt):
    """An engine that leaves the prompt's last token to its first decode step gives the
    first token after a prefill one token short (none for a one-token prompt) and a decode
    step at the prompt's length; the decode steps after it are the usual ones."""
    decoding = profile(first_token="decode")
    request = infer(toy(), tiny, prompt=prompt, generate=3, runtime=decoding, exact=True)
    usual = infer(toy(), tiny, prompt=prompt, generate=3, runtime=profile(), exact=True)
    chip = profile().on(tiny)
    layers = TOY["num_hidden_layers"]
    steps = [Step("prefill", 1, prompt - 1, prompt - 1)] if prompt > 1 else []
    runs = [
        simulate(step_workload(toy(), chip, s, layers, "auto"))
        for s in [*steps, Step("decode", 1, 1, prompt)]
    ]
    assert request.prefill.cycles == sum(k.cycles for r in runs for k in r.kernels)
    hbm = [k.traffic["HBM"] for r in runs for k in r.kernels]
    assert request.prefill.hbm_bytes == sum(t.read_bytes + t.write_bytes for t in hbm)
    assert request.prefill.energy["static"] > 0
    assert request.decode == usual.decode
    assert "decode step at context" in request.notes[-1]
    assert request.to_dict()["provenance"]["options"]["runtime"]["first_token"] == "decode"


def test_a_runtimes_launch_figures_replace_the_chips(tiny):
    """A stream runtime issues every kernel from the host: a step takes at least its kernels'
    launches; a graph issues the step once, so a large per-kernel cost no longer binds."""
    slow = 200_000  # 200 µs per kernel launch
    stream = profile(graph=False, launch_overhead_ns=slow).on(tiny)
    graph = profile(graph=True, launch_overhead_ns=slow).on(tiny)
    assert stream.launch_overhead_cycles == math.ceil(slow * tiny.clock_hz / 1e9)
    assert stream.kernel_gap == math.ceil(500 * tiny.clock_hz / 1e9)
    assert (stream.graph_launch, graph.graph_launch) == (False, True)
    kernels = {}
    cycles = {}
    for name, hardware in (("stream", stream), ("graph", graph)):
        report = simulate(step_workload(toy(), hardware, Step("decode", 1, 1, 17), 2))
        kernels[name], cycles[name] = len(report.kernels), report.cycles
    assert kernels["stream"] == kernels["graph"] > 1
    assert cycles["stream"] >= launch_bound_cycles(kernels["stream"], stream)
    graphed, streamed = cycles["graph"], cycles["stream"]
    assert graphed < streamed - (kernels["graph"] - 1) * stream.launch_overhead_cycles / 2


def test_a_runtime_file_with_mistakes_names_each_field():
    raw = {
        "name": "bad",
        "launch": "sometimes",
        "launch_overhead": "3us",
        "kernel_gap": "200cycles",
        "step_host": "5s",
        "bogus": 1,
        "figures": "assumption",
    }
    with pytest.raises(ConfigError) as caught:
        parse_runtime(raw, "bad.yaml")
    text = str(caught.value)
    for field in ("about: is required", "launch:", "kernel_gap:", "step_host:", "bogus:"):
        assert field in text, (field, text)
    assert "no clock" in text and "graph or stream" in text


def test_the_cli_runs_a_runtime_and_refuses_an_unknown_one_in_one_line(tmp_path, capsys):
    config = tmp_path / "toy.json"
    config.write_text(json.dumps(TOY))
    request = ["infer", str(config), "--hardware", "tiny", "--prompt", "16", "--generate", "2"]
    assert main([*request, "--runtime", "vllm-v0"]) == 0
    printed = capsys.readouterr().out
    assert "toy on tiny: batch 1, prompt 16, generate 2, fusion auto, fp16 weights, " in printed
    assert "runtime vllm-v0" in printed and "    host " in printed
    assert main([*request, "--runtime", "nope"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no runtime named 'nope' (runtimes: cuda-graphs" in err[0]
    assert main(["figures", "vllm-v0"]) == 0
    assert "step_host        3.8ms         vllm06" in capsys.readouterr().out


def test_a_power_capped_step_counts_its_time_in_the_chips_full_clock(tiny):
    """A step whose run the power cap held to half the clock takes the run's seconds: its
    cycles, counted at the full clock, are the capped run's doubled."""
    energy = replace(
        tiny.energy, cap_watts=tiny.energy.static_watts, cap_clock_hz=tiny.clock_hz / 2
    )
    capped = replace(tiny, energy=energy)  # every run draws more than its static power
    held = infer(toy(), capped, prompt=16, generate=2, exact=True)
    prefill = Step("prefill", 1, 16, 16)
    run = simulate(step_workload(toy(), capped, prefill, TOY["num_hidden_layers"], "auto", "fp16"))
    assert run.clock_ghz * 1e9 == tiny.clock_hz / 2
    assert held.prefill.cycles == pytest.approx(2 * run.cycles)
    free = infer(toy(), tiny, prompt=16, generate=2, exact=True)
    assert free.ttft_us < held.ttft_us <= 2 * free.ttft_us
    assert held.to_dict()["hardware"] == free.to_dict()["hardware"]
