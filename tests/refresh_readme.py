"""Refresh the README's sample outputs after a deliberate change to what they show:

    python -m tests.refresh_readme

Every fenced block right after a line `<!-- output of: COMMAND -->` is replaced by what
COMMAND prints today (tests/test_cli.py checks that they match, but for the wall times a
command prints, which no two runs share).
"""

import re
import shlex
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
WALL_TIME = re.compile(r"\bin \d[\d,.]* s\b")  # "tuned in 30.8 s"
BLOCK = re.compile(r"(<!-- output of: (?P<command>.+?) -->\n```\n)(?P<shown>.*?)(\n?```)", re.S)


def output_of(command: str) -> str:
    args = shlex.split(command)
    assert args[:3] == ["python", "-m", "simulator"], command
    return subprocess.run(
        [sys.executable, *args[1:]], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.rstrip()


def comparable(text: str) -> str:
    """The output with its wall times blanked."""
    return WALL_TIME.sub("in N s", text)


def shown_blocks(readme: str) -> list[tuple[str, str]]:
    return [(m["command"], m["shown"]) for m in BLOCK.finditer(readme)]


def main() -> None:
    path = ROOT / "README.md"
    text = BLOCK.sub(lambda m: m.group(1) + output_of(m["command"]) + "\n```", path.read_text())
    path.write_text(text)
    print("README.md: sample outputs refreshed; check that its prose still matches")


if __name__ == "__main__":
    main()
