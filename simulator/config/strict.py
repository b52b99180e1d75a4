"""Strict YAML reading and field-by-field validation with YAML paths.

Parsing happens in stages: strict YAML (duplicate keys are errors) → a raw
mapping with `--set` overrides applied → `Fields`, which declares every field
once with its parser and default, reports unknown keys, and collects every
problem with its path before anything is built.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

import yaml

from ..errors import ConfigError, Problems
from ..units import UnitError

REQUIRED = object()


class SkipField(Exception):
    """A field that depends on a mistake already reported: skipped, not blamed again."""


class _StrictLoader(yaml.SafeLoader):
    """SafeLoader that refuses duplicate keys instead of keeping the last one."""


def _construct_mapping(loader: _StrictLoader, node: yaml.MappingNode, deep: bool = False):
    seen: dict[Any, int] = {}
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=deep)
        if not isinstance(key, (str, int, float, bool)) and key is not None:
            raise yaml.constructor.ConstructorError(
                None, None, f"a key must be a plain name, not {describe(key)}",
                key_node.start_mark)
        if key in seen:
            raise yaml.constructor.ConstructorError(
                None, None, f"duplicate key '{key}' (first at line {seen[key] + 1})",
                key_node.start_mark)
        seen[key] = key_node.start_mark.line
    return loader.construct_mapping(node, deep=deep)


_StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


def read_yaml(path: str | Path) -> dict:
    """Read one YAML file whose top level is a mapping; every failure is a ConfigError."""
    source = str(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(source, ["file not found"]) from None
    except IsADirectoryError:
        raise ConfigError(source, ["is a directory, not a YAML file"]) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(source, [f"cannot be read: {exc}"]) from None
    try:
        data = yaml.load(text, Loader=_StrictLoader)  # noqa: S506 - strict SafeLoader subclass
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
        raise ConfigError(source, [f"{where}malformed YAML: {exc.problem}"]) from None
    except yaml.YAMLError as exc:
        raise ConfigError(source, [f"malformed YAML: {exc}"]) from None
    if not isinstance(data, dict):
        raise ConfigError(source, ["the top level must be a mapping of fields, got "
                                   f"{describe(data)}"])
    return data


def describe(value: object) -> str:
    """How an error message names what the user wrote: 'a list', 'an integer'..."""
    if value is None:
        return "nothing"
    return {dict: "a mapping", list: "a list", str: "a string", bool: "a boolean",
            int: "an integer", float: "a number"}.get(type(value), type(value).__name__)


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
        if raw is None:
            raw = {}
        if not isinstance(raw, dict):
            problems.add(path, f"expected a mapping, got {describe(raw)}")
            raw = {}
        self.raw = raw
        self.used: set[str] = set()

    def get(self, key: str, parse: Callable[[Any], Any] = lambda v: v, default: Any = REQUIRED):
        self.used.add(key)
        path = join(self.path, key)
        if key not in self.raw:
            if default is REQUIRED:
                self.problems.add(path, "is required")
                return None
            return default
        try:
            return parse(self.raw[key])
        except SkipField:
            return None
        except (UnitError, ValueError, TypeError) as exc:
            self.problems.add(path, str(exc))
            return None

    def sub(self, key: str, default: Any = REQUIRED) -> "Fields":
        self.used.add(key)
        if key not in self.raw and default is REQUIRED:
            self.problems.add(join(self.path, key), "is required")
        return Fields(self.raw.get(key), join(self.path, key), self.problems)

    def finish(self) -> None:
        """Report keys nobody asked for: a misspelt key must never fall back to a default."""
        for key in self.raw:
            if key not in self.used:
                known = ", ".join(sorted(self.used))
                self.problems.add(join(self.path, str(key)),
                                  f"unknown field (known fields: {known})")


def as_int(minimum: int = 1, maximum: int | None = None) -> Callable[[Any], int]:
    def parse(value: Any) -> int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValueError(f"expected an integer, got {describe(value)} {value!r}")
        if value < minimum:
            raise ValueError(f"{value} is below the minimum of {minimum}")
        if maximum is not None and value > maximum:
            raise ValueError(f"{value} is above the maximum of {maximum}")
        return value
    return parse


def as_fraction(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"expected a number between 0 and 1, got {describe(value)} {value!r}")
    if not 0 < value <= 1:
        raise ValueError(f"{value} must be in (0, 1]")
    return float(value)


def as_number(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
        raise ValueError(f"expected a positive number, got {value!r}")
    return float(value)


def as_name(value: Any) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"expected a non-empty string, got {describe(value)} {value!r}")
    return value


def one_of(*choices: str) -> Callable[[Any], str]:
    def parse(value: Any) -> str:
        if value not in choices:
            raise ValueError(f"{value!r} is not one of: {', '.join(choices)}")
        return value
    return parse


def apply_overrides(raw: dict, overrides: list[tuple[str, Any]], source: str) -> dict:
    """Return a copy of `raw` with each dotted-path override set (creating mappings as needed).

    Unknown fields are not judged here: the strict validation that follows
    reports them with their path, exactly as if they were written in the file.
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
                raise ConfigError(source, [f"--set {path}: '{where}' is {describe(child)}, "
                                           "not a mapping of fields"])
            node = child
        node[keys[-1]] = value
    return result
