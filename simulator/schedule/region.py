"""A rectangle of a tensor: what a global transfer reads or writes, and what L2 caches."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Region:
    """A rectangle of a tensor viewed as 2-D (rows = all leading dims, cols = last dim)."""

    tensor: str
    row0: int
    row1: int
    col0: int
    col1: int

    def __str__(self) -> str:
        return f"{self.tensor}[{self.row0}:{self.row1}, {self.col0}:{self.col1}]"
