"""Strict YAML reading and field-by-field validation with YAML paths.

Parsing happens in stages: strict YAML (duplicate keys are errors) → a raw
mapping with `--set` overrides applied → `Fields`, which declares every field
once with its parser and default, reports unknown keys, and collects every
problem with its path before anything is built.
"""

from __future__ import annotations

import math
import os
import re
import stat
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Callable

import yaml

from ..errors import OVERRIDE_MARK, QUOTE_CHARS, ConfigError, Problems, quote
from ..units import UnitError, format_size

REQUIRED = object()


class SkipField(Exception):
    """A field that depends on a mistake already reported: skipped, not blamed again."""


# What one YAML input (a file, or the value of an override) may hold. Beyond these an input
# is refused with the limit named, before it can exhaust memory or the interpreter's stack.
MAX_FILE_BYTES = 1024 * 1024  # a workload or hardware file is a few KiB
MAX_NESTING = 32  # mappings and lists inside each other, aliases followed
MAX_VALUES = 100_000  # scalars, lists and mappings, each alias expanded

MERGE_TAG = "tag:yaml.org,2002:merge"


class YamlLimitError(yaml.MarkedYAMLError):
    """An input beyond one of the limits above (not malformed: refused)."""

    def __init__(self, problem: str, mark):
        super().__init__(problem=problem, problem_mark=mark)


class _StrictLoader(yaml.SafeLoader):
    """SafeLoader that refuses duplicate keys instead of keeping the last one, and nesting
    deeper than MAX_NESTING while it composes (before the stack can overflow)."""

    depth = 0

    def compose_node(self, parent, index):
        self.depth += 1
        try:
            if self.depth > MAX_NESTING:
                raise YamlLimitError(
                    f"nested deeper than {MAX_NESTING} levels", self.peek_event().start_mark
                )
            return super().compose_node(parent, index)
        finally:
            self.depth -= 1


def _construct_mapping(loader: _StrictLoader, node: yaml.MappingNode, deep: bool = False):
    """Merge keys (`<<: *base`) are supported: keys written here override merged ones, and only
    keys written twice here are duplicates."""
    seen: dict[Any, int] = {}
    for key_node, _ in node.value:
        if key_node.tag == MERGE_TAG:
            continue
        key = loader.construct_object(key_node, deep=deep)
        if not isinstance(key, (str, int, float, bool)) and key is not None:
            raise yaml.constructor.ConstructorError(
                None, None, f"a key must be a plain name, not {describe(key)}", key_node.start_mark
            )
        if key in seen:
            raise yaml.constructor.ConstructorError(
                None,
                None,
                f"duplicate key {quote(key)} (first at line {seen[key] + 1})",
                key_node.start_mark,
            )
        seen[key] = key_node.start_mark.line
    return loader.construct_mapping(node, deep=deep)


_StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)

# Numbers without YAML 1.1's surprises: it takes 040 for the octal 32 and 1:30 for the
# base-60 90, which no one writing a shape or a size means. Here they stay strings, which
# every numeric field refuses by name (with the fix); 0o40 is the octal 32. As in YAML 1.1,
# an exponent needs a point (1.0e3): 1e3 is text, refused with "write 1000".
# Booleans are true and false alone (YAML 1.2): YAML 1.1's yes, no, on and off stay text,
# which a true-or-false field refuses, rather than a `yes` silently meaning true.
_INT_TAG, _FLOAT_TAG = "tag:yaml.org,2002:int", "tag:yaml.org,2002:float"
_BOOL_TAG = "tag:yaml.org,2002:bool"
_StrictLoader.yaml_implicit_resolvers = {
    first: [(tag, rx) for tag, rx in entries if tag not in (_INT_TAG, _FLOAT_TAG, _BOOL_TAG)]
    for first, entries in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
_StrictLoader.add_implicit_resolver(
    _BOOL_TAG, re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"), list("tTfF")
)
_StrictLoader.add_implicit_resolver(
    _INT_TAG,
    re.compile(r"^[-+]?(?:0|[1-9][0-9_]*|0x[0-9a-fA-F_]+|0o[0-7_]+|0b[01_]+)$"),
    list("-+0123456789"),
)
_StrictLoader.add_implicit_resolver(
    _FLOAT_TAG,
    re.compile(
        r"""^(?:[-+]?(?:[0-9][0-9_]*\.[0-9_]*|\.[0-9][0-9_]*)
                                   (?:[eE][-+]?[0-9]+)?
                               |[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$""",
        re.X,
    ),
    list("-+0123456789."),
)


def _measure(node: yaml.Node, depth: int, memo: dict, active: set) -> tuple[int, int]:
    """(values, height) of a composed node with every alias expanded; refuses an alias bomb,
    nesting that aliases make too deep, and an alias inside its own anchor."""
    if id(node) in memo:
        values, height = memo[id(node)]
        if depth + height > MAX_NESTING:
            raise YamlLimitError(
                f"aliases nest it deeper than {MAX_NESTING} levels", node.start_mark
            )
        return values, height
    if id(node) in active:
        raise YamlLimitError("an alias refers to the anchor it is inside of", node.start_mark)
    if depth > MAX_NESTING:
        raise YamlLimitError(f"aliases nest it deeper than {MAX_NESTING} levels", node.start_mark)
    children: list = []
    if isinstance(node, yaml.MappingNode):
        children = [child for pair in node.value for child in pair]
    elif isinstance(node, yaml.SequenceNode):
        children = node.value
    active.add(id(node))
    values, height = 1, 0
    for child in children:
        child_values, child_height = _measure(child, depth + 1, memo, active)
        values += child_values
        height = max(height, child_height + 1)
        if values > MAX_VALUES:
            raise YamlLimitError(
                f"expands to more than {MAX_VALUES:,} values (aliases included)", node.start_mark
            )
    active.discard(id(node))
    memo[id(node)] = (values, height)
    return values, height


def parse_yaml(text: str) -> Any:
    """Strict, bounded YAML → Python values; raises yaml.YAMLError (marked where it can be)."""
    loader = _StrictLoader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        _measure(node, 1, {}, set())
        try:
            return loader.construct_document(node)
        except (ValueError, OverflowError) as exc:  # e.g. an integer of 5,000 digits
            raise YamlLimitError(f"a value cannot be read ({str(exc)[:80]})", None) from None
    finally:
        loader.dispose()


def yaml_problem(exc: yaml.YAMLError) -> str:
    """One line for a YAML error: where, and what."""
    if isinstance(exc, yaml.MarkedYAMLError):
        mark = exc.problem_mark or exc.context_mark
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
        problem = exc.problem or exc.context or "malformed"
        if isinstance(exc, YamlLimitError):
            return f"{where}refused: {problem}"
        return f"{where}malformed YAML: {problem}"
    return f"malformed YAML: {str(exc).splitlines()[0]}"


def read_text(path: str | Path, limit_bytes: int = MAX_FILE_BYTES) -> str:
    """A regular file's text, at most `limit_bytes`: a device, a FIFO or a file that grows
    without end is refused before it can hang the reader."""
    source = str(path)
    try:
        info = os.stat(path)
    except FileNotFoundError:
        raise ConfigError(source, ["file not found"]) from None
    except OSError as exc:
        raise ConfigError(source, [f"cannot be read: {exc.strerror or exc}"]) from None
    if stat.S_ISDIR(info.st_mode):
        raise ConfigError(source, ["is a directory, not a YAML file"])
    if not stat.S_ISREG(info.st_mode):
        raise ConfigError(
            source,
            ["is not a regular file (a device, FIFO or socket); give the path of a YAML file"],
        )
    too_large = [f"is larger than the {format_size(limit_bytes)} a YAML input may be"]
    if info.st_size > limit_bytes:
        raise ConfigError(source, too_large)
    try:
        with open(path, "rb") as handle:
            data = handle.read(limit_bytes + 1)
    except OSError as exc:
        raise ConfigError(source, [f"cannot be read: {exc.strerror or exc}"]) from None
    if len(data) > limit_bytes:
        raise ConfigError(source, too_large)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(source, [f"cannot be read: not UTF-8 text (byte {exc.start})"]) from None


def read_yaml(path: str | Path) -> dict:
    """Read one YAML file whose top level is a mapping; every failure is a ConfigError."""
    source = str(path)
    text = read_text(path)
    try:
        data = parse_yaml(text)
    except yaml.YAMLError as exc:
        raise ConfigError(source, [yaml_problem(exc)]) from None
    if not isinstance(data, dict):
        raise ConfigError(
            source, [f"the top level must be a mapping of fields, got {describe(data)}"]
        )
    return data


def describe(value: object) -> str:
    """How an error message names what the user wrote: 'a list', 'an integer'..."""
    if value is None:
        return "nothing"
    return {
        dict: "a mapping",
        list: "a list",
        str: "a string",
        bool: "a boolean",
        int: "an integer",
        float: "a number",
    }.get(type(value), type(value).__name__)


def join(path: str, key: object) -> str:
    if isinstance(key, int):
        return f"{path}[{key}]"
    return f"{path}.{key}" if path else str(key)


class Fields:
    """Read the fields of one mapping, each declared once with its parser and default.

    Any problem (missing, wrong type, bad unit, unknown key) is added to
    `problems` with its path, and the field's value becomes None so that
    validation can carry on and report everything at once.
    """

    def __init__(self, raw: object, path: str, problems: Problems):
        self.path = path
        self.problems = problems
        self.broken = False  # not a mapping: reported once, its fields not blamed
        if raw is None:
            raw = {}
        if not isinstance(raw, dict):
            problems.add(path, f"expected a mapping, got {describe(raw)}")
            raw, self.broken = {}, True
        self.raw = raw
        self.used: set[str] = set()

    def get(self, key: str, parse: Callable[[Any], Any] = lambda v: v, default: Any = REQUIRED):
        self.used.add(key)
        path = join(self.path, key)
        if key not in self.raw:
            if default is not REQUIRED:
                return default
            if not self.broken:
                self.problems.add(path, "is required")
            return None
        try:
            return parse(self.raw[key])
        except SkipField:
            return None
        except (UnitError, ValueError, TypeError, OverflowError) as exc:
            self.problems.add(path, str(exc))
            return None

    def sub(self, key: str, default: Any = REQUIRED) -> "Fields":
        self.used.add(key)
        if key not in self.raw and default is REQUIRED and not self.broken:
            self.problems.add(join(self.path, key), "is required")
        sub = Fields(self.raw.get(key), join(self.path, key), self.problems)
        sub.broken |= self.broken
        return sub

    def finish(self) -> None:
        """Report keys nobody asked for: a misspelt key must never fall back to a default."""
        for key in self.raw:
            if key not in self.used:
                known = ", ".join(sorted(self.used))
                self.problems.add(
                    join(self.path, key_text(key)),
                    f"unknown field (known fields: {known})",
                    unknown=True,
                )


def key_text(key: object) -> str:
    """A key as a field path shows it: itself, or quoted and cut short when it is long."""
    text = str(key)
    return text if len(text) <= QUOTE_CHARS else quote(key)


def not_an_integer(value: Any) -> str:
    """What was written instead of an integer ('got ...'), with the fix where there is one."""
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e18:
        return f"got the number {value!r}; write {int(value)}"
    if isinstance(value, str):
        try:
            number = float(value)
        except ValueError:
            number = None
        if number is not None and number.is_integer() and abs(number) < 1e18:
            return (
                f"got the text {quote(value)} (YAML reads {value.strip()[:20]} as text, not "
                f"a number); write {int(number)}"
            )
    return f"got {describe(value)} {quote(value)}"


def as_int(minimum: int = 1, maximum: int | None = None) -> Callable[[Any], int]:
    def parse(value: Any) -> int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValueError(f"expected an integer, {not_an_integer(value)}")
        if value < minimum:
            raise ValueError(f"{quote(value)} is below the minimum of {minimum}")
        if maximum is not None and value > maximum:
            raise ValueError(f"{quote(value)} is above the maximum of {maximum:,}")
        return value

    return parse


def not_a_number(value: Any) -> str:
    """What was written instead of a number ('got ...'), with the fix for 9e-1 (text)."""
    if isinstance(value, str):
        try:
            number = float(value)
        except ValueError:
            number = math.nan
        if math.isfinite(number):
            return (
                f"got the text {quote(value)} (YAML reads {value.strip()[:20]} as text, not "
                f"a number); write {number!r}"
            )
    return f"got {describe(value)} {quote(value)}"


def as_fraction(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"expected a number between 0 and 1, {not_a_number(value)}")
    if not 0 < value <= 1:
        raise ValueError(f"{quote(value)} must be in (0, 1]")
    return float(value)


def as_number(maximum: float) -> Callable[[Any], float]:
    """A positive, finite number no larger than `maximum`."""

    def parse(value: Any) -> float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ValueError(f"expected a positive number, {not_a_number(value)}")
        if not 0 < value <= maximum:  # false for nan too
            raise ValueError(f"{quote(value)} must be above 0 and at most {maximum:g}")
        return float(value)

    return parse


def as_bool(value: Any) -> bool:
    """true or false (YAML's own booleans; 'yes' and 1 are refused)."""
    if not isinstance(value, bool):
        raise ValueError(f"expected true or false, got {describe(value)}")
    return value


def as_name(value: Any) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"expected a non-empty string, got {describe(value)} {quote(value)}")
    if not value.isprintable():
        raise ValueError(f"a name must be one line of printable text, got {quote(value)}")
    return value


def one_of(*choices: str) -> Callable[[Any], str]:
    def parse(value: Any) -> str:
        if not isinstance(value, str) or value not in choices:
            raise ValueError(f"{quote(value)} is not one of: {', '.join(choices)}")
        return value

    return parse


HARDWARE_PREFIX = "hardware."  # an override of the workload's hardware, not of the workload


def parse_override(text: str) -> tuple[str, Any]:
    """'params.tokens=2048' -> ('params.tokens', 2048); the value is read as bounded YAML
    (text that is not YAML stays text)."""
    if "=" not in text:
        raise ConfigError(
            "--set", [f"{OVERRIDE_MARK}{quote(text)}: must be PATH=VALUE, e.g. params.tokens=2048"]
        )
    path, _, value_text = text.partition("=")
    path = path.strip()
    if not path or any(not part.strip() for part in path.split(".")):
        raise ConfigError(
            "--set",
            [
                f"{OVERRIDE_MARK}{quote(text)}: {quote(path)} is not a "
                "dotted field path such as params.tokens"
            ],
        )
    if len(path.split(".")) > MAX_NESTING:
        raise ConfigError(
            "--set",
            [
                f"{OVERRIDE_MARK}{quote(path)}: deeper than the "
                f"{MAX_NESTING} levels a field path may have"
            ],
        )
    if not value_text.strip():
        return path, ""
    if value_text.strip()[0] not in "'\"" and re.search(r"(^|\s)#", value_text):
        raise ConfigError(
            "--set",
            [
                f"{OVERRIDE_MARK}{override_label(path, value_text)}: a '#' "
                "starts a YAML comment, so what follows would be dropped; "
                "put the value in quotes"
            ],
        )
    try:
        return path, parse_yaml(value_text)
    except YamlLimitError as exc:
        raise ConfigError(
            "--set", [f"{OVERRIDE_MARK}{override_label(path, value_text)}: refused: {exc.problem}"]
        ) from None
    except yaml.YAMLError:
        return path, value_text


def override_label(path: str, value: Any) -> str:
    """An override as error messages name it: 'params.tokens=2048', cut short when long."""
    text = "".join(c if c.isprintable() else repr(c)[1:-1] for c in f"{path}={value}")
    if len(text) <= 2 * QUOTE_CHARS:
        return text
    return f"{text[: 2 * QUOTE_CHARS]}... ({len(text):,} characters)"


def parse_overrides(
    overrides: Sequence[str] | Sequence[tuple[str, Any]], source: str
) -> list[tuple[str, Any]]:
    """Overrides as (path, value) pairs, each field given one value: a field set twice to
    different values is refused (the same value twice is the same request)."""
    pairs = [parse_override(o) if isinstance(o, str) else (o[0], o[1]) for o in overrides]
    given: dict[str, Any] = {}
    for path, value in pairs:
        if given.setdefault(path, value) != value:
            raise ConfigError(
                source,
                [
                    f"{OVERRIDE_MARK}{override_label(path, value)}: {path} is already set to "
                    f"{quote(given[path])} by another override; give each field one value"
                ],
            )
    return pairs


def apply_overrides(
    raw: dict, overrides: list[tuple[str, Any]], source: str, prefix: str = ""
) -> dict:
    """Return a copy of `raw` with each dotted-path override set (creating mappings as needed).

    Unknown fields are not judged here: the strict validation that follows
    reports them with their path, exactly as if they were written in the file.
    `prefix` is how the user addressed this file's fields ('hardware.').
    """
    import copy

    result = copy.deepcopy(raw)
    for path, value in overrides:
        keys = path.split(".")
        node = result
        for depth, key in enumerate(keys[:-1]):
            child = node.get(key)
            if child is None:
                child = node[key] = {}
            if not isinstance(child, dict):
                where = ".".join(keys[: depth + 1])
                raise ConfigError(
                    source,
                    [
                        f"{OVERRIDE_MARK}{override_label(prefix + path, value)}: {quote(where)} is "
                        f"{describe(child)}, not a mapping of fields (in {source})"
                    ],
                    unknown_paths=(prefix + path,),
                )
            node = child
        node[keys[-1]] = value
    return result


def shipped_name(name: str, names: Sequence[str]) -> str | None:
    """The shipped preset, model or profile `name` means, whatever its case (`H100` is
    h100); None if it means none."""
    if name in names:
        return name
    folded = [shipped for shipped in names if shipped.casefold() == name.casefold()]
    return folded[0] if len(folded) == 1 else None
