"""The files a command writes: checked before anything runs, written without loss.

Every output path is checked up front, so that a mistake costs one line and no
simulation time: the extension fits the kind of file, the folder exists and
takes a new file, the path is not a folder, not the input, not named twice.
A file that exists is overwritten only when it is one of ours, decided by a
mark a user's file cannot carry by accident (a JSON "format" of
"npu-memsim/...", a PNG "Software" chunk naming us, a sweep CSV header with
our exact run of metric columns), or when the user passes --force. Files are
written to a temporary name and renamed, so a failed write never leaves a
half-written file where a good one was.
"""

from __future__ import annotations

import json
import os
import re
import struct
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from .errors import SimulatorError
from .sweep import METRICS
from .version import FORMAT_PREFIX, NAME, format_mark

SUFFIXES = {"json": (".json",), "png": (".png",), "csv": (".csv",), "yaml": (".yaml", ".yml")}
SNIFF_BYTES = 1 << 16        # how much of an existing file is read to recognise it
CSV_MARK = ",".join(("error", *METRICS))


@dataclass(frozen=True)
class Output:
    """One file a command will write: the option that names it, its path and its kind."""
    option: str
    path: Path
    kind: str                 # json | png | csv | yaml (a kind whose files are never ours)

    def fail(self, problem: str) -> SimulatorError:
        return SimulatorError(f"{self.option} {self.path}: {problem}")


def check_outputs(outputs: list[Output], force: bool, inputs: tuple[str, ...] = ()) -> None:
    """Refuse, before any work, every output that could not be written or would overwrite a
    file that is not ours (unless `force`)."""
    seen: dict[Path, Output] = {}
    sources = {real_path(p) for p in inputs}
    for out in outputs:
        where = real_path(out.path)
        if where in seen:
            raise out.fail(f"is also the file of {seen[where].option}; give each its own name")
        seen[where] = out
        if where in sources:
            raise out.fail("that is an input file; write the output to a new file")
        check_output(out, force)


def check_output(out: Output, force: bool) -> None:
    suffixes = SUFFIXES[out.kind]
    if out.path.suffix.lower() not in suffixes:
        raise out.fail(f"the file name must end in {' or '.join(suffixes)}")
    if out.path.is_dir():
        raise out.fail("is a folder; give a file name")
    if os.path.islink(out.path) and not out.path.exists():
        raise out.fail("is a link that leads nowhere; remove it or give another name")
    parent = out.path.parent
    if not parent.exists():
        raise out.fail(f"the folder {str(parent)!r} does not exist")
    if not parent.is_dir():
        raise out.fail(f"{str(parent)!r} is not a folder")
    if out.path.exists():
        if not out.path.is_file():
            raise out.fail("exists and is not a regular file")
        if not force and not is_ours(out.path, out.kind):
            raise out.fail("the file exists and was not written by this simulator; choose "
                           "another name or pass --force to overwrite it")
    _check_writable_folder(out, parent)


def check_plot_folder(option: str, folder: Path, names: tuple[str, ...], force: bool) -> None:
    """`run --plot DIR`: the folder may exist or be created in an existing parent; each PNG
    it would hold is checked as an output of its own."""
    if folder.exists() and not folder.is_dir():
        raise SimulatorError(f"{option} {folder}: is a file, not a folder")
    if not folder.exists() and not real_path(folder).parent.is_dir():
        raise SimulatorError(f"{option} {folder}: the folder {str(folder.parent)!r} does not "
                             "exist")
    outputs = [Output(option, folder / name, "png") for name in names]
    if folder.is_dir():
        for out in outputs:
            check_output(out, force)
    else:
        _check_writable_folder(outputs[0], real_path(folder).parent)


def real_path(path: str | Path) -> Path:
    """The path with links followed; unlike Path.resolve() it never raises (a link loop is
    left as it is, for the check or the read that follows to refuse)."""
    return Path(os.path.realpath(path))


def _check_writable_folder(out: Output, folder: Path) -> None:
    """Try what the write will do: create a file in the folder (and remove it at once)."""
    try:
        with tempfile.NamedTemporaryFile(dir=folder, prefix=".npu-memsim-check-"):
            pass
    except OSError as exc:
        raise out.fail(f"cannot write in {str(folder)!r}: {exc.strerror or exc}") from None
    if out.path.exists() and not os.access(out.path, os.W_OK):
        raise out.fail("the file is read-only")


def is_ours(path: Path, kind: str) -> bool:
    """Whether an existing file carries our mark (see the module docstring); only its start
    is read, however large it is."""
    try:
        with open(path, "rb") as handle:
            head = handle.read(SNIFF_BYTES)
    except OSError:
        return False
    if kind == "png":
        return (_png_software(head) or "").startswith(f"{NAME} ")
    if kind == "csv":
        header = head.split(b"\n", 1)[0].decode("utf-8", errors="replace").strip()
        return f",{CSV_MARK}," in f",{header},"
    if kind == "json":
        return _JSON_MARK.match(head) is not None
    return False


# Our JSON files open with their mark: {"format": "npu-memsim/...", ...}, or for a Chrome
# trace, whose own keys come first in its format, {"otherData": {"format": "npu-memsim/...
_JSON_MARK = re.compile(rb'\s*\{\s*(?:"otherData"\s*:\s*\{\s*)?"format"\s*:\s*"'
                        + re.escape(FORMAT_PREFIX.encode()))


def _png_software(head: bytes) -> str | None:
    """The text of a PNG's 'Software' tEXt chunk, if it has one before its image data."""
    if head[:8] != b"\x89PNG\r\n\x1a\n":
        return None
    at = 8
    while at + 8 <= len(head):
        length, chunk = struct.unpack(">I4s", head[at:at + 8])
        body = head[at + 8:at + 8 + length]
        if chunk == b"tEXt" and body.startswith(b"Software\x00"):
            return body[len(b"Software\x00"):].decode("latin-1")
        if chunk in (b"IDAT", b"IEND"):
            return None
        at += 12 + length
    return None


def write_atomically(out: Output, write: Callable[[Path], Any]) -> None:
    """Write through a temporary file in the same folder, then rename it into place."""
    handle, temporary = tempfile.mkstemp(dir=out.path.parent, prefix=f".{out.path.name}.",
                                         suffix=out.path.suffix)
    os.close(handle)
    try:
        write(Path(temporary))
        os.replace(temporary, out.path)
    except OSError as exc:
        raise out.fail(f"cannot be written: {exc.strerror or exc}") from None
    finally:
        if os.path.exists(temporary):
            os.unlink(temporary)


def write_json(out: Output, kind: str, data: dict) -> None:
    """A JSON output with our mark first."""
    text = json.dumps({"format": format_mark(kind), **data}, indent=2) + "\n"
    write_atomically(out, lambda path: path.write_text(text, encoding="utf-8"))
