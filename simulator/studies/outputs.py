"""The files a command writes: checked before anything runs, written without loss.

Every output path is checked up front, so that a mistake costs one line and no
simulation time: the extension fits the kind of file, the folder exists and
takes a new file, the path is not a folder, not the input, not named twice.
A file that exists is overwritten only when it is one of ours, decided by a
mark a user's file cannot carry by accident (a JSON "format" of
"npu-memsim/...", a PNG "Software" chunk naming us, a sweep CSV header of
named grid fields then exactly our columns: a table a user derived from one,
with an index or a column of notes, is not ours), or when the user passes
--force. Files are written to a temporary name and renamed, so a failed write
never leaves a half-written file where a good one was, and an output that is a
link is replaced by the file: nothing is ever written through a link into the
file it leads to. New files get the usual permissions (the umask's); a
replaced file keeps its own.
"""

from __future__ import annotations

import csv
import errno
import gzip
import json
import os
import re
import stat
import struct
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, TextIO

from ..errors import SimulatorError, printable
from ..version import FORMAT_PREFIX, NAME, format_mark
from .inference_compare import CSV_COLUMNS as INFERENCE_COLUMNS
from .sweep import FIGURES, columns

SUFFIXES = {
    "json": (".json",),
    "trace": (".json", ".json.gz"),  # a Chrome trace, gzipped if asked (Perfetto opens both)
    "png": (".png",),
    "csv": (".csv",),
    "yaml": (".yaml", ".yml"),
}
GZIP_MAGIC = b"\x1f\x8b"
SNIFF_BYTES = 1 << 16  # how much of an existing file is read to recognise it
CSV_TAIL = ["error", *FIGURES]  # a sweep CSV's header: its grid fields, then exactly these


@dataclass(frozen=True)
class Output:
    """One file a command will write: the option that names it, its path and its kind."""

    option: str
    path: Path
    kind: str  # json | trace | png | csv | yaml (a kind whose files are never ours)
    force: bool = False  # --force: a file there that is not ours may be replaced

    def fail(self, problem: str) -> SimulatorError:
        return SimulatorError(printable(f"{self.option} {self.path}: {problem}"))


def check_outputs(outputs: list[Output], inputs: tuple[str | Path, ...] = ()) -> None:
    """Refuse, before any work, every output that could not be written, would replace an
    input (even with --force) or a file that is not ours (unless forced)."""
    seen: dict[Path, Output] = {}
    sources = {real_path(p) for p in inputs}
    for out in outputs:
        where = real_path(out.path)
        if where in seen:
            raise out.fail(f"is also the file of {seen[where].option}; give each its own name")
        seen[where] = out
        if where in sources:
            raise out.fail("that is an input file; write the output to a new file")
        check_output(out)


def check_output(out: Output) -> None:
    suffixes = SUFFIXES[out.kind]
    if not out.path.name.lower().endswith(suffixes):
        raise out.fail(f"the file name must end in {' or '.join(suffixes)}")
    info = _status(out, out.path)
    if info is not None and stat.S_ISDIR(info.st_mode):
        raise out.fail("is a folder; give a file name")
    parent = out.path.parent
    if not os.path.isdir(parent):
        there = "does not exist" if not os.path.lexists(parent) else "is not a folder"
        raise out.fail(f"the folder {str(parent)!r} {there}")
    if info is not None:
        if not stat.S_ISREG(info.st_mode):
            raise out.fail("exists and is not a regular file")
        if not out.force and not is_ours(out.path, out.kind):
            raise out.fail(
                "the file exists and was not written by this simulator; choose "
                "another name or pass --force to overwrite it"
            )
        if not info.st_mode & 0o222 or not os.access(out.path, os.W_OK):
            raise out.fail("the file is read-only")
    _check_writable_folder(out, parent)


def check_plot_folder(
    option: str, folder: Path, names: tuple[str, ...], force: bool, others: Sequence[Output] = ()
) -> None:
    """`run --plot DIR`: the folder may exist or be created in an existing parent; each PNG
    it would hold is checked as an output of its own. It may not be the file of `others`."""
    whole = Output(option, folder, "png", force)
    for other in others:
        if real_path(other.path) == real_path(folder):
            raise whole.fail(f"is also the file of {other.option}; give each its own name")
    info = _status(whole, folder)
    if info is None:
        if not os.path.isdir(folder.parent):
            raise whole.fail(f"the folder {str(folder.parent)!r} does not exist")
        _check_writable_folder(whole, folder.parent)
    elif not stat.S_ISDIR(info.st_mode):
        raise whole.fail("is a file, not a folder")
    else:
        for name in names:
            check_output(Output(option, folder / name, "png", force))


def _status(out: Output, path: Path) -> os.stat_result | None:
    """What is at `path` (links followed), or None when nothing is; a link that leads
    nowhere, a name too long or a place that cannot be looked at is the output's error."""
    try:
        return os.stat(path)
    except FileNotFoundError:
        if os.path.islink(path):
            raise out.fail("is a link that leads nowhere; remove it or give another name") from None
        return None
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise out.fail("is a link in a loop of links; remove it or give another name") from None
        raise out.fail(f"cannot be used: {exc.strerror or exc}") from None


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
        header = head.split(b"\n", 1)[0].decode("utf-8", errors="replace").strip().split(",")
        if header == list(INFERENCE_COLUMNS):  # infer's rows
            return True
        fields = header[: -len(CSV_TAIL)]
        return header[-len(CSV_TAIL) :] == CSV_TAIL and all(fields) and len(fields) >= 1
    if kind == "trace" and head[:2] == GZIP_MAGIC:
        try:
            with gzip.open(path, "rb") as handle:
                head = handle.read(SNIFF_BYTES)
        except (OSError, EOFError):
            return False
    if kind in ("json", "trace"):
        return _JSON_MARK.match(head) is not None
    return False


# Our JSON files open with their mark: {"format": "npu-memsim/...", ...}, or for a Chrome
# trace, whose own keys come first in its format, {"otherData": {"format": "npu-memsim/...
_JSON_MARK = re.compile(
    rb'\s*\{\s*(?:"otherData"\s*:\s*\{\s*)?"format"\s*:\s*"' + re.escape(FORMAT_PREFIX.encode())
)


def _png_software(head: bytes) -> str | None:
    """The text of a PNG's 'Software' tEXt chunk, if it has one before its image data."""
    if head[:8] != b"\x89PNG\r\n\x1a\n":
        return None
    at = 8
    while at + 8 <= len(head):
        length, chunk = struct.unpack(">I4s", head[at : at + 8])
        body = head[at + 8 : at + 8 + length]
        if chunk == b"tEXt" and body.startswith(b"Software\x00"):
            return body[len(b"Software\x00") :].decode("latin-1")
        if chunk in (b"IDAT", b"IEND"):
            return None
        at += 12 + length
    return None


def write_atomically(out: Output, write: Callable[[Path], Any]) -> None:
    """Write through a temporary file in the same folder, then rename it into place (over a
    link, not through it)."""
    temporary = _temporary(out)
    try:
        write(temporary)
        _put_in_place(temporary, out)
    except OSError as exc:
        raise out.fail(f"cannot be written: {exc.strerror or exc}") from None
    finally:
        if os.path.exists(temporary):
            os.unlink(temporary)


def _put_in_place(temporary: Path, out: Output) -> None:
    """Move a finished file to its output path. The path was checked before the run; a file
    another program put there since is replaced only when it is ours or forced, and a path
    still free is taken with a hard link, which fails rather than replace a file created in
    the instant between the look and the move."""
    if not os.path.lexists(out.path):
        try:
            os.link(temporary, out.path, follow_symlinks=False)
        except FileExistsError:
            pass  # it appeared just now: judged below, as any file found there
        except OSError:  # a file system without hard links: the rename is the best there is
            os.replace(temporary, out.path)
            return
        else:
            os.unlink(temporary)
            return
    if not out.force and not is_ours(out.path, out.kind):
        raise out.fail(
            "a file appeared there while the run was going, and it was not written by this "
            "simulator; it is left as it is: choose another name or pass --force"
        )
    os.replace(temporary, out.path)


def _temporary(out: Output) -> Path:
    """A new, empty file beside the output, with the permissions the output will have."""
    handle, temporary = tempfile.mkstemp(
        dir=out.path.parent, prefix=f".{out.path.name}.", suffix=out.path.suffix
    )
    os.close(handle)
    try:
        mode = stat.S_IMODE(os.stat(out.path).st_mode)
    except OSError:
        mode = 0o666 & ~_umask()
    os.chmod(temporary, mode)
    return Path(temporary)


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def write_json(out: Output, kind: str, data: dict) -> None:
    """A JSON output with our mark first."""
    text = json.dumps({"format": format_mark(kind), **data}, indent=2, allow_nan=False) + "\n"
    write_atomically(out, lambda path: path.write_text(text, encoding="utf-8"))


class CsvRows:
    """A sweep's CSV, written as points finish: the header first, then each row as it comes,
    flushed, so an interrupted sweep keeps every finished point. The file takes the place of
    the old one when the first point finishes (a sweep that fails to start leaves any
    earlier file as it was), and `finish()` rewrites it in grid order once every point is
    in."""

    def __init__(self, out: Output, fields: list[str]):
        self.out = out
        self.columns = columns(fields)
        self.handle: TextIO | None = None
        self.written = 0

    def add(self, index: int, row: dict[str, Any]) -> None:
        handle = self.handle
        if handle is None:
            temporary = _temporary(self.out)
            handle = self.handle = open(temporary, "w", newline="", encoding="utf-8")  # noqa: SIM115
            self.writer = csv.DictWriter(handle, fieldnames=self.columns)
            self.writer.writeheader()
            try:
                _put_in_place(temporary, self.out)
            finally:
                if os.path.exists(temporary):
                    os.unlink(temporary)
        self.writer.writerow(_cells(row))
        handle.flush()
        self.written += 1

    def close(self) -> None:
        if self.handle is not None:
            self.handle.close()

    def finish(self, rows: list[dict[str, Any]]) -> None:
        """Once every point is in: the same rows, in grid order."""
        self.close()
        write_csv(self.out, self.columns, rows)


def write_csv(out: Output, columns: Sequence[str], rows: list[dict[str, Any]]) -> None:
    """A CSV written whole (a sweep's grows as its points finish: CsvRows)."""

    def write(path: Path) -> None:
        with open(path, "w", newline="", encoding="utf-8") as handle:
            writer = csv.DictWriter(handle, fieldnames=list(columns))
            writer.writeheader()
            writer.writerows(_cells(row) for row in rows)

    write_atomically(out, write)


def _cells(row: dict[str, Any]) -> dict[str, Any]:
    return {k: "" if v is None else v for k, v in row.items()}
