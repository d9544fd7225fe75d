"""The parts of a PostgreSQL step lease's batch that ``PostgresStore``'s leases share: the
``step_started`` of what was leased, the lease's end, its answers."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any, TypeAlias

from flow_cli.model.events import StepStarted
from flow_cli.store.due import HORIZON
from flow_cli.store.postgres import tables
from flow_cli.store.postgres.batch import Batch
from flow_cli.store.postgres.limited import ANY_LIMITED_READY
from flow_cli.store.postgres.reads import READ_HISTORIES, histories_params
from flow_cli.store.protocol import ReadAfter, wanted_after

Leased: TypeAlias = tuple[
    list[tuple[Any, ...]],
    dict[str, int],
    list[tuple[Any, ...]] | None,
    tuple[datetime | None, datetime | None],
]
"""A step lease's rows, the sequences its histories were read after, the histories' rows,
and when runs and steps are next due (see ``DueHints``)."""


def queue_started(
    batch: Batch,
    rows: Sequence[tuple[Any, ...]],
    locked: dict[str, tables.LockedRun],
    worker: str,
    now: datetime,
    lease_until: datetime,
) -> None:
    """Add to a lease's batch the ``step_started`` of each leased attempt (rows of run id, step
    id, attempt) and its run row's new sequence and status."""
    for run_id, step_id, attempt, *_ in rows:
        target = locked[run_id]
        started = StepStarted(
            step_id=step_id, attempt=attempt, worker=worker, lease_until=lease_until
        )
        tables.insert_events(batch, run_id, target.last_sequence, [started], now)
        target.last_sequence += 1
    for run_id in {row[0] for row in rows}:
        batch.execute(
            "UPDATE runs SET last_sequence = %s, updated_at = %s, status = CASE "
            "WHEN status = 'Cancelling' THEN status ELSE 'Running' END "
            "WHERE run_id = %s",
            (locked[run_id].last_sequence, now, run_id),
        )


def queue_lease_end(
    batch: Batch,
    params: dict[str, Any],
    rows: Sequence[tuple[Any, ...]],
    read_after: ReadAfter | None,
    limited: bool = False,
) -> dict[str, int]:
    """End a step lease's batch: with ``limited``, whether an attempt of a limited step is
    ready (``limited_ready``); when work is next due (read with the lease, so the worker's
    pass need not ask again), the leased runs' histories, ``COMMIT``. Returns the sequences
    the histories are read after."""
    if limited:
        batch.execute(ANY_LIMITED_READY, params)
    batch.execute(tables.NEXT_DUE, params)
    after = wanted_after((row[0] for row in rows), read_after) if read_after is not None else {}
    if after:
        # Read before COMMIT: the histories cost no round trip of their own, and include the
        # step_started events just written.
        batch.execute(READ_HISTORIES, histories_params(after))
    batch.execute("COMMIT")
    return after


def leased(
    done: Sequence[list[tuple[Any, ...]] | None],
    rows: list[tuple[Any, ...]],
    after: dict[str, int],
) -> Leased:
    """A lease's result from the answers of a batch that ``_queue_lease_end`` ended."""
    due_rows = done[-3] if after else done[-2]
    runs, steps = due_rows[0] if due_rows else (None, None)
    due = (
        None if runs is None else tables.utc(runs),
        None if steps is None else tables.utc(steps),
    )
    return rows, after, (done[-2] if after else None), due


def limited_ready(done: Sequence[list[tuple[Any, ...]] | None], after: dict[str, int]) -> bool:
    """The answer of ``ANY_LIMITED_READY`` in a batch that ``queue_lease_end`` ended."""
    rows = done[-4] if after else done[-3]
    return bool(rows and rows[0][0])


def due_params(
    worker: str, build_ids: Sequence[str], now: datetime, lease_until: datetime, limit: int
) -> dict[str, Any]:
    return {
        "worker": worker,
        "builds": list(build_ids),
        "now": now,
        "until": lease_until,
        "limit": limit,
        "due_until": now + HORIZON,  # how far ahead ``NEXT_DUE`` looks with the lease
    }
