"""The second catalogue of hostile inputs (issue 10): YAML bombs and nesting, files that are
not files, numbers too large to be sizes, expressions and overrides beyond reason, hardware
that cannot be a chip, degenerate workloads, sweeps, compare labels and output files.

Each case runs the CLI in a fresh folder holding a small workload (w.yaml, on the tiny chip)
and whatever files the case adds. A refusal must be one line that starts with 'error: ',
names the problem, stays short, and exits 2; a documented success exits 0. In every case
no file that was there before is changed, and nothing hangs (a case has 20 seconds)."""

import os
import signal
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from simulator.cli import main
from simulator.cli_args import MAX_ERROR_CHARS
from simulator.studies.sweep import FIGURES

from .test_hostile import BASE, HW, SYNTAX_FRAGMENTS, edit, op_line

FIFO, DIR, LOOP = object(), object(), object()  # file markers: a pipe, a folder, a link loop


class Link(str):
    """A file marker: a symbolic link to this (relative) target."""


class ReadOnly(str):
    """A file marker: a file with this text and no write permission for anyone."""


MAX_LINE_CHARS = MAX_ERROR_CHARS


def case(name, args, fragment, files=None, code=2):
    return pytest.param(args, fragment, files or {}, code, id=name)


# the tensors of BASE that a workload reading only `a` declares (an unused one is refused)
ONLY_A = BASE.split("ops:")[0].replace("  b: {shape: [k, n], kind: weight}\n", "")


def workload_with(old, new):
    return {"w.yaml": edit(old, new)}


def with_hardware(old, new, workload_edit=("hardware: tiny", "hardware: hw.yaml")):
    return {"hw.yaml": edit(old, new, text=HW), "w.yaml": edit(*workload_edit)}


def nested(depth, opening="[", closing="]"):
    return opening * depth + closing * depth


BOMB = "".join(f"{c}: &{c} [{', '.join([f'*{p}'] * 9)}]\n" for p, c in zip("abcdefgh", "bcdefghi"))
USER_PNG = b"\x89PNG\r\n\x1a\n" + b"\x00\x00\x00\rIHDR" + b"\x00" * 17 + b"user picture"

YAML_CASES = [
    case(
        "alias-bomb",
        ["run", "w.yaml"],
        "expands to more than 100,000 values",
        {"w.yaml": "a: &a [x, x, x, x, x, x, x, x, x]\n" + BOMB + BASE},
    ),
    case(
        "alias-bomb-in-ops",
        ["run", "w.yaml"],
        "expands to more than",
        {
            "w.yaml": BASE.split("ops:")[0]
            + "ops: &o ["
            + ", ".join(["{}"] * 50)
            + "]\n"
            + "extra: ["
            + ", ".join(["*o"] * 3000)
            + "]\n"
        },
    ),
    case(
        "recursive-alias",
        ["run", "w.yaml"],
        "refused",
        {"w.yaml": BASE + "schedule: &s {tiling: *s}\n"},
    ),
    case(
        "deep-lists",
        ["run", "w.yaml"],
        "nested deeper than 32 levels",
        {"w.yaml": BASE + "x: " + nested(5000) + "\n"},
    ),
    case(
        "deep-mappings",
        ["run", "w.yaml"],
        "nested deeper than 32 levels",
        {"w.yaml": BASE + "x: " + nested(3000, "{a: ", "}") + "\n"},
    ),
    case(
        "deep-through-aliases",
        ["run", "w.yaml"],
        "aliases nest it deeper",
        {"w.yaml": "a: &a " + nested(20) + "\nb: &b " + "[" * 15 + "*a" + "]" * 15 + "\n" + BASE},
    ),
    case(
        "merge-keys-work",
        ["run", "w.yaml"],
        "t on tiny",
        code=0,
        files={
            "w.yaml": edit(
                "params: {m: 32, n: 64, k: 64}", "params: {<<: {m: 16, n: 64}, m: 32, k: 64}"
            )
        },
    ),
    case(
        "merge-key-bad-value",
        ["run", "w.yaml"],
        "malformed YAML",
        files={"w.yaml": edit("params: {m: 32,", "params: {<<: 5, m: 32,")},
    ),
    case(
        "merge-brings-unknown-field",
        ["run", "w.yaml"],
        "tensors.a.colour: unknown",
        files={"w.yaml": edit("a: {shape: [m, k]}", "a: {<<: {colour: red}, shape: [m, k]}")},
    ),
    case(
        "two-documents",
        ["run", "w.yaml"],
        "but found another document",
        {"w.yaml": BASE + "---\nname: again\n"},
    ),
    case(
        "python-tag",
        ["run", "w.yaml"],
        "malformed YAML",
        {"w.yaml": edit("name: t", "name: !!python/object/apply:os.system [ls]")},
    ),
    case(
        "null-byte",
        ["run", "w.yaml"],
        "malformed YAML",
        {"w.yaml": edit("name: t", "name: t\x00x")},
    ),
    case(
        "huge-integer-literal",
        ["run", "w.yaml"],
        "cannot be read",
        workload_with("m: 32,", "m: " + "9" * 5000 + ","),
    ),
    case(
        "key-is-a-list",
        ["run", "w.yaml"],
        "a key must be a plain name",
        {"w.yaml": BASE + "? [a, b]\n: 1\n"},
    ),
    case(
        "file-too-large",
        ["run", "w.yaml"],
        "larger than the 1.0 MiB",
        {"w.yaml": BASE + "# " + "x" * (1 << 20) + "\n"},
    ),
    case("fifo", ["run", "pipe.yaml"], "not a regular file", {"pipe.yaml": FIFO}),
    case(
        "link-loop", ["run", "loop.yaml"], "Too many levels of symbolic links", {"loop.yaml": LOOP}
    ),
    case("dev-zero", ["run", "/dev/zero"], "not a regular file"),
    case("dev-stdin", ["run", "/dev/stdin"], "not a regular file"),
    case("folder-named-yaml", ["run", "d.yaml"], "is a directory", {"d.yaml": DIR}),
    case("binary-garbage", ["run", "w.yaml"], "cannot be read", {"w.yaml": bytes(range(256))}),
    case(
        "tensor-not-a-mapping",
        ["run", "w.yaml"],
        "tensors.a: expected a mapping, got a str",
        workload_with("a: {shape: [m, k]}", "a: 0 [m, k]}"),
    ),
    case(
        "date-as-name",
        ["run", "w.yaml"],
        "name: expected a non-empty string",
        workload_with("name: t", "name: 2024-01-01"),
    ),
    case(
        "set-tag-as-inputs",
        ["run", "w.yaml"],
        "expected a list of tensor names",
        workload_with("inputs: [a, b]", "inputs: !!set {a, b}"),
    ),
    case(
        "long-unknown-key",
        ["run", "w.yaml"],
        "(100,002 characters): unknown field",
        {"w.yaml": BASE + "? " + "k" * 100_000 + "\n: 1\n"},
    ),
    case(
        "long-implicit-key",
        ["run", "w.yaml"],
        "malformed YAML: could not find expected",
        {"w.yaml": BASE + "k" * 100_000 + ": 1\n"},
    ),
]

NUMBER_CASES = [
    case(
        "param-scientific-text", ["run", "w.yaml"], "write 1000", workload_with("m: 32,", "m: 1e3,")
    ),
    case(
        "param-scientific-float",
        ["run", "w.yaml"],
        "write 1000",
        workload_with("m: 32,", "m: 1.0e+3,"),
    ),
    case(
        "param-huge",
        ["run", "w.yaml"],
        "at most 4,294,967,296",
        workload_with("m: 32,", "m: 100000000000000000000000000000,"),
    ),
    case(
        "param-infinity",
        ["run", "w.yaml"],
        "params.m: must be a positive integer",
        workload_with("m: 32,", "m: .inf,"),
    ),
    case(
        "param-nan",
        ["run", "w.yaml"],
        "params.m: must be a positive integer",
        workload_with("m: 32,", "m: .nan,"),
    ),
    case("param-boolean", ["run", "w.yaml"], "got a boolean", workload_with("m: 32,", "m: true,")),
    case(
        "param-hex-is-a-number",
        ["run", "w.yaml"],
        "t on tiny",
        code=0,
        files=workload_with("m: 32,", "m: 0x20,"),
    ),
    case(
        "dimension-product-too-large",
        ["run", "w.yaml"],
        "larger than the 4,294,967,296",
        workload_with("[m, k]", "[m * m * m * m * m * m * m, k]"),
    ),
    case(
        "tensor-too-large-for-hbm",
        ["run", "w.yaml"],
        "of HBM",
        workload_with("{m: 32, n: 64, k: 64}", "{m: 65536, n: 65536, k: 64}"),
    ),
    case(
        "rank-too-high",
        ["run", "w.yaml"],
        "a tensor has at most 8",
        workload_with("b: {shape: [k, n]", "b: {shape: [k, n, 1, 1, 1, 1, 1, 1, 1]"),
    ),
    case(
        "tiling-scientific",
        ["run", "w.yaml"],
        "write 32",
        {"w.yaml": BASE + "schedule: {tiling: {mm: {base: {m: 3.2e+1}}}}\n"},
    ),
    case(
        "tiling-split-huge",
        ["run", "w.yaml"],
        "above the maximum",
        {"w.yaml": BASE + "schedule: {tiling: {mm: {split: {m: 1000000000}}}}\n"},
    ),
    case(
        "step-zero",
        ["run", "w.yaml"],
        "below the minimum of 1",
        {"w.yaml": BASE + "schedule: {tiling: {mm: {step: {k: 0}}}}\n"},
    ),
]

EXPRESSION_CASES = [
    case(
        "expression-too-long",
        ["run", "w.yaml"],
        "longer than the 200 characters",
        workload_with("[m, k]", "['" + "+".join(["1"] * 50_000) + "', k]"),
    ),
    case(
        "expression-deep-parentheses",
        ["run", "w.yaml"],
        "longer than the 200",
        workload_with("[m, k]", "['" + nested(300, "(", ")").replace("()", "(m)") + "', k]"),
    ),
    case(
        "expression-nested-within-limit",
        ["run", "w.yaml"],
        "t on tiny",
        code=0,
        files=workload_with("[m, k]", "['" + "(" * 90 + "m" + ")" * 90 + "', k]"),
    ),
    case(
        "expression-unary-chain",
        ["run", "w.yaml"],
        "dimensions must be positive",
        workload_with("[m, k]", "['" + "-" * 99 + "m', k]"),
    ),
    case(
        "expression-call",
        ["run", "w.yaml"],
        "only integers, param names",
        workload_with("[m, k]", "['len(m)', k]"),
    ),
    case(
        "expression-attribute",
        ["run", "w.yaml"],
        "only integers, param names",
        workload_with("[m, k]", "['m.real', k]"),
    ),
    case(
        "expression-float",
        ["run", "w.yaml"],
        "only integers, param names",
        workload_with("[m, k]", "['m * 1.5', k]"),
    ),
    case(
        "expression-modulo",
        ["run", "w.yaml"],
        "only integers, param names",
        workload_with("[m, k]", "['m % 5', k]"),
    ),
    case(
        "expression-lambda",
        ["run", "w.yaml"],
        "only integers, param names",
        workload_with("[m, k]", "['(lambda: 1)()', k]"),
    ),
    case(
        "expression-empty",
        ["run", "w.yaml"],
        "is not a valid expression",
        workload_with("[m, k]", "['  ', k]"),
    ),
    case(
        "expression-bytes",
        ["run", "w.yaml"],
        "is not a valid expression",
        workload_with("[m, k]", "['m\\x00', k]"),
    ),
]

OVERRIDE_CASES = [
    case(
        "set-deep-value",
        ["run", "w.yaml", "--set", "params.m=" + nested(3000)],
        "--set params.m=[[[[",
        {},
    ),
    case(
        "set-bomb-value",
        [
            "run",
            "w.yaml",
            "--set",
            "params.m=[&a [1,1,1,1,1,1,1,1,1,1], " + ", ".join(["*a"] * 20000) + "]",
        ],
        "expands to more than",
    ),
    case(
        "set-long-path", ["run", "w.yaml", "--set", "a." * 100 + "b=1"], "deeper than the 32 levels"
    ),
    case(
        "set-empty-segment", ["run", "w.yaml", "--set", "params..m=1"], "is not a dotted field path"
    ),
    case("set-no-equals", ["run", "w.yaml", "--set", "params.m"], "must be PATH=VALUE"),
    case(
        "set-scientific",
        ["run", "w.yaml", "--set", "params.m=1e3"],
        "--set params.m=1e3: must be a positive integer",
    ),
    case(
        "set-into-scalar",
        ["run", "w.yaml", "--set", "name.x=1"],
        "'name' is a string, not a mapping",
    ),
    case(
        "set-replaces-a-mapping",
        ["run", "w.yaml", "--set", "hardware.HBM=fast"],
        "--set hardware.HBM=fast: expected a mapping",
    ),
    case(
        "set-hardware-missing-file",
        ["run", "w.yaml", "--set", "hardware=nothere.yaml"],
        "--set hardware=nothere.yaml: 'nothere.yaml': no such file",
    ),
    case(
        "set-hardware-path-escape",
        ["run", "w.yaml", "--set", "hardware=../../etc/passwd"],
        "no hardware preset named",
    ),
    case(
        "set-huge-size",
        ["run", "w.yaml", "--set", "hardware.HBM.capacity=99999999999TiB"],
        "no memory holds more than 1 PiB",
    ),
    case(
        "set-huge-integer-size",
        ["run", "w.yaml", "--set", "hardware.L1.capacity=" + "9" * 400],
        "too large",
    ),
    case(
        "set-value-with-newline",
        ["run", "w.yaml", "--set", "name=a\nb: 1"],
        "--set name=a\\nb: 1: a name must be one line",
    ),
    case("set-budget", ["run", "w.yaml", "--max-cycles", "10"], "--max-cycles N"),
]

HARDWARE_CASES = [
    case(
        "hw-l0a-larger-than-l1",
        ["run", "w.yaml"],
        "larger than L1",
        with_hardware("L0A: {capacity: 8KiB}", "L0A: {capacity: 128KiB}"),
    ),
    case(
        "hw-ub-too-small",
        ["run", "w.yaml"],
        "UB.capacity: 512 B cannot hold",
        with_hardware("UB:  {capacity: 16KiB}", "UB:  {capacity: 512B}"),
    ),
    case(
        "hw-l0c-too-small",
        ["run", "w.yaml"],
        "L0C.capacity",
        with_hardware("L0C: {capacity: 16KiB}", "L0C: {capacity: 64B}"),
    ),
    case(
        "hw-hbm-latency-absurd",
        ["run", "w.yaml"],
        "beyond the 100 µs",
        with_hardware("latency: 100cycles", "latency: 2s"),
    ),
    case(
        "hw-engine-latency-absurd",
        ["run", "w.yaml"],
        "MTE2.latency",
        with_hardware("latency: 10cycles", "latency: 1000000000cycles"),
    ),
    case(
        "hw-launch-absurd",
        ["run", "w.yaml"],
        "beyond the 10,000 µs",
        with_hardware("launch_overhead: 100cycles", "launch_overhead: 1s"),
    ),
    case(
        "hw-clock-too-slow",
        ["run", "w.yaml"],
        "outside the 1 MHz to 100 GHz",
        with_hardware("clock: 1.0GHz", "clock: 1Hz"),
    ),
    case(
        "hw-clock-too-fast",
        ["run", "w.yaml"],
        "outside the 1 MHz to 100 GHz",
        with_hardware("clock: 1.0GHz", "clock: 1000000GHz"),
    ),
    case(
        "hw-queue-depth-zero",
        ["run", "w.yaml"],
        "MTE2.queue_depth: 0 is below the minimum",
        with_hardware("  latency: 10cycles\n", "  latency: 10cycles\n  queue_depth: 0\n"),
    ),
    case(
        "hw-queue-depth-unknown-word",
        ["run", "w.yaml"],
        "MTE2.queue_depth: 'stage' is neither a count nor 'stages'",
        with_hardware("  latency: 10cycles\n", "  latency: 10cycles\n  queue_depth: stage\n"),
    ),
    case(
        "hw-streams-unknown",
        ["run", "w.yaml"],
        "MTE2.streams: 'two' is not one of: one, per_tensor",
        with_hardware("  latency: 10cycles\n", "  latency: 10cycles\n  streams: two\n"),
    ),
    case(
        "hw-packet-not-power-of-two",
        ["run", "w.yaml"],
        "MTE2.packet_bytes: '500B' must be a power of two from 32 B",
        with_hardware("  latency: 10cycles\n", "  latency: 10cycles\n  packet_bytes: 500B\n"),
    ),
    case(
        "hw-same-address-unknown",
        ["run", "w.yaml"],
        "'maybe' is not one of: share, serialise",
        with_hardware("latency: 20cycles}", "latency: 20cycles, same_address_reads: maybe}"),
    ),
    case(
        "hw-multicast-too-wide",
        ["run", "w.yaml"],
        "L2.multicast: 64 is above the maximum",
        with_hardware("latency: 20cycles}", "latency: 20cycles, multicast: 64}"),
    ),
    case(
        "hw-kernel-gap-without-unit",
        ["run", "w.yaml"],
        "kernel_gap: '5' needs a unit",
        with_hardware("launch_overhead: 100cycles", "launch_overhead: 100cycles\nkernel_gap: 5"),
    ),
    case(
        "hw-graph-launch-not-a-boolean",
        ["run", "w.yaml"],
        "graph_launch: expected true or false",
        with_hardware(
            "launch_overhead: 100cycles", "launch_overhead: 100cycles\ngraph_launch: sometimes"
        ),
    ),
    case(
        "hw-epilogue-unknown",
        ["run", "w.yaml"],
        "'regs' is not one of: ub, registers",
        with_hardware("launch_overhead: 100cycles", "launch_overhead: 100cycles\nepilogue: regs"),
    ),
    case(
        "hw-ub-shared-with-a-register-file",
        ["run", "w.yaml"],
        "UB.shared_with: 'L0C' is not one of: L1",
        with_hardware("UB:  {capacity: 16KiB}", "UB:  {capacity: 16KiB, shared_with: L0C}"),
    ),
    case(
        "split-neither-cores-nor-blocks",
        ["run", "w.yaml"],
        "'rows' is not a split",
        workload_with("ops:", "schedule: {tiling: {mm: {split: rows}}}\nops:"),
    ),
    case(
        "layout-unknown",
        ["run", "w.yaml"],
        "'zz' is not one of: nd, nz",
        workload_with(
            "b: {shape: [k, n], kind: weight}", "b: {shape: [k, n], kind: weight, layout: zz}"
        ),
    ),
    case(
        "strided-unknown",
        ["run", "w.yaml"],
        "'sideways' is not one of: direct, copy",
        workload_with("ops:", "schedule: {strided: sideways}\nops:"),
    ),
    case(
        "slice-step-zero",
        ["run", "w.yaml"],
        "step: expected a whole number of at least 1",
        workload_with(
            "  - {name: mm, op: matmul, inputs: [a, b], output: c}",
            "  - {name: s, op: slice, inputs: [a], output: a2, attrs: {step: 0}}\n"
            "  - {name: mm, op: matmul, inputs: [a, b], output: c}",
        ),
    ),
    case(
        "hw-zero-rate",
        ["run", "w.yaml"],
        "must be a positive rate",
        with_hardware("L2->L1: 64B/cycle", "L2->L1: 0B/cycle"),
    ),
    case(
        "hw-zero-vector",
        ["run", "w.yaml"],
        "must be a positive rate",
        with_hardware(
            "bandwidth: 64B/cycle\n  latency: 4cycles", "bandwidth: 0TB/s\n  latency: 4cycles"
        ),
    ),
    case(
        "hw-infinite-rate",
        ["run", "w.yaml"],
        "too large to be a rate",
        with_hardware("bandwidth: 128B/cycle", "bandwidth: 1e400B/cycle"),
    ),
    case(
        "hw-negative-latency",
        ["run", "w.yaml"],
        "is not a time",
        with_hardware("latency: 20cycles", "latency: -20cycles"),
    ),
    case(
        "hw-cost-factor-zero",
        ["run", "w.yaml"],
        "must be above 0",
        with_hardware("elementwise: 1", "elementwise: 0"),
    ),
    case(
        "hw-cost-factor-nan",
        ["run", "w.yaml"],
        "must be above 0",
        with_hardware("elementwise: 1", "elementwise: .nan"),
    ),
    case(
        "hw-cost-factor-huge",
        ["run", "w.yaml"],
        "at most 1000",
        with_hardware("elementwise: 1", "elementwise: 1.0e+9"),
    ),
    case(
        "hw-efficiency-nan",
        ["run", "w.yaml"],
        "must be in (0, 1]",
        with_hardware("efficiency: 1.0", "efficiency: .nan"),
    ),
    case(
        "hw-fractal-zero",
        ["run", "w.yaml"],
        "below the minimum of 1",
        with_hardware("fp16: {m: 16, n: 16, k: 16}", "fp16: {m: 0, n: 16, k: 16}"),
    ),
    case(
        "hw-too-many-cores",
        ["run", "w.yaml"],
        "above the maximum of 4,096",
        with_hardware("cores: 2", "cores: 100000"),
    ),
    case(
        "hw-empty-name",
        ["run", "w.yaml"],
        "name: expected a non-empty string",
        with_hardware("name: tiny", "name: ''"),
    ),
    case(
        "hw-hbm-too-small",
        ["run", "w.yaml"],
        "but tiny has 1.0 KB",
        with_hardware("capacity: 1GiB", "capacity: 1000B"),
    ),
    case(
        "hw-is-a-fifo",
        ["run", "w.yaml"],
        "not a regular file",
        {"hw.yaml": FIFO, "w.yaml": edit("hardware: tiny", "hardware: hw.yaml")},
    ),
    case(
        "hw-bomb",
        ["run", "w.yaml"],
        "expands to more than",
        {
            "hw.yaml": "a: &a [x, x, x, x, x, x, x, x, x]\n" + BOMB + HW,
            "w.yaml": edit("hardware: tiny", "hardware: hw.yaml"),
        },
    ),
    case(
        "hw-relative-to-the-workload",
        ["run", "sub/w.yaml"],
        "t on tiny",
        code=0,
        files={
            "sub/hw/chip.yaml": HW,
            "sub/w.yaml": edit("hardware: tiny", "hardware: hw/chip.yaml"),
        },
    ),
    case(
        "hw-preset-name-with-slash",
        ["run", "w.yaml"],
        "no hardware preset named",
        workload_with("hardware: tiny", "hardware: tiny/../tiny"),
    ),
    case(
        "hw-unknown-field-names-override",
        ["run", "w.yaml", "--set", "hardware.L1.size=1MiB"],
        "--set hardware.L1.size=1MiB: unknown field",
    ),
]

DEGENERATE_CASES = [
    case(
        "only-views",
        ["run", "w.yaml"],
        "nothing to simulate",
        {
            "w.yaml": ONLY_A
            + "ops:\n  - {name: v, op: reshape, inputs: [a], output: v, attrs: {shape: [k, m]}}\n"
        },
    ),
    case(
        "tune-without-matmul",
        ["tune", "w.yaml"],
        "nothing to tune",
        {"w.yaml": ONLY_A + "ops:\n  - {name: mm, op: relu, inputs: [a], output: c}\n"},
    ),
    case(
        "tune-only-views",
        ["tune", "w.yaml"],
        "nothing to tune",
        {
            "w.yaml": ONLY_A
            + "ops:\n  - {name: v, op: reshape, inputs: [a], output: v, attrs: {shape: [k, m]}}\n"
        },
    ),
    case(
        "sweep-every-point-illegal",
        ["sweep", "w.yaml", "--workers", "1", "--grid", "schedule.tiling.mm.base.m=48,64"],
        "every point is illegal",
        code=0,
    ),
    case(
        "compare-views-only",
        ["compare", "w.yaml"],
        "nothing to simulate",
        {
            "w.yaml": ONLY_A
            + "ops:\n  - {name: v, op: reshape, inputs: [a], output: v, attrs: {shape: [k, m]}}\n"
        },
    ),
]

SWEEP_CASES = [
    case(
        "grid-misspelt-field",
        ["sweep", "w.yaml", "--grid", "schedule.fuzion=auto,none"],
        "--grid schedule.fuzion=auto: unknown field",
    ),
    case("grid-unknown-param", ["sweep", "w.yaml", "--grid", "params.q=1,2"], "no param 'q'"),
    case("grid-empty-value", ["sweep", "w.yaml", "--grid", "params.m=16,,32"], "an empty value"),
    case("grid-trailing-comma", ["sweep", "w.yaml", "--grid", "params.m=16,"], "an empty value"),
    case("grid-no-values", ["sweep", "w.yaml", "--grid", "params.m="], "write FIELD=V1,V2"),
    case("grid-no-field", ["sweep", "w.yaml", "--grid", "=1,2"], "write FIELD=V1,V2"),
    case(
        "grid-bad-value",
        ["sweep", "w.yaml", "--grid", "params.m=16,lots"],
        "--grid params.m=lots: must be a positive integer",
    ),
    case(
        "grid-list-value",
        ["sweep", "w.yaml", "--grid", "params.m=[16]"],
        "not a single number or word",
    ),
    case("grid-repeated-value", ["sweep", "w.yaml", "--grid", "params.m=16,16"], "is given twice"),
    case(
        "grid-repeated-field",
        ["sweep", "w.yaml", "--grid", "params.m=16", "--grid", "params.m=32"],
        "is given twice",
    ),
    case(
        "grid-deep-value",
        ["sweep", "w.yaml", "--grid", "params.m=" + nested(3000)],
        "refused: nested deeper than 32 levels",
    ),
    case(
        "grid-too-many-values",
        ["sweep", "w.yaml", "--grid", "params.m=" + ",".join(map(str, range(1, 1_002)))],
        "more than the 1,000",
    ),
    case(
        "grid-too-many-points",
        [
            "sweep",
            "w.yaml",
            "--yes",
            *(
                a
                for f in "mnk"
                for a in ("--grid", f"params.{f}=" + ",".join(map(str, range(16, 16 * 60, 16))))
            ),
        ],
        "205,379 points, more than the 100,000",
    ),
    case(
        "grid-large-needs-yes",
        ["sweep", "w.yaml", "--grid", "params.m=" + ",".join(map(str, range(1, 102)))],
        "the grid has 101 points",
    ),
    case(
        "grid-plot-three-fields",
        [
            "sweep",
            "w.yaml",
            "--plot",
            "p.png",
            "--grid",
            "params.m=16",
            "--grid",
            "params.n=16",
            "--grid",
            "params.k=16",
        ],
        "this grid has 3",
    ),
    case(
        "grid-plot-a-word",
        ["sweep", "w.yaml", "--plot", "p.png", "--metric", "bound", "--grid", "params.m=16"],
        "cannot be plotted",
    ),
    case(
        "grid-unknown-metric",
        ["sweep", "w.yaml", "--metric", "speed", "--grid", "params.m=16"],
        "not a figure of the sweep CSV",
    ),
    case(
        "grid-dask-without-scheduler",
        ["sweep", "w.yaml", "--executor", "dask", "--grid", "params.m=16"],
        "go together",
    ),
    case("grid-none", ["sweep", "w.yaml"], "at least one --grid"),
    case(
        "compare-empty-variant",
        ["compare", "w.yaml", "--variant", ","],
        "give one or more PATH=VALUE",
    ),
    case(
        "compare-same-variant-twice",
        ["compare", "w.yaml", "--variant", "params.m=16", "--variant", "params.m=16"],
        "is given twice",
    ),
    case(
        "compare-too-many-variants",
        [
            "compare",
            "w.yaml",
            *(a for m in range(1, 8) for a in ("--set", f"params.m={16 * m}")),
            *(a for n in range(1, 6) for a in ("--set", f"params.n={16 * n}")),
        ],
        "35 variants are more than the 32",
    ),
    case(
        "compare-labels-distinguish-paths",
        [
            "compare",
            "w.yaml",
            "--set",
            "hardware.L1.capacity=32KiB",
            "--set",
            "hardware.L1.capacity=64KiB",
            "--set",
            "hardware.UB.capacity=8KiB",
            "--set",
            "hardware.UB.capacity=16KiB",
        ],
        "L1.capacity=64KiB UB.capacity=16KiB",
        code=0,
    ),
]

OUTPUT_CASES = [
    case(
        "json-is-a-folder",
        ["run", "w.yaml", "--json", "out.json"],
        "is a folder",
        {"out.json": DIR},
    ),
    case(
        "json-missing-folder",
        ["run", "w.yaml", "--json", "nowhere/r.json"],
        "the folder 'nowhere' does not exist",
    ),
    case("json-wrong-extension", ["run", "w.yaml", "--json", "r.txt"], "must end in .json"),
    case(
        "json-user-file-with-points",
        ["run", "w.yaml", "--json", "r.json"],
        "was not written by this simulator",
        {"r.json": '{"points": [1, 2]}'},
    ),
    case(
        "json-user-file-with-provenance",
        ["run", "w.yaml", "--json", "r.json"],
        "was not written by this simulator",
        {"r.json": '{"provenance": "mine"}'},
    ),
    case(
        "json-user-file-deep",
        ["run", "w.yaml", "--json", "r.json"],
        "was not written by this simulator",
        {"r.json": nested(100_000)},
    ),
    case(
        "json-into-read-only-place",
        ["run", "w.yaml", "--json", "/proc/r.json"],
        "cannot write in '/proc'",
    ),
    case(
        "json-is-a-link-loop",
        ["run", "w.yaml", "--json", "loop.json"],
        "is a link in a loop of links",
        {"loop.json": LOOP},
    ),
    case("trace-wrong-extension", ["run", "w.yaml", "--trace", "t.trace"], "must end in .json"),
    case(
        "trace-and-json-same-file",
        ["run", "w.yaml", "--json", "r.json", "--trace", "r.json"],
        "is also the file of --json",
    ),
    case(
        "trace-over-user-json",
        ["run", "w.yaml", "--trace", "t.json"],
        "was not written by this simulator",
        {"t.json": '{"traceEvents": []}'},
    ),
    case(
        "plot-is-a-file",
        ["run", "w.yaml", "--plot", "plots"],
        "is a file, not a folder",
        {"plots": "my notes"},
    ),
    case("plot-missing-parent", ["run", "w.yaml", "--plot", "a/b"], "the folder 'a' does not"),
    case(
        "plot-over-user-png",
        ["run", "w.yaml", "--plot", "plots"],
        "plots/timeline.png: the file exists and was not written",
        {"plots/timeline.png": USER_PNG},
    ),
    case(
        "sweep-csv-over-user-csv",
        ["sweep", "w.yaml", "--grid", "params.m=16", "--csv", "data.csv"],
        "was not written by this simulator",
        {"data.csv": "error,time_us\n,1\n"},
    ),
    case(
        "sweep-default-csv-over-user-csv",
        ["sweep", "w.yaml", "--grid", "params.m=16"],
        "--csv w-sweep.csv: the file exists",
        {"w-sweep.csv": "mine\n"},
    ),
    case(
        "sweep-csv-wrong-extension",
        ["sweep", "w.yaml", "--grid", "params.m=16", "--csv", "out.json"],
        "must end in .csv",
    ),
    case(
        "sweep-plot-over-user-png",
        ["sweep", "w.yaml", "--grid", "params.m=16", "--plot", "p.png"],
        "was not written",
        {"p.png": USER_PNG},
    ),
    case(
        "sweep-plot-wrong-extension",
        ["sweep", "w.yaml", "--grid", "params.m=16", "--plot", "p.svg"],
        "must end in .png",
    ),
    case(
        "sweep-json-is-the-workload",
        ["sweep", "w.yaml", "--grid", "params.m=16", "--json", "w.yaml"],
        "that is an input file",
    ),
    case(
        "compare-json-over-user-file",
        ["compare", "w.yaml", "--json", "c.json"],
        "was not written",
        {"c.json": '{"variants": []}'},
    ),
    case(
        "tune-write-exists",
        ["tune", "w.yaml", "--write", "t.yaml"],
        "was not written",
        {"t.yaml": "name: mine\n"},
    ),
    case(
        "tune-write-the-input",
        ["tune", "w.yaml", "--write", "w.yaml", "--force"],
        "that is an input file",
    ),
    case(
        "tune-write-wrong-extension", ["tune", "w.yaml", "--write", "t.json"], "must end in .yaml"
    ),
]

CLI_CASES = [
    case("cli-unknown-option", ["run", "w.yaml", "--fast"], "unrecognized arguments: --fast"),
    case("cli-unknown-command", ["simulate", "w.yaml"], "invalid choice: 'simulate'"),
    case("cli-no-command", [], "required: COMMAND"),
    case(
        "cli-workers-zero",
        ["sweep", "w.yaml", "--workers", "0", "--grid", "params.m=16"],
        "0 must be at least 1",
    ),
    case(
        "cli-workers-absurd",
        ["tune", "w.yaml", "--workers", "100000"],
        "more worker processes than",
    ),
    case("cli-top-zero", ["tune", "w.yaml", "--top", "0"], "0 must be at least 1"),
    case(
        "cli-max-cycles-word",
        ["run", "w.yaml", "--max-cycles", "lots"],
        "'lots' is not a whole number",
    ),
]

LONG = "x" * 300  # longer than any file name may be
BF16 = {
    "w.yaml": edit(
        "a: {shape: [m, k]}",
        "a: {shape: [m, k], dtype: bf16}",
        edit("b: {shape: [k, n], kind: weight}", "b: {shape: [k, n], kind: weight, dtype: bf16}"),
    )
}
WITH_ACT = op_line("{name: act, op: relu, inputs: [c], output: d}")
DUAL = (
    BASE.split("ops:")[0]
    + "  b2: {shape: [k, n], kind: weight}\n"
    + (
        "ops:\n  - {name: gate, op: matmul, inputs: [a, b], output: g}\n"
        "  - {name: up, op: matmul, inputs: [a, b2], output: u}\n"
        "  - {name: act, op: silu, inputs: [g], output: s}\n"
        "  - {name: glu, op: mul, inputs: [s, u], output: h}\n"
    )
)
OURS_JSON = '{"format": "npu-memsim/report"}'

# Found by a review of the first two lists: names too long, links as outputs, the hardware
# file as an output, a dtype the chip lacks, rates no chip has, tiling entries that would be
# ignored, YAML 1.1 numbers, control characters in what the user wrote.
REVIEW_CASES = [
    case("json-name-too-long", ["run", "w.yaml", "--json", LONG + ".json"], "File name too long"),
    case("plot-name-too-long", ["run", "w.yaml", "--plot", LONG], "File name too long"),
    case(
        "csv-name-too-long",
        ["sweep", "w.yaml", "--grid", "params.m=16", "--csv", LONG + ".csv"],
        "File name too long",
    ),
    case("workload-name-too-long", ["run", LONG + ".yaml"], "File name too long"),
    case("hw-path-too-long", ["run", "w.yaml", "--set", f"hardware={LONG}.yaml"], "no such file"),
    case(
        "hw-preset-name-too-long",
        ["run", "w.yaml", "--set", f"hardware={LONG}"],
        "(presets: a100, ascend910",
    ),
    case(
        "plot-folder-dangling-link",
        ["run", "w.yaml", "--plot", "plots"],
        "is a link that leads nowhere",
        {"plots": Link("gone")},
    ),
    case(
        "json-link-to-user-file",
        ["run", "w.yaml", "--json", "r.json"],
        "was not written by this simulator",
        {"mine.json": '{"a": 1}', "r.json": Link("mine.json")},
    ),
    case(
        "csv-link-to-user-file",
        ["sweep", "w.yaml", "--grid", "params.m=16", "--csv", "d.csv"],
        "was not written by this simulator",
        {"mine.csv": "a,b\n", "d.csv": Link("mine.csv")},
    ),
    case(
        "json-ours-but-read-only",
        ["run", "w.yaml", "--json", "r.json"],
        "the file is read-only",
        {"r.json": ReadOnly(OURS_JSON)},
    ),
    case(
        "tune-write-over-the-hardware-file",
        ["tune", "w.yaml", "--write", "hw.yaml", "--force"],
        "that is an input file",
        {"hw.yaml": HW, "w.yaml": edit("hardware: tiny", "hardware: hw.yaml")},
    ),
    case(
        "tune-write-with-hardware-override",
        ["tune", "w.yaml", "--write", "t.yaml", "--set", "hardware.L1.capacity=32KiB"],
        "--write cannot keep --set 'hardware.L1.capacity=32KiB'",
    ),
    case(
        "tune-write-null-schedule",
        ["tune", "w.yaml", "--workers", "1", "--write", "t.yaml"],
        "tuned workload written to t.yaml",
        {"w.yaml": BASE + "schedule: ~\n"},
        code=0,
    ),
    case(
        "cube-lacks-the-dtype",
        ["run", "w.yaml", "--set", "schedule.fusion=auto"],
        "ops[0] (mm): the Cube of tiny has no bf16 mode",
        BF16,
    ),
    case("cube-lacks-the-dtype-tune", ["tune", "w.yaml"], "has no bf16 mode", BF16),
    case("cube-lacks-the-dtype-compare", ["compare", "w.yaml"], "has no bf16 mode", BF16),
    case(
        "vector-rate-tiny",
        ["run", "w.yaml", "--set", "hardware.vector.bandwidth=0.000000001B/cycle"],
        "outside the 0.001 to 1,000,000",
    ),
    case(
        "hbm-rate-absurd",
        ["run", "w.yaml", "--set", "hardware.HBM.bandwidth=1e300B/s"],
        "is 1e+291 bytes per cycle",
    ),
    case(
        "path-rate-absurd",
        ["run", "w.yaml"],
        "MTE2.paths.HBM->L1: '1e9B/cycle'",
        with_hardware("HBM->L1: 64B/cycle", "HBM->L1: 1e9B/cycle"),
    ),
    case(
        "max-cycles-beyond-the-engine",
        ["run", "w.yaml", "--max-cycles", "9" * 20],
        "cycles the simulator can follow",
    ),
    case(
        "scheduler-not-an-address",
        [
            "sweep",
            "w.yaml",
            "--grid",
            "params.m=16",
            "--executor",
            "dask",
            "--scheduler",
            "not a url",
        ],
        "--scheduler 'not a url'",
    ),
    case(
        "tiling-of-a-vector-op",
        ["run", "w.yaml"],
        "act is a relu, a vector op: its kernel's tiling takes only buffers (given: base.m)",
        {"w.yaml": WITH_ACT + "schedule: {tiling: {act: {base: {m: 16}}}}\n"},
    ),
    case(
        "tiling-of-a-view",
        ["run", "w.yaml"],
        "takes no tiling",
        {
            "w.yaml": op_line(
                "{name: v, op: reshape, inputs: [c], output: v, attrs: {shape: [n, m]}}"
            )
            + "schedule: {tiling: {v: {buffers: 1}}}\n"
        },
    ),
    case(
        "tiling-of-a-fused-op",
        ["run", "w.yaml"],
        "act runs in the kernel mm+act",
        {"w.yaml": WITH_ACT + "schedule: {fusion: auto, tiling: {act: {buffers: 1}}}\n"},
    ),
    case(
        "tiling-of-a-second-gemm",
        ["run", "w.yaml"],
        "up runs in the kernel gate+up+act+glu",
        {"w.yaml": DUAL + "schedule: {fusion: auto, tiling: {up: {base: {m: 16}}}}\n"},
    ),
    case(
        "tiling-same-for-both-gemms",
        ["run", "w.yaml"],
        "1 kernel",
        code=0,
        files={
            "w.yaml": DUAL + "schedule: {fusion: auto, tiling: {gate: {buffers: 1}, "
            "up: {buffers: 1}}}\n"
        },
    ),
    case("yaml-leading-zero", ["run", "w.yaml"], "write 40", workload_with("m: 32", "m: 040")),
    case(
        "yaml-base-60", ["run", "w.yaml"], "got a string '1:30'", workload_with("m: 32", "m: 1:30")
    ),
    case(
        "key-with-control-characters",
        ["run", "w.yaml"],
        "bad\\nkey\\x1b[31m: unknown field",
        {"w.yaml": BASE + '"bad\\nkey\\e[31m": 1\n'},
    ),
    case(
        "path-with-control-characters",
        ["run", "w\x1b[2J\n.yaml"],
        "w\\x1b[2J\\n.yaml: file not found",
    ),
    case(
        "metric-utilization-plots",
        [
            "sweep",
            "w.yaml",
            "--workers",
            "1",
            "--grid",
            "params.m=16,32",
            "--plot",
            "p.png",
            "--metric",
            "util_MTE2",
        ],
        "plot written to p.png",
        code=0,
    ),
]

BATCHED_LAYERNORM = """name: t
hardware: tiny
params: {m: 48, n: 48, k: 7}
tensors:
  a: {shape: [2, m, k]}
  b: {shape: [2, k, n], kind: weight}
  bias: {shape: [n], kind: weight}
  g: {shape: [n], kind: weight}
ops:
  - {name: mm, op: batch_matmul, inputs: [a, b], output: c}
  - {name: o0, op: bias_add, inputs: [c, bias], output: t0}
  - {name: o1, op: layernorm, inputs: [t0, g, bias], output: t1}
schedule: {fusion: auto}
"""
# a table a user made from a sweep CSV with pandas: an index column, a column of notes
USER_SWEEP_TABLE = "," + ",".join(["params.m", "error", *FIGURES, "my_notes"]) + "\n"
HW_MTE3_LOADS = edit(
    "paths: {UB->HBM: 64B/cycle, UB->L1: 64B/cycle}",  # MTE3 given a load
    "paths: {UB->HBM: 64B/cycle, UB->L1: 64B/cycle, HBM->L1: 64B/cycle}",
    text=edit("HBM->L1: 64B/cycle, ", "", text=HW),
)

# The third round: a second review of everything above.
ROUND_THREE_CASES = [
    case(
        "fused-input-read-by-two-ops",
        ["run", "w.yaml"],
        "1 kernels",
        code=0,
        files={"w.yaml": BATCHED_LAYERNORM},
    ),
    case(
        "hw-path-on-the-wrong-engine",
        ["run", "w.yaml"],
        "MTE3.paths.HBM->L1: the lowering moves HBM->L1 on MTE2",
        {"hw.yaml": HW_MTE3_LOADS, "w.yaml": edit("hardware: tiny", "hardware: hw.yaml")},
    ),
    case(
        "hw-no-drain-to-ub",
        ["run", "w.yaml", "--set", "hardware.FIXPIPE.paths={L0C->HBM: 64B/cycle}"],
        "no engine serves the path L0C->UB",
    ),
    case(
        "dtype-attr-a-list",
        ["run", "w.yaml"],
        "['fp32'] is not a dtype",
        {"w.yaml": op_line("{name: k, op: cast, inputs: [c], output: d, attrs: {to: [fp32]}}")},
    ),
    case(
        "fusion-group-nested-list",
        ["run", "w.yaml"],
        "is not one of: auto, none",
        {"w.yaml": BASE + "schedule: {fusion: [[[mm]]]}\n"},
    ),
    case(
        "plot-folder-is-the-json",
        ["run", "w.yaml", "--json", "x.json", "--plot", "x.json"],
        "--plot x.json: is also the file of --json",
    ),
    case(
        "too-many-instructions-in-all",
        ["run", "w.yaml"],
        "a run can hold in memory",
        {
            "w.yaml": edit(
                "params: {m: 32, n: 64, k: 64}",
                "params: {m: 2048, n: 2048, k: 2560}",
                BASE
                + "".join(
                    f"  - {{name: mm{i}, op: matmul, inputs: [a, b], output: c{i}}}\n"
                    for i in range(16)
                ),
            )
        },
    ),
    case(
        "op-named-default",
        ["run", "w.yaml"],
        "'default' is reserved",
        {"w.yaml": edit("{name: mm,", "{name: default,")},
    ),
    case(
        "param-look-alike-letter",
        ["run", "w.yaml"],
        "of ASCII letters",
        workload_with("m: 32,", "m: 32, \uff4d: 16,"),
    ),
    case(
        "expression-look-alike-letter",
        ["run", "w.yaml"],
        "a shape expression is ASCII",
        workload_with("[m, k]}", "[\uff4d, k]}"),
    ),
    case("json-empty-name", ["run", "w.yaml", "--json", ""], "an empty name"),
    case(
        "csv-empty-name",
        ["sweep", "w.yaml", "--grid", "params.m=16", "--csv", " "],
        "an empty name",
    ),
    case(
        "set-twice-different",
        ["run", "w.yaml", "--set", "params.m=16", "--set", "params.m=32"],
        "params.m is already set to 16",
    ),
    case(
        "set-and-grid-same-field",
        ["sweep", "w.yaml", "--set", "params.m=16", "--grid", "params.m=32,64"],
        "params.m is already set to 16",
    ),
    case(
        "compare-common-and-variant-clash",
        ["compare", "w.yaml", "--set", "params.m=16", "--variant", "params.m=32"],
        "already set",
    ),
    case(
        "set-value-with-comment", ["run", "w.yaml", "--set", "name=a # b"], "starts a YAML comment"
    ),
    case(
        "set-quoted-hash-is-fine",
        ["run", "w.yaml", "--set", "name='a # b'"],
        "a # b on tiny",
        code=0,
    ),
    case(
        "csv-derived-by-the-user",
        ["sweep", "w.yaml", "--grid", "params.m=16", "--csv", "analysis.csv"],
        "was not written by this simulator",
        {"analysis.csv": USER_SWEEP_TABLE},
    ),
    case(
        "exponent-without-point",
        ["run", "w.yaml", "--set", "hardware.HBM.efficiency=9e-1"],
        "write 0.9",
    ),
    case(
        "octal-written-as-such",
        ["run", "w.yaml"],
        "t on tiny",
        code=0,
        files={"w.yaml": edit("m: 32,", "m: 0o40,")},
    ),
    case(
        "variant-value-with-commas",
        [
            "compare",
            "w.yaml",
            "--variant",
            "schedule.fusion=none",
            "--variant",
            "schedule.fusion=[[mm, act]]",
        ],
        "fusion=[[mm, act]]",
        code=0,
        files={"w.yaml": WITH_ACT},
    ),
    case(
        "variant-without-equals",
        ["compare", "w.yaml", "--variant", "params.m"],
        "give one or more PATH=VALUE",
    ),
    case(
        "variants-equal-once-read",
        ["compare", "w.yaml", "--variant", "params.m=16", "--variant", "params.m=0x10"],
        "is given twice",
    ),
    case(
        "set-params-whole",
        ["run", "w.yaml", "--set", "params={m: 16, n: 64, k: 64}"],
        "t on tiny",
        code=0,
    ),
    case(
        "sweep-plot-every-point-illegal",
        [
            "sweep",
            "w.yaml",
            "--workers",
            "1",
            "--grid",
            "schedule.tiling.mm.base.m=48,64",
            "--plot",
            "p.png",
        ],
        "no point is legal",
        code=0,
    ),
    case(
        "sweep-plot-no-flops",
        ["sweep", "w.yaml", "--workers", "1", "--grid", "params.m=16,32", "--plot", "p.png"],
        "plot written to p.png",
        code=0,
        files={
            "w.yaml": ONLY_A + "ops:\n  - {name: k, op: cast, inputs: [a], "
            "output: d, attrs: {to: fp32}}\n"
        },
    ),
]

ALL = (
    YAML_CASES
    + NUMBER_CASES
    + EXPRESSION_CASES
    + OVERRIDE_CASES
    + HARDWARE_CASES
    + DEGENERATE_CASES
    + SWEEP_CASES
    + OUTPUT_CASES
    + CLI_CASES
    + REVIEW_CASES
    + ROUND_THREE_CASES
)


def make_files(folder: Path, files: dict) -> None:
    files = {"w.yaml": BASE, **files}
    for name, content in files.items():
        path = folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if content is FIFO:
            os.mkfifo(path)
        elif content is LOOP:
            path.symlink_to(path.name)
        elif content is DIR:
            path.mkdir()
        elif isinstance(content, Link):
            path.symlink_to(str(content))
        elif isinstance(content, ReadOnly):
            path.write_text(content, encoding="utf-8")
            path.chmod(0o444)
        elif isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content, encoding="utf-8")


def snapshot(folder: Path) -> dict:
    """Every regular file under `folder` with its bytes (FIFOs and folders by kind only)."""
    state = {}
    for path in sorted(folder.rglob("*")):
        if path.is_symlink():
            state[path] = f"link to {os.readlink(path)}"
        elif path.is_fifo():
            state[path] = "fifo"
        elif path.is_file():
            state[path] = path.read_bytes()
        elif path.is_dir():
            state[path] = "folder"
    return state


class Hang(Exception):
    pass


def _hang(signum, frame):
    raise Hang("the command took longer than 20 seconds")


@pytest.mark.parametrize("args, fragment, files, code", ALL)
def test_hostile_case(tmp_path, capsys, monkeypatch, args, fragment, files, code):
    make_files(tmp_path, files)
    before = snapshot(tmp_path)
    monkeypatch.chdir(tmp_path)
    previous = signal.signal(signal.SIGALRM, _hang)
    signal.alarm(20)
    try:
        try:
            result = main(args)
        except SystemExit as exit_:  # argparse's own exits (our parser's error())
            result = exit_.code
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    assert result == code, err
    if code == 2:
        lines = err.strip().splitlines()
        assert len(lines) == 1, err
        assert lines[0].startswith("error: "), err
        assert fragment in lines[0], err
        assert len(lines[0]) <= MAX_LINE_CHARS, lines[0]
    else:
        assert fragment in out, out
    after = snapshot(tmp_path)
    assert {p: v for p, v in after.items() if p in before} == before


def test_thousands_of_problems_print_twenty_lines_and_a_count(tmp_path, capsys):
    path = tmp_path / "w.yaml"
    path.write_text(BASE + "".join(f"junk{i}: 1\n" for i in range(3000)))
    assert main(["run", str(path)]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 21 and all("unknown field" in line for line in lines[:20])
    assert lines[-1] == "error: ... and 2,980 more problems"


def test_the_second_catalogue_is_large():
    assert len(ALL) >= 80


HW_FRAGMENTS = st.sampled_from(
    [
        *SYNTAX_FRAGMENTS,
        ".nan",
        ".inf",
        "KiB",
        "GiB",
        "B/cycle",
        "TB/s",
        "cycles",
        "ns",
        "s",
        "GHz",
        "Hz",
        "&a",
        "*a",
        "<<: ",
        "!!binary",
        "'",
        ",",
        "\t",
        "L1",
        "UB",
        "->",
        "fp16",
        "9" * 30,
    ]
)
PATHS = st.sampled_from(
    [
        "params.m",
        "params.n",
        "params.k",
        "name",
        "dtype",
        "hardware",
        "schedule.fusion",
        "schedule.tiling.mm.base.m",
        "schedule.tiling.mm.split.n",
        "schedule.tiling.default.buffers",
        "tensors.a.shape",
        "tensors.b.kind",
        "ops",
        "ops.0",
        "hardware.HBM.bandwidth",
        "hardware.L1.capacity",
        "hardware.cores",
        "hardware.clock",
        "hardware.MTE2.latency",
        "hardware.cube.fractal.fp16.k",
        "hardware.vector.cost_factor.reduction",
        "hardware.launch_overhead",
        "x",
        "params",
        "hardware.L0A",
        "",
        ".",
        "a..b",
    ]
)
VALUES = st.lists(
    HW_FRAGMENTS
    | st.sampled_from(
        ["16", "32", "auto", "none", "[m, k]", "64KiB", "2.4TB/s", "tiny", "w.yaml", "=", "null"]
    ),
    max_size=4,
).map("".join)


def run_quietly(args: list[str]) -> tuple[int, str]:
    """main() in this process with its output captured, stopped after 20 seconds."""
    import contextlib
    import io

    err, out = io.StringIO(), io.StringIO()
    previous = signal.signal(signal.SIGALRM, _hang)
    signal.alarm(20)
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(out):
            try:
                code = main(args)
            except SystemExit as exit_:
                code = exit_.code
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
    return code, err.getvalue()


def assert_clean(code: int, err: str) -> None:
    assert code in (0, 2), err
    assert "Traceback" not in err
    if code == 2:
        lines = err.strip().splitlines()
        assert lines and all(line.startswith("error: ") for line in lines), err
        assert all(len(line) <= MAX_LINE_CHARS for line in lines), err


@pytest.mark.slow
@settings(max_examples=800, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    position=st.integers(0, len(HW)),
    cut=st.integers(0, 12),
    insert=st.lists(HW_FRAGMENTS, max_size=4),
)
def test_mutated_hardware_never_crashes(tmp_path_factory, position, cut, insert):
    folder = tmp_path_factory.mktemp("hw")
    (folder / "hw.yaml").write_text(HW[:position] + "".join(insert) + HW[position + cut :])
    (folder / "w.yaml").write_text(edit("hardware: tiny", "hardware: hw.yaml"))
    assert_clean(*run_quietly(["run", str(folder / "w.yaml")]))


@pytest.mark.slow
@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(overrides=st.lists(st.tuples(PATHS, VALUES), min_size=1, max_size=3))
def test_random_overrides_never_crash(tmp_path_factory, overrides):
    path = tmp_path_factory.mktemp("set") / "w.yaml"
    path.write_text(BASE)
    args = ["run", str(path)]
    for field, value in overrides:
        args += ["--set", f"{field}={value}"]
    assert_clean(*run_quietly(args))


@pytest.mark.slow
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    grids=st.lists(
        st.tuples(PATHS, st.lists(VALUES, min_size=1, max_size=3)), min_size=1, max_size=2
    )
)
def test_random_grids_never_crash(tmp_path_factory, grids):
    folder = tmp_path_factory.mktemp("grid")
    (folder / "w.yaml").write_text(BASE)
    args = ["sweep", str(folder / "w.yaml"), "--workers", "1", "--csv", str(folder / "s.csv")]
    for field, values in grids:
        args += ["--grid", f"{field}={','.join(values)}"]
    assert_clean(*run_quietly(args))


def test_api_mistakes_are_clear_errors(tmp_path):
    """Calling code that passes the wrong kind of argument hears what is wrong at once."""
    import simulator as sim

    path = tmp_path / "w.yaml"
    path.write_text(BASE)
    workload = sim.load_workload(path)
    mistakes = [
        (lambda: sim.simulate(str(path)), TypeError, "takes a Workload"),
        (lambda: sim.simulate(workload, -5), ValueError, "max_cycles must be a positive"),
        (lambda: sim.simulate(workload, "1000"), ValueError, "max_cycles must be a positive"),
        (lambda: sim.compare(str(path), []), ValueError, "at least one variant"),
        (lambda: sim.sweep(str(path), {"params.m": "16"}), TypeError, "non-empty list"),
        (lambda: sim.sweep(str(path), {"params.m": [16]}, workers=0), ValueError, "workers"),
        (lambda: sim.tune(workload, top=0), ValueError, "top must be a positive"),
    ]
    for call, kind, fragment in mistakes:
        with pytest.raises(kind, match=fragment):
            call()
