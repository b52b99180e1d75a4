"""Code hygiene the style guide asks for, checked rather than hoped for."""

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_ruff_clean():
    result = subprocess.run(
        [sys.executable, "-m", "ruff", "check", "simulator", "tests", "benchmarks"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_ruff_formatted():
    """One format for everyone (`ruff format simulator tests benchmarks` applies it)."""
    result = subprocess.run(
        [sys.executable, "-m", "ruff", "format", "--check", "simulator", "tests", "benchmarks"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_mypy_clean():
    """The package type-checks (settings in setup.cfg's [mypy])."""
    result = subprocess.run(
        [sys.executable, "-m", "mypy", "--no-error-summary"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_library_does_not_print():
    """Only the CLI prints; the library returns values."""
    offenders = [
        str(path.relative_to(ROOT))
        for path in (ROOT / "simulator").rglob("*.py")
        if path.name not in ("cli.py", "__main__.py")
        and re.search(r"^\s*print\(|logging\.basicConfig", path.read_text(), re.M)
    ]
    assert offenders == []


def test_no_module_is_overlong():
    long = {
        str(p.relative_to(ROOT)): n
        for p in (ROOT / "simulator").rglob("*.py")
        if (n := len(p.read_text().splitlines())) > 600
    }
    assert long == {}
