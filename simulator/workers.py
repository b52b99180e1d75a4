"""Worker processes for sweeps and the tuner, stopped with the command that started them.

A Ctrl-C at a terminal reaches every process of the group, so workers ignore it and leave
the decision to their parent; when the parent stops (an interrupt, SIGTERM from `kill`,
`timeout` or a CI cancellation, or an error), it terminates its workers before it goes, so
none is left computing a point nobody will read.
"""

from __future__ import annotations

import multiprocessing
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from multiprocessing.pool import Pool


def _worker_signals() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent decides what an interrupt does
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # and stops its workers with SIGTERM


@contextmanager
def worker_pool(processes: int, tasks_per_worker: int | None = None) -> Iterator[Pool]:
    """A pool of `processes` workers, closed when the block ends and terminated at once if
    it ends by an exception or an interrupt; a worker that has done `tasks_per_worker` tasks
    (None: no limit) is replaced by a fresh one, which gives its memory back."""
    pool = multiprocessing.Pool(
        processes, initializer=_worker_signals, maxtasksperchild=tasks_per_worker
    )
    try:
        yield pool
    except BaseException:
        pool.terminate()
        raise
    else:
        pool.close()
    finally:
        pool.join()


class Stopped(KeyboardInterrupt):
    """The command was asked to stop by a signal (SIGTERM): handled as an interrupt, so that
    every clean-up an interrupt runs (workers terminated, temporary files removed) runs."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


@contextmanager
def stopping_on_sigterm() -> Iterator[None]:
    """Within the block, SIGTERM raises Stopped in the main thread instead of killing the
    process where it stands (elsewhere than the main thread, nothing changes)."""

    def stop(signum: int, _frame: object) -> None:
        raise Stopped(signum)

    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGTERM, stop)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
