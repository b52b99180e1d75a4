"""Whole-model inference: model configs, the generated layers, the fast path against every
layer simulated, and the physics a request's times must obey."""

import csv
import json
import math

import pytest

from simulator.cli import main
from simulator.config.model import load_model, model_names, parse_model, shard
from simulator.config.transformer import Step, step_workload
from simulator.errors import ConfigError, SimulatorError, TooLargeError
from simulator.pipeline import simulate
from simulator.studies.inference import infer
from simulator.studies.inference_compare import CSV_COLUMNS, parse_compare

# A small dense model with grouped-query attention, quick on the tiny chip.
TOY = {
    "hidden_size": 256,
    "intermediate_size": 512,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "num_hidden_layers": 6,
    "vocab_size": 1024,
    "max_position_embeddings": 512,
}


def toy(**changes):
    return parse_model({**TOY, **changes}, "toy", "<toy>")


# Parameter counts of the released models (their model cards): the shipped configs must
# reproduce them, embeddings and head included.
PUBLISHED_PARAMETERS_B = {
    "llama2-7b": 6.74,
    "llama2-13b": 13.0,
    "llama2-70b": 69.0,
    "mistral-7b": 7.24,
    "qwen2-7b": 7.62,
    "mixtral-8x7b": 46.7,
    "llama3-8b": 8.03,
    "llama3-70b": 70.6,
}


@pytest.mark.parametrize("name", sorted(PUBLISHED_PARAMETERS_B))
def test_shipped_configs_reproduce_the_published_parameter_counts(name):
    model = load_model(name)
    assert model.cited.startswith("https://huggingface.co/")
    assert model.weight_count() / 1e9 == pytest.approx(PUBLISHED_PARAMETERS_B[name], rel=0.01)


def test_every_shipped_config_is_in_the_table_above():
    assert set(model_names()) == set(PUBLISHED_PARAMETERS_B)


def test_a_config_with_mistakes_names_each_field(tmp_path):
    path = tmp_path / "bad.json"
    path.write_text(json.dumps({**TOY, "num_key_value_heads": 3, "hidden_act": "swish"}))
    del_required = {k: v for k, v in TOY.items() if k != "hidden_size"}
    with pytest.raises(ConfigError) as info:
        load_model(str(path))
    text = str(info.value)
    assert "num_key_value_heads: 3 does not divide num_attention_heads 4" in text
    assert "hidden_act: 'swish' is not one of" in text
    path.write_text(json.dumps(del_required))
    with pytest.raises(ConfigError, match="hidden_size: is required"):
        load_model(str(path))
    path.write_text("{not json")
    with pytest.raises(ConfigError, match="not valid JSON"):
        load_model(str(path))
    with pytest.raises(ConfigError, match="no model named 'llama9'"):
        load_model("llama9")
    with pytest.raises(ConfigError, match="--set 'num_heads': not a field"):
        load_model("llama2-7b", [("num_heads", 8)])


def test_a_hugging_face_model_folder_is_read_and_named_after_itself(tmp_path):
    folder = tmp_path / "Toy-7b-hf"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(TOY))
    assert load_model(str(folder)).name == "Toy-7b-hf"
    assert load_model(str(folder / "config.json")).name == "Toy-7b-hf"
    (tmp_path / "toy.json").write_text(json.dumps(TOY))
    assert load_model(str(tmp_path / "toy.json")).name == "toy"
    with pytest.raises(ConfigError, match="a model folder holds config.json"):
        load_model(str(tmp_path))  # a folder without one


def test_an_override_changes_the_model_and_is_blamed_for_its_mistakes():
    assert load_model("llama2-7b", [("num_key_value_heads", 8)]).kv_heads == 8
    with pytest.raises(ConfigError, match="--set num_key_value_heads=5: 5 does not divide"):
        load_model("llama2-7b", [("num_key_value_heads", 5)])


def test_generated_weights_are_the_models_parameters(tiny):
    """The weights the generated layers hold, times the layers, plus the embedding and the
    head, are the config's parameter count at two bytes each."""
    model = toy()
    one = step_workload(model, tiny, Step("decode", 1, 1, 64), 1)
    two = step_workload(model, tiny, Step("decode", 1, 1, 64), 2)

    def weight_bytes(workload):
        return sum(t.nbytes for t in workload.tensors.values() if t.kind == "weight")

    per_layer = weight_bytes(two) - weight_bytes(one)
    outside = weight_bytes(one) - per_layer
    assert per_layer * model.layers + outside == 2 * model.weight_count()


def test_weight_only_int8_keeps_activations_fp16_and_reads_half_the_weights(tiny):
    """w8a16: every projection's weight is int8 and multiplies the fp16 activation directly
    (no quantize op, unlike W8A8's int8), its output scaled per channel; a decode step reads
    its projections' weights in half the bytes of fp16."""
    model, step = toy(), Step("decode", 1, 1, 64)
    built = {w: step_workload(model, tiny, step, 2, "auto", w) for w in ("fp16", "int8", "w8a16")}
    ops = {w: {op.op for op in workload.ops} for w, workload in built.items()}
    assert "quantize" in ops["int8"] and "quantize" not in ops["w8a16"]
    assert "mul" in ops["w8a16"] and "dequantize" not in ops["w8a16"]
    matmuls = [op for op in built["w8a16"].ops if op.op == "matmul"]
    for op in matmuls:
        x, w = (built["w8a16"].tensors[name] for name in op.inputs)
        assert (x.dtype, w.dtype) in (("fp16", "int8"), ("fp16", "fp16"))  # the tied head
    int8 = [o for o in matmuls if built["w8a16"].tensors[o.inputs[1]].dtype == "int8"]
    assert len(int8) >= 7 * 2  # q, k, v, o, gate, up, down in each of the two layers

    def weight_bytes(workload, dtype):
        return sum(
            t.nbytes for t in workload.tensors.values() if t.kind == "weight" and t.dtype == dtype
        )

    assert 2 * weight_bytes(built["w8a16"], "int8") == sum(
        built["fp16"].tensors[o.inputs[1]].nbytes for o in int8
    )


def test_fp8_weights_multiply_fp8_activations_into_fp16_where_the_cube_has_fp8():
    """fp8: each projection quantizes its input to fp8 once, multiplies fp8 by an fp8 weight
    into fp16 and scales the result per channel; its weights take the bytes of int8's. A chip
    without an fp8 mode refuses the request in one line, before anything runs."""
    from simulator import load_hardware

    h100, model, step = load_hardware("h100"), toy(), Step("decode", 1, 1, 64)
    built = {w: step_workload(model, h100, step, 2, "auto", w) for w in ("int8", "fp8")}
    fp8 = built["fp8"]
    matmuls = [op for op in fp8.ops if op.op == "matmul" and op.name != "lm_head"]
    assert len(matmuls) >= 7 * 2
    for op in matmuls:
        x, w = (fp8.tensors[name] for name in op.inputs)
        assert (x.dtype, w.dtype, fp8.tensors[op.output].dtype) == ("fp8", "fp8", "fp16")
    assert {op.op for op in fp8.ops} >= {"quantize", "mul"}

    def weight_bytes(workload):
        return sum(t.nbytes for t in workload.tensors.values() if t.kind == "weight")

    assert weight_bytes(fp8) == weight_bytes(built["int8"])
    with pytest.raises(SimulatorError, match="fp8 weights need a matrix unit with an fp8 mode"):
        infer(model, load_hardware("a100"), prompt=4, generate=1, weights="fp8")


def test_a_narrow_kv_cache_is_written_quantized_and_read_narrow(tiny):
    """An fp8 or int8 KV cache: each layer quantizes its new K and V rows into the cache's
    dtype (at prefill and at decode), decode's attention reads cached K and V of that dtype,
    and the footprint counts the cache at one byte an element."""
    model = toy()
    for cache in ("fp8", "int8"):
        decode = step_workload(model, tiny, Step("decode", 1, 1, 64), 2, "auto", kv_cache=cache)
        prefill = step_workload(model, tiny, Step("prefill", 1, 8, 8), 2, "auto", kv_cache=cache)
        for workload in (decode, prefill):
            quant = [op for op in workload.ops if op.name.endswith(("k_quant", "v_quant"))]
            assert len(quant) == 2 * 2
            assert {workload.tensors[op.output].dtype for op in quant} == {cache}
        cached = [t for t in decode.tensors.values() if t.kind == "cache"]
        assert len(cached) == 2 * 2 and {t.dtype for t in cached} == {cache}
    reports = {c: infer(model, tiny, prompt=8, generate=3, kv_cache=c) for c in ("fp16", "fp8")}
    kv = {c: r.footprint.kv_cache_bytes for c, r in reports.items()}
    assert kv["fp16"] == 2 * kv["fp8"] > 0
    d = reports["fp8"].to_dict()
    assert d["kv_cache"] == "fp8" and d["provenance"]["options"]["kv_cache"] == "fp8"
    assert "fp8 KV cache" in reports["fp8"].summary().splitlines()[0]
    assert "KV cache" not in reports["fp16"].summary().splitlines()[0]
    decode_bytes = {c: r.decode[-1].hbm_bytes for c, r in reports.items()}
    assert decode_bytes["fp8"] < decode_bytes["fp16"]
    with pytest.raises(SimulatorError, match="kv_cache must be one of fp16, fp8, int8"):
        infer(model, tiny, prompt=8, generate=1, kv_cache="fp4")
    with pytest.raises(SystemExit) as refused:
        main(["infer", "llama2-7b", "--kv-cache", "fp4"])
    assert refused.value.code == 2


def test_a_refusal_suggests_a_narrower_cache_only_where_the_cache_weighs(tiny):
    """A request that does not fit is told what would shrink it: int8 weights while they are
    fp16, an fp8 KV cache while the cache is fp16 and a quarter of the need or more."""
    big_cache = {"prompt": 4000, "generate": 4, "batch": 8}
    for model, options, advised, not_advised in (
        ("llama2-7b", big_cache, ["int8 weights", "an fp8 KV cache"], []),
        ("llama2-7b", {**big_cache, "kv_cache": "int8"}, ["int8 weights"], ["an fp8 KV"]),
        ("qwen2-7b", {"prompt": 16, "generate": 4}, ["int8 weights"], ["an fp8 KV"]),
    ):
        with pytest.raises(SimulatorError) as refused:
            infer(load_model(model), tiny, **options)
        advice = str(refused.value).split("; try ")[1]
        assert all(a in advice for a in advised) and not any(a in advice for a in not_advised)


def test_grouped_query_attention_reads_each_key_value_head_once(tiny):
    """Four query heads over two key/value heads: the cache read per layer is the two heads'
    K and V over the context, not four."""
    workload = step_workload(toy(), tiny, Step("decode", 1, 1, 64), 1)
    cache = [t for t in workload.tensors.values() if t.kind == "cache"]
    assert sum(t.nbytes for t in cache) == 2 * 2 * 64 * 64 * 2  # K+V, 2 heads, 64 pos, hd 64


def test_the_fast_path_matches_every_layer_simulated(tiny):
    """Within 0.1% on every figure (the toy's decode steps are interpolated between three
    simulated contexts; its layers repeat exactly from the second on)."""
    fast = infer(toy(), tiny, prompt=32, generate=9).to_dict()
    exact = infer(toy(), tiny, prompt=32, generate=9, exact=True).to_dict()
    assert "simulated at 3 of 8 contexts" in fast["method"]
    assert exact["method"] == "every layer of every step simulated"
    for key in ("ttft_us", "e2e_us", "hbm_bytes_per_token"):
        assert fast[key] == pytest.approx(exact[key], rel=1e-3)
    for key in ("first", "last", "mean"):
        assert fast["tpot_us"][key] == pytest.approx(exact["tpot_us"][key], rel=1e-3)


def test_a_step_proven_from_three_layers_is_the_exact_step_bit_for_bit(tiny):
    """On tiny the toy's third layer begins with the L2 holding what its second began with
    (a layer on), so three layers prove the six: every step's cycles, classes and bytes are
    the exact run's, not only close to them."""
    fast = infer(toy(), tiny, prompt=32, generate=4, decode_points=4)
    exact = infer(toy(), tiny, prompt=32, generate=4, exact=True)
    assert "3 of 6 (the first, the second and the last" in fast.method
    for proven, simulated in zip((fast.prefill, *fast.decode), (exact.prefill, *exact.decode)):
        assert proven.layers_simulated == 3
        assert proven.cycles == simulated.cycles
        assert proven.by_class_cycles == simulated.by_class_cycles
        assert proven.hbm_bytes == simulated.hbm_bytes


@pytest.mark.slow
def test_llama2_7b_proven_from_three_layers_is_its_every_layer_run(ascend):
    """The proof on a real model and chip: LLaMA-2-7B's prefill of 64 tokens and its decode
    step on ascend910, from three layers, are the 32-layer runs' to the cycle and the byte
    (h100 gives the same; about 25 s, most of it the exact run)."""
    model = load_model("llama2-7b")
    fast = infer(model, ascend, prompt=64, generate=2)
    exact = infer(model, ascend, prompt=64, generate=2, exact=True)
    for proven, simulated in zip((fast.prefill, *fast.decode), (exact.prefill, *exact.decode)):
        assert proven.layers_simulated == 3
        assert (proven.cycles, proven.hbm_bytes) == (simulated.cycles, simulated.hbm_bytes)
        assert proven.by_class_cycles == simulated.by_class_cycles


def test_where_the_l2_holds_more_than_a_layer_the_repeat_is_checked_not_proven(ascend):
    """ascend910's L2 holds the whole toy, so its third layer begins with the first two
    layers' bytes where its second began with the embedding's: no proof, and the step falls
    back to four layers whose two middle ones are compared."""
    from simulator.studies.layer_steps import _second_repeats

    workload = step_workload(toy(), ascend, Step("prefill", 1, 32, 32), 3, "auto")
    assert not _second_repeats(simulate(workload))
    report = infer(toy(), ascend, prompt=32, generate=0)
    assert report.prefill.layers_simulated == 4
    assert "4 of 6 (the rest repeat the one before the last" in report.method


@pytest.mark.parametrize("fusion", ["none", "auto"])
def test_a_token_takes_at_least_its_bytes_at_hbm_bandwidth(tiny, fusion):
    """Each decode step reads every weight but the embedding table (a row per token) and
    the KV cache it attends over; the first token waits at least for the prefill's FLOPs at
    the Cube's peak."""
    model = toy()
    report = infer(model, tiny, prompt=32, generate=4, fusion=fusion)
    per_cycle = tiny.memories["HBM"].peak_bytes_per_cycle
    table = model.vocab * model.hidden * 2
    for step in report.decode:
        kv = 2 * model.layers * model.kv_heads * model.head_dim * step.context * 2
        assert step.cycles >= (report.footprint.weight_bytes - table + kv) / per_cycle
    matmul_params = model.weight_count() - model.vocab * model.hidden  # head, not the table
    flops = 2 * matmul_params * 32
    assert report.prefill.cycles >= flops / tiny.peak_flops_per_cycle("fp16")


def test_fusion_moves_fewer_bytes_per_token(tiny):
    unfused = infer(toy(), tiny, prompt=32, generate=3, fusion="none").to_dict()
    fused = infer(toy(), tiny, prompt=32, generate=3, fusion="auto").to_dict()
    assert fused["hbm_bytes_per_token"] <= unfused["hbm_bytes_per_token"]
    assert fused["tpot_us"]["mean"] < unfused["tpot_us"]["mean"]


def test_generate_zero_is_the_prefill_alone(tiny):
    report = infer(toy(), tiny, prompt=16, generate=0)
    assert report.decode == ()
    assert report.e2e_us == report.ttft_us > 0


def test_a_model_too_large_for_the_chip_is_refused_then_runs_on_the_chips_suggested():
    """LLaMA-2-70B needs 138 GB in fp16: one ascend910 (32 GB) refuses it and names the
    fewest chips whose shares fit with 64 heads split evenly (5 would fit the bytes, but 64
    heads do not split over 5, 6 or 7); on that many it runs, every chip holding an eighth."""
    from simulator.config.hardware import load_hardware

    hw, model = load_hardware("ascend910"), load_model("llama2-70b")
    with pytest.raises(SimulatorError) as info:
        infer(model, hw, prompt=16, generate=2)
    text = str(info.value)
    assert "llama2-70b does not fit in ascend910's 32.0 GB of HBM per chip: it needs 138" in text
    assert text.endswith("it fits on 8 chips: --chips 8")
    report = infer(model, hw, prompt=16, generate=2, chips=8)
    assert report.footprint.total_bytes <= report.footprint.hbm_capacity_bytes
    # an eighth of the heads, MLP and LM head; the embedding table and the norms whole
    assert report.footprint.weight_bytes == 2 * shard(model, 8).weight_count()


def test_tensor_parallel_communication_takes_at_least_its_bytes_over_the_link(tiny):
    """Two chips: per layer two all-reduces of the step's activations, each sending
    2(N - 1)/N of them over the link; the report's communication is at least that."""
    model = toy()
    report = infer(model, tiny, prompt=16, generate=3, chips=2)
    for step in (report.prefill, *report.decode):
        activations = (16 if step.phase == "prefill" else 1) * model.hidden * 2
        floor = 2 * model.layers * (2 * 1 / 2) * activations / tiny.link.bytes_per_cycle
        assert step.by_class_cycles["communication"] >= floor
    assert report.to_dict()["breakdown_us"]["decode"]["communication"] > 0


def test_tensor_parallelism_needs_an_even_split_and_a_link(tiny):
    from dataclasses import replace

    with pytest.raises(ConfigError, match="num_attention_heads 4 is not a multiple of 3 chips"):
        infer(toy(), tiny, prompt=16, generate=2, chips=3)
    with pytest.raises(SimulatorError, match="names no link to other chips"):
        infer(toy(), replace(tiny, link=None), prompt=16, generate=2, chips=2)


def test_a_mixture_of_experts_reads_only_its_active_experts_weights(tiny):
    """Eight experts, two per token. At decode one token reaches 2 experts, so a layer
    reads 2 experts' weights; a 16-token prompt reaches all 8 (32 choices). The footprint
    holds all 8 either way."""
    model = toy(num_local_experts=8, num_experts_per_tok=2)
    expert_bytes = 3 * model.hidden * model.intermediate * 2

    def expert_weights(step):
        workload = step_workload(model, tiny, step, 1)
        return sum(
            t.nbytes
            for t in workload.tensors.values()
            if "_experts_" in t.name and t.kind == "weight"
        )

    assert expert_weights(Step("decode", 1, 1, 64)) == 2 * expert_bytes
    assert expert_weights(Step("prefill", 1, 16, 16)) == 8 * expert_bytes
    report = infer(model, tiny, prompt=16, generate=3)
    assert report.footprint.weight_bytes == 2 * model.weight_count()
    assert report.to_dict()["breakdown_us"]["decode"]["gemm"] > 0


@pytest.mark.parametrize("experts, per_token, prompt", [(5, 2, 16), (8, 2, 127), (3, 2, 5)])
def test_any_token_count_routes_and_every_expert_is_counted(tiny, experts, per_token, prompt):
    """Issue 21, class 3: top-k need not divide the experts, nor the tokens split evenly:
    each expert's rows are padded to the most any serves, the footprint and the prefill's
    weight traffic hold every expert, and the report says how the tokens were routed."""
    model = toy(num_local_experts=experts, num_experts_per_tok=per_token)
    workload = step_workload(model, tiny, Step("prefill", 1, prompt, prompt), 1)
    expert_weights = sum(
        t.nbytes for t in workload.tensors.values() if "_experts_" in t.name and t.kind == "weight"
    )
    assert expert_weights == experts * 3 * model.hidden * model.intermediate * 2
    report = infer(model, tiny, prompt=prompt, generate=2)
    assert report.footprint.weight_bytes == 2 * model.weight_count()
    (note,) = report.notes
    choices = prompt * per_token
    assert f"{prompt} tokens x {per_token} choices reach {experts} of {experts}" in note
    if choices % experts:
        assert f"padded to {-(-choices // experts)}" in note


def test_a_context_beyond_the_models_is_refused(tiny):
    with pytest.raises(SimulatorError, match="at most 512 positions"):
        infer(toy(), tiny, prompt=500, generate=20)


def test_the_cli_prints_the_request_and_writes_json(tmp_path, capsys):
    out = tmp_path / "r.json"
    config = tmp_path / "toy.json"
    config.write_text(json.dumps(TOY))
    code = main(
        ["infer", str(config), "--hardware", "tiny", "--prompt", "16", "--generate", "3"]
        + ["--json", str(out)]
    )
    printed = capsys.readouterr().out
    assert code == 0
    assert "toy on tiny: batch 1, prompt 16, generate 3" in printed
    assert "time to first token" in printed and "time per token" in printed
    saved = json.loads(out.read_text())
    assert saved["format"] == "npu-memsim/inference"
    assert math.isclose(saved["e2e_us"], saved["ttft_us"] + 2 * saved["tpot_us"]["mean"])


def test_cli_mistakes_are_one_line_and_exit_2(capsys):
    assert main(["infer", "llama9"]) == 2
    assert "error: llama9: no model named 'llama9'" in capsys.readouterr().err
    assert main(["infer", "llama2-7b", "--set", "num_key_value_heads=7"]) == 2
    assert "does not divide" in capsys.readouterr().err


def test_a_runs_energy_is_its_bytes_macs_vector_work_and_static_power(tiny):
    """On the tiny chip (10 pJ per HBM byte, 1 pJ per fp16 MAC, 10 W static): each part is
    its count at the preset's figure, the kernels' joules add up to the run's, and a chip
    without energy figures reports none."""
    from dataclasses import replace

    from tests.helpers import matmul_workload

    w = matmul_workload(tiny, 64, 64, 256)
    report = simulate(w)
    energy = report.energy
    hbm = report.traffic["HBM"]
    assert energy.by_level_j["HBM"] == pytest.approx((hbm.read_bytes + hbm.write_bytes) * 10e-12)
    assert energy.cube_j == pytest.approx(64 * 64 * 256 * 1e-12)
    assert energy.static_j == pytest.approx(10 * report.cycles / tiny.clock_hz)
    parts = sum(energy.by_level_j.values()) + energy.cube_j + energy.vector_j + energy.static_j
    assert energy.total_j == pytest.approx(parts)
    assert sum(k.energy.total_j for k in report.kernels) == pytest.approx(energy.total_j)
    assert "energy" in report.summary()
    bare = simulate(replace(w, hardware=replace(tiny, energy=None)))
    assert bare.energy is None and bare.to_dict()["energy"] is None
    assert "energy" not in bare.summary().split("traffic")[0]


def test_a_token_costs_at_least_its_bytes_and_macs_at_their_energies(tiny):
    model = toy()
    report = infer(model, tiny, prompt=32, generate=4)
    energy = report.to_dict()["energy_j"]
    per_token = energy["per_token"]
    assert sum(energy["per_token_by_part"].values()) == pytest.approx(per_token)
    assert set(energy["per_token_by_part"]) >= {"HBM", "L2", "Cube", "vector", "static"}
    table = model.vocab * model.hidden * 2
    kv = 2 * model.layers * model.kv_heads * model.head_dim * 33 * 2
    macs = model.weight_count() - model.vocab * model.hidden
    floor = (report.footprint.weight_bytes - table + kv) * 10e-12 + macs * 1e-12
    assert per_token >= floor


def test_energy_units_parse_and_refuse_clearly():
    from simulator.units import UnitError, parse_energy, parse_power

    assert parse_energy("3.9pJ/bit", "B") == pytest.approx(31.2e-12)
    assert parse_energy("0.4pJ/MAC", "MAC") == pytest.approx(0.4e-12)
    assert parse_power("60W") == 60.0
    with pytest.raises(UnitError, match="not an energy per B"):
        parse_energy("0.4pJ/MAC", "B")
    with pytest.raises(UnitError, match="not a power"):
        parse_power("60 J")


def test_the_footprint_holds_no_bytes_a_fused_kernel_keeps_on_chip(tiny):
    """Fused attention's scores and probabilities never reach HBM, so they take no memory;
    unfused, every head's are there, in fp16."""
    model = toy()
    fused = infer(model, tiny, prompt=128, generate=0, fusion="auto").footprint
    unfused = infer(model, tiny, prompt=128, generate=0, fusion="none").footprint
    scores = model.heads * 128 * 128 * 2
    assert unfused.activation_bytes - fused.activation_bytes >= 2 * scores
    assert fused.weight_bytes == unfused.weight_bytes


def test_a_step_too_large_for_one_run_says_what_to_change():
    """A 16000-token prefill of Qwen2-7B on h100 would need more instructions than a run
    holds even one layer at a time: refused at once, naming the options that shrink it."""
    from simulator.config.hardware import load_hardware

    with pytest.raises(TooLargeError, match="1 layer at a time.*use a shorter --prompt"):
        infer(load_model("qwen2-7b"), load_hardware("h100"), prompt=16000, generate=1)


def test_a_step_too_large_for_its_first_layers_is_simulated_from_one(tiny, monkeypatch):
    """Where three layers at once are more than a run holds but one is not, the step is one
    layer and its repeats, and the report says they were not checked. The time is the
    three-layer run's within 2% (the toy's one layer is also its last, which fuses with the
    head; LLaMA-2-7B's 2048-token prefill on ascend910 came within 0.2% of four layers)."""
    import simulator.schedule.attention as attention
    import simulator.schedule.lower as lower

    model = toy()
    whole = infer(model, tiny, prompt=64, generate=0)
    assert whole.prefill.layers_simulated == 3
    for module in (lower, attention):  # one layer of this prefill: 2,412; three: 6,228
        monkeypatch.setattr(module, "MAX_INSTRUCTIONS", 4000)
    one = infer(model, tiny, prompt=64, generate=0)
    assert one.prefill.layers_simulated == 1
    assert "so the rest repeat that one unchecked" in one.method
    assert one.prefill.cycles == pytest.approx(whole.prefill.cycles, rel=0.02)
    with pytest.raises(TooLargeError):
        infer(model, tiny, prompt=64, generate=0, exact=True)


def test_the_decode_line_is_held_to_the_most_a_staircase_can_be_off_it():
    """Between two simulated contexts, a steps apart, rising b − a cycles, the steps' sum lies
    within (b − a)(a_steps − 1)/2 of the line's whatever the staircase in between (attention
    reads the cache in blocks): all of the rise at the first step or at the last."""
    from simulator.studies.inference_report import StepTime, interpolation_error, line_sum

    def step(context, cycles):
        return StepTime("decode", context, cycles, {}, 0.0, 1, None)

    knots = [step(10, 100.0), step(20, 200.0)]
    assert line_sum(knots, lambda s: s.cycles) == 10 * 100 + 100 * 9 / 2 + 200
    bound = interpolation_error(knots) * line_sum(knots, lambda s: s.cycles)
    early = 100 + 9 * 200 + 200  # the whole rise right after the first context
    late = 10 * 100 + 200  # the whole rise at the last
    line = line_sum(knots, lambda s: s.cycles)
    assert bound == pytest.approx(max(early - line, line - late))
    assert interpolation_error([step(10, 100.0), step(11, 120.0)]) is None  # every context


def test_the_stated_decode_bound_covers_the_exact_requests_difference(tiny):
    """Three decode contexts of a toy model on tiny, against every context simulated: the
    bound the report states holds (the steps climb a staircase of 32-position blocks that
    the three points happen to lie straight across)."""
    model = toy(num_hidden_layers=2)
    line = infer(model, tiny, prompt=200, generate=60)
    every = infer(model, tiny, prompt=200, generate=60, exact=True)
    cycles = line.decode_sum(lambda s: s.cycles)
    exact = every.decode_sum(lambda s: s.cycles)
    assert (
        every.interpolation_error is None and every.to_dict()["decode_interpolation_error"] is None
    )
    assert cycles != exact  # the line is not the staircase
    assert abs(cycles - exact) / exact <= line.interpolation_error
    assert f"within {100 * line.interpolation_error:.2g}%" in line.method


def test_compare_runs_a_request_per_value_side_by_side(tmp_path, capsys):
    """Each row is the request run alone; the CSV carries the same rows, the plot is drawn,
    and our CSV is rewritten without --force where a user's is refused."""
    config = tmp_path / "toy.json"
    config.write_text(json.dumps(TOY))
    csv_out, png_out = tmp_path / "r.csv", tmp_path / "r.png"
    base = ["infer", str(config), "--hardware", "tiny", "--prompt", "16", "--generate", "3"]
    request = base + ["--compare", "batch=1,2", "--csv", str(csv_out), "--plot", str(png_out)]
    assert main(request) == 0
    printed = capsys.readouterr().out
    assert (
        "toy on tiny (prompt 16, generate 3, fusion auto, weights fp16, chips 1), by batch"
        in printed
    )
    rows = list(csv.DictReader(csv_out.open()))
    assert [row["batch"] for row in rows] == ["1", "2"]
    assert list(rows[0]) == list(CSV_COLUMNS)
    assert float(rows[0]["speedup"]) == 1.0
    assert png_out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    for batch, row in zip((1, 2), rows):
        assert (
            main(base + ["--batch", str(batch), "--json", str(tmp_path / "one.json"), "--force"])
            == 0
        )
        alone = json.loads((tmp_path / "one.json").read_text())
        assert float(row["ttft_us"]) == alone["ttft_us"]
        assert float(row["e2e_us"]) == alone["e2e_us"]
    assert main(request) == 0  # our files: rewritten
    csv_out.write_text("a,b\n1,2\n")
    capsys.readouterr()
    assert main(request) == 2
    assert "--csv" in capsys.readouterr().err


@pytest.mark.parametrize(
    "compare, problem",
    [
        (["color=red,blue"], "'color' is not a field of a request"),
        (["batch=1,2", "batch=4"], "batch is compared twice"),
        (["batch=1,,2"], "no empty value"),
        (["batch=0,2"], "whole numbers of at least 1"),
        (["generate=-1"], "whole numbers of at least 0"),
        (["weights=fp16,int4"], "weights is one of fp16, int8, w8a16, fp8"),
        (["prompt=1,2,3,4", "batch=1,2,3,4"], "16 requests are more than the 12"),
        (["hardware=h100,h100"], "a value is given twice"),
    ],
)
def test_compare_mistakes_are_one_line_before_anything_runs(compare, problem, capsys):
    argv = ["infer", "llama2-7b"]
    for text in compare:
        argv += ["--compare", text]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert problem in err and len(err.strip().splitlines()) == 1


def test_compare_loads_every_requests_files_before_simulating(capsys, monkeypatch):
    import simulator.studies.inference

    monkeypatch.setattr(simulator.studies.inference, "infer", lambda *a, **k: pytest.fail("ran"))
    assert main(["infer", "llama2-7b", "--compare", "hardware=h100,nochip"]) == 2
    assert "nochip" in capsys.readouterr().err


def test_compare_labels_name_each_field_when_several_combine():
    requests = parse_compare(["hardware=a100,h100", "kv-cache=fp16,fp8"])
    assert [r.label for r in requests] == [
        "hardware=a100, kv_cache=fp16",
        "hardware=a100, kv_cache=fp8",
        "hardware=h100, kv_cache=fp16",
        "hardware=h100, kv_cache=fp8",
    ]
    assert requests[1].changes == {"hardware": "a100", "kv_cache": "fp8"}
