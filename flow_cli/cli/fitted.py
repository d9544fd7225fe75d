"""``FittedTable``: a Rich table that never splits an identifier or crops a value.

Rich fits a table that is too wide for the terminal by folding cells mid-word (a run id or a
hook token split over two lines cannot be copied) and by cropping cells that do not wrap. A
``FittedTable`` whose identifier columns (``add_id_column``) or unwrapped columns would not get
their whole width, or whose columns would be narrower than their ``min_width``, prints each
row as a block of ``column  value`` lines instead. A long word of a text column may still fold:
nothing of it is lost.
"""

from __future__ import annotations

from typing import Any

from rich.console import Console, ConsoleOptions, RenderResult
from rich.table import Table
from rich.text import Text

_UNBOUNDED = 100_000
"""A width no terminal has: a column measured at it is as wide as its widest cell."""


class FittedTable(Table):
    """A ``Table`` that turns into one block per row where its identifiers would not fit."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._ids: set[int] = set()

    def add_id_column(self, header: str, **options: Any) -> None:
        """A column of identifiers (run ids, tokens, builds): shown whole or not as a table."""
        # No wrap: Rich then narrows the other columns first, and where it would still have to
        # crop an id, ``_fits`` says so.
        self._ids.add(len(self.columns))
        self.add_column(header, no_wrap=True, **options)

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        if self._fits(console, options) or not self.columns:
            yield from super().__rich_console__(console, options)
            return
        if self.title:
            yield Text(str(self.title), style="bold")
        yield from self._records()

    def _fits(self, console: Console, options: ConsoleOptions) -> bool:
        # The widths Rich would give (as Table.__rich_console__ computes them), against the
        # whole width of each column that must not fold or crop. Both include cell padding.
        width = options.max_width if self.width is None else self.width
        given = self._calculate_column_widths(
            console, options.update_width(width - self._extra_width)
        )
        # What Rich could not narrow enough is cropped at the terminal's edge; the table's right
        # edge (a blank of the box) may go, nothing more.
        spare = 1 if self.box is not None and self.show_edge else 0
        if sum(given) + self._extra_width - width > spare:
            return False
        unbounded = options.update_width(_UNBOUNDED)
        for index, (column, has) in enumerate(zip(self.columns, given, strict=True)):
            needs = self._measure_column(console, unbounded, column)
            if column.no_wrap or index in self._ids:
                enough = has >= needs.maximum
            else:  # Rich may give a column less than its min_width, and crop its lines
                enough = (
                    column.min_width is None
                    or has >= column.min_width + self._get_padding_width(index)
                )
            if not enough:
                return False
        return True

    def _records(self) -> RenderResult:
        headers = [str(column.header) for column in self.columns]
        cells = [list(column.cells) for column in self.columns]
        for index in range(self.row_count):
            record = Table.grid(padding=(0, 2))
            record.add_column(style="bold", no_wrap=True)
            record.add_column(overflow="fold")
            for header, column in zip(headers, cells, strict=True):
                record.add_row(header, column[index])
            yield record
            yield Text("")
