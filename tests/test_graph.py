"""Dataflow graph validation: one test per error class; each message names op, tensor, field."""

import pytest

from simulator.config.workload import parse_workload
from simulator.errors import ConfigError


def problems(tiny, tensors, ops, params=None):
    raw = {
        "name": "t",
        "hardware": "tiny",
        "params": params or {},
        "tensors": {
            name: spec if isinstance(spec, dict) else {"shape": spec}
            for name, spec in tensors.items()
        },
        "ops": ops,
    }
    with pytest.raises(ConfigError) as info:
        parse_workload(raw, "g.yaml", tiny)
    return info.value.problems


def op(name, kind, inputs, output, **attrs):
    return {
        "name": name,
        "op": kind,
        "inputs": inputs,
        "output": output,
        **({"attrs": attrs} if attrs else {}),
    }


def test_cycle(tiny):
    [p] = problems(
        tiny, {"x": [16, 16]}, [op("a", "add", ["x", "c"], "b"), op("r", "relu", ["b"], "c")]
    )
    assert p.startswith("ops[0] (a)") and "form a cycle" in p and "a → r → a" in p
    assert "b, c" in p


def test_input_nobody_produces(tiny):
    [p] = problems(tiny, {"x": [16, 16]}, [op("r", "relu", ["y"], "z")])
    assert p.startswith("ops[0] (r).inputs") and "'y' is neither declared" in p


def test_tensor_produced_twice(tiny):
    [p] = problems(
        tiny, {"x": [16, 16]}, [op("a", "relu", ["x"], "y"), op("b", "gelu", ["x"], "y")]
    )
    assert p.startswith("ops[1] (b).output") and "already produced by op 'a'" in p


def test_output_that_is_a_declared_input(tiny):
    [p] = problems(tiny, {"x": [16, 16]}, [op("a", "relu", ["x"], "x")])
    assert p.startswith("ops[0] (a).output") and "'x' is declared under tensors" in p


def test_matmul_inner_dimensions(tiny):
    [p] = problems(tiny, {"a": [4, 8], "b": [16, 4]}, [op("mm", "matmul", ["a", "b"], "c")])
    assert p.startswith("ops[0] (mm).inputs") and "inner dimensions differ" in p
    assert "a [4, 8] has K=8" in p and "b [16, 4] has K=16" in p


def test_batch_dims_must_match(tiny):
    [p] = problems(
        tiny, {"a": [2, 4, 8], "b": [3, 8, 4]}, [op("bmm", "batch_matmul", ["a", "b"], "c")]
    )
    assert "batch dims differ" in p and "ops[0] (bmm)" in p


def test_bias_must_match_the_last_dim(tiny):
    [p] = problems(tiny, {"x": [4, 8], "b": [4]}, [op("ba", "bias_add", ["x", "b"], "y")])
    assert p.startswith("ops[0] (ba).inputs") and "bias b must be 1-D with 8 elements" in p


def test_residual_must_broadcast(tiny):
    [p] = problems(tiny, {"x": [4, 8], "r": [2, 8]}, [op("add", "add", ["x", "r"], "y")])
    assert "r [2, 8] does not broadcast to x [4, 8]" in p


@pytest.mark.parametrize(
    "dtypes, message",
    [
        (("int8", "fp16"), "x is int8 but w is fp16"),  # fp16 by int8 weights is weight-only
        (("fp32", "fp32"), "the Cube has no fp32 mode"),
    ],
)
def test_unsupported_matmul_dtypes(tiny, dtypes, message):
    [p] = problems(
        tiny,
        {
            "x": {"shape": [16, 16], "dtype": dtypes[0]},
            "w": {"shape": [16, 16], "dtype": dtypes[1]},
        },
        [op("mm", "matmul", ["x", "w"], "y")],
    )
    assert message in p and p.startswith("ops[0] (mm).inputs")


def test_elementwise_dtypes_must_agree(tiny):
    [p] = problems(
        tiny,
        {"x": {"shape": [4, 8]}, "y": {"shape": [4, 8], "dtype": "fp32"}},
        [op("a", "add", ["x", "y"], "z")],
    )
    assert "add of fp16 x and fp32 y" in p


def test_vector_op_on_integers(tiny):
    [p] = problems(tiny, {"x": {"shape": [4, 8], "dtype": "int8"}}, [op("g", "gelu", ["x"], "y")])
    assert "gelu takes floating-point input, x is int8" in p


def test_norm_weight_shape(tiny):
    [p] = problems(tiny, {"x": [4, 8], "g": [4]}, [op("n", "rmsnorm", ["x", "g"], "y")])
    assert "rmsnorm weight g must be [8]" in p


def test_dequantize_needs_integers(tiny):
    [p] = problems(tiny, {"x": [4, 8], "s": [8]}, [op("d", "dequantize", ["x", "s"], "y")])
    assert "dequantize takes int8, fp8 or int32 input, x is fp16" in p


def test_reshape_must_keep_the_element_count(tiny):
    [p] = problems(tiny, {"x": [4, 8]}, [op("r", "reshape", ["x"], "y", shape=[3, 8])])
    assert "reshape of x [4, 8] (32 elements) to [3, 8] (24 elements)" in p


@pytest.mark.parametrize(
    "attrs, message",
    [
        ({"transpose": True}, "matmul has no attribute 'transpose'"),
        ({"transpose_b": "yes"}, "attribute transpose_b: expected true or false"),
    ],
)
def test_bad_attributes(tiny, attrs, message):
    [p] = problems(tiny, {"a": [4, 8], "b": [8, 4]}, [op("mm", "matmul", ["a", "b"], "c", **attrs)])
    assert p.startswith("ops[0] (mm).attrs") and message in p


def test_cast_needs_a_target(tiny):
    [p] = problems(tiny, {"x": [4, 8]}, [op("c", "cast", ["x"], "y")])
    assert "cast needs the attribute 'to'" in p


def test_wrong_arity(tiny):
    [p] = problems(tiny, {"x": [4, 8]}, [op("a", "add", ["x"], "y")])
    assert p == "ops[0] (a).inputs: add takes 2 inputs, got 1"


def test_one_mistake_is_reported_once(tiny):
    """Everything downstream of a broken op is skipped, not blamed."""
    ps = problems(
        tiny,
        {"x": [4, 8]},
        [op("a", "add", ["x"], "y"), op("r", "relu", ["y"], "z"), op("g", "gelu", ["z"], "w")],
    )
    assert len(ps) == 1


def test_ops_may_be_listed_in_any_order(tiny):
    raw = {
        "name": "t",
        "hardware": "tiny",
        "tensors": {"x": {"shape": [16, 16]}},
        "ops": [op("g", "gelu", ["y"], "z"), op("r", "relu", ["x"], "y")],
    }
    w = parse_workload(raw, "g.yaml", tiny)
    assert [o.name for o in w.ops] == ["r", "g"]
    assert w.tensors["z"].shape == (16, 16)


def test_transposed_batch_matmul_shapes(tiny):
    raw = {
        "name": "t",
        "hardware": "tiny",
        "tensors": {"q": {"shape": [4, 1, 32]}, "k": {"shape": [4, 64, 32]}},
        "ops": [op("qk", "batch_matmul", ["q", "k"], "s", transpose_b=True)],
    }
    w = parse_workload(raw, "g.yaml", tiny)
    assert w.tensors["s"].shape == (4, 1, 64)


def test_int8_matmul_accumulates_in_int32(tiny):
    raw = {
        "name": "t",
        "hardware": "tiny",
        "tensors": {
            "x": {"shape": [16, 32], "dtype": "int8"},
            "w": {"shape": [32, 16], "dtype": "int8"},
        },
        "ops": [op("mm", "matmul", ["x", "w"], "y")],
    }
    assert parse_workload(raw, "g.yaml", tiny).tensors["y"].dtype == "int32"


def test_fp8_quantizes_and_multiplies_where_the_cube_has_an_fp8_mode(tiny):
    """fp8 (e4m3, one byte) is what quantize may produce and a Cube with an fp8 fractal
    multiplies, into bf16; a chip without one refuses the matmul by name."""
    from simulator import load_hardware

    def workload(hw):
        raw = {
            "name": "t",
            "hardware": hw.name,
            "tensors": {"x": {"shape": [16, 32]}, "w": {"shape": [32, 16], "dtype": "fp8"}},
            "ops": [
                op("q", "quantize", ["x"], "xq", to="fp8"),
                op("mm", "matmul", ["xq", "w"], "y"),
            ],
        }
        return parse_workload(raw, "g.yaml", hw)

    tensors = workload(load_hardware("h100")).tensors
    assert (tensors["xq"].dtype, tensors["y"].dtype) == ("fp8", "bf16")
    with pytest.raises(ConfigError, match="the Cube of tiny has no fp8 mode"):
        workload(tiny)
