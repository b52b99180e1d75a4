"""The example workloads and labs that ship with the package, and copying them out.

An installed package holds them as simulator/example_workloads and
simulator/example_notebooks (setup.cfg maps the repository's top-level folders there); a
source checkout reads the top-level folders themselves, so both list the same files."""

from __future__ import annotations

import filecmp
import json
import shutil
import textwrap
from dataclasses import dataclass
from pathlib import Path

from .errors import SimulatorError

# folder -> its examples' patterns (the labs' answer keys in a folder of their own)
FOLDERS = {"workloads": ("*.yaml",), "notebooks": ("*.ipynb", "answers/*.ipynb")}
ABOUT_CHARS = 72  # an example's line in the listing, beside its name


@dataclass(frozen=True)
class Example:
    folder: str  # "workloads" or "notebooks"
    name: str  # its path within the folder: ffn_decode.yaml, answers/01_....ipynb
    path: Path
    about: str  # one line: a workload's first comment, a lab's title


def folder(name: str) -> Path:
    """Where the examples of folder `name` are: in the package once installed, else in the
    checkout."""
    package = Path(__file__).resolve().parent
    shipped = package / f"example_{name}"
    return shipped if shipped.is_dir() else package.parent / name


def examples() -> list[Example]:
    """Every shipped example, workloads first, each folder in name order."""
    return [
        Example(name, path.relative_to(folder(name)).as_posix(), path, _about(path))
        for name, patterns in FOLDERS.items()
        for pattern in patterns
        for path in sorted(folder(name).glob(pattern))
    ]


def _about(path: Path) -> str:
    """A workload's first sentence (its opening comment), or a lab's first heading, cut to
    ABOUT_CHARS."""
    if path.suffix == ".ipynb":
        cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
        lines = ("".join(cell["source"]) for cell in cells if cell["cell_type"] == "markdown")
        heading = next((line for text in lines for line in text.splitlines() if line), "")
        return textwrap.shorten(heading.lstrip("# "), ABOUT_CHARS, placeholder=" ...")
    comment = []  # the file's first comment block, up to its first full stop
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.startswith("#"):
            break
        comment.append(line.lstrip("# ").strip())
    sentence = " ".join(comment).split(". ")[0].rstrip(".")
    return textwrap.shorten(sentence, ABOUT_CHARS, placeholder=" ...")


def listing(prog: str) -> str:
    """What `examples` prints: each folder's examples, one line each, and how to use them
    (`prog`: how the user calls the simulator)."""
    shown = examples()
    width = max(len(e.name) for e in shown)
    uses = {"workloads": f"{prog} run FILE", "notebooks": "jupyter lab FILE"}
    lines = []
    for name, use in uses.items():
        lines.append(f"{name} ({use}):")
        lines += [f"  {e.name:{width}}  {e.about}" for e in shown if e.folder == name]
        lines.append("")
    return "\n".join([*lines, f"copy them into a folder of your own: {prog} examples --copy DIR"])


def copy_examples(destination: Path, force: bool = False) -> str:
    """Copy every example into destination/workloads and destination/notebooks (the labs
    find the workloads beside them there) and say what was written. A file already there
    that differs is not overwritten unless `force`: the refusal names them all first."""
    plan = [(e.path, destination / e.folder / e.name) for e in examples()]
    differing = [str(to) for source, to in plan if to.exists() and not _same(source, to)]
    if differing and not force:
        more = len(differing) - 3
        shown = ", ".join(differing[:3]) + (f" and {more} more" if more > 0 else "")
        one = len(differing) == 1
        raise SimulatorError(
            f"examples --copy: {shown} already {'exists' if one else 'exist'} and "
            f"{'differs' if one else 'differ'} from the shipped "
            f"example{'' if one else 's'}; pass --force to overwrite"
        )
    written = 0
    for source, to in plan:
        if to.exists() and _same(source, to):
            continue
        to.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source, to)
        written += 1
    where = " and ".join(str(destination / name) for name in FOLDERS)
    if not written:
        return f"{where} already hold every example"
    return f"copied {written} file{'s' * (written != 1)} into {where}"


def _same(a: Path, b: Path) -> bool:
    return b.is_file() and filecmp.cmp(a, b, shallow=False)


def missing_file_hint(path: str, prog: str) -> str:
    """For a workload file that is not there: the shipped example of that name, if any, and
    how to get it (`prog`: how the user calls the simulator)."""
    name = Path(path).name
    stem = name if name.endswith((".yaml", ".yml")) else f"{name}.yaml"
    if stem in {example.name for example in examples() if example.folder == "workloads"}:
        return f"; '{stem}' is a shipped example: `{prog} examples --copy .` puts it in ./workloads"
    return ""
