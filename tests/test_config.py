"""Loaders: strict YAML, every problem with its field path, overrides, shape expressions."""

import pytest

from simulator import load_hardware, load_workload
from simulator.config.expressions import evaluate
from simulator.config.hardware import parse_hardware
from simulator.config.strict import read_yaml
from simulator.errors import ConfigError

from .helpers import matmul_workload


def write(tmp_path, text, name="w.yaml"):
    path = tmp_path / name
    path.write_text(text)
    return path


def problems_of(fn, *args, **kwargs):
    with pytest.raises(ConfigError) as info:
        fn(*args, **kwargs)
    return info.value.problems


def test_presets_load_with_cited_numbers():
    hw = load_hardware("ascend910")
    assert hw.cores == 32 and hw.clock_hz == 1e9
    assert hw.buffer_bytes == {
        "L1": 1 << 20,
        "L0A": 64 << 10,
        "L0B": 64 << 10,
        "L0C": 256 << 10,
        "UB": 256 << 10,
    }
    assert hw.cube.fractal["fp16"] == (16, 16, 16) and hw.cube.fractal["int8"] == (16, 16, 32)
    assert hw.memories["HBM"].peak_bytes_per_cycle == pytest.approx(1200)
    assert hw.peak_flops_per_cycle("fp16") * hw.clock_hz == pytest.approx(262.144e12)
    assert load_hardware("tiny").cores == 2
    a100 = load_hardware("a100")  # 108 SMs x 1.41 GHz x 2 x 1024 MACs: the 312 TFLOPS
    assert a100.peak_flops_per_cycle("fp16") * a100.clock_hz == pytest.approx(311.87e12, 1e-4)
    assert a100.memories["HBM"].peak_bytes_per_cycle * a100.clock_hz == pytest.approx(2.039e12)
    b3 = load_hardware("ascend910b")  # Ascend910B3.ini: 20 cube cores x 4096 MACs at 1.8 GHz
    assert b3.cores == 20 and b3.buffer_bytes["L0C"] == 128 << 10
    assert b3.peak_flops_per_cycle("fp16") * b3.clock_hz == pytest.approx(294.912e12)


def test_duplicate_keys_are_errors(tmp_path):
    path = write(tmp_path, "name: a\nname: b\n")
    [problem] = problems_of(read_yaml, path)
    assert "duplicate key 'name'" in problem and "line 2" in problem


def test_malformed_yaml_names_line(tmp_path):
    path = write(tmp_path, "name: [unclosed\n")
    [problem] = problems_of(read_yaml, path)
    assert "malformed YAML" in problem and "line" in problem


def test_top_level_must_be_mapping(tmp_path):
    [problem] = problems_of(read_yaml, write(tmp_path, "- a\n- b\n"))
    assert "mapping" in problem


def test_hardware_reports_every_problem_with_path(tiny):
    raw = read_yaml(tiny.source)
    raw["HBM"]["bandwith"] = raw["HBM"].pop("bandwidth")
    raw["L1"]["capacity"] = "64KX"
    raw["cores"] = 0
    raw["MTE2"]["paths"]["HBM->L9"] = "1B/cycle"
    problems = problems_of(parse_hardware, raw, "hw.yaml")
    text = "\n".join(problems)
    assert "HBM.bandwidth: is required" in text
    assert "HBM.bandwith: unknown field" in text
    assert "L1.capacity: '64KX' is not a size" in text
    assert "cores: 0 is below the minimum of 1" in text
    assert "MTE2.paths.HBM->L9" in text


def test_hardware_override_and_unknown_override():
    hw = load_hardware("tiny", [("HBM.bandwidth", "128B/cycle")])
    assert hw.memories["HBM"].peak_bytes_per_cycle == 128
    problems = problems_of(load_hardware, "tiny", [("HBM.bandwith", "1B/cycle")])
    assert problems == [
        "--set hardware.HBM.bandwith=1B/cycle: unknown field (known fields: "
        "bandwidth, capacity, efficiency, latency)"
    ]


def test_unknown_preset_lists_presets():
    [problem] = problems_of(load_hardware, "ascend9999")
    assert "ascend910" in problem and "tiny" in problem


def test_workload_overrides_reach_params_and_hardware():
    w = load_workload(
        "workloads/ffn_decode.yaml", ["params.tokens=64", "hardware.HBM.bandwidth=2.4TB/s"]
    )
    assert w.tensors["x"].shape == (64, 4096)
    assert w.hardware.memories["HBM"].peak_bytes_per_cycle == pytest.approx(2400)
    assert ("params.tokens", 64) in w.overrides


def test_override_of_missing_param_is_refused():
    [problem] = problems_of(load_workload, "workloads/ffn_decode.yaml", ["params.tokenz=3"])
    assert "no param 'tokenz'" in problem


def test_override_of_unknown_field_is_refused():
    problems = problems_of(
        load_workload, "workloads/ffn_decode.yaml", ["schedule.tilling.default.base.m=16"]
    )
    assert any("schedule.tilling: unknown field" in p for p in problems)


def test_bad_override_syntax():
    problems = problems_of(load_workload, "workloads/ffn_decode.yaml", ["params.tokens"])
    assert "PATH=VALUE" in problems[0]


@pytest.mark.parametrize(
    "expr, value",
    [("tokens * 4", 8), ("(hidden + 2) / 2", 3), ("hidden - 1", 3), (7, 7), ("-tokens + 5", 3)],
)
def test_shape_expressions(expr, value):
    assert evaluate(expr, {"tokens": 2, "hidden": 4}) == value


@pytest.mark.parametrize(
    "expr, message",
    [
        ("hidden / 3", "not a whole number"),
        ("hidden / (tokens - 2)", "division by zero"),
        ("nope * 2", "unknown param 'nope'"),
        ("__import__('os')", "only integers"),
        ("2 ** 8", "only integers"),
        ("hidden +", "not a valid expression"),
        ("1.5", "only integers"),
    ],
)
def test_bad_shape_expressions(expr, message):
    with pytest.raises(ValueError, match=message):
        evaluate(expr, {"tokens": 2, "hidden": 4})


def test_workload_problems_are_collected_with_paths(tmp_path):
    path = write(
        tmp_path,
        """
name: x
hardware: tiny
params: {t: 1, h: 64}
tensors:
  x: {shape: [t, h], dtyp: fp16}
  w: {shape: [h, h / 3], kind: weight}
  v: {shape: [h, h], kind: wieght}
ops:
  - {name: mm, op: matmul, inputs: [x, v], output: y}
  - {name: mm2, op: conv, inputs: [y, v], output: z}
  - {name: mm3, op: matmul, inputs: [y, nope], output: q}
""",
    )
    text = "\n".join(problems_of(load_workload, path))
    assert "tensors.x.dtyp: unknown field" in text
    assert "tensors.w.shape: 'h / 3': 64 / 3 is not a whole number" in text
    assert "tensors.v.kind: 'wieght' is not one of" in text
    assert "ops[1].op: 'conv' is not one of" in text
    assert "ops[2] (mm3).inputs: tensor 'nope'" in text
    # a broken tensor is reported once, not again by every op that uses it
    assert "ops[0]" not in text


def test_matmul_inner_dimension_mismatch(tiny):
    raw_error = problems_of(lambda: load_workload_from(tiny, {"a": [4, 8], "b": [16, 4]}))
    assert "inner dimensions differ" in raw_error[0] and "ops[0] (mm).inputs" in raw_error[0]


def load_workload_from(hw, shapes):
    from simulator.config.workload import parse_workload

    raw = {
        "name": "t",
        "hardware": "tiny",
        "tensors": {name: {"shape": shape} for name, shape in shapes.items()},
        "ops": [{"name": "mm", "op": "matmul", "inputs": ["a", "b"], "output": "c"}],
    }
    return parse_workload(raw, "t.yaml", hw)


@pytest.mark.parametrize(
    "fusion, message",
    [
        ("sometimes", "is not one of: auto, none, or a list"),
        ([["r", "nope"]], "no op named 'nope'"),
        ([["r"], ["r"]], "op 'r' is in two groups"),
    ],
)
def test_fusion_setting_is_validated(tiny, fusion, message):
    from simulator.config.workload import parse_workload

    raw = {
        "name": "t",
        "hardware": "tiny",
        "tensors": {"a": {"shape": [16, 16]}},
        "ops": [{"name": "r", "op": "relu", "inputs": ["a"], "output": "b"}],
        "schedule": {"fusion": fusion},
    }
    [problem] = problems_of(parse_workload, raw, "t.yaml", tiny)
    assert problem.startswith("schedule.fusion") and message in problem


def test_output_shapes_are_inferred(tiny):
    w = matmul_workload(
        tiny,
        32,
        48,
        64,
        extra_ops=[{"name": "b", "op": "bias_add", "inputs": ["c", "bias"], "output": "d"}],
    )
    assert w.tensors["c"].shape == (32, 48) and w.tensors["d"].shape == (32, 48)
    assert w.tensors["c"].kind == "intermediate"
