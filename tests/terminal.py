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
    code, _, shown = _run(args, cwd, timeout_s, stdout_piped=False)
    return code, shown


def run_with_stderr_at_terminal(args: list[str], timeout_s: float = 300) -> tuple[int, str, str]:
    """`python -m simulator ARGS` with its standard input and error on a pseudo-terminal and
    its output on a pipe, as `cmd > file` at a terminal: the exit code, the output, and what
    the terminal showed. The progress bars are drawn (they look at standard error), and the
    output is what a pipe gets, so a README block can be checked from the same run."""
    return _run(args, ROOT, timeout_s, stdout_piped=True)


def _run(args: list[str], cwd: Path, timeout_s: float, stdout_piped: bool) -> tuple[int, str, str]:
    """The exit code, the output if piped (else empty) and what the terminal showed."""
    leader, follower = pty.openpty()
    # a terminal of 40 rows of 100 columns (a new pseudo-terminal has none, and a progress
    # bar drawn in zero columns is drawn as nothing)
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 100, 0, 0))
    process = subprocess.Popen(
        [sys.executable, "-m", "simulator", *args],
        cwd=cwd,
        stdin=follower,
        stdout=subprocess.PIPE if stdout_piped else follower,
        stderr=follower,
        close_fds=True,
        env={**os.environ, "TERM": "xterm"},
    )
    os.close(follower)
    streams = {leader: []}
    if process.stdout is not None:
        streams[process.stdout.fileno()] = []
    open_fds = set(streams)
    deadline = time.monotonic() + timeout_s
    try:
        while open_fds and time.monotonic() < deadline:
            ready, _, _ = select.select(sorted(open_fds), [], [], 0.5)
            if not ready:
                if process.poll() is not None:
                    break
                continue
            for fd in ready:
                try:
                    data = os.read(fd, 65536)
                except OSError:  # the terminal closed: the program ended
                    data = b""
                if data:
                    streams[fd].append(data)
                else:
                    open_fds.discard(fd)
        if open_fds and time.monotonic() >= deadline:
            process.kill()
            raise TimeoutError(f"{args} ran past {timeout_s} s at a terminal")
        returncode = process.wait(timeout=30)
    finally:
        os.close(leader)
        if process.stdout is not None:
            process.stdout.close()
    shown, *piped = (b"".join(c).decode("utf-8", errors="replace") for c in streams.values())
    return returncode, "".join(piped), shown
