"""A persistent cache of simulated runs: a step of `infer`, a point of a sweep or a kernel
the tuner tries, simulated once with the same content, costs a file read the next time.

A run is keyed by everything that decides its report: the workload as loaded (its tensors,
ops, fusion, tilings, params, name and source, and its hardware, every figure of it resolved)
and the simulator's own code (a digest of its modules, so an edited simulator or a changed
figure never meets a stale entry). The simulator is deterministic, so an entry is the report
the run would give again, bit for bit (without its trace: timelines and Chrome traces come
from `run`, which always simulates).

Where: $NPU_MEMSIM_CACHE if set (a folder; `off` turns the cache off), else
$XDG_CACHE_HOME/npu-memsim, else ~/.cache/npu-memsim. `python -m simulator cache` says how
much it holds; `--clear` empties it.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import pickle
import tempfile
from collections.abc import Callable, Mapping
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple, TypeVar

from .version import NAME, __version__

if TYPE_CHECKING:  # the command line reads this module's names without loading a simulator
    from .config.workload import Workload
    from .report import SimulationReport

T = TypeVar("T")
ENV = "NPU_MEMSIM_CACHE"
OFF = "off"
ENTRY_SUFFIX = ".pickle"


class CacheState(NamedTuple):
    """What the cache holds: its folder (None: turned off), entries and bytes."""

    folder: Path | None
    entries: int
    nbytes: int


def cache_folder() -> Path | None:
    """The folder of cached runs, or None when the cache is turned off."""
    chosen = os.environ.get(ENV)
    if chosen is not None:
        return None if chosen.strip().lower() in (OFF, "") else Path(chosen) / "runs"
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / NAME / "runs"


def simulate_cached(
    workload: Workload, max_cycles: int | None = None, sample: bool = False
) -> SimulationReport:
    """`simulate(workload, max_cycles, sample)`'s report without its trace, from the cache
    when this content was simulated before; a fresh run is stored for next time."""
    from .pipeline import simulate

    return remembered(
        "run",
        (workload, max_cycles, sample),  # as run_key
        lambda: dataclasses.replace(simulate(workload, max_cycles, sample), trace=None),
    )


def remembered(kind: str, content: Any, compute: Callable[[], T]) -> T:
    """`compute()`, or what it gave before for the same `kind` of result and `content` (the
    loaded configs it depends on). A cache that cannot be read or written is passed by, never
    an error: the result is computed."""
    folder = cache_folder()
    if folder is None:
        return compute()
    key = content_key(kind, content)
    path = folder / key[:2] / (key + ENTRY_SUFFIX)
    try:
        with path.open("rb") as file:
            kept = pickle.load(file)
        if isinstance(kept, _Entry) and kept.kind == kind:
            return kept.value
    except OSError:  # none yet, or a folder that cannot be read
        pass
    except Exception:  # a damaged entry (a full disk, a killed writer): compute anew
        path.unlink(missing_ok=True)
    value = compute()
    _store(path, _Entry(kind, value))
    return value


def content_key(kind: str, content: Any) -> str:
    """The digest of a result's kind, everything it depends on and the simulator's code."""
    text = json.dumps(
        [kind, _canonical(content), code_digest()], separators=(",", ":"), sort_keys=True
    )
    return hashlib.sha256(text.encode()).hexdigest()


def run_key(workload: Workload, max_cycles: int | None, sample: bool = False) -> str:
    """The key of a run's report."""
    return content_key("run", (workload, max_cycles, sample))


@cache
def code_digest() -> str:
    """A digest of the simulator's modules and version: any edit makes every entry stale."""
    digest = hashlib.sha256(__version__.encode())
    package = Path(__file__).resolve().parent
    for module in sorted(package.rglob("*.py")):
        digest.update(module.relative_to(package).as_posix().encode())
        digest.update(module.read_bytes())
    return digest.hexdigest()


def cache_state() -> CacheState:
    folder = cache_folder()
    entries = list(folder.glob(f"*/*{ENTRY_SUFFIX}")) if folder and folder.is_dir() else []
    return CacheState(folder, len(entries), sum(_size(path) for path in entries))


def clear_cache() -> CacheState:
    """Remove every cached run; returns what was removed."""
    state = cache_state()
    if state.folder is not None and state.folder.is_dir():
        for path in state.folder.glob(f"*/*{ENTRY_SUFFIX}"):
            path.unlink(missing_ok=True)
    return state


class _Entry(NamedTuple):
    kind: str
    value: Any


def _store(path: Path, entry: _Entry) -> None:
    """Write an entry whole or not at all (a temporary file renamed into place), so that a
    reader never meets half of one; a folder that cannot be written is left alone."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        handle, temporary = tempfile.mkstemp(dir=path.parent, suffix=".partial")
        try:
            with os.fdopen(handle, "wb") as file:
                pickle.dump(entry, file, protocol=pickle.HIGHEST_PROTOCOL)
            os.replace(temporary, path)
        except BaseException:
            os.unlink(temporary)
            raise
    except OSError:
        pass


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def _canonical(value: Any) -> Any:
    """A JSON form of a loaded config that is the same in every process (mappings sorted by
    key, each record named by its type; JSON writes floats exactly), so equal content always
    gives equal keys. A type the configs do not hold is refused, not guessed at."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return [
            type(value).__qualname__,
            {f.name: _canonical(getattr(value, f.name)) for f in dataclasses.fields(value)},
        ]
    if isinstance(value, Mapping):
        items = [[_canonical(k), _canonical(v)] for k, v in value.items()]
        return ["map", sorted(items, key=lambda item: json.dumps(item[0], sort_keys=True))]
    if isinstance(value, (list, tuple)):
        return [_canonical(v) for v in value]
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    raise TypeError(f"no canonical form for {type(value).__name__} in a run's key")
