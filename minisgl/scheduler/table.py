from __future__ import annotations


class RequestTable:
    """Hands out rows of the page table / token pool to running requests."""

    def __init__(self, rows: int):
        self._free = list(range(rows - 1, -1, -1))
        self.rows = rows

    @property
    def num_free(self) -> int:
        return len(self._free)

    def acquire(self) -> int:
        return self._free.pop()

    def release(self, row: int) -> None:
        self._free.append(row)
