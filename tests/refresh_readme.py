"""Refresh the README's sample output after a deliberate change to the report:

    python -m tests.refresh_readme
"""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MARK = "## What the main job prints\n\n```\n"


def main() -> None:
    out = subprocess.run([sys.executable, "-m", "simulator", "run", "workloads/ffn_decode.yaml"],
                         cwd=ROOT, capture_output=True, text=True, check=True).stdout.rstrip()
    readme = (ROOT / "README.md").read_text()
    head, rest = readme.split(MARK, 1)
    tail = rest.split("\n```", 1)[1]
    (ROOT / "README.md").write_text(head + MARK + out + "\n```" + tail)
    print("README.md: sample output refreshed; check that its prose still matches")


if __name__ == "__main__":
    main()
