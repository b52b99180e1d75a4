"""A catalogue of hostile inputs: each is refused with one clear line (file, field path,
rule, offending value) and exit code 2, never a traceback."""

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from simulator.cli import main

BASE = """name: t
hardware: tiny
params: {m: 32, n: 64, k: 64}
tensors:
  a: {shape: [m, k]}
  b: {shape: [k, n], kind: weight}
ops:
  - {name: mm, op: matmul, inputs: [a, b], output: c}
"""

HW = (
    __import__("pathlib").Path(__file__).resolve().parents[1] / "hw_models" / "tiny.yaml"
).read_text()


def edit(old, new, text=BASE):
    assert old in text, old
    return text.replace(old, new)


def op_line(line):
    return BASE + f"  - {line}\n"


# (case id, workload text, extra CLI args, fragment the one-line error must contain)
CASES = [
    ("malformed-yaml", "name: [unclosed\n", [], "malformed YAML"),
    ("tab-indent", "name: t\n\thardware: tiny\n", [], "malformed YAML"),
    ("duplicate-top-key", BASE + "name: again\n", [], "duplicate key 'name'"),
    ("duplicate-tensor", edit("  b:", "  a: {shape: [m]}\n  b:"), [], "duplicate key 'a'"),
    ("unknown-top-field", BASE + "colour: red\n", [], "colour: unknown field"),
    ("missing-name", edit("name: t\n", ""), [], "name: is required"),
    ("missing-ops", BASE.split("ops:")[0], [], "ops: is required"),
    ("empty-ops", BASE.split("ops:")[0] + "ops: []\n", [], "non-empty list of ops"),
    ("ops-not-list", BASE.split("ops:")[0] + "ops: matmul\n", [], "non-empty list of ops"),
    ("top-level-list", "- a\n- b\n", [], "must be a mapping"),
    ("empty-file", "", [], "mapping of fields, got nothing"),
    ("param-negative", edit("m: 32", "m: -32"), [], "params.m: must be a positive integer"),
    ("param-zero", edit("m: 32", "m: 0"), [], "params.m: must be a positive integer"),
    ("param-float", edit("m: 32", "m: 3.5"), [], "got a number 3.5"),
    ("param-string", edit("m: 32", "m: lots"), [], "got a string 'lots'"),
    ("param-name", edit("m: 32,", "m: 32, 2x: 4,"), [], "a param name must be an identifier"),
    ("shape-inexact-division", edit("[m, k]", "[m / 3, k]"), [], "32 / 3 is not a whole"),
    ("shape-division-by-zero", edit("[m, k]", "[m / (k - k), k]"), [], "division by zero"),
    ("shape-unknown-param", edit("[m, k]", "[rows, k]"), [], "unknown param 'rows'"),
    (
        "shape-injection",
        edit("[m, k]", "[\"__import__('os').getcwd()\", k]"),
        [],
        "only integers, param names",
    ),
    ("shape-power", edit("[m, k]", "[m ** 2, k]"), [], "only integers, param names"),
    ("shape-negative", edit("[m, k]", "[m - 64, k]"), [], "dimensions must be positive"),
    ("shape-empty", edit("[m, k]", "[]"), [], "expected a list of dimensions"),
    ("shape-not-list", edit("[m, k]", "m"), [], "expected a list of dimensions"),
    (
        "unknown-dtype",
        edit("{shape: [m, k]}", "{shape: [m, k], dtype: fp4}"),
        [],
        "'fp4' is not one of",
    ),
    (
        "unknown-kind",
        edit("kind: weight}", "kind: wieght}"),
        [],
        "'wieght' is not one of",
    ),
    ("unknown-op", edit("op: matmul", "op: conv2d"), [], "'conv2d' is not one of"),
    ("wrong-arity", edit("inputs: [a, b]", "inputs: [a]"), [], "matmul takes 2 inputs, got 1"),
    (
        "unproduced-input",
        op_line("{name: r, op: relu, inputs: [ghost], output: d}"),
        [],
        "tensor 'ghost' is neither declared",
    ),
    (
        "produced-twice",
        op_line("{name: r, op: relu, inputs: [a], output: c}"),
        [],
        "already produced by op 'mm'",
    ),
    (
        "output-is-input",
        op_line("{name: r, op: relu, inputs: [c], output: a}"),
        [],
        "'a' is declared under tensors",
    ),
    (
        "cycle",
        op_line("{name: r, op: add, inputs: [c, e], output: d}")
        + "  - {name: s, op: relu, inputs: [d], output: e}\n",
        [],
        "form a cycle",
    ),
    ("inner-dims", edit("[k, n]", "[m, n]"), [], "inner dimensions differ"),
    (
        "bias-shape",
        op_line("{name: ba, op: bias_add, inputs: [c, a], output: d}"),
        [],
        "must be 1-D with 64 elements",
    ),
    (
        "broadcast",
        op_line("{name: ad, op: add, inputs: [c, b], output: d}"),
        [],
        "does not broadcast",
    ),
    (
        "mixed-dtypes",  # fp16 by int8 weights is weight-only quantization; int8 by fp16 is not
        edit("a: {shape: [m, k]}", "a: {shape: [m, k], dtype: int8}"),
        [],
        "a is int8 but b is fp16",
    ),
    ("fp32-cube", edit("dtype", "dtype", "dtype: fp32\n" + BASE), [], "no fp32 mode"),
    (
        "unknown-attr",
        edit("output: c}", "output: c, attrs: {trans: true}}"),
        [],
        "matmul has no attribute 'trans'",
    ),
    (
        "attr-type",
        edit("output: c}", "output: c, attrs: {transpose_b: 1}}"),
        [],
        "expected true or false",
    ),
    (
        "reshape-count",
        op_line("{name: r, op: reshape, inputs: [c], output: d, attrs: {shape: [3, 64]}}"),
        [],
        "(2048 elements) to [3, 64]",
    ),
    ("unknown-preset", edit("hardware: tiny", "hardware: tpu9"), [], "no hardware preset"),
    ("missing-hardware", edit("hardware: tiny\n", ""), [], "hardware: is required"),
    (
        "tiling-unknown-op",
        BASE + "schedule: {tiling: {nope: {buffers: 2}}}\n",
        [],
        "no op named 'nope'",
    ),
    (
        "tiling-fractal",
        BASE + "schedule: {tiling: {mm: {base: {k: 24}}}}\n",
        [],
        "24 is not a multiple of the Cube fractal k=16",
    ),
    (
        "tiling-fit",
        BASE + "schedule: {tiling: {mm: {base: {n: 64, k: 64}}}}\n",
        [],
        "does not fit L0B",
    ),
    (
        "tiling-too-large",
        BASE + "schedule: {tiling: {mm: {base: {m: 64}}}}\n",
        [],
        "larger than the problem",
    ),
    ("tiling-cores", BASE + "schedule: {tiling: {mm: {split: {m: 2, n: 2}}}}\n", [], "tiny has 2"),
    (
        "tiling-buffers",
        BASE + "schedule: {tiling: {mm: {buffers: 3}}}\n",
        [],
        "3 is above the maximum of 2",
    ),
    ("tiling-order", BASE + "schedule: {tiling: {mm: {order: k}}}\n", [], "'k' is not one of"),
    ("tiling-auto", BASE + "schedule: {tiling: {mm: auto}}\n", [], "tiling search"),
    ("fusion-value", BASE + "schedule: {fusion: maybe}\n", [], "is not one of: auto, none"),
    ("fusion-group", BASE + "schedule: {fusion: [[mm, ghost]]}\n", [], "no op named 'ghost'"),
    (
        "override-unknown-field",
        BASE,
        ["--set", "schedule.fuzion=auto"],
        "--set schedule.fuzion=auto: unknown field",
    ),
    ("override-unknown-param", BASE, ["--set", "params.q=3"], "no param 'q'"),
    ("override-syntax", BASE, ["--set", "params.m"], "must be PATH=VALUE"),
    ("override-into-list", BASE, ["--set", "ops.x=1"], "is a list, not a mapping"),
    ("override-bad-unit", BASE, ["--set", "hardware.HBM.bandwidth=fast"], "is not a rate"),
    ("override-huge-size", BASE, ["--set", "hardware.L1.capacity=1e400GB"], "too large"),
    (
        "override-hw-field",
        BASE,
        ["--set", "hardware.HBM.colour=red"],
        "--set hardware.HBM.colour=red: unknown",
    ),
    (
        "too-many-instructions",
        edit("{m: 32, n: 64, k: 64}", "{m: 16384, n: 8192, k: 4096}"),
        [],
        "instructions, more than the",
    ),
]

HW_CASES = [
    ("hw-negative-size", ("capacity: 64KiB}", "capacity: -64KiB}"), "'-64KiB' is not a size"),
    ("hw-zero-cores", ("cores: 2", "cores: 0"), "cores: 0 is below the minimum of 1"),
    ("hw-bad-clock", ("clock: 1.0GHz", "clock: fast"), "is not a clock"),
    ("hw-bad-path", ("HBM->L1: 64B/cycle", "HBM->L9: 64B/cycle"), "SOURCE->DESTINATION"),
    (
        "hw-missing-path",
        ("UB->HBM: 64B/cycle", "UB->L2: 64B/cycle"),
        "no engine serves the path UB->HBM",
    ),
    ("hw-unknown-factor", ("reduction: 2}", "reduction: 2, magic: 3}"), "magic: unknown field"),
    ("hw-efficiency", ("efficiency: 1.0", "efficiency: 1.5"), "1.5 must be in (0, 1]"),
]


def run_cli(capsys, args):
    code = main(args)
    captured = capsys.readouterr()
    return code, captured.err


def assert_one_clear_line(code, err, fragment, path):
    assert code == 2, err
    assert "Traceback" not in err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("error: ") and fragment in lines[0], err
    if path is not None and "--set" not in lines[0]:
        assert str(path) in lines[0] or "hw.yaml" in lines[0], err


@pytest.mark.parametrize("name, text, extra, fragment", CASES, ids=[c[0] for c in CASES])
def test_hostile_workload(tmp_path, capsys, name, text, extra, fragment):
    path = tmp_path / f"{name}.yaml"
    path.write_text(text)
    code, err = run_cli(capsys, ["run", str(path), *extra])
    assert_one_clear_line(code, err, fragment, path if not extra else None)


@pytest.mark.parametrize("name, change, fragment", HW_CASES, ids=[c[0] for c in HW_CASES])
def test_hostile_hardware(tmp_path, capsys, name, change, fragment):
    hw = tmp_path / "hw.yaml"
    hw.write_text(edit(*change, text=HW))
    path = tmp_path / "w.yaml"
    path.write_text(edit("hardware: tiny", f"hardware: {hw}"))
    code, err = run_cli(capsys, ["run", str(path)])
    assert_one_clear_line(code, err, fragment, None)
    assert "hw.yaml" in err


@pytest.mark.parametrize(
    "target, fragment", [("missing.yaml", "file not found"), (".", "is a directory")]
)
def test_files_that_are_not_there(tmp_path, capsys, target, fragment):
    code, err = run_cli(capsys, ["run", str(tmp_path / target)])
    assert_one_clear_line(code, err, fragment, None)


def test_not_utf8(tmp_path, capsys):
    path = tmp_path / "binary.yaml"
    path.write_bytes(b"\xff\xfe\x00garbage")
    code, err = run_cli(capsys, ["run", str(path)])
    assert_one_clear_line(code, err, "cannot be read", path)


def test_the_catalogue_is_large():
    assert len(CASES) + len(HW_CASES) + 3 >= 50


# YAML's structure and numbers at its edges: what any mutated input file may gain
SYNTAX_FRAGMENTS = ["", "[", "]", "{", "}", ":", "- ", "\n", "  ", "0", "-1", "1e9"]
FRAGMENTS = st.sampled_from(
    [
        *SYNTAX_FRAGMENTS,
        "m",
        "k",
        "fp16",
        "matmul",
        "relu",
        "KiB",
        "/",
        "*",
        "null",
        "!!python/object:os.system",
        "&a",
        "*a",
        "'",
        '"',
        ",",
        "\t",
    ]
)


@pytest.mark.slow
@settings(max_examples=1500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    position=st.integers(0, len(BASE)),
    cut=st.integers(0, 8),
    insert=st.lists(FRAGMENTS, max_size=4),
)
def test_mutated_workloads_never_crash(tmp_path_factory, position, cut, insert):
    """Random edits of a valid file: a report (exit 0) or clear errors (exit 2), nothing else."""
    import contextlib
    import io

    text = BASE[:position] + "".join(insert) + BASE[position + cut :]
    path = tmp_path_factory.mktemp("fuzz") / "w.yaml"
    path.write_text(text)
    err, out = io.StringIO(), io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(out):
        code = main(["run", str(path)])
    assert code in (0, 2), err.getvalue()
    assert "Traceback" not in err.getvalue()
    if code == 2:
        assert all(line.startswith("error: ") for line in err.getvalue().strip().splitlines())
