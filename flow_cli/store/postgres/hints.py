"""Ready-step hints: a commit's ``NOTIFY`` names the steps it made ready, so that an idle worker
it wakes can lease them in one round trip instead of two.

A step lease must lock the runs of the ready steps before it can write their ``step_started``
events (each one's sequence follows its run's last), so the ordinary lease asks first (which
steps, whose rows it locked) and writes after: two round trips. A commit that schedules steps
knows all of that already: the run, the step, its attempt, the run's sequence after the commit
and its build. It sends them in a second notification beside the plain one (whose payload, the
schema, older listeners still wait for). A worker woken from idle by one sends a single
``Batch``: each hinted run's row moved from that sequence (a guard: it fails unless the run
is still there), each step task leased if still ready (the same kind of guard), the events,
when work is next due, the histories, ``COMMIT``. If any guard fails (another worker took a
step first, the run moved on) nothing was written and the ordinary lease runs instead.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from flow_cli.model.events import StepStarted
from flow_cli.store.limits_sql import unlimited_step
from flow_cli.store.pauses_sql import unpaused_or_not_held
from flow_cli.store.postgres import tables
from flow_cli.store.postgres.batch import Batch
from flow_cli.store.protocol import KEEP, CommitGroup

MAX_HINTS = 32
"""Steps named in one notification at most; past it, the workers lease the rest the ordinary
way."""

MAX_PAYLOAD_BYTES = 7_900
"""A notification's payload must stay under 8,000 bytes (PostgreSQL refuses the commit
otherwise): hints that would not fit (names have no length limit) are left out."""

_SEPARATOR = "\n"


@dataclass(frozen=True, slots=True)
class Hint:
    """A step task a commit made ready, and its run's sequence after that commit."""

    run_id: str
    step_id: str
    attempt: int
    sequence: int
    build_id: str


def ready_hints(
    groups: Sequence[CommitGroup], once: set[str], after: Mapping[str, int]
) -> list[Hint]:
    """The steps these groups make ready now, of runs they write once (a run written twice in
    one commit is left to the ordinary lease). A run's build is known when the commit creates
    it or re-pins it; other hints have none and are checked against the worker's builds by
    the lease itself."""
    hints: list[Hint] = []
    for group in groups:
        builds = {run.run_id: run.spec.runtime_build_id for run in group.creates}
        for write in group.writes:
            if write.run_id not in once or not write.index.steps:
                continue
            build = write.index.build_id
            build_id = builds.get(write.run_id, "") if build is KEEP else str(build)
            for step_id, task in write.index.steps.items():
                if task is None or task.owner is not None or task.available_at > group.now:
                    continue
                hints.append(
                    Hint(write.run_id, step_id, task.attempt, after[write.run_id], build_id)
                )
                if len(hints) == MAX_HINTS:
                    return hints
    return hints


def payload(schema: str, hints: Sequence[Hint]) -> str | None:
    """The hints' notification payload, with those that fit in ``MAX_PAYLOAD_BYTES``; ``None``
    when none does."""
    rows: list[str] = []
    size = len((schema + _SEPARATOR + "[]").encode())
    for h in hints:
        # ASCII (json.dumps escapes the rest), so characters are bytes.
        row = json.dumps([h.run_id, h.step_id, h.attempt, h.sequence, h.build_id])
        if size + len(row) + 1 > MAX_PAYLOAD_BYTES:
            continue
        rows.append(row)
        size += len(row) + 1
    if not rows:
        return None
    return schema + _SEPARATOR + "[" + ",".join(rows) + "]"


def parse(schema: str, text: str) -> list[Hint] | None:
    """The hints of a payload for ``schema``; ``None`` when it is not a hints payload of it."""
    head, separator, body = text.partition(_SEPARATOR)
    if not separator or head != schema:
        return None
    try:
        rows = json.loads(body)
        return [Hint(str(r), str(s), int(a), int(q), str(b)) for r, s, a, q, b in rows]
    except (ValueError, TypeError):
        return None  # not ours to understand: the plain notification wakes the worker anyway


def usable(hints: Iterable[Hint], build_ids: Sequence[str], limit: int) -> list[Hint]:
    """The hints a worker of these builds may lease, at most ``limit``, every run's hints
    whole (its guard moves its sequence past all of them); sorted by run id, the order in
    which commits lock runs."""
    hosted = set(build_ids)
    by_run: dict[str, list[Hint]] = {}
    for hint in hints:
        if hint.build_id and hint.build_id not in hosted:
            continue
        steps = by_run.setdefault(hint.run_id, [])
        if all(h.step_id != hint.step_id for h in steps):
            steps.append(hint)
    chosen: list[Hint] = []
    for run_id in sorted(by_run):
        steps = by_run[run_id]
        if len({h.sequence for h in steps}) != 1 or len(chosen) + len(steps) > limit:
            continue
        chosen.extend(steps)
    return chosen


_RUN_GUARD = (
    "WITH moved AS (UPDATE runs SET last_sequence = %s, updated_at = %s, status = CASE"
    " WHEN status = 'Cancelling' THEN status ELSE 'Running' END"
    " WHERE run_id = %s AND last_sequence = %s AND build_id = ANY(%s)"
    f" AND {unpaused_or_not_held('runs')} RETURNING 1)"
    " SELECT 1 / count(*) FROM moved"
)
"""Move a hinted run's row past its step_started events, if it is still at the hinted sequence,
of a hosted build and held by no pause: else a division by zero fails the whole batch."""

_STEP_GUARD = (
    "WITH leased AS (UPDATE step_tasks SET available_at = %s, lease_owner = %s"
    " WHERE run_id = %s AND step_id = %s AND attempt = %s AND available_at <= %s"
    " AND build_id = ANY(%s) AND " + unlimited_step("step_tasks") + " RETURNING 1)"
    " SELECT 1 / count(*) FROM leased"
)
"""Lease a hinted step task if it is still ready (the same failure otherwise)."""


def queue_lease(
    batch: Batch,
    hints: Sequence[Hint],
    worker: str,
    build_ids: Sequence[str],
    now: datetime,
    lease_until: datetime,
) -> None:
    """Add the hinted lease's writes to ``batch`` (after its ``BEGIN``): per run, in the order
    of ``hints`` (``usable``'s), the guard, its step tasks' guards and its events."""
    builds = list(build_ids)
    by_run: dict[str, list[Hint]] = {}
    for hint in hints:
        by_run.setdefault(hint.run_id, []).append(hint)
    for run_id, steps in by_run.items():
        sequence = steps[0].sequence
        batch.execute(_RUN_GUARD, (sequence + len(steps), now, run_id, sequence, builds))
        for hint in steps:
            batch.execute(
                _STEP_GUARD,
                (lease_until, worker, run_id, hint.step_id, hint.attempt, now, builds),
            )
        started = [
            StepStarted(
                step_id=h.step_id, attempt=h.attempt, worker=worker, lease_until=lease_until
            )
            for h in steps
        ]
        tables.insert_events(batch, run_id, sequence, started, now)


def leased_rows(hints: Sequence[Hint]) -> list[tuple[Any, ...]]:
    """The hinted lease's rows, shaped as the ordinary lease's (run, step, attempt, was)."""
    return [(h.run_id, h.step_id, h.attempt, None) for h in hints]
