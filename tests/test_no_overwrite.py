"""Nothing a user wrote is overwritten without --force: every command, run with a random mix
of output options in a folder full of user files and of files the simulator wrote before."""

import shutil
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
EXTRA = {"sweep": ["--grid", "params.m=16,32", "--workers", "1"], "tune": ["--workers", "1"],
         "compare": [], "run": [], "plan": []}


@pytest.fixture(scope="module")
def ours(tmp_path_factory) -> Path:
    """Files this simulator wrote: a report, a trace, a comparison, a sweep's CSV, JSON and
    plot, a folder of run plots."""
    folder = tmp_path_factory.mktemp("ours")
    (folder / "w.yaml").write_text(BASE)
    for args in (["run", "w.yaml", "--json", "report.json", "--trace", "trace.json", "--plot",
                  "our_plots"],
                 ["compare", "w.yaml", "--json", "compare.json"],
                 ["sweep", "w.yaml", "--grid", "params.m=16", "--workers", "1", "--csv",
                  "sweep.csv", "--json", "sweep.json", "--plot", "sweep.png"]):
        assert _in(folder, args) == 0
    (folder / "w.yaml").unlink()
    return folder


def _in(folder: Path, args: list[str]) -> int:
    import contextlib
    import io
    import os

    previous = os.getcwd()
    os.chdir(folder)
    try:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            return main(args)
    finally:
        os.chdir(previous)


def state(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


NAMES = ["new.json", "new.csv", "new.png", "new.yaml", "new_plots", *USER_FILES, "plots",
         "report.json", "trace.json", "compare.json", "sweep.csv", "sweep.json", "sweep.png",
         "our_plots", "w.yaml"]


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


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                 HealthCheck.function_scoped_fixture])
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
    from simulator.outputs import is_ours

    trace = tmp_path / "t.json"
    trace.write_text('{"otherData": {"format": "npu-memsim/trace"}, "traceEvents": ['
                     + "{}," * 2_000_000 + "{}]}")
    assert is_ours(trace, "json")
    report = tmp_path / "r.json"
    report.write_text('{\n  "format": "npu-memsim/report",\n  "workload": "x"\n}\n')
    assert is_ours(report, "json")
    for text in ('{"format": "mine"}', '{"workload": 1, "format": "npu-memsim/report"}',
                 '["npu-memsim/report"]', "", "\xff"):
        (tmp_path / "u.json").write_text(text)
        assert not is_ours(tmp_path / "u.json", "json"), text
