"""The L2 as a tile-granularity LRU cache in front of HBM.

Tensors are viewed as 2-D (rows × last dim) and cut into granules of
`granule_rows` rows × GRANULE_COLS columns. Inside a granule, presence is kept
per cell (one row × SECTOR_COLS columns) as one bit of a Python int, so a
lookup or a fill is a handful of integer operations whatever the region's
shape. This is a modelling granularity, not a hardware figure: bytes are
counted per cell whatever the granule, and the granule (16 to 64 rows) is as
tall as lets the L2 still hold MIN_GRANULES of them, so that eviction stays
fine-grained while a large L2 needs fewer lookups per transfer.

A read hits on the cells present and fetches the missing ones from HBM
(whole cells: at most SECTOR_COLS - 1 extra elements at each end of a row). A
cell being fetched is present at once, but a reader that hits it must wait
for the fetch to land (it merges into the outstanding miss). Writes go
through to HBM and allocate. Eviction is least recently used, by granule.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from collections.abc import Iterable, Mapping, Sequence
from functools import lru_cache

from ..errors import InvariantError
from ..schedule.program import Region

MIN_GRANULE_ROWS, MAX_GRANULE_ROWS = 16, 64
MIN_GRANULES = 1024  # of 2-byte elements, when the L2 is large enough
SECTOR_COLS = 16
SECTORS = 16
GRANULE_COLS = SECTOR_COLS * SECTORS
_ROW_BITS = SECTORS
# _ROWS_OF[n]: the bit pattern that repeats a one-row sector mask over n rows
_ROWS_OF = [sum(1 << (_ROW_BITS * r) for r in range(n)) for n in range(MAX_GRANULE_ROWS + 1)]
# _COLUMN_OF[s]: the bits of sector s in every row of a granule (of any height)
_COLUMN_OF = [_ROWS_OF[MAX_GRANULE_ROWS] << s for s in range(SECTORS)]


def granule_rows(capacity_bytes: int) -> int:
    """The granule height for an L2 of `capacity_bytes` (see the module docstring)."""
    rows = MIN_GRANULE_ROWS
    while (
        rows < MAX_GRANULE_ROWS and capacity_bytes // (2 * rows * GRANULE_COLS * 2) >= MIN_GRANULES
    ):
        rows *= 2
    return rows


class _Landed:
    """A fetch that has landed (the fill of a warming read)."""

    triggered = True


_LANDED = _Landed()


class _Line:
    __slots__ = ("cells", "nbytes", "fill")

    def __init__(self, cells: int, nbytes: int, fill=None):
        self.cells = cells  # present cells, bit (row * SECTORS + sector)
        self.nbytes = nbytes
        self.fill = fill  # the latest fetch into this granule (it may have landed)


class L2Cache:
    """The chip's L2 as an LRU cache of tensor regions, not of addresses: the model knows
    tiles, not pointers, so it looks regions up per granule of a tensor's rows (bytes are
    counted per cell).
    That is what lets a decode kernel find the previous kernel's output still on chip, and a
    prefill kernel find it evicted, without simulating lines."""

    def __init__(self, capacity_bytes: int, geometry: Mapping[str, tuple[int, int, int]]):
        self.capacity_bytes = capacity_bytes
        self.geometry = geometry
        self.granule_rows = granule_rows(capacity_bytes)
        self.lines: OrderedDict[tuple, _Line] = OrderedDict()
        self.used_bytes = 0
        self.hits = 0
        self.misses = 0
        # per tensor, the bytes warming reads found in L2 and fetched (see warm)
        self.warmed: dict[str, list[int]] = {}

    def copy(self) -> L2Cache:
        """An L2 holding what this one holds, in the same order, with no lookups counted."""
        copy = L2Cache(self.capacity_bytes, self.geometry)
        copy.lines = OrderedDict(
            (key, _Line(line.cells, line.nbytes, line.fill)) for key, line in self.lines.items()
        )
        copy.used_bytes = self.used_bytes
        return copy

    def await_fetches(self, other: L2Cache) -> None:
        """Make a reader of a granule that `other` is still fetching wait for that fetch here
        too (a view of this L2 fetched it: engine/skips.py)."""
        lines = self.lines
        for key, line in other.lines.items():
            fill = line.fill
            if fill is not None and not fill.triggered and key in lines:
                lines[key].fill = fill

    def entry_state(self, ahead: Iterable[Sequence[str]]) -> str:
        """A digest of what L2 holds, in LRU order, with each tensor named by where the
        kernels `ahead` (each one's touched tensors, in order) first touch it: (kernels
        from now, its rank there); a tensor none of them touches is only the bytes it
        takes (it can only be evicted). Two kernel starts with the same digest, followed by
        the same kernels, run alike: from the same L2, tensor for tensor, whatever the
        tensors are called (World records it at each kernel's launch, and replays a kernel
        that begins as an earlier one did: replay.py; layer_steps.py proves from it that a
        layer repeats the one before)."""
        held = {tensor for tensor, _ in self.lines}
        names: dict[str, tuple[int, int]] = {}
        for distance, touched in enumerate(ahead):
            if len(names) == len(held):
                break
            for rank, tensor in enumerate(touched):
                if tensor in held:
                    names.setdefault(tensor, (distance, rank))
        state = [
            (names[tensor], granule, line.cells, line.nbytes) if tensor in names else line.nbytes
            for (tensor, granule), line in self.lines.items()
        ]
        return hashlib.blake2b(repr(state).encode(), digest_size=16).hexdigest()

    def own_state(self, touched: Sequence[str]) -> str:
        """A digest of what L2 holds as a kernel that touches `touched` meets it: those
        tensors' lines in LRU order, each run of other lines between them as its bytes only,
        the free bytes counted in the oldest run. The kernel's run depends on nothing more:
        it never looks the other lines up, and they leave only by eviction, oldest first,
        silently (writes go through); until a run of them is gone no line above it goes,
        however the run is made up. So two starts with one digest run alike; what they
        leave differs only in which of the other lines stay (replay.py replays on this
        digest only a kernel that evicted them all)."""
        place = {tensor: rank for rank, tensor in enumerate(touched)}
        state: list = []
        others = self.capacity_bytes - self.used_bytes
        for (tensor, granule), line in self.lines.items():
            rank = place.get(tensor)
            if rank is None:
                others += line.nbytes
                continue
            if others:
                state.append(others)
                others = 0
            state.append((rank, granule, line.cells, line.nbytes))
        state.append(others)
        return hashlib.blake2b(repr(state).encode(), digest_size=16).hexdigest()

    def state(self) -> tuple[list[tuple], int, int]:
        """Every line as (key, cells, bytes), least recently used first, and the lookups'
        counts of hits and misses so far."""
        lines = [(key, line.cells, line.nbytes) for key, line in self.lines.items()]
        return lines, self.hits, self.misses

    def rerun(
        self,
        before: tuple[list[tuple], int, int],
        after: tuple[list[tuple], int, int],
        renamed: Mapping[str, str],
    ) -> None:
        """Leave L2 as a kernel that ran before left it (`after`, from `before`: see state),
        now that the same kernel on other tensors (`renamed`: its tensors' names then ->
        now) has begun with the L2 holding what that one began with, line for line, or with
        the same lines of its tensors where that one left no other (engine/replay.py). A
        line of a tensor the kernel touched is that line renamed; any other the kernel left
        alone: it is the line now in its place."""
        now = dict(zip((key for key, _, _ in before[0]), self.lines.items()))
        lines: OrderedDict[tuple, _Line] = OrderedDict()
        for (tensor, granule), cells, nbytes in after[0]:
            if tensor in renamed:
                lines[(renamed[tensor], granule)] = _Line(cells, nbytes)
            else:
                key, line = now[(tensor, granule)]
                lines[key] = line
        self.lines = lines
        self.used_bytes = sum(line.nbytes for line in lines.values())
        self.hits += after[1] - before[1]
        self.misses += after[2] - before[2]

    def _cut(self, region: Region):
        """The region cut along granule boundaries (see `_cut_region`)."""
        rows, cols, elem = self.geometry[region.tensor]
        if not (0 <= region.row0 < region.row1 <= rows and 0 <= region.col0 < region.col1 <= cols):
            raise InvariantError(f"region {region} outside tensor of {rows}x{cols}")
        return _cut_region(
            region.row0, region.row1, region.col0, region.col1, cols, elem, self.granule_rows
        )

    def read(self, region: Region, fill) -> tuple[int, int, list]:
        """Look a region up. Missing cells are fetched by this read, whose completion event is
        `fill`. Returns (bytes L2 serves, bytes fetched from HBM, fetches still in flight that
        the hit part must wait for)."""
        hit_bytes = fetch_bytes = hits = misses = 0
        in_flight = []
        lines, tensor = self.lines, region.tensor
        pieces, cols, elem = self._cut(region)
        for granule, need, region_bytes, need_bytes, base, cell in pieces:
            key = (tensor, granule)
            line = lines.get(key)
            if line is None:  # the common streaming case: all of it from HBM
                misses += 1
                fetch_bytes += need_bytes
                self._fill(key, None, need, need_bytes, fill)
                continue
            lines.move_to_end(key)
            present = line.cells
            missing = need & ~present
            if line.fill is not None and not line.fill.triggered and missing != need:
                in_flight.append(line.fill)
            if not missing:
                hits += 1
                hit_bytes += region_bytes
                continue
            misses += 1
            cells = present | need
            if cell:
                fetch_bytes += missing.bit_count() * cell
                cells_bytes = cells.bit_count() * cell
            else:
                fetch_bytes += _cell_bytes(missing, base, cols, elem)
                cells_bytes = _cell_bytes(cells, base, cols, elem)
            hit_bytes += region_bytes * (need & present).bit_count() // need.bit_count()
            self._fill(key, line, cells, cells_bytes, fill)
        self.hits += hits
        self.misses += misses
        return hit_bytes, fetch_bytes, in_flight

    def warm(self, touches: Sequence[tuple[Region, bool]], recent: Sequence[Region] = ()) -> None:
        """Read (or write: True) regions in turn as transfers that took no time, so that L2
        holds what they would have left (the units a sampled kernel did not simulate); what
        the reads found and fetched is kept per tensor in `warmed`, not in the lookups'
        counts. `recent`: regions touched since that would have come after them, held
        again afterwards, the most recently used (a warm larger than L2 evicts them)."""
        hits, misses = self.hits, self.misses
        for region, written in touches:
            if written:
                self.write(region)
                continue
            hit_bytes, fetch_bytes, _ = self.read(region, _LANDED)
            found = self.warmed.setdefault(region.tensor, [0, 0])
            found[0] += hit_bytes
            found[1] += fetch_bytes
        for region in recent:
            self.read(region, _LANDED)
        self.hits, self.misses = hits, misses

    def write(self, region: Region) -> None:
        """Write-through with allocate: the written cells become present and recently used."""
        lines, tensor = self.lines, region.tensor
        pieces, cols, elem = self._cut(region)
        for granule, need, _, _, base, _ in pieces:
            key = (tensor, granule)
            line = lines.get(key)
            cells = need
            if line is not None:
                lines.move_to_end(key)
                cells |= line.cells
            self._fill(
                key,
                line,
                cells,
                _cell_bytes(cells, base, cols, elem),
                line.fill if line is not None else None,
            )

    def _fill(self, key: tuple, line: _Line | None, cells: int, nbytes: int, fill) -> None:
        """Make `cells` (`nbytes`) of granule `key` present, by the fetch `fill`, evicting
        least recently used granules. A granule already cached (`line`) has just been moved
        to the most recent end, so the eviction, which starts at the other end, never
        reaches it."""
        if line is not None:
            self.used_bytes -= line.nbytes
        if nbytes > self.capacity_bytes:
            if line is not None:
                del self.lines[key]
            return
        while self.used_bytes + nbytes > self.capacity_bytes:
            _, evicted = self.lines.popitem(last=False)
            self.used_bytes -= evicted.nbytes
        if line is None:
            self.lines[key] = _Line(cells, nbytes, fill)
        else:
            line.cells, line.nbytes, line.fill = cells, nbytes, fill
        self.used_bytes += nbytes


@lru_cache(maxsize=65536)
def _cut_region(
    row0: int, row1: int, col0: int, col1: int, cols: int, elem: int, height: int
) -> tuple[tuple, int, int]:
    """Rows [row0, row1) x columns [col0, col1) of a tensor `cols` wide cut along granule
    boundaries, per granule: its (row, column) index, the cells the region needs in it, the
    region's bytes in it, the bytes of those cells (whole cells), the granule's first
    column, and the bytes of one cell (0 if the tensor's edge cuts the granule); then the
    tensor's columns and element bytes. The same cut recurs on every core and every layer,
    so it is cached."""
    row_pieces = []
    for gr in range(row0 // height, (row1 - 1) // height + 1):
        r0, r1 = max(row0, gr * height), min(row1, (gr + 1) * height)
        row_pieces.append((gr, _ROWS_OF[r1 - r0] << (_ROW_BITS * (r0 - gr * height)), r1 - r0))
    pieces = []
    for gc in range(col0 // GRANULE_COLS, (col1 - 1) // GRANULE_COLS + 1):
        base = gc * GRANULE_COLS
        lo, hi = max(col0, base), min(col1, base + GRANULE_COLS)
        first, last = (lo - base) // SECTOR_COLS, (hi - 1 - base) // SECTOR_COLS
        sectors = ((1 << (last + 1)) - 1) ^ ((1 << first) - 1)
        cell = SECTOR_COLS * elem if base + GRANULE_COLS <= cols else 0
        row_cell_bytes = _cell_bytes(sectors, base, cols, elem)
        for gr, row_pattern, row_count in row_pieces:
            pieces.append(
                (
                    (gr, gc),
                    sectors * row_pattern,
                    row_count * (hi - lo) * elem,
                    row_count * row_cell_bytes,
                    base,
                    cell,
                )
            )
    pieces.sort(key=lambda piece: piece[0])  # row by row, as the region is laid out
    return tuple(pieces), cols, elem


def _cell_bytes(cells: int, base: int, cols: int, elem: int) -> int:
    """Bytes of the cells in `cells`; a granule's last sectors may be cut by the tensor's edge."""
    if base + GRANULE_COLS <= cols:
        return cells.bit_count() * SECTOR_COLS * elem
    full, partial, width = _edge_masks(cols - base)
    return ((cells & full).bit_count() * SECTOR_COLS + (cells & partial).bit_count() * width) * elem


@lru_cache(maxsize=None)
def _edge_masks(remaining: int) -> tuple[int, int, int]:
    """For a granule with `remaining` columns left in the tensor: the cells of its whole
    sectors, those of its one cut sector, and how many columns the cut sector keeps."""
    whole, cut = divmod(remaining, SECTOR_COLS)
    full = 0
    for sector in range(whole):
        full |= _COLUMN_OF[sector]
    return full, (_COLUMN_OF[whole] if cut else 0), cut
