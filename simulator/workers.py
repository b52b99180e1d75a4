"""Worker processes for sweeps, the tuner and serving, stopped with the command that started
them; or an existing Dask cluster's workers.

A Ctrl-C at a terminal reaches every process of the group, so workers ignore it and leave
the decision to their parent; when the parent stops (an interrupt, SIGTERM from `kill`,
`timeout` or a CI cancellation, or an error), it terminates its workers before it goes, so
none is left computing a point nobody will read.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from multiprocessing.pool import Pool
from typing import Any

from .errors import SimulatorError, quote

ORPHAN_CHECK_S = 0.25  # how soon a worker notices that its parent is gone
STOPS = {signal.SIGINT, signal.SIGTERM}  # held while a pool starts (worker_pool)


def _worker_signals(parent: int) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent decides what an interrupt does
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # and stops its workers with SIGTERM
    signal.pthread_sigmask(signal.SIG_UNBLOCK, STOPS)  # held by the parent as it forked us
    _die_with(parent)


def _die_with(parent: int) -> None:
    """End this worker when its parent process ends, however it goes (killed outright, or
    stopped while its pool was still forking, before it knew every worker): an orphaned
    worker would compute on, or wait for tasks forever, holding the command's output pipes
    open. A watcher thread looks for the parent every ORPHAN_CHECK_S. (Not PR_SET_PDEATHSIG:
    it fires when the forking *thread* ends, and a pool forks replacement workers from a
    thread that ends at close, killing them while they may hold the task queue's lock.)"""

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(ORPHAN_CHECK_S)
        os._exit(1)

    threading.Thread(target=watch, name="orphan-watch", daemon=True).start()


@contextmanager
def worker_pool(processes: int, tasks_per_worker: int | None = None) -> Iterator[Pool]:
    """A pool of `processes` workers, closed when the block ends and terminated at once if
    it ends by an exception or an interrupt; a worker that has done `tasks_per_worker` tasks
    (None: no limit) is replaced by a fresh one, which gives its memory back. An interrupt
    or SIGTERM that comes while the pool starts waits until it has started (held, then
    delivered): raised in the middle of multiprocessing's bookkeeping, it left a half-made
    finalizer that printed a traceback as the command stopped."""
    held = signal.pthread_sigmask(signal.SIG_BLOCK, STOPS)
    try:
        pool = multiprocessing.Pool(
            processes,
            initializer=_worker_signals,
            initargs=(os.getpid(),),
            maxtasksperchild=tasks_per_worker,
        )
    except BaseException:
        signal.pthread_sigmask(signal.SIG_SETMASK, held)
        raise
    try:
        signal.pthread_sigmask(signal.SIG_SETMASK, held)  # a stop held meanwhile arrives here
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
    process where it stands (elsewhere than the main thread, nothing changes). A stop that
    Python swallowed is delivered again: a signal handler's exception raised while Python
    runs a callback whose errors it only prints (an at-fork hook as a pool forks its
    workers, a finaliser) would otherwise be lost, and the command would run on."""

    def stop(signum: int, _frame: object) -> None:
        raise Stopped(signum)

    def redeliver(unraisable) -> None:
        exc = unraisable.exc_value
        if not isinstance(exc, KeyboardInterrupt):  # neither Stopped nor Ctrl-C's own
            previous_hook(unraisable)
            return
        signum = exc.signum if isinstance(exc, Stopped) else signal.SIGINT
        # again from another thread a moment later, once Python has left the callback (a
        # signal sent from here would be handled, and swallowed, in this hook)
        again = threading.Timer(0.05, os.kill, (os.getpid(), signum))
        again.daemon = True
        again.start()

    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous, previous_hook = signal.signal(signal.SIGTERM, stop), sys.unraisablehook
    sys.unraisablehook = redeliver
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
        sys.unraisablehook = previous_hook


def dask_client(address: str) -> Any:
    """A client of the Dask cluster whose scheduler is at `address` (a context manager that
    closes it), or a one-line error when dask.distributed is missing or the scheduler out of
    reach."""
    try:
        from distributed import Client
    except ImportError:
        raise SimulatorError(
            "--executor dask needs dask.distributed: pip install 'dask[distributed]'"
        ) from None
    try:
        return Client(address, timeout=10)
    except (OSError, TimeoutError, ValueError) as exc:  # ValueError: not an address at all
        raise SimulatorError(
            f"--scheduler {quote(address)}: cannot reach the Dask scheduler ({quote(str(exc))})"
        ) from None
