"""Every preset figure has its class; a fitted figure names calibration rows only, never a
holdout row; a hardware file's `figures:` is checked as strictly as its figures."""

import json
import sys
from pathlib import Path

import pytest

from simulator import cli
from simulator.config.figures import CITED, CLASSES, OVERRIDE, UNCLASSIFIED
from simulator.config.hardware import PRESET_DIR, load_hardware, parse_hardware, preset_names
from simulator.config.runtime import runtime_names
from simulator.config.strict import read_yaml
from simulator.errors import ConfigError

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

from holdout_cases import HOLDOUT  # noqa: E402
from validation_cases import CALIBRATION  # noqa: E402


@pytest.mark.parametrize("name", preset_names())
def test_every_preset_figure_has_a_class_and_a_cited_class_its_source(name):
    figures = load_hardware(name).figures
    assert figures and {f.kind for f in figures} <= set(CLASSES)
    for figure in figures:
        assert figure.references or figure.kind not in CITED, figure
        assert bool(figure.rows) == (figure.kind == "fitted"), figure


def test_fitted_figures_name_calibration_rows_never_holdout_ones():
    calibration = {case.id for case in CALIBRATION}
    holdout = {case.id for case in HOLDOUT}
    assert not calibration & holdout, "a row is in both splits"
    fitted = {
        (name, f.path): set(f.rows)
        for name in preset_names()
        for f in load_hardware(name).figures
        if f.kind == "fitted"
    }
    assert fitted, "the presets' fits are named (h100's L0C, ascend910b's MTE2 packets, ...)"
    for where, rows in fitted.items():
        assert rows <= calibration, (where, rows - calibration)


def tiny_raw() -> dict:
    return read_yaml(PRESET_DIR / "tiny.yaml")


def classed(raw: dict, figures: dict, references: dict | None = None):
    """`raw` with this figures: section (and references:), parsed."""
    raw = {**raw, "figures": figures, **({"references": references} if references else {})}
    return parse_hardware(raw, "chip.yaml")


def problems(raw: dict, figures, references: dict | None = None) -> list[str]:
    with pytest.raises(ConfigError) as info:
        classed(raw, figures, references)
    return info.value.problems


def test_the_most_specific_key_classes_a_figure_and_a_section_covers_the_rest():
    raw = tiny_raw()
    everything = {key: "assumption" for key in raw if key not in ("name", "figures")}
    chip = classed(
        raw,
        {**everything, "HBM.bandwidth": "datasheet [v]", "L2.capacity": "fitted on G1, D5a"},
        {"v": "the vendor's datasheet"},
    )
    kinds = {f.path: (f.kind, f.references, f.rows) for f in chip.figures}
    assert kinds["HBM.bandwidth"] == ("datasheet", (("v", "the vendor's datasheet"),), ())
    assert kinds["L2.capacity"] == ("fitted", (), ("G1", "D5a"))
    assert kinds["HBM.latency"] == ("assumption", (), ())
    assert kinds["MTE2.paths.HBM->L1"] == ("assumption", (), ())


@pytest.mark.parametrize(
    ("entry", "references", "message"),
    [
        ("guess", None, "must be a class (datasheet, microbenchmark, vendor model"),
        ("datasheet", None, "a datasheet figure cites its source: add [key]"),
        ("microbenchmark [x]", None, "cites x, which references: does not name"),
        ("fitted", None, "a fitted figure names the validation rows it was fitted on"),
        ("assumption on G1", None, "only a fitted figure names rows"),
        ("assumption", {"x": "a paper"}, "references.x: is cited by no figure"),
    ],
)
def test_a_wrong_class_entry_is_refused_with_its_path(entry, references, message):
    raw = tiny_raw()
    everything = {key: "assumption" for key in raw if key not in ("name", "figures")}
    found = problems(raw, {**everything, "HBM.bandwidth": entry}, references)
    assert any(message in p for p in found), found


def test_a_figure_without_class_and_a_key_naming_nothing_are_refused():
    raw = tiny_raw()
    everything = {key: "assumption" for key in raw if key not in ("name", "figures", "HBM")}
    found = problems(raw, {**everything, "HBM.capacity": "assumption", "HBM.speed": "assumption"})
    assert "figures.HBM.speed: names no figure or section of this file" in found
    assert (
        "figures: 3 figures without a class (HBM.bandwidth, HBM.latency, HBM.efficiency): "
        "class each, or a section for all its figures (e.g. `HBM: assumption`)"
    ) in found


def test_an_override_is_its_own_class_and_a_file_without_figures_is_unclassified(tmp_path):
    chip = load_hardware("h100", [("HBM.bandwidth", "3TB/s")])
    [bandwidth] = [f for f in chip.figures if f.path == "HBM.bandwidth"]
    assert (bandwidth.kind, bandwidth.value) == (OVERRIDE, "3TB/s")
    raw = tiny_raw()
    del raw["figures"]
    chip = parse_hardware(raw, "chip.yaml")
    assert {f.kind for f in chip.figures} == {UNCLASSIFIED}


def test_the_figures_command_lists_them_by_class(capsys):
    assert cli.main(["figures", "ascend910b", "--class", "fitted"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("ascend910b (")
    assert "  fitted\n" in out and "MTE2.packet_bytes" in out and "on A2a, A2b" in out
    assert "  assumption\n" not in out and "  references\n    cm: " in out
    assert cli.main(["figures", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert set(data) == set(preset_names()) | set(runtime_names())
    every = [f for chip in data.values() for f in chip["figures"]]
    assert {f["class"] for f in every} <= set(CLASSES)
    assert cli.main(["figures", "no-such-chip"]) == 2
    assert "no hardware preset named" in capsys.readouterr().err
