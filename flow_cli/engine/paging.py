"""Walking many runs a page at a time, so that a command over a million runs holds one page.

``paged`` follows the run index's keyset cursor (``RunFilter.after``): each page is one
bounded query (``limit``) that starts after the last run of the page before, in listing order
(newest first), so the walk's memory is one page whatever the selection, and each page costs
what the first does (an index range, not an offset). It honours the filter's own ``after``
(where to start) and ``limit`` (how many in all).

``paged_by_status`` is for walks whose order does not matter (``flow doctor`` tallies): one
keyset walk per status, each served in order by the ``(status, created_at)`` index, where one
walk over several statuses would have the database sort every match again for each page.

Pages are read one after another, not in one transaction: a run that changes between two pages
may be seen twice (by two statuses) or not at all, as a run changing during any listing may.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import replace
from typing import Protocol, TypeVar

from flow_cli.store.protocol import RunFilter

PAGE_SIZE = 1000
"""Runs a page: large enough that a query's fixed cost is small beside its rows, small
enough that a page (records or states, ~1 KB a run) is about a megabyte."""


class _HasRunId(Protocol):
    @property
    def run_id(self) -> str: ...


T = TypeVar("T", bound=_HasRunId)


def paged(
    fetch: Callable[[RunFilter], Sequence[T]], where: RunFilter, size: int = PAGE_SIZE
) -> Iterator[T]:
    """Every run ``where`` selects, in ``fetch``'s (listing) order, read ``size`` at a time:
    ``fetch`` (``Engine.find_runs``, ``Engine.run_states``) is never asked for more than
    ``size`` runs, and each page after the first starts after the last run of the one before."""
    if size < 1:
        raise ValueError(f"a page holds at least one run, not {size}")
    left = where.limit
    after = where.after
    while left is None or left > 0:
        want = size if left is None else min(size, left)
        page = fetch(replace(where, limit=want, after=after))
        yield from page
        if len(page) < want:
            return
        after = page[-1].run_id
        if left is not None:
            left -= len(page)


def paged_by_status(
    fetch: Callable[[RunFilter], Sequence[T]], where: RunFilter, size: int = PAGE_SIZE
) -> Iterator[T]:
    """Every run ``where`` selects, a status at a time (``where.statuses`` in their order;
    with none, one walk): listing order within a status, none across them. No ``limit``: a
    limit counts runs in listing order, which this walk does not keep."""
    if where.limit is not None:
        raise ValueError("paged_by_status walks every match; page a limited filter with paged")
    if len(where.statuses) < 2:
        yield from paged(fetch, where, size)
        return
    for status in where.statuses:
        yield from paged(fetch, replace(where, statuses=(status,)), size)


__all__ = ["PAGE_SIZE", "paged", "paged_by_status"]
