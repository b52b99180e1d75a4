"""A hardware file's figures by class: what is the vendor's word, what was measured, what
was fitted to which validation rows, and what is assumed (config/figures.py)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Protocol

from ..config.figures import CLASSES, OVERRIDE, UNCLASSIFIED, Figure

ORDER = (*CLASSES, OVERRIDE, UNCLASSIFIED)


class Figured(Protocol):
    """A file of classed figures: a hardware file or a runtime profile."""

    @property
    def name(self) -> str: ...
    @property
    def source(self) -> str: ...
    @property
    def figures(self) -> tuple[Figure, ...]: ...


def figures_dict(hardware: Figured, kind: str | None = None) -> dict:
    """One hardware's figures (of one class, if given) as plain data, for --json."""
    return {
        "source": hardware.source,
        "figures": [
            {
                "path": f.path,
                "value": f.value,
                "class": f.kind,
                "references": dict(f.references),
                "rows": list(f.rows),
            }
            for f in _chosen(hardware, kind)
        ],
    }


def render_figures(hardware: Figured, kind: str | None = None) -> str:
    """A table of `hardware`'s figures grouped by class, then the references they cite."""
    counts = Counter(f.kind for f in hardware.figures)
    lines = [
        f"{hardware.name} ({_shown(hardware.source)}): {len(hardware.figures)} figures: "
        + ", ".join(f"{counts[k]} {k}" for k in ORDER if counts[k] or k in CLASSES)
    ]
    chosen = _chosen(hardware, kind)
    width = max((len(f.path) for f in chosen), default=0)
    cited: dict[str, str] = {}
    for group in ORDER:
        members = [f for f in chosen if f.kind == group]
        if not members:
            continue
        lines.append(f"  {group}")
        for figure in members:
            lines.append(
                f"    {figure.path:<{width}}  {figure.value:<12}  {_basis(figure)}".rstrip()
            )
            cited.update(figure.references)
    if cited:
        lines.append("  references")
        lines.extend(f"    {key}: {text}" for key, text in cited.items())
    return "\n".join(lines)


def _shown(source: str) -> str:
    """A file's path from the working folder when it is inside it (as a user would type it)."""
    try:
        return str(Path(source).resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return source


def _chosen(hardware: Figured, kind: str | None) -> list[Figure]:
    return [f for f in hardware.figures if kind is None or f.kind == kind]


def _basis(figure: Figure) -> str:
    keys = ", ".join(key for key, _ in figure.references)
    rows = f"on {', '.join(figure.rows)}" if figure.rows else ""
    return "; ".join(part for part in (rows, keys) if part)
