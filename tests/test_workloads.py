"""Every workload in workloads/ runs, and the scenarios teach what their comments say."""

import re
from pathlib import Path

import pytest

from simulator import load_workload, simulate

from .test_cli import run_cli

WORKLOADS = sorted((Path(__file__).resolve().parents[1] / "workloads").glob("*.yaml"))
LONG = ("ffn_prefill", "ffn_llama13b")  # seconds each on two cores: CI runs them, -m "not slow" not


@pytest.fixture(scope="module")
def reports():
    cache = {}

    def get(name, *overrides):
        key = (name, overrides)
        if key not in cache:
            cache[key] = simulate(load_workload(f"workloads/{name}.yaml", list(overrides)))
        return cache[key].to_dict()

    return get


@pytest.mark.parametrize(
    "path",
    [pytest.param(p, marks=pytest.mark.slow) if p.stem in LONG else p for p in WORKLOADS],
    ids=lambda p: p.stem,
)
def test_every_workload_runs_and_respects_the_roofline(path, reports):
    report = reports(path.stem)
    assert report["cycles"] >= report["roofline"]["bound_cycles"]
    for kernel in report["kernels"]:  # a kernel fed from L2 may beat its HBM roofline, not this
        assert kernel["cycles"] >= kernel["floor_cycles"], kernel["name"]
    assert report["bound"] in ("compute", "memory", "latency")
    first_line = path.read_text().splitlines()[0]
    assert first_line.startswith("# "), "each workload says what it teaches"


def test_plan_of_the_decode_layer_lists_kernels_and_reasons():
    result = run_cli("plan", "workloads/llama7b_decode_layer.yaml")
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "in 9 kernels" in out
    assert re.search(r"qk\+smx\+pv +fused attention", out)
    assert re.search(r"gate\+up\+act\+glu +dual GEMM", out)
    assert "o_proj+attn_resid" in out and "down+ffn_resid" in out
    assert "ffn_norm: its input h1 is also read by ffn_resid" in out
    assert "q_heads: a reshape is a view of q in HBM" in out


def test_int8_weights_halve_decode_time(reports):
    fp16 = reports("ffn_decode", "schedule.fusion=auto")
    int8 = reports("ffn_decode_int8")
    assert 0.5 <= int8["time_us"] / fp16["time_us"] <= 0.6
    weights = {name: t for name, t in int8["tensors"].items() if t["role"] == "weight"}
    assert sum(t["bytes"] for t in weights.values()) < 0.51 * 3 * 4096 * 11008 * 2
    assert int8["bound"] == "memory"


def test_attention_decode_is_bound_by_the_kv_cache(reports):
    report = reports("attention_decode")
    assert report["bound"] == "memory"
    cache = {n: t for n, t in report["tensors"].items() if t["role"] == "cache"}
    assert set(cache) == {"k_cache", "v_cache"}
    cache_bytes = 2 * 32 * 4096 * 128 * 2
    assert sum(t["hbm_read_bytes"] for t in cache.values()) == cache_bytes
    assert cache_bytes >= 0.95 * report["traffic"]["HBM"]["read_bytes"]


def test_compare_prints_the_fused_and_unfused_table(tmp_path):
    out = tmp_path / "cmp.json"
    result = run_cli("compare", "workloads/linear_gelu.yaml", "--json", str(out))
    assert result.returncode == 0, result.stderr
    assert "fusion=none" in result.stdout and "fusion=auto" in result.stdout
    assert "speedup vs first" in result.stdout and "absorbed by L2" in result.stdout
    import json

    data = json.loads(out.read_text())
    assert [v["label"] for v in data["variants"]] == ["fusion=none", "fusion=auto"]
    assert data["speedups"][1] > 1.0


def test_compare_variant_axes_from_repeated_sets():
    from simulator.cli import variants_from

    variants, common = variants_from(
        ["params.tokens=8", "schedule.fusion=none", "schedule.fusion=auto"], []
    )
    assert common == ["params.tokens=8"]
    assert variants == [
        ("fusion=none", ["schedule.fusion=none"]),
        ("fusion=auto", ["schedule.fusion=auto"]),
    ]


def test_each_kernel_of_the_decode_layer_says_what_binds_it(reports):
    """Every projection streams its weights (HBM binds); a norm moves a few KB and waits on
    fixed costs (latency)."""
    kernels = {k["name"]: k for k in reports("llama7b_decode_layer")["kernels"]}
    for name in ("q_proj", "k_proj", "v_proj", "gate+up+act+glu", "down+ffn_resid"):
        assert (kernels[name]["bound"], kernels[name]["binding"]) == ("memory", "hbm"), name
    for name in ("attn_norm", "ffn_norm"):
        assert kernels[name]["bound"] == "latency", name
