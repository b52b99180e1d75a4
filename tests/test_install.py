"""A real install: every package and every preset ships in the wheel, and the installed
package runs the main job from any directory."""

import configparser
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def listed_packages() -> set[str]:
    config = configparser.ConfigParser()
    config.read(ROOT / "setup.cfg")
    return set(config["options"]["packages"].split())


def test_setup_cfg_lists_every_package():
    found = {
        ".".join(p.parent.relative_to(ROOT).parts)
        for p in (ROOT / "simulator").rglob("__init__.py")
    }
    data = {"simulator.hw_models", "simulator.model_configs"}
    data |= {"simulator.example_workloads", "simulator.example_notebooks"}
    assert listed_packages() == found | data


def test_version_flag():
    from simulator import __version__

    result = subprocess.run(
        [sys.executable, "-m", "simulator", "--version"], capture_output=True, text=True, cwd=ROOT
    )
    assert result.returncode == 0
    assert result.stdout.strip() == f"npu-memsim {__version__}"


@pytest.mark.slow
def test_built_wheel_runs_the_main_job_from_another_directory(tmp_path):
    build = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            str(tmp_path / "dist"),
            str(ROOT),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert build.returncode == 0, build.stderr
    wheel = next((tmp_path / "dist").glob("*.whl"))
    names = zipfile.ZipFile(wheel).namelist()
    for preset in (ROOT / "hw_models").glob("**/*.yaml"):
        assert f"simulator/hw_models/{preset.relative_to(ROOT / 'hw_models')}" in names
    for config in (ROOT / "workloads" / "models").glob("*.json"):
        assert f"simulator/model_configs/{config.name}" in names
    for folder, pattern in (("workloads", "*.yaml"), ("notebooks", "**/*.ipynb")):
        for example in (ROOT / folder).glob(pattern):
            assert f"simulator/example_{folder}/{example.relative_to(ROOT / folder)}" in names
    assert any(n.endswith(".dist-info/licenses/LICENSE") or n.endswith("/LICENSE") for n in names)
    # install the wheel alone into a folder of its own and run it from an unrelated folder
    target = tmp_path / "site"
    install = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--no-deps",
            "-q",
            "--target",
            str(target),
            str(wheel),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert install.returncode == 0, install.stderr
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = {**os.environ, "PYTHONPATH": str(target)}
    where = subprocess.run(
        [sys.executable, "-c", "import simulator; print(simulator.__file__)"],
        capture_output=True,
        text=True,
        cwd=elsewhere,
        env=env,
    )
    assert Path(where.stdout.strip()).is_relative_to(target)
    copied = subprocess.run(  # the shipped examples, copied out as a user starts
        [sys.executable, "-m", "simulator", "examples", "--copy", "."],
        capture_output=True,
        text=True,
        cwd=elsewhere,
        env=env,
    )
    assert copied.returncode == 0, copied.stderr
    assert (elsewhere / "notebooks" / "01_decode_is_bandwidth_bound.ipynb").is_file()
    result = subprocess.run(  # through the console command pip installed
        [str(target / "bin" / "npu-memsim"), "run", "workloads/ffn_decode.yaml"],
        capture_output=True,
        text=True,
        cwd=elsewhere,
        env=env,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    assert "llama7b-ffn-decode on ascend910" in result.stdout
    shipped = subprocess.run(  # a shipped model config, found inside the package
        [sys.executable, "-m", "simulator", "infer", "llama2-7b", "--prompt", "8"]
        + ["--generate", "0", "--json", "-"],
        capture_output=True,
        text=True,
        cwd=elsewhere,
        env=env,
        timeout=300,
    )
    assert shipped.returncode == 0, shipped.stderr
    assert '"model": "llama2-7b"' in shipped.stdout
