"""Where each figure of a hardware file comes from: its class and what it cites.

A simulator is only as honest as its figures. A preset names its sources once under
`references:` (a key and what it is), and gives every figure under `figures:` its class:

    figures:
      clock: datasheet [nv]                 # read off the vendor's published figures
      L2.bandwidth: microbenchmark [cc]     # measured on silicon by someone who says how
      MTE2.packet_bytes: vendor model [cm]  # the vendor's own cost model or config
      L0C.capacity: fitted on F1024n, F2048n  # chosen so these validation rows agree
      MTE2.paths: assumption                # chosen, and said so (a section covers its figures)

The three cited classes need a reference; a fitted figure names the validation rows it was
fitted on (benchmarks/validate.py), which may then not be counted as validating it. A key
may be one figure or a section, and the most specific key covers a figure; `figures: CLASS`
classes the whole file (a teaching chip's round numbers are all assumptions). A file that has
`figures:` must class every figure; a file without one is `unclassified` throughout, and a
figure a `--set` override replaced is an `override`, whatever its file said.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..errors import Problems, quote

CITED = ("datasheet", "microbenchmark", "vendor model")
CLASSES = (*CITED, "fitted", "assumption")
OVERRIDE = "override"  # a figure replaced with --set: it is whatever the user says it is
UNCLASSIFIED = "unclassified"  # a hardware file without `figures:`
NOT_FIGURES = ("name", "references", "figures")  # top-level keys that are not figures
SHOWN_UNCLASSED = 6  # figures the one line about unclassed figures names

_REFERENCE = re.compile(r"\[([A-Za-z0-9_.-]+)\]")
_CLASS = re.compile(r"(datasheet|microbenchmark|vendor model|fitted|assumption)(?: on (.+))?")
_ROW = re.compile(r"[A-Za-z][A-Za-z0-9.]*")


@dataclass(frozen=True)
class Figure:
    """One figure of a hardware file, as written, with its class (`kind`: one of CLASSES,
    OVERRIDE or UNCLASSIFIED), the sources it cites and, if fitted, the rows it was fitted on."""

    path: str
    value: str
    kind: str
    references: tuple[tuple[str, str], ...] = ()  # (key, what the source is) of each cited
    rows: tuple[str, ...] = ()


def leaf_paths(raw: Mapping, prefix: str = "") -> dict[str, Any]:
    """Every figure of a raw hardware mapping, by its dotted field path."""
    leaves: dict[str, Any] = {}
    for key, value in raw.items():
        if not prefix and key in NOT_FIGURES:
            continue
        path = f"{prefix}{key}"
        if isinstance(value, Mapping):
            leaves.update(leaf_paths(value, path + "."))
        else:
            leaves[path] = value
    return leaves


def parse_figures(
    raw: Mapping, problems: Problems, overridden: Mapping[str, str]
) -> tuple[Figure, ...]:
    """The class of every figure of `raw`, checked: a class entry names a figure or a section
    that exists, is one of CLASSES, cites references that exist (the cited classes must) or
    names rows (fitted must); every figure is classed and every reference cited."""
    leaves = leaf_paths(raw)
    references = _references(raw.get("references", {}), problems)
    if "figures" not in raw:
        return tuple(
            Figure(p, str(v), _kind(p, UNCLASSIFIED, overridden)) for p, v in leaves.items()
        )
    entries = raw["figures"]
    if isinstance(entries, str):  # one class for the whole file (a teaching chip's)
        entries = {key: entries for key in raw if key not in NOT_FIGURES}
    if not isinstance(entries, Mapping):
        problems.add("figures", "expected a mapping of field paths to classes")
        return ()
    classes: dict[str, tuple[str, tuple[str, ...], tuple[str, ...]]] = {}
    cited: set[str] = set()
    for key, text in entries.items():
        where = f"figures.{key}"
        if not any(_within(p, key) for p in leaves):
            problems.add(where, "names no figure or section of this file")
            continue
        parsed = _parse_class(str(text) if isinstance(text, str) else "", references)
        if isinstance(parsed, str):
            problems.add(where, parsed)
            continue
        classes[str(key)] = parsed
        cited.update(parsed[1])
    for key in references:
        if key not in cited:
            problems.add(f"references.{key}", "is cited by no figure (figures: ... [key])")
    figures, unclassed = [], []
    for path, value in leaves.items():
        cover = max((k for k in classes if _within(path, k)), key=len, default=None)
        if cover is None and not _overridden(path, overridden):
            unclassed.append(path)
        kind, keys, rows = classes[cover] if cover is not None else (UNCLASSIFIED, (), ())
        figures.append(
            Figure(
                path,
                str(value),
                _kind(path, kind, overridden),
                tuple((k, references[k]) for k in keys),
                rows,
            )
        )
    if unclassed:
        more = ", ..." if len(unclassed) > SHOWN_UNCLASSED else ""
        shown = ", ".join(unclassed[:SHOWN_UNCLASSED]) + more
        problems.add(
            "figures",
            f"{len(unclassed)} figure{'s' * (len(unclassed) != 1)} without a class ({shown}): "
            f"class each, or a section for all its figures (e.g. `{unclassed[0].split('.')[0]}: "
            "assumption`)",
        )
    return tuple(figures)


def _references(raw: Any, problems: Problems) -> dict[str, str]:
    if not isinstance(raw, Mapping):
        problems.add("references", "expected a mapping of keys to what each source is")
        return {}
    found = {}
    for key, text in raw.items():
        if not isinstance(text, str) or not _REFERENCE.fullmatch(f"[{key}]"):
            problems.add(
                f"references.{key}",
                "a reference is a short key (letters, digits, _ . -) and the source as text",
            )
            continue
        found[str(key)] = text
    return found


def _parse_class(
    text: str, references: Mapping[str, str]
) -> tuple[str, tuple[str, ...], tuple[str, ...]] | str:
    """(class, reference keys, fitted rows) of one entry, or what is wrong with it."""
    keys = tuple(_REFERENCE.findall(text))
    words = " ".join(_REFERENCE.sub(" ", text).split())
    match = _CLASS.fullmatch(words)
    if match is None:
        return (
            f"{quote(text)} must be a class ({', '.join(CLASSES)}), then its references "
            "in brackets, e.g. `datasheet [nv]` or `fitted on G1, G2`"
        )
    kind, rows_text = match.groups()
    unknown = [k for k in keys if k not in references]
    if unknown:
        return f"cites {', '.join(unknown)}, which references: does not name"
    if kind in CITED and not keys:
        return f"a {kind} figure cites its source: add [key] (a key of references:)"
    rows = tuple(r.strip() for r in (rows_text or "").split(","))
    if kind == "fitted":
        if not rows_text or not all(_ROW.fullmatch(r) for r in rows):
            return "a fitted figure names the validation rows it was fitted on: fitted on G1, G2"
        return kind, keys, rows
    if rows_text:
        return f"only a fitted figure names rows ({quote(text)})"
    return kind, keys, ()


def _within(path: str, section: str) -> bool:
    """Whether field `path` is `section` or one of the figures below it."""
    return path == section or path.startswith(f"{section}.")


def _overridden(path: str, overridden: Mapping[str, str]) -> bool:
    return any(_within(path, o) for o in overridden)


def _kind(path: str, kind: str, overridden: Mapping[str, str]) -> str:
    return OVERRIDE if _overridden(path, overridden) else kind
