"""Code hygiene the style guide asks for, checked rather than hoped for."""

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _passes(*command: str) -> None:
    """A checking tool run on the checkout finds nothing."""
    result = subprocess.run(
        [sys.executable, "-m", *command], cwd=ROOT, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_ruff_clean():
    _passes("ruff", "check", "simulator", "tests", "benchmarks")


def test_ruff_formatted():
    """One format for everyone (`ruff format simulator tests benchmarks` applies it)."""
    _passes("ruff", "format", "--check", "simulator", "tests", "benchmarks")


def test_mypy_clean():
    """The package type-checks (settings in setup.cfg's [mypy])."""
    _passes("mypy", "--no-error-summary")


def test_library_does_not_print():
    """Only the CLI prints; the library returns values."""
    offenders = [
        str(path.relative_to(ROOT))
        for path in (ROOT / "simulator").rglob("*.py")
        if path.name not in ("cli.py", "cli_infer.py", "cli_serve.py", "__main__.py")
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
