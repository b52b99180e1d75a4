"""Requests drawn across the whole space a user can ask for (issue 21): every preset, every
family of model we ship (dense multi-head, grouped-query, mixtures of experts whose top-k
need not divide the experts), hidden sizes from 64 to 8192 with few layers, batch 1-300,
prompts from 1 to the model's context, generations from none to hundreds, tensor
parallelism, int8 weights, fp16, fp8 and int8 KV caches and both fusion modes.

Every draw either completes with figures physics allows (a time never below the work's
FLOPs at peak and its weight bytes at peak bandwidth, a footprint that holds the weights and
the KV cache, energy finite and positive, no NaN anywhere) or is refused with one line that
says why. A crash of any other kind fails the draw.

The default suite runs DRAWS draws in GROUPS groups (derandomized: CI sees the same ones
every run); the soak run, marked slow and skipped unless asked for (an hour or two on 2
cores), draws MANY_DRAWS at random with a larger budget:

    python -m pytest --soak tests/test_drawn_requests.py
"""

from __future__ import annotations

import json
import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from simulator.config.hardware import load_hardware, preset_names
from simulator.config.model import kv_cache_bytes, parse_model, shard
from simulator.errors import SimulatorError
from simulator.ops import DTYPE_BYTES
from simulator.studies.inference import infer

DRAWS = 300
GROUPS = 6  # the draws are split in groups, which the suite's workers share out
MANY_DRAWS = 2_000
BUDGET = 1e9  # see work()
MANY_BUDGET = 1e10
PRESETS = {name: load_hardware(name) for name in preset_names()}
WEIGHT_BYTES = {"fp16": 2, "int8": 1}
WIDTHS = [64] * 16 + [128] * 14 + [256] * 12 + [512] * 8 + [1024] * 5 + [2048] * 3 + [4096, 8192]


def _sized(draw, low: int, high: int) -> int:
    """An integer in [low, high], small values as likely as large ones on a log scale."""
    if high <= low:
        return low
    exponent = draw(st.floats(math.log(low), math.log(high + 1)))
    return max(low, min(high, int(math.exp(exponent))))


def work(config: dict, batch: int, prompt: int, fusion: str = "auto") -> float:
    """About how much simulating a request costs, in weight-element x token units: each
    layer's weights times the tokens of its four simulated steps (at least a Cube fractal's
    16 rows each), its attention's score elements x head size, and a share for each
    (sequence, key/value head) unit of attention, whose many small blocks cost more than
    their size. Draws are kept under a budget of these, so that the suite stays quick."""
    hidden, inter = config["hidden_size"], config["intermediate_size"]
    experts = min(config.get("num_local_experts", 1), batch * prompt)
    layer = 4 * hidden * hidden + 3 * hidden * inter * experts
    tokens = max(16, batch * prompt) + 3 * max(16, batch)
    scores = batch * config["num_attention_heads"] * (prompt * prompt + 3 * 2 * prompt)
    units = 4 * batch * config.get("num_key_value_heads", config["num_attention_heads"])
    head_dim = hidden // config["num_attention_heads"]
    unfused = 4 if fusion == "none" else 1  # about as many kernels again, each on every core
    return (
        unfused * config["num_hidden_layers"] * (layer * tokens + scores * head_dim + units * 1e6)
    )


@st.composite
def requests(draw, budget: float):
    family = draw(st.sampled_from(["mha", "gqa", "moe"]))
    # 64 to 8192, the wide ones rarer: they cost seconds a draw even at one token, the
    # narrow ones milliseconds
    hidden = draw(st.sampled_from(WIDTHS))
    head_dim = draw(st.sampled_from([d for d in (32, 64, 128) if d <= hidden]))
    heads = hidden // head_dim
    divisors = [d for d in range(1, heads + 1) if heads % d == 0]
    kv_heads = heads if family == "mha" else draw(st.sampled_from(divisors))
    context = draw(st.sampled_from([16, 128, 512, 2048, 4096]))
    config = {
        "hidden_size": hidden,
        "intermediate_size": hidden * draw(st.sampled_from([1, 2, 3, 4])),
        "num_attention_heads": heads,
        "num_key_value_heads": kv_heads,
        "num_hidden_layers": draw(st.integers(1, 3)),
        "vocab_size": draw(st.sampled_from([100, 1000, 32000])),
        "max_position_embeddings": context,
        "hidden_act": draw(st.sampled_from(["silu", "gelu"])),
        "tie_word_embeddings": draw(st.booleans()),
    }
    if family == "moe":
        experts = draw(st.integers(2, 8))
        config["num_local_experts"] = experts
        config["num_experts_per_tok"] = draw(st.integers(1, min(3, experts)))
    fusion = draw(st.sampled_from(["auto", "none"]))
    # the layers, the prompt and then the batch as drawn, each cut to what the budget leaves
    while config["num_hidden_layers"] > 1 and work(config, 1, 1, fusion) > budget:
        config["num_hidden_layers"] -= 1
    prompt = _sized(draw, 1, context)
    while prompt > 1 and work(config, 1, prompt, fusion) > budget:
        prompt //= 2
    batch = _sized(draw, 1, 300)
    while batch > 1 and work(config, batch, prompt, fusion) > budget:
        batch //= 2
    options = {
        "batch": batch,
        "prompt": prompt,
        "generate": draw(st.integers(0, min(300, context - prompt))),
        "fusion": fusion,
        "weights": draw(st.sampled_from(["fp16", "int8"])),
        "kv_cache": draw(st.sampled_from(["fp16", "fp16", "fp8", "int8"])),
        "chips": draw(st.sampled_from([1, 1, 2, 4, 8])),
    }
    return config, draw(st.sampled_from(sorted(PRESETS))), options


def _finite(value) -> bool:
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, dict):
        return all(_finite(v) for v in value.values())
    if isinstance(value, list):
        return all(_finite(v) for v in value)
    return True


def _weights(model, tokens: int) -> tuple[float, float]:
    """(bytes, FLOPs per token) of one chip's weights that a step of `tokens` tokens reads:
    every layer's projections and MLP (its active experts), and the LM head."""
    attention = model.hidden * model.head_dim * (2 * model.heads + 2 * model.kv_heads)
    expert = (3 if model.gated else 2) * model.hidden * model.intermediate
    active = min(model.experts, tokens * model.experts_per_token)
    per_layer_bytes = attention + expert * active
    per_layer_flops = attention + expert * model.experts_per_token
    head = model.hidden * model.head_vocab
    return model.layers * per_layer_bytes + head, model.layers * per_layer_flops


def check_request(config: dict, chip: str, options: dict) -> None:
    hw = PRESETS[chip]
    model = parse_model(config, "drawn", "<drawn>")
    try:
        report = infer(model, hw, **options)
    except SimulatorError as exc:
        lines = str(exc).splitlines()
        assert len(lines) == 1 and lines[0].strip(), f"a refusal of {len(lines)} lines: {exc}"
        return
    d = report.to_dict()
    json.dumps(d, allow_nan=False)
    assert _finite(d), "a figure is not finite"
    part = shard(model, options["chips"])
    batch, prompt = options["batch"], options["prompt"]
    element = WEIGHT_BYTES[options["weights"]]
    dtype = "int8" if options["weights"] == "int8" else "fp16"
    peak_flops_s = hw.peak_flops_per_cycle(dtype) * hw.clock_hz
    peak_bytes_s = hw.memories["HBM"].peak_bytes_per_cycle * hw.clock_hz
    weight_count, flops_per_token = _weights(part, batch * prompt)
    prefill_s = max(
        2 * flops_per_token * batch * prompt / peak_flops_s, weight_count * element / peak_bytes_s
    )
    assert d["ttft_us"] * 1e-6 >= prefill_s * (1 - 1e-9)
    if d["tpot_us"] is not None:
        decode_weights, _ = _weights(part, batch)
        assert d["tpot_us"]["mean"] * 1e-6 >= decode_weights * element / peak_bytes_s * (1 - 1e-9)
        assert d["tokens_per_s"] > 0
    else:
        assert options["generate"] <= 1 and "tpot_us" in d["undefined"]
    footprint = d["memory_footprint"]
    kv_bytes = DTYPE_BYTES[options["kv_cache"]]
    kv = kv_cache_bytes(part, batch * (prompt + options["generate"]), kv_bytes)
    assert footprint["total_bytes"] >= footprint["weight_bytes"] + kv
    assert footprint["total_bytes"] <= footprint["hbm_capacity_bytes"]
    energy = d["energy_j"]
    assert energy is None or energy["prefill"] > 0
    if energy is not None and energy["per_token"] is not None:
        assert energy["per_token"] > 0


def drawn(examples: int, **options):
    """Hypothesis settings for draws that take their time (a whole request each)."""
    return settings(
        max_examples=examples,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
        **options,
    )


@pytest.mark.slow
@pytest.mark.parametrize("group", range(GROUPS))  # each its own draws (Hypothesis seeds by id)
@drawn(DRAWS // GROUPS, derandomize=True)
@given(request=requests(BUDGET))
def test_a_drawn_request_runs_with_physical_figures_or_is_refused_in_one_line(group, request):
    check_request(*request)


@pytest.mark.slow
@pytest.mark.soak
@drawn(MANY_DRAWS)
@given(requests(MANY_BUDGET))
def test_many_drawn_requests(request):
    check_request(*request)
