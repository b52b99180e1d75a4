"""The output blocks a matmul core computes, in its order, and the rows they form."""

from __future__ import annotations

from .tiling import Tiling

# an output block: its batch, rows, columns and the columns of its cell
Block = tuple[int, tuple[int, int], tuple[int, int], tuple[int, int]]
Cell = tuple[range, tuple[int, int], tuple[int, int]]  # its batches, rows and columns


def core_blocks(cells: list[Cell], t: Tiling) -> tuple[list[Block], list[int]]:
    """The blocks of a core's cells, one cell after another, each cell's in the tiling's
    order; and the first block of each row (a cell's inner loop: its blocks keep one
    operand and step along the other)."""
    blocks: list[Block] = []
    row_starts: list[int] = []
    for batches, (m0, m1), (n0, n1) in cells:
        in_cell = [
            (b, bm, bn)
            for b in batches
            for bm in range(m0, m1, t.base_m)
            for bn in range(n0, n1, t.base_n)
        ]
        if t.order == "m":
            in_cell.sort(key=lambda block: (block[0], block[2], block[1]))
        outer = 2 if t.order == "m" else 1  # the coordinate a row keeps
        row_starts += [
            len(blocks) + i
            for i, block in enumerate(in_cell)
            if not i or block[: outer + 1] != in_cell[i - 1][: outer + 1]
        ]
        blocks += [
            (b, (bm, min(m1, bm + t.base_m)), (bn, min(n1, bn + t.base_n)), (n0, n1))
            for b, bm, bn in in_cell
        ]
    return blocks, row_starts
