"""Rows kept in key order on disk once there are too many to hold in memory.

``flow doctor --json`` lists every open run by cause, longest first: it cannot write the first
line before it has seen the last run, and a diagnosis per open run held in memory grew with the
fleet (170 MB for 329,000 open runs). Past ``HOLD`` rows they go to a private temporary SQLite
database (deleted when closed), whose table is its own sort order; SQLite's page cache bounds
what stays in memory.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator

HOLD = 20_000
"""Rows held in memory before they are moved to disk."""

Key = tuple[int, int, str]
"""What rows are ordered by: two integers, then a text (rows with equal keys keep the order
they were added in)."""

Row = tuple[str, ...]


class DiskSort:
    """Rows of ``width`` texts, read back (as often as wanted) in key order."""

    def __init__(self, width: int, hold: int | None = None) -> None:
        self._width = width
        self._hold = HOLD if hold is None else hold
        self._held: list[tuple[Key, int, Row]] = []
        self._db: sqlite3.Connection | None = None
        self._count = 0

    def add(self, key: Key, row: Row) -> None:
        if len(row) != self._width:
            raise ValueError(f"a row of {len(row)} values, expected {self._width}")
        self._held.append((key, self._count, row))
        self._count += 1
        if len(self._held) > self._hold:
            self._spill()

    def __len__(self) -> int:
        return self._count

    @property
    def on_disk(self) -> bool:
        return self._db is not None

    def __iter__(self) -> Iterator[Row]:
        if self._db is None:
            self._held.sort(key=lambda held: (held[0], held[1]))
            return (row for _, _, row in self._held)
        self._spill()
        return self._rows("")

    def slice(self, start: int, stop: int) -> list[Row]:
        """Rows ``start`` to ``stop`` (exclusive) in key order."""
        if self._db is None:
            return list(self)[start:stop]
        return list(self._rows(f" LIMIT {max(0, stop - start)} OFFSET {start}"))

    def close(self) -> None:
        if self._db is not None:
            self._db.close()
            self._db = None
        self._held = []

    def _rows(self, tail: str) -> Iterator[Row]:
        assert self._db is not None
        values = ", ".join(f"v{i}" for i in range(self._width))
        cursor = self._db.execute(f"SELECT {values} FROM rows ORDER BY a, b, c, seq{tail}")
        while batch := cursor.fetchmany(1000):
            yield from batch

    def _spill(self) -> None:
        if self._db is None:
            # "": a private on-disk database that SQLite deletes when it is closed.
            self._db = sqlite3.connect("", check_same_thread=False)
            columns = ", ".join(f"v{i} TEXT" for i in range(self._width))
            self._db.execute(
                f"CREATE TABLE rows (a INTEGER, b INTEGER, c TEXT, seq INTEGER, {columns},"
                " PRIMARY KEY (a, b, c, seq)) WITHOUT ROWID"
            )
        marks = ", ".join("?" * (4 + self._width))
        self._db.executemany(
            f"INSERT INTO rows VALUES ({marks})",
            ((*key, seq, *row) for key, seq, row in self._held),
        )
        self._held = []
