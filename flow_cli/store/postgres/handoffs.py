"""Hand-offs: a start gives its run's first step straight to an idle worker.

Without them, a run started in one process reaches a worker in three commits: the start, the
worker's lease of the first step (``step_started``), and the step's end. The lease is a round
trip to the database, with a flush, on the path of every new run, between a worker waking up
and its step beginning.

A worker about to sleep offers itself in ``idle_workers`` (an unlogged table: offers are not
history, and a crash of the server may drop them), from the connection it listens on, for a few
starts (``slots``). The commit that creates a run with its first decisions
(``NewRun.hand_off``) also claims a slot of the latest offer of the run's build (``HAND_OFF``:
the row locked until that commit, so two starts never claim the same slot, and only while that
worker's connection is still open, so a worker that died is not claimed),
records the step's ``step_started`` for that worker, and notifies it, with the run's history in
the payload when it fits. The worker runs the step at once: no lease, no read. With no offer to
claim, the commit announces the ready step as any commit does, and a worker leases it.

If the claimed worker dies before it runs the step, the step's lease runs out and another worker
runs it, as after any crash mid-step. A worker offers itself again as soon as it takes the
steps that used its offer up (as many hand-offs heard as it had slots: a busy worker seldom
sleeps), and whenever it is about to sleep with a thread free and its offer may be used up or
is older than ``OFFER_REFRESH``.

An offer serves several starts (as many as the worker has free threads, up to
``worker.HANDOFF_SLOTS``) because a fleet's workers are busy and idle by turns: with one start
per offer, a claimed worker was not offered again until it had run the step and was about to
sleep, and with four workers a third or more of the starts found no offer. Each of those woke
every listening worker to lease one step (one of them got it). The latest offer is claimed
first, not the oldest: the worker that had room last most likely has it still, and runs
gathered on fewer workers commit more steps at a time. A worker whose threads are all taken
does not offer itself, so work spills over to the next one as the first fills up.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from functools import cache
from typing import Any, Final, Literal

from flow_cli.model.events import Event, EventEnvelope, StepStarted, event_from_data, event_json

OFFER = (
    "INSERT INTO idle_workers"
    " (worker_id, builds, lease_seconds, slots, backend_pid, backend_start, offered_at)"
    " SELECT %s, %s, %s, %s, a.pid, a.backend_start, now()"
    " FROM pg_stat_activity a WHERE a.pid = pg_backend_pid()"
    " ON CONFLICT (worker_id) DO UPDATE SET builds = EXCLUDED.builds,"
    " lease_seconds = EXCLUDED.lease_seconds, slots = EXCLUDED.slots,"
    " backend_pid = EXCLUDED.backend_pid, backend_start = EXCLUDED.backend_start,"
    " offered_at = EXCLUDED.offered_at"
)
"""Offer the worker whose listening connection runs this, for ``slots`` starts. Its server
process is named by its pid and its start time: a pid alone may be reused by another session
after this one ends."""

_SAME_SESSION = (
    "SELECT 1 FROM pg_stat_activity a"
    " WHERE a.pid = i.backend_pid AND a.backend_start = i.backend_start"
)
"""Whether the session that made offer ``i`` is still connected."""

FORGET_GONE = f"DELETE FROM idle_workers i WHERE NOT EXISTS ({_SAME_SESSION})"
"""Offers of workers whose connection closed (they died): sent with an offer now and then."""

WITHDRAW = "DELETE FROM idle_workers WHERE worker_id = %s"

HAND_OFF = (
    "WITH claimed AS ("
    " UPDATE idle_workers SET slots = slots - 1 WHERE worker_id = ("
    "  SELECT i.worker_id FROM idle_workers i WHERE %(build)s = ANY(i.builds) AND i.slots > 0"
    f"  AND EXISTS ({_SAME_SESSION})"
    "  ORDER BY i.offered_at DESC LIMIT 1 FOR UPDATE SKIP LOCKED)"
    " RETURNING worker_id, %(now)s::timestamptz + lease_seconds * interval '1 second' AS until"
    "), started AS ("
    " INSERT INTO events (run_id, sequence, event_key, recorded_at, data)"
    " SELECT %(run)s, %(sequence)s, 'step_started', %(now)s, jsonb_build_object("
    "  'step_id', %(step)s::text, 'attempt', %(attempt)s::integer,"
    "  'worker', c.worker_id, 'lease_until', c.until)"
    " FROM claimed c RETURNING 1"
    "), task AS ("
    " UPDATE step_tasks SET lease_owner = c.worker_id, available_at = c.until FROM claimed c"
    " WHERE step_tasks.run_id = %(run)s AND step_tasks.step_id = %(step)s RETURNING 1"
    "), moved AS ("
    " UPDATE runs SET last_sequence = %(sequence)s FROM claimed c"
    " WHERE runs.run_id = %(run)s RETURNING 1"
    ") "
    "SELECT pg_notify(%(channel)s, CASE WHEN c.worker_id IS NULL THEN %(ready)s"
    " ELSE %(head)s || json_build_array(c.worker_id, c.until, %(rest)s::json)::text END)"
    " FROM (SELECT 1) AS one LEFT JOIN claimed c ON true "
    "UNION ALL "
    "SELECT pg_notify(%(channel)s, %(schema)s) WHERE NOT EXISTS (SELECT 1 FROM claimed)"
)
"""Claim a slot of the latest offer of the run's build whose worker is still connected (the
row locked until the commit: a concurrent start claims another worker's), start the step for
it (the event, the step task, the run's sequence) and notify it; with no offer, notify the
step as ready (its hint, and the plain notification older workers wait for)."""

OFFER_REFRESH = 30.0
"""Seconds after which a worker that has not been claimed offers itself again before it sleeps
(a commit that claimed it and then failed, say on a taken run id, tells it nothing)."""

MAX_PAYLOAD_BYTES = 7_900
"""As for hints (``postgres.hints``): PostgreSQL refuses a notification of 8,000 bytes."""

_ROOM = 512
"""Bytes kept for what the database adds to a hand-off's payload: the worker id, the lease's
end and the JSON around them."""

_MARK = ">"
"""Starts a hand-off's body, after the schema and the newline, where hints start with ``[``."""


@dataclass(frozen=True, slots=True)
class Handoff:
    """A step handed to a worker, its ``step_started`` recorded; with the run's history up to
    that event when the notification could carry it."""

    worker_id: str
    run_id: str
    step_id: str
    attempt: int
    lease_until: datetime
    history: tuple[EventEnvelope, ...] | None


def params(
    schema: str,
    channel: str,
    build_id: str,
    run_id: str,
    step_id: str,
    attempt: int,
    events: list[Event],
    now: datetime,
    ready: str | None,
) -> dict[str, Any]:
    """``HAND_OFF``'s parameters for a run whose first commit holds ``events`` (from
    ``run_started`` on); ``ready``: the step's hint payload, for when no worker is claimed."""
    head = f"{schema}\n{_MARK}"
    history: list[list[Any]] | None = [[e.KEY, e.to_data()] for e in events]
    rest = json.dumps([run_id, step_id, attempt, now.isoformat(), history])
    if len(head.encode()) + len(rest.encode()) + _ROOM > MAX_PAYLOAD_BYTES:
        # The worker reads the history itself then; ids alone always fit, or almost.
        rest = json.dumps([run_id, step_id, attempt, now.isoformat(), None])
    return {
        "build": build_id,
        "now": now,
        "run": run_id,
        "sequence": len(events) + 1,
        "step": step_id,
        "attempt": attempt,
        "channel": channel,
        "ready": ready if ready is not None else schema,
        "head": head,
        "rest": rest,
        "schema": schema,
    }


def fits(schema: str, run_id: str, step_id: str) -> bool:
    """Whether a hand-off of this step can be told at all (ids have no length limit)."""
    return len(schema) + len(json.dumps([run_id, step_id]).encode()) + _ROOM <= MAX_PAYLOAD_BYTES


@cache
def _addressed(worker_id: str) -> str | None:
    """How a hand-off's body to ``worker_id`` starts (``json_build_array``'s text); ``None``
    when the id holds a character PostgreSQL might escape otherwise than Python."""
    quoted = json.dumps(worker_id, ensure_ascii=False)
    return f"{_MARK}[{quoted}, " if quoted == f'"{worker_id}"' else None


ELSEWHERE: Final = "elsewhere"
"""What ``parse`` returns for a step handed to another worker."""


def parse(schema: str, text: str, worker_id: str | None) -> Handoff | Literal["elsewhere"] | None:
    """The hand-off a payload for ``schema`` carries to worker ``worker_id``; ``ELSEWHERE``
    when it hands a step to another worker, ``None`` when it is not a hand-off."""
    head, separator, body = text.partition("\n")
    if not separator or head != schema or not body.startswith(_MARK):
        return None
    # Every listening worker hears every hand-off (with four workers, three of every four are
    # not its own): another's is told by the worker id the payload starts with, unread.
    prefix = None if worker_id is None else _addressed(worker_id)
    if prefix is not None and not body.startswith(prefix):
        return ELSEWHERE
    try:
        to, until, (run_id, step_id, attempt, at, events) = json.loads(body[len(_MARK) :])
        if to != worker_id:
            return ELSEWHERE
        lease_until = datetime.fromisoformat(until)
        history = None
        if events is not None:
            now = datetime.fromisoformat(at)
            started = StepStarted(
                step_id=str(step_id),
                attempt=int(attempt),
                worker=str(to),
                lease_until=lease_until,
            )
            decoded = [event_from_data(key, data) for key, data in events] + [started]
            history = tuple(
                EventEnvelope(
                    run_id=str(run_id),
                    sequence=sequence,
                    recorded_at=now,
                    event=event,
                    size=len(event_json(event).encode()),
                )
                for sequence, event in enumerate(decoded, start=1)
            )
        return Handoff(str(to), str(run_id), str(step_id), int(attempt), lease_until, history)
    except (ValueError, TypeError, KeyError):
        return None
