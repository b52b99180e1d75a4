"""Workload files (workloads/*.yaml) → a frozen `Workload` bound to its `Hardware`.

Shapes are expressions over named integer params (config/expressions.py).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from ..errors import OVERRIDE_MARK, ConfigError, Problems, quote
from ..ops import CUBE_DTYPES, DTYPE_BYTES, OPS, operands_of
from ..units import format_bytes_decimal
from .expressions import MAX_DIMENSION, shape_of
from .hardware import Hardware, load_hardware
from .strict import (
    HARDWARE_PREFIX,
    Fields,
    apply_overrides,
    as_int,
    as_name,
    describe,
    join,
    key_text,
    not_an_integer,
    one_of,
    override_label,
    parse_overrides,
    read_yaml,
)

DTYPES = tuple(DTYPE_BYTES)
TENSOR_KINDS = ("activation", "weight", "cache")
STRIDED_WAYS = ("direct", "copy")  # how kernels take a slice: read it in place, or copied
LAYOUTS = ("nd", "nz")  # row-major, or Ascend's fractal (FRACTAL_NZ) layout
ORDERS = ("m", "n")
FUSION_MODES = ("none", "auto")


@dataclass(frozen=True)
class Tensor:
    name: str
    shape: tuple[int, ...]
    dtype: str
    kind: str  # activation | weight | intermediate (produced by an op)
    path: str = ""  # where it is declared, or the op that produces it
    layout: str = "nd"  # nd: row-major; nz: Ascend's fractal layout (see cost.py)

    @property
    def nbytes(self) -> int:
        count = 1
        for dim in self.shape:
            count *= dim
        return count * DTYPE_BYTES[self.dtype]


@dataclass(frozen=True)
class Op:
    name: str
    op: str
    inputs: tuple[str, ...]
    output: str
    path: str  # YAML path, for error messages
    attrs: dict = field(default_factory=dict, hash=False, compare=False)


@dataclass(frozen=True)
class TilingSpec:
    """What the file says about one kernel's tiling; None = derive from shapes and buffers."""

    base_m: int | None = None
    base_n: int | None = None
    base_k: int | None = None
    step_k: int | None = None
    order: str | None = None
    buffers: int | None = None
    split_b: int | None = None
    split_m: int | None = None
    split_n: int | None = None
    split_blocks: bool | None = None  # `split: blocks`: deal whole base blocks to the cores
    acc_buffers: int | None = None
    path: str = ""


@dataclass(frozen=True)
class Workload:
    """A workload file bound to its hardware, checked through and frozen: params evaluated,
    every tensor's shape and dtype known, ops in dataflow order. Everything downstream trusts
    it, so every mistake is refused here, with its field path."""

    name: str
    source: str
    hardware: Hardware
    params: dict[str, int]
    dtype: str
    tensors: dict[str, Tensor]
    ops: tuple[Op, ...]  # in a topological order (file order breaks ties)
    fusion: str | tuple[tuple[str, ...], ...]  # "none", "auto", or explicit groups of op names
    tiling: dict[str, TilingSpec]  # op name or "default" -> spec
    overrides: tuple[tuple[str, Any], ...] = field(default=())

    def tiling_for(self, op_name: str) -> TilingSpec:
        return self.tiling.get(op_name, self.tiling.get("default", TilingSpec()))


def check_workload(caller: str, workload: object) -> None:
    """An API call given something other than a loaded workload says what it needs."""
    if not isinstance(workload, Workload):
        raise TypeError(
            f"{caller}() takes a Workload (load_workload(path)), got {type(workload).__name__}"
        )


def load_workload(
    path: str | Path, overrides: Sequence[str] | Sequence[tuple[str, Any]] = ()
) -> Workload:
    """Load, override, validate. Overrides starting with 'hardware.' apply to the hardware,
    whose path in the file is relative to the workload file's folder."""
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(
            f"load_workload() takes the path of a workload file, got {type(path).__name__}"
        )
    source = str(path)
    pairs = parse_overrides(overrides, source)
    hw_overrides = [
        (p[len(HARDWARE_PREFIX) :], v) for p, v in pairs if p.startswith(HARDWARE_PREFIX)
    ]
    wl_overrides = [(p, v) for p, v in pairs if not p.startswith(HARDWARE_PREFIX)]
    raw = read_yaml(path)
    if "cores" in raw and "ops" not in raw:  # one line, not every workload field missing
        raise ConfigError(
            source,
            [
                "this is a hardware file (it has cores), not a workload; a workload names it "
                "in its hardware field, or infer takes it with --hardware"
            ],
        )
    known_params = raw.get("params")
    if not isinstance(known_params, dict):
        known_params = {}
    for override_path, value in wl_overrides:
        head, _, param = override_path.partition(".")
        if head == "params" and param and param not in known_params:
            raise ConfigError(
                source,
                [
                    f"{OVERRIDE_MARK}{override_label(override_path, value)}: no param "
                    f"{quote(param)} in {source} (params: "
                    f"{', '.join(map(str, known_params)) or 'none'})"
                ],
                unknown_paths=(override_path,),
            )
    raw = apply_overrides(raw, wl_overrides, source)

    hw_name = raw.get("hardware")
    if not isinstance(hw_name, str) or not hw_name.strip():
        raise ConfigError(
            source,
            [
                "hardware: is required: a preset name such as 'ascend910' "
                "or a path to a hardware YAML file"
            ],
        )
    named_in = next(
        (OVERRIDE_MARK + override_label(p, v) for p, v in wl_overrides if p == "hardware"), source
    )
    hardware = load_hardware(
        hw_name, hw_overrides, relative_to=Path(path).resolve().parent, named_in=named_in
    )
    return parse_workload(raw, source, hardware, tuple(pairs))


def parse_workload(raw: dict, source: str, hardware: Hardware, overrides: tuple = ()) -> Workload:
    problems = Problems(
        source,
        {
            path: override_label(path, value)
            for path, value in overrides
            if not path.startswith(HARDWARE_PREFIX)
        },
    )
    top = Fields(raw, "", problems)
    name = top.get("name", as_name)
    top.get("hardware", as_name)
    dtype = top.get("dtype", one_of(*DTYPES), default="fp16")

    params_f = top.sub("params", default={})
    params: dict[str, int | None] = {}
    for key in params_f.raw:
        params_f.used.add(key)
        if not isinstance(key, str) or not key.isidentifier() or not key.isascii():
            # ASCII: Python folds look-alike letters in expressions ('ｍ' reads as 'm')
            problems.add(
                join("params", key_text(key)),
                "a param name must be an identifier of ASCII letters, digits and _",
            )
            continue
        value = params_f.raw[key]
        if isinstance(value, bool) or not isinstance(value, int):
            problems.add(
                join("params", key), f"must be a positive integer, {not_an_integer(value)}"
            )
        elif not 1 <= value <= MAX_DIMENSION:
            problems.add(
                join("params", key),
                f"must be a positive integer of at most "
                f"{MAX_DIMENSION:,} (2^32), got {quote(value)}",
            )
        else:
            params[key] = value
            continue
        params[key] = None  # reported: shapes that use it are skipped, not blamed

    tensors: dict[str, Tensor] = {}
    tensors_f = top.sub("tensors")
    for tname in tensors_f.raw:
        tensors_f.used.add(tname)
        tf = Fields(tensors_f.raw[tname], join("tensors", tname), problems)
        shape = tf.get("shape", lambda v: shape_of(v, params))
        tdtype = tf.get("dtype", one_of(*DTYPES), default=dtype)
        kind = tf.get("kind", one_of(*TENSOR_KINDS), default="activation")
        layout = tf.get("layout", one_of(*LAYOUTS), default="nd")
        tf.finish()
        if shape is not None:
            tensors[str(tname)] = Tensor(
                str(tname), shape, tdtype or "fp16", kind or "activation", tf.path, layout or "nd"
            )

    broken = {str(name) for name in tensors_f.raw} - set(tensors)
    raw_ops = top.get("ops", _list_of_mappings)
    ops = _parse_ops(raw_ops, params, problems, broken)
    op_kinds = {op.name: op.op for op in ops}
    sched = top.sub("schedule", default={})
    fusion = sched.get("fusion", lambda v: _fusion(v, set(op_kinds)), default="none")
    strided = sched.get("strided", one_of(*STRIDED_WAYS), default="direct")
    tiling = _parse_tiling(sched.sub("tiling", default={}), op_kinds, problems)
    sched.finish()
    top.finish()
    # semantic checks: producers, cycles, shapes and dtypes through the op vocabulary
    if strided == "copy":
        ops = _copy_slices(ops, set(tensors) | {op.output for op in ops})
    tensors, ordered_ops = resolve(tensors, broken, ops, problems)
    _check_cube_modes(ordered_ops, tensors, hardware, problems)
    if not problems.items:  # else a misspelt input would be reported twice
        used = {name for op in ops for name in (*op.inputs, op.output)}
        for tname in tensors_f.raw:
            if str(tname) not in used:
                problems.add(
                    join("tensors", tname),
                    f"no op reads it ({format_bytes_decimal(tensors[str(tname)].nbytes)} "
                    "declared for nothing); remove it or name it in an op's inputs",
                )
    problems.raise_if_any()
    valid_params = {k: v for k, v in params.items() if v is not None}
    return Workload(
        name, source, hardware, valid_params, dtype, tensors, ordered_ops, fusion, tiling, overrides
    )


def resolve(
    declared: dict[str, Tensor], broken: set[str], ops: list[Op], problems: Problems
) -> tuple[dict[str, Tensor], tuple[Op, ...]]:
    """Check sources and cycles, infer produced tensors; returns (all tensors, ordered ops).

    Tensors in `broken` were declared but are invalid (already reported): ops that use them,
    and everything downstream, are skipped so that one mistake is reported once.
    """
    import networkx as nx  # only for loading: `import simulator` stays light

    producer: dict[str, Op] = {}
    for op in ops:
        if op.output in declared or op.output in broken:
            problems.add(
                f"{op.path}.output",
                f"tensor '{op.output}' is declared under tensors "
                f"(an input); an op's output must be a new tensor",
            )
        elif op.output in producer:
            first = producer[op.output]
            problems.add(
                f"{op.path}.output",
                f"tensor '{op.output}' is already produced by op "
                f"'{first.name}' ({first.path}); a tensor has one producer",
            )
        else:
            producer[op.output] = op
    for op in ops:
        for name in op.inputs:
            if name not in declared and name not in broken and name not in producer:
                problems.add(
                    f"{op.path}.inputs",
                    f"tensor '{name}' is neither declared under tensors nor produced by any op",
                )

    deps = nx.DiGraph()
    deps.add_nodes_from(op.name for op in ops)
    for op in ops:
        for name in op.inputs:
            if name in producer:
                deps.add_edge(producer[name].name, op.name)
    by_name = {op.name: op for op in ops}
    cyclic: set[str] = set()
    for component in nx.strongly_connected_components(deps):
        if len(component) > 1 or any(deps.has_edge(n, n) for n in component):
            cycle = [edge[0] for edge in nx.find_cycle(deps.subgraph(component))]
            via = [by_name[name].output for name in cycle]
            first = by_name[min(component, key=[o.name for o in ops].index)]
            problems.add(
                first.path,
                f"ops {' → '.join(cycle + cycle[:1])} form a cycle "
                f"(through tensors {', '.join(via)}); a dataflow graph must be acyclic",
            )
            cyclic |= component

    position = {op.name: i for i, op in enumerate(ops)}
    order = [
        by_name[n]
        for n in nx.lexicographical_topological_sort(
            deps.subgraph(set(by_name) - cyclic), key=position.get
        )
    ]
    tensors = dict(declared)
    unusable = set(broken) | {by_name[n].output for n in cyclic}
    for op in order:
        if any(name in unusable or name not in tensors for name in op.inputs):
            unusable.add(op.output)
            continue
        spec = OPS[op.op]
        operands = operands_of(op, tensors)
        try:
            shape, out_dtype = spec.output(operands, op.attrs)
        except ValueError as exc:
            problems.add(f"{op.path}.inputs", f"{op.op} {', '.join(op.inputs)}: {exc}")
            unusable.add(op.output)
            continue
        tensors[op.output] = Tensor(op.output, shape, out_dtype, "intermediate", op.path)
    return tensors, tuple(order)


def _copy_slices(ops: list[Op], taken: set[str]) -> list[Op]:
    """`strided: copy`: each slice becomes a view read by a copy kernel that writes the slice
    contiguously, for its consumers to read; `strided: direct` leaves the consumers to read
    the view in place (see cost.strided_read_factor)."""
    result = []
    for op in ops:
        if op.op != "slice":
            result.append(op)
            continue
        view = f"{op.output}~view"
        while view in taken:
            view += "~"
        taken.add(view)
        result += [
            Op(op.name, op.op, op.inputs, view, op.path, op.attrs),
            Op(f"{op.name}~copy", "copy", (view,), op.output, op.path),
        ]
    return result


def _list_of_mappings(value: Any) -> list:
    if not isinstance(value, list) or not value:
        raise ValueError(f"expected a non-empty list of ops, got {describe(value)}")
    return value


def _parse_ops(
    raw_ops: list | None,
    params: Mapping[str, int | None],
    problems: Problems,
    broken: set[str],
) -> list[Op]:
    """The fields of each op; what they mean together is checked by the graph. The outputs
    of ops that are themselves wrong join `broken`, so their consumers are not blamed."""
    ops: list[Op] = []
    names: set[str] = set()
    for index, raw in enumerate(raw_ops or []):
        path = f"ops[{index}]"
        f = Fields(raw, path, problems)
        name = f.get("name", as_name)
        kind = f.get("op", one_of(*OPS))
        inputs = f.get("inputs", _name_list)
        output = f.get("output", as_name)
        raw_attrs = f.get("attrs", _mapping, default={})
        f.finish()
        if None in (name, kind, inputs, output, raw_attrs):
            if isinstance(output, str):
                broken.add(output)
            continue
        path = f"ops[{index}] ({name})"
        if name == "default":
            problems.add(
                f"{path}.name",
                "'default' is reserved: schedule.tiling.default is the "
                "tiling of every kernel without an entry of its own; rename the op",
            )
            broken.add(output)
            continue
        if name in names:
            problems.add(f"{path}.name", f"op name {quote(name)} is used twice")
            broken.add(output)
            continue
        names.add(name)
        spec = OPS[kind]
        low, high = spec.arity
        if not low <= len(inputs) <= high:
            count = f"{low}" if low == high else f"{low} or {high}"
            problems.add(f"{path}.inputs", f"{kind} takes {count} inputs, got {len(inputs)}")
            broken.add(output)
            continue
        try:
            if kind == "reshape" and "shape" in raw_attrs:
                raw_attrs = {**raw_attrs, "shape": shape_of(raw_attrs["shape"], params)}
            attrs = spec.parse_attrs(raw_attrs)
        except ValueError as exc:
            problems.add(f"{path}.attrs", str(exc))
            broken.add(output)
            continue
        ops.append(Op(name, kind, tuple(inputs), output, path, attrs))
    return ops


def _mapping(value: Any) -> dict:
    if not isinstance(value, dict):
        raise ValueError(f"expected a mapping, got {describe(value)}")
    return value


def _fusion(value: Any, op_names: set[str]) -> str | tuple[tuple[str, ...], ...]:
    """'auto', 'none', or a list of groups (lists of op names) to fuse as given."""
    if value in FUSION_MODES:
        return value
    if value == []:
        raise ValueError("an empty list of groups fuses nothing: write none")
    if not isinstance(value, list) or not all(
        isinstance(g, list) and g and all(isinstance(name, str) for name in g) for g in value
    ):
        raise ValueError(
            f"{quote(value)} is not one of: auto, none, or a list of op-name groups "
            "such as [[gate, up, act, glu]]"
        )
    seen: set[str] = set()
    for group in value:
        for name in group:
            if name not in op_names:
                raise ValueError(f"group {quote(group)}: no op named {quote(name)}")
            if name in seen:
                raise ValueError(f"op {quote(name)} is in two groups")
            seen.add(name)
    return tuple(tuple(group) for group in value)


def _name_list(value: Any) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ValueError(f"expected a list of tensor names, got {quote(value)}")
    return value


def _check_cube_modes(
    ops: tuple[Op, ...], tensors: dict[str, Tensor], hardware: Hardware, problems: Problems
) -> None:
    """A matmul needs a mode of this chip's Cube for its input dtype (the ops registry has
    already refused dtypes no Cube multiplies)."""
    modes = hardware.cube.fractal
    for op in ops:
        dtype = tensors[op.inputs[0]].dtype if op.inputs[0] in tensors else None
        if OPS[op.op].unit == "cube" and dtype in CUBE_DTYPES and dtype not in modes:
            problems.add(
                op.path,
                f"the Cube of {hardware.name} has no {dtype} mode (modes: "
                f"{', '.join(modes)}); give the tensors a dtype it has",
            )


def _parse_tiling(f: Fields, op_kinds: dict[str, str], problems: Problems) -> dict[str, TilingSpec]:
    result = {}
    for key in f.raw:
        f.used.add(key)
        path = join(f.path, key_text(key))
        if key != "default" and key not in op_kinds:
            problems.add(
                path,
                f"no op named {quote(key)} (ops: {', '.join(sorted(op_kinds))}, or 'default')",
                unknown=True,
            )
            continue
        unit = OPS[op_kinds[key]].unit if key != "default" else "cube"
        if unit == "view":
            problems.add(
                path,
                f"{key} is a {op_kinds[key]}, a view of its input in HBM: it "
                "runs no kernel, so it takes no tiling",
            )
            continue
        if f.raw[key] == "auto":
            problems.add(
                path,
                "'auto' asks for the tiling search, which is not built yet; "
                "leave this kernel out to get a legal tiling derived from its shapes",
            )
            continue
        t = Fields(f.raw[key], path, problems)
        base = t.sub("base", default={})
        step = t.sub("step", default={})
        split_raw = t.raw.get("split") if isinstance(t.raw, dict) else None
        split_blocks = split_raw == "blocks"
        if isinstance(split_raw, str) and not split_blocks:
            problems.add(
                join(path, "split"),
                f"{quote(split_raw)} is not a split: write "
                "{b: B, m: M, n: N} (cores per dimension) or 'blocks' (every base "
                "block dealt to the cores in turn)",
            )
            split_raw = {}
        split = Fields({} if split_blocks else split_raw, join(path, "split"), problems)
        t.used.add("split")
        dim = as_int(1, 1 << 20)
        spec = TilingSpec(
            base_m=base.get("m", dim, None),
            base_n=base.get("n", dim, None),
            base_k=base.get("k", dim, None),
            step_k=step.get("k", dim, None),
            order=t.get("order", one_of(*ORDERS), None),
            buffers=t.get("buffers", as_int(1, 2), None),
            split_b=split.get("b", dim, None),
            split_m=split.get("m", dim, None),
            split_n=split.get("n", dim, None),
            acc_buffers=t.get("acc_buffers", as_int(1, 2), None),
            split_blocks=split_blocks or None,
            path=path,
        )
        for sub in (base, step, split, t):
            sub.finish()
        given = [
            name.replace("_", ".") if name.startswith(("base", "step", "split")) else name
            for name in (spec_field.name for spec_field in fields(spec))
            if name not in ("buffers", "path") and getattr(spec, name) is not None
        ]
        if unit == "vector" and given:
            problems.add(
                path,
                f"{key} is a {op_kinds[key]}, a vector op: its kernel's tiling "
                f"takes only buffers (given: {', '.join(given)})",
            )
        result[str(key)] = spec
    f.finish()
    return result
