"""Pausing Python's cyclic garbage collector for a whole command: an opt-in of the CLI and
the benchmarks, never of library calls (the collector is process-wide, so a library that
paused it would pause it for a notebook's or a Dask worker's other threads too)."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def gc_paused() -> Iterator[None]:
    """Pause the collector: a run allocates millions of records, and every collection would
    rescan them all. What a run leaves in reference cycles (the engine's and SimPy's) the
    pipeline collects once the run is over (pipeline._simulate). Worker processes forked
    inside inherit the pause."""
    collecting = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if collecting:
            gc.enable()
