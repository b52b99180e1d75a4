"""Run the command line as a user at a terminal runs it: standard input, output and error on a
pseudo-terminal, so that whatever the program does only when it sees a terminal (progress
bars) runs too. The suite's other tests pipe the output, which hides that path."""

from __future__ import annotations

import fcntl
import os
import pty
import select
import struct
import subprocess
import sys
import termios
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def run_in_terminal(args: list[str], cwd: Path = ROOT, timeout_s: float = 300) -> tuple[int, str]:
    """`python -m simulator ARGS` on a pseudo-terminal: its exit code and all it printed."""
    leader, follower = pty.openpty()
    # a terminal of 40 rows of 100 columns (a new pseudo-terminal has none, and a progress
    # bar drawn in zero columns is drawn as nothing)
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 100, 0, 0))
    process = subprocess.Popen(
        [sys.executable, "-m", "simulator", *args],
        cwd=cwd,
        stdin=follower,
        stdout=follower,
        stderr=follower,
        close_fds=True,
        env={**os.environ, "TERM": "xterm"},
    )
    os.close(follower)
    chunks = []
    deadline = time.monotonic() + timeout_s
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([leader], [], [], 0.5)
            if not ready:
                if process.poll() is not None:
                    break
                continue
            try:
                data = os.read(leader, 65536)
            except OSError:  # the terminal closed: the program ended
                break
            if not data:
                break
            chunks.append(data)
        else:
            process.kill()
            raise TimeoutError(f"{args} ran past {timeout_s} s at a terminal")
        returncode = process.wait(timeout=30)
    finally:
        os.close(leader)
    return returncode, b"".join(chunks).decode("utf-8", errors="replace")
