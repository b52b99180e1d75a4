"""The L2 as a tile-granularity LRU cache in front of HBM.

Tensors are viewed as 2-D (rows × last dim) and cut into granules of
GRANULE_ROWS rows × GRANULE_COLS columns, each holding a presence bit per
SECTOR_COLS-column sector. This is a modelling granularity, not a hardware
figure: a 256 KiB operand chunk is a few dozen lookups, and kernels that tile
the same tensor differently still find each other's data. A read hits on the
sectors present; missing sectors are fetched whole from HBM (rows of the
granule clipped to the tensor) and become present. Writes go through to HBM
and allocate. Eviction is least recently used, by granule.
"""

from __future__ import annotations

from collections import OrderedDict

from ..schedule.program import Region

GRANULE_ROWS = 16
SECTOR_COLS = 16
SECTORS = 16
GRANULE_COLS = SECTOR_COLS * SECTORS


class L2Cache:
    def __init__(self, capacity_bytes: int, geometry: dict[str, tuple[int, int, int]]):
        self.capacity_bytes = capacity_bytes
        self.geometry = geometry
        self.lines: OrderedDict[tuple, int] = OrderedDict()   # key -> present sector mask
        self.line_bytes: dict[tuple, int] = {}
        self.used_bytes = 0
        self.hits = 0
        self.misses = 0

    def _touch(self, region: Region):
        """Per granule touched: key, sectors needed, rows used, granule rows, column span."""
        rows, cols, _ = self.geometry[region.tensor]
        for gr in range(region.row0 // GRANULE_ROWS, (region.row1 - 1) // GRANULE_ROWS + 1):
            g_r0, g_r1 = gr * GRANULE_ROWS, min(rows, (gr + 1) * GRANULE_ROWS)
            in_rows = min(region.row1, g_r1) - max(region.row0, g_r0)
            for gc in range(region.col0 // GRANULE_COLS, (region.col1 - 1) // GRANULE_COLS + 1):
                base = gc * GRANULE_COLS
                lo, hi = max(region.col0, base), min(region.col1, base + GRANULE_COLS)
                first, last = (lo - base) // SECTOR_COLS, (hi - 1 - base) // SECTOR_COLS
                need = ((1 << (last + 1)) - 1) ^ ((1 << first) - 1)
                yield (region.tensor, gr, gc), need, in_rows, g_r1 - g_r0, lo, hi, base, cols

    def read(self, region: Region) -> tuple[int, int]:
        """Look a region up; returns (bytes L2 serves, bytes fetched from HBM into L2)."""
        elem = self.geometry[region.tensor][2]
        hit_bytes = fetch_bytes = 0
        for key, need, in_rows, g_rows, lo, hi, base, cols in self._touch(region):
            present = self.lines.get(key, 0)
            missing = need & ~present
            if present:
                self.lines.move_to_end(key)
            if not missing:
                self.hits += 1
                hit_bytes += in_rows * (hi - lo) * elem
                continue
            self.misses += 1
            fetched = _sector_cols(missing, base, cols) * g_rows * elem
            fetch_bytes += fetched
            if missing != need:
                hit_bytes += in_rows * (_sector_overlap(need & present, base, lo, hi)) * elem
            self._fill(key, present | need, g_rows * elem * _sector_cols(present | need, base,
                                                                          cols))
        return hit_bytes, fetch_bytes

    def write(self, region: Region) -> None:
        """Write-through with allocate: the written sectors become present and recently used."""
        elem = self.geometry[region.tensor][2]
        for key, need, _in_rows, g_rows, _lo, _hi, base, cols in self._touch(region):
            mask = self.lines.get(key, 0) | need
            self._fill(key, mask, g_rows * elem * _sector_cols(mask, base, cols))

    def _fill(self, key: tuple, mask: int, nbytes: int) -> None:
        self.used_bytes -= self.line_bytes.pop(key, 0)
        self.lines.pop(key, None)
        if nbytes > self.capacity_bytes:
            return
        while self.used_bytes + nbytes > self.capacity_bytes:
            evicted, _ = self.lines.popitem(last=False)
            self.used_bytes -= self.line_bytes.pop(evicted)
        self.lines[key] = mask
        self.line_bytes[key] = nbytes
        self.used_bytes += nbytes


def _sector_cols(mask: int, base: int, cols: int) -> int:
    """Columns covered by the sectors in `mask`, clipped to the tensor's width."""
    if base + GRANULE_COLS <= cols:
        return mask.bit_count() * SECTOR_COLS
    total = 0
    for sector in range(SECTORS):
        if mask >> sector & 1:
            lo = base + sector * SECTOR_COLS
            total += max(0, min(cols, lo + SECTOR_COLS) - lo)
    return total


def _sector_overlap(mask: int, base: int, lo: int, hi: int) -> int:
    """Columns of [lo, hi) that fall in the sectors of `mask`."""
    total = 0
    for sector in range(SECTORS):
        if mask >> sector & 1:
            s_lo = base + sector * SECTOR_COLS
            total += max(0, min(hi, s_lo + SECTOR_COLS) - max(lo, s_lo))
    return total
