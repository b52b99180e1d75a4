"""Nothing a user wrote is overwritten without --force: every command, run with a random mix
of output options in a folder full of user files and of files the simulator wrote before."""

import errno
import gzip
import io
import os
import shutil
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from simulator.cli import main

from .test_hostile import BASE
from .test_hostile_more import USER_PNG

USER_FILES = {
    "notes.json": '{"points": [1, 2], "provenance": "my own notes"}',
    "events.json": '{"traceEvents": [], "otherData": {"format": "mine"}}',
    "picture.png": USER_PNG,
    "data.csv": "error,time_us,cycles\n,1,2\n",
    "tuned.yaml": "name: my tuned copy\n",
    "notes.txt": "dear diary",
    "plots/timeline.png": USER_PNG,
}
# Every option that writes a file, per command, and the kind of name it takes.
OPTIONS = {
    "run": {"--json": ".json", "--trace": ".json", "--plot": "/"},
    "compare": {"--json": ".json"},
    "sweep": {"--csv": ".csv", "--json": ".json", "--plot": ".png"},
    "tune": {"--write": ".yaml"},
    "plan": {},
}
EXTRA = {
    "sweep": ["--grid", "params.m=16,32", "--workers", "1"],
    "tune": ["--workers", "1"],
    "compare": [],
    "run": [],
    "plan": [],
}


@pytest.fixture(scope="module")
def ours(tmp_path_factory) -> Path:
    """Files this simulator wrote: a report, a trace, a comparison, a sweep's CSV, JSON and
    plot, a folder of run plots."""
    folder = tmp_path_factory.mktemp("ours")
    (folder / "w.yaml").write_text(BASE)
    for args in (
        ["run", "w.yaml", "--json", "report.json", "--trace", "trace.json", "--plot", "our_plots"],
        ["compare", "w.yaml", "--json", "compare.json"],
        [
            "sweep",
            "w.yaml",
            "--grid",
            "params.m=16",
            "--workers",
            "1",
            "--csv",
            "sweep.csv",
            "--json",
            "sweep.json",
            "--plot",
            "sweep.png",
        ],
    ):
        assert _in(folder, args) == 0
    (folder / "w.yaml").unlink()
    return folder


def _in(folder: Path, args: list[str]) -> int:
    import contextlib

    previous = os.getcwd()
    os.chdir(folder)
    try:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            return main(args)
    finally:
        os.chdir(previous)


def state(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


NAMES = [
    "new.json",
    "new.csv",
    "new.png",
    "new.yaml",
    "new_plots",
    *USER_FILES,
    "plots",
    "report.json",
    "trace.json",
    "compare.json",
    "sweep.csv",
    "sweep.json",
    "sweep.png",
    "our_plots",
    "w.yaml",
]


def targets(suffix: str):
    """Mostly names an option takes (new, the user's or ours), sometimes any name at all."""
    fitting = [n for n in NAMES if n.endswith(suffix) or suffix == "/" and "." not in n]
    return st.one_of(st.sampled_from(fitting), st.sampled_from(NAMES))


@st.composite
def commands(draw):
    command = draw(st.sampled_from(sorted(OPTIONS)))
    args = [command, "w.yaml", *EXTRA[command]]
    for option, suffix in OPTIONS[command].items():
        if draw(st.booleans()):
            args += [option, draw(targets(suffix))]
    force = draw(st.booleans())
    return args + (["--force"] if force and command != "plan" else []), force


@settings(
    max_examples=30,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(command=commands())
def test_no_file_changes_without_force(tmp_path_factory, ours, command):
    args, force = command
    folder = tmp_path_factory.mktemp("user")
    shutil.copytree(ours, folder, dirs_exist_ok=True)
    for name, content in USER_FILES.items():
        path = folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content if isinstance(content, bytes) else content.encode())
    (folder / "w.yaml").write_text(BASE)
    mine = set(USER_FILES) | {"w.yaml"}
    before = state(folder)

    code = _in(folder, args)

    assert code in (0, 2)
    after = state(folder)
    targets = {Path(t) for t in args[1:]}
    for name, content in before.items():
        if after.get(name) == content:
            continue
        # a changed file was named by an output option (itself or its plot folder), and
        # it was ours or the user forced it; the workload itself is never replaced
        assert name != "w.yaml", args
        assert Path(name) in targets or Path(name).parent in targets, (name, args)
        assert force or name not in mine, (name, args)


def test_our_marks_are_read_from_the_start_of_a_file_however_large(tmp_path):
    from simulator.studies.outputs import is_ours

    trace = tmp_path / "t.json"
    trace.write_text(
        '{"otherData": {"format": "npu-memsim/trace"}, "traceEvents": ['
        + "{}," * 2_000_000
        + "{}]}"
    )
    assert is_ours(trace, "json")
    report = tmp_path / "r.json"
    report.write_text('{\n  "format": "npu-memsim/report",\n  "workload": "x"\n}\n')
    assert is_ours(report, "json")
    zipped = tmp_path / "t.json.gz"
    zipped.write_bytes(gzip.compress(trace.read_bytes()))
    assert is_ours(zipped, "trace") and not is_ours(zipped, "json")
    zipped.write_bytes(gzip.compress(b'{"traceEvents": []}'))
    assert not is_ours(zipped, "trace")
    zipped.write_bytes(b"\x1f\x8b not gzip at all")
    assert not is_ours(zipped, "trace")
    for text in (
        '{"format": "mine"}',
        '{"workload": 1, "format": "npu-memsim/report"}',
        '["npu-memsim/report"]',
        "",
        "\xff",
    ):
        (tmp_path / "u.json").write_text(text)
        assert not is_ours(tmp_path / "u.json", "json"), text


@pytest.mark.parametrize(
    "args, output",
    [
        (["run", "w.yaml", "--json", "out.json"], "out.json"),
        (["run", "w.yaml", "--trace", "out.json"], "out.json"),
        (["run", "w.yaml", "--plot", "plots"], "plots/roofline.png"),
        (
            ["sweep", "w.yaml", "--grid", "params.m=16,32", "--workers", "1", "--csv", "out.csv"],
            "out.csv",
        ),
        (["tune", "w.yaml", "--workers", "1", "--write", "out.yaml"], "out.yaml"),
    ],
)
def test_an_output_that_is_a_link_is_replaced_never_written_through(tmp_path, args, output):
    """With --force the link is replaced by the new file; the file it led to, the user's,
    keeps every byte (and a file written new gets the usual permissions, not 0600)."""
    (tmp_path / "w.yaml").write_text(BASE)
    target = tmp_path / "elsewhere" / "precious.txt"
    target.parent.mkdir()
    target.write_text("the user's own work")
    link = tmp_path / output
    link.parent.mkdir(exist_ok=True)
    link.symlink_to(target)

    assert _in(tmp_path, args) == 2  # not ours: refused without --force
    assert _in(tmp_path, [*args, "--force"]) == 0

    assert target.read_text() == "the user's own work"
    assert link.is_file() and not link.is_symlink()
    umask = os.umask(0)
    os.umask(umask)
    assert link.stat().st_mode & 0o777 == 0o666 & ~umask


def test_a_replaced_file_keeps_its_permissions(tmp_path):
    (tmp_path / "w.yaml").write_text(BASE)
    assert _in(tmp_path, ["run", "w.yaml", "--json", "r.json"]) == 0
    (tmp_path / "r.json").chmod(0o640)
    assert _in(tmp_path, ["run", "w.yaml", "--json", "r.json"]) == 0
    assert (tmp_path / "r.json").stat().st_mode & 0o777 == 0o640


def test_a_full_standard_output_is_one_line_not_a_traceback(tmp_path, monkeypatch, capsys):
    """Standard output sent to a full disk (`> /dev/full`): one line, exit 1."""

    class Full(io.StringIO):
        def write(self, text):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    (tmp_path / "w.yaml").write_text(BASE)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "stdout", Full())
    assert main(["run", "w.yaml"]) == 1
    assert capsys.readouterr().err == "error: No space left on device\n"
