"""Structural checks of Flow's tables, shared by the SQLite and PostgreSQL stores.

``check_integrity()`` of each store runs its engine's own check (SQLite's
``PRAGMA integrity_check``) and then these queries, which hold on every healthy Flow database:

- each run's events are numbered 1, 2, 3, ... without a gap, and the first is ``run_started``;
- ``runs.last_sequence`` is the number of the run's last event;
- every event, step task and hook belongs to a run that exists.

Each query returns the offending rows; ``structural_problems`` turns them into sentences.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

MAX_REPORTED = 20
"""Offending rows reported per check; the rest are counted."""

Query = Callable[[str], Sequence[tuple[Any, ...]]]

CHECKS: tuple[tuple[str, str], ...] = (
    (
        "SELECT run_id, count(*), min(sequence), max(sequence) FROM events GROUP BY run_id "
        "HAVING count(*) <> max(sequence) OR min(sequence) <> 1 ORDER BY run_id",
        "run {0!r}: its history has gaps ({1} events numbered {2} to {3})",
    ),
    (
        "SELECT run_id, event_key FROM events WHERE sequence = 1 AND event_key <> 'run_started' "
        "ORDER BY run_id",
        "run {0!r}: event 1 is {1!r}, not 'run_started'",
    ),
    (
        "SELECT r.run_id, r.last_sequence, max(e.sequence) FROM runs r "
        "LEFT JOIN events e ON e.run_id = r.run_id GROUP BY r.run_id, r.last_sequence "
        "HAVING max(e.sequence) IS NULL OR r.last_sequence <> max(e.sequence) ORDER BY r.run_id",
        "run {0!r}: the runs index says its last event is {1} but the history ends at {2}",
    ),
    (
        "SELECT DISTINCT e.run_id FROM events e LEFT JOIN runs r ON r.run_id = e.run_id "
        "WHERE r.run_id IS NULL ORDER BY e.run_id",
        "run {0!r}: it has events but no row in the runs index",
    ),
    (
        "SELECT t.run_id, t.step_id FROM step_tasks t LEFT JOIN runs r ON r.run_id = t.run_id "
        "WHERE r.run_id IS NULL ORDER BY t.run_id",
        "step task {1!r}: it belongs to run {0!r}, which does not exist",
    ),
    (
        "SELECT h.token, h.run_id FROM hooks h LEFT JOIN runs r ON r.run_id = h.run_id "
        "WHERE r.run_id IS NULL ORDER BY h.run_id",
        "hook token {0!r}: it belongs to run {1!r}, which does not exist",
    ),
)


def structural_problems(query: Query, extra: Sequence[tuple[str, str]] = ()) -> list[str]:
    """Run ``CHECKS`` (and ``extra`` ones) through ``query``; one sentence per problem."""
    problems: list[str] = []
    for sql, message in (*CHECKS, *extra):
        rows = query(sql)
        problems.extend(message.format(*row) for row in rows[:MAX_REPORTED])
        if len(rows) > MAX_REPORTED:
            problems.append(f"... and {len(rows) - MAX_REPORTED} more like the one above")
    return problems
