"""The PostgreSQL statements of step limits (``DESIGN.md`` §6.4) on the lease and commit paths.

Two ways a step attempt under a limit starts, both counted in the database under the limit's row
lock:

- The limited lease (``LOCK_LIMITED``, ``LOCK_LIMITS``, ``LEASE_LIMITED``): one round trip finds
  the ready attempts, locks their runs' rows, then the limits' rows, and leases as many as the
  limits leave slots for; the second writes their ``step_started`` and commits (as the ordinary
  lease does, ``tables.LOCK_READY``).
- In the commit that schedules it (``LIMIT_GUARD``), as an unlimited step is, when its limit has
  room: the commit's batch locks the limit's row and fails (a guard, see
  ``tables.GUARD_SEQUENCE``) unless the attempts in flight, this one included, and the ready
  ones waiting for a slot fit the limit (and its rate's window). A commit that finds no room is
  redone without the start, which the next lease then counts like any other. Under a generous
  limit the lock is shared (``LOCK_LIMIT_SHARED``), so that such commits do not queue on one
  row, and the check leaves room for what the others may be starting meanwhile.

Locks are always taken runs first (in run id order), then limits (in name order): a commit
holding a run and waiting for a limit never waits for a lease that holds the limit and waits for
that run. An attempt holds its slot while its lease runs (``lease_owner`` set, ``available_at``
ahead), so a worker killed mid-attempt frees it when its lease lapses.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from datetime import datetime

import psycopg

from flow_cli.model.events import StepStarted
from flow_cli.store.pauses_sql import unpaused_or_not_held
from flow_cli.store.postgres.batch import Batch, Connection
from flow_cli.store.protocol import StreamWrite

_TASK_NOT_HELD = unpaused_or_not_held(
    "t", workflow="(SELECT w.workflow FROM runs w WHERE w.run_id = t.run_id)"
)

_CANDIDATES = (
    "unnest("
    "coalesce(nullif(current_setting('flow.limited_runs', true), ''), '{}')::text[], "
    "coalesce(nullif(current_setting('flow.limited_steps', true), ''), '{}')::text[]) AS u(r, s)"
    " CROSS JOIN LATERAL (SELECT * FROM step_tasks WHERE step_tasks.run_id = u.r"
    " AND step_tasks.step_id = u.s LIMIT 1) t"
)
"""The step tasks of the attempts ``LOCK_LIMITED`` found, as the transaction's settings hold
them: a ``FROM`` item, ``t``, each read by its key. (The ``LIMIT`` keeps the planner from
folding the lookup into a join; as a plain ``IN`` it scanned every open step task once per
attempt found.)"""

MOST_TASKS = "pg_relation_size('step_tasks') / 28"
"""More than the rows in ``step_tasks`` can be, read without scanning it: a heap row takes at
least 28 bytes of its page (a 24-byte header and a 4-byte item pointer), and every row a
statement sees lies in the table's pages (a vacuum truncates only empty ones)."""

LOCK_LIMITED = (
    "WITH ready AS MATERIALIZED (SELECT c.run_id, c.step_id FROM limits l CROSS JOIN LATERAL"
    "  (SELECT t.run_id, t.step_id FROM step_tasks t WHERE t.step_name = l.name"
    "  AND t.available_at <= %(now)s AND t.build_id = ANY(%(builds)s)"
    f"  AND {_TASK_NOT_HELD}"
    "  ORDER BY t.priority, t.available_at, t.run_id, t.step_id LIMIT %(limit)s) c"
    "  WHERE l.kind = 'step' AND l.limited = 1)"
    " SELECT run_id, last_sequence, build_id,"
    "  set_config('flow.limited_runs', (SELECT array_agg(run_id)::text FROM ready), true),"
    "  set_config('flow.limited_steps', (SELECT array_agg(step_id)::text FROM ready), true)"
    " FROM runs WHERE run_id IN (SELECT run_id FROM ready) ORDER BY run_id FOR UPDATE"
)
"""Find the first ``limit`` ready attempts (by priority, then age) of each limited step (one limit's
backlog does not hide another's), lock their runs' rows in run id order, and leave the attempts in
the transaction's ``flow.limited_*`` settings for the next statements. Rows of ``tables.LOCK_RUNS``
(then the settings' values). Each step's first attempts are read in the order of the ready-task
index, ``limit`` of them, not all of its backlog sorted."""

ANY_LIMITED_READY = (
    "SELECT EXISTS (SELECT 1 FROM step_tasks t WHERE t.available_at <= %(now)s"
    " AND t.build_id = ANY(%(builds)s)"
    " AND t.step_name IN (SELECT name FROM limits WHERE kind = 'step' AND limited = 1)"
    f" AND {_TASK_NOT_HELD})"
)
"""Whether an attempt of a limited step is ready: asked in the ordinary lease's round trip, so
that the limited lease runs only when it has something to count (``PostgresStore``)."""

LOCK_LIMITS = (
    "SELECT name FROM limits WHERE kind = 'step' AND limited = 1 AND name IN"
    f" (SELECT t.step_name FROM {_CANDIDATES}) ORDER BY name FOR UPDATE"
)
"""Lock the rows of the limits the found attempts are under, in name order. A statement of its
own: the next one's snapshot, taken after the locks, sees every slot taken before them."""

BUCKETS = 16
"""How many time buckets a rate's window is counted in (``limit_start_counts``)."""

BUCKET_END = (
    "to_timestamp((floor(extract(epoch FROM {at})::float8 * "
    f"{BUCKETS} / l.rate_seconds) + 1) * l.rate_seconds / {BUCKETS}.0)"
)
"""The end of the bucket a start at ``{at}`` is counted in, under the limit ``l``."""

COUNT_STARTS = (
    "INSERT INTO limit_start_counts (name, bucket_end, pid, n) {rows}"
    " ON CONFLICT (name, bucket_end, pid) DO UPDATE SET n = limit_start_counts.n + EXCLUDED.n"
)
"""Add starts to their bucket's count, in a row of this connection's own (``pg_backend_pid``):
commits on other connections never wait for it."""

LEASE_LIMITED = (
    "WITH cand AS (SELECT t.run_id, t.step_id, t.step_name, t.available_at, t.priority,"
    "  row_number() OVER (PARTITION BY t.step_name"
    "   ORDER BY t.priority, t.available_at, t.run_id, t.step_id) AS rank"
    f"  FROM {_CANDIDATES}"
    "  WHERE t.available_at <= %(now)s AND t.build_id = ANY(%(builds)s)),"
    " lim AS (SELECT l.name, l.rate_count IS NOT NULL AS rated, least("
    "  CASE WHEN l.concurrency IS NULL THEN %(limit)s"
    "   WHEN l.concurrency - " + MOST_TASKS + " >= %(limit)s THEN %(limit)s"
    "   ELSE l.concurrency - (SELECT count(*) FROM step_tasks b WHERE b.step_name = l.name"
    "   AND b.lease_owner IS NOT NULL AND b.available_at > %(now)s) END,"
    "  CASE WHEN l.rate_count IS NULL THEN %(limit)s"
    "   WHEN l.rate_count - (SELECT coalesce(sum(c.n), 0) FROM limit_start_counts c"
    "   WHERE c.name = l.name AND c.bucket_end"
    "   > %(now)s::timestamptz - l.rate_seconds * interval '1 second') >= %(limit)s"
    "   THEN %(limit)s"
    "   ELSE l.rate_count - (SELECT count(*) FROM limit_starts s WHERE s.name = l.name"
    "   AND s.started_at > %(now)s::timestamptz - l.rate_seconds * interval '1 second') END)"
    "  AS free"
    "  FROM limits l WHERE l.kind = 'step' AND l.limited = 1"
    "  AND l.name IN (SELECT step_name FROM cand)),"
    " chosen AS (SELECT c.run_id, c.step_id, c.step_name, c.available_at, lim.rated FROM cand c"
    "  JOIN lim ON lim.name = c.step_name WHERE c.rank <= lim.free"
    "  ORDER BY c.priority, c.available_at, c.run_id, c.step_id LIMIT %(limit)s),"
    " moved AS (UPDATE step_tasks SET available_at = %(until)s, lease_owner = %(worker)s"
    "  FROM chosen WHERE step_tasks.run_id = chosen.run_id"
    "  AND step_tasks.step_id = chosen.step_id"
    "  RETURNING step_tasks.run_id, step_tasks.step_id, step_tasks.attempt, chosen.available_at,"
    "  chosen.step_name, chosen.rated),"
    " logged AS (INSERT INTO limit_starts (name, started_at)"
    "  SELECT step_name, %(now)s FROM moved WHERE rated),"
    " counted AS ("
    + COUNT_STARTS.format(
        rows="SELECT l.name, "
        + BUCKET_END.format(at="%(now)s::timestamptz")
        + ", pg_backend_pid(), count(*) FROM moved m JOIN limits l ON l.kind = 'step'"
        " AND l.name = m.step_name WHERE m.rated GROUP BY l.name, l.rate_seconds"
    )
    + ")"
    " SELECT run_id, step_id, attempt, available_at, NULL::bigint FROM moved"
    " UNION ALL SELECT NULL, NULL, NULL, NULL, count(*) FROM cand"
)
"""Lease as many of the found attempts as their limits leave slots for (attempts in flight: leased,
lease not lapsed, not counted when ``MOST_TASKS`` leaves room for all; starts in the rate's
window, not counted one by one when their buckets' counts, which never undercount, leave room
for all), by priority then oldest first per limit, at most
``limit`` in all, logging the rated ones' starts. Rows of (run_id, step_id, attempt, old
available_at, NULL), then one of (NULL, ..., how many attempts were found ready)."""

PRUNE_STARTS = (
    "WITH counts AS (DELETE FROM limit_start_counts c USING limits l WHERE l.kind = 'step'"
    " AND l.name = c.name AND c.bucket_end"
    " <= %(now)s::timestamptz - l.rate_seconds * interval '1 second')"
    " DELETE FROM limit_starts s USING limits l WHERE l.kind = 'step' AND l.name = s.name"
    " AND s.started_at <= %(now)s::timestamptz - l.rate_seconds * interval '1 second'"
)
"""Forget the starts (and counts) every step limit's rate window has passed (now and then,
with a lease)."""

SHARED_STARTS = 16
"""The most attempts of one limit a commit starts under a shared lock of its row (more: an
exclusive one)."""

_MARGIN = f"current_setting('max_connections')::bigint * {SHARED_STARTS}"
"""What commits holding a limit's row shared may start that this one cannot see: each starts
at most ``SHARED_STARTS``, and no more transactions than connections are open at once."""

LOCK_LIMIT = (
    "SELECT 1 / count(*) FROM (SELECT 1 FROM limits WHERE kind = 'step' AND name = %(name)s"
    " AND limited = 1 FOR UPDATE) l"
)
"""A commit's exclusive lock of the limit its attempts start under; fails
(``division_by_zero``) when the limit is gone meanwhile (the commit is then redone the checking
way, which starts them freely)."""

LOCK_LIMIT_SHARED = LOCK_LIMIT.replace("FOR UPDATE", "FOR KEY SHARE")
"""``LOCK_LIMIT``, shared: commits starting attempts under a limit far from full do not queue
on its row (each would hold it through its WAL flush); a lease or a commit near the limit,
locking it exclusively, waits for them, then counts what they started."""

GENEROUS = (
    "SELECT name, (concurrency IS NULL OR concurrency >= 2 * " + _MARGIN + ")"
    " AND (rate_count IS NULL OR rate_count >= 2 * " + _MARGIN + ")"
    " FROM limits WHERE kind = 'step' AND limited = 1"
)
"""Each step limit in effect, and whether it is generous: far enough from what commits holding
its row shared could start unseen that they take a shared lock (``LIMIT_GUARD``)."""

LIMIT_GUARD = (
    "WITH l AS (SELECT concurrency, rate_count, rate_seconds FROM limits"
    "  WHERE kind = 'step' AND name = %(name)s),"
    " bs AS (SELECT coalesce(sum(c.n), 0) AS started FROM limit_start_counts c, l"
    "  WHERE c.name = %(name)s"
    "  AND c.bucket_end > %(now)s::timestamptz - l.rate_seconds * interval '1 second'),"
    " m AS (SELECT CASE WHEN %(shared)s THEN " + _MARGIN + " ELSE 0 END AS unseen),"
    " f AS (SELECT (l.concurrency IS NULL OR b.most + m.unseen <= l.concurrency)"
    "  AND (l.rate_count IS NULL OR bs.started + b.most + m.unseen + %(starts)s <= l.rate_count)"
    "  AS fits FROM l, bs, m, (SELECT " + MOST_TASKS + " AS most) b),"
    " s AS (SELECT CASE WHEN %(shared)s THEN bs.started"
    "  ELSE (SELECT count(*) FROM limit_starts WHERE name = %(name)s"
    "  AND started_at > %(now)s::timestamptz - l.rate_seconds * interval '1 second'"
    "  AND NOT coalesce((SELECT fits FROM f), false)) END AS started FROM l, bs),"
    " t AS (SELECT count(*) FILTER (WHERE lease_owner IS NOT NULL"
    "   AND available_at > %(now)s) AS busy,"
    "  count(*) FILTER (WHERE available_at <= %(now)s) AS ready"
    "  FROM step_tasks WHERE step_name = %(name)s AND NOT coalesce((SELECT fits FROM f), false)),"
    " logged AS (INSERT INTO limit_starts (name, started_at)"
    "  SELECT %(name)s, %(now)s FROM l, generate_series(1, %(starts)s)"
    "  WHERE l.rate_count IS NOT NULL),"
    " counted AS ("
    + COUNT_STARTS.format(
        rows="SELECT %(name)s, "
        + BUCKET_END.format(at="%(now)s::timestamptz")
        + ", pg_backend_pid(), %(starts)s FROM l WHERE l.rate_count IS NOT NULL"
    )
    + ")"
    " SELECT 1 / count(*) FROM l, t, s, m, f"
    " WHERE f.fits OR ((l.concurrency IS NULL OR t.busy + t.ready + m.unseen <= l.concurrency)"
    " AND (l.rate_count IS NULL OR s.started + t.ready + m.unseen + %(starts)s <= l.rate_count))"
)
"""After ``LOCK_LIMIT`` or ``LOCK_LIMIT_SHARED`` (in a statement of its own, so it sees every
slot taken before the lock), once the commit has written its started attempts (``starts`` of
them, counted in ``busy``): fail unless the limit has room for them, for every ready attempt
waiting for a slot (a start in a commit never takes a slot an older ready attempt could have)
and, under a shared lock (``shared``), for all that other commits holding it may start unseen;
log the starts for the rate.

It first asks whether the limit is far from full whatever the step's attempts are (``fits``):
``MOST_TASKS`` in place of the attempts in flight and ready, and the rate's starts read from
their buckets' counts (``limit_start_counts``: a few rows, not one per start in the window,
never fewer than the starts in it, as a bucket the window's start cuts counts whole). Only
when it is not are the step's open attempts counted (a scan of every open step task) and,
under an exclusive lock, the rate's starts one by one (``limit_starts``); a shared lock keeps
the buckets' counts."""


def started_under_limits(writes: Iterable[StreamWrite], limited: frozenset[str]) -> dict[str, int]:
    """How many attempts of each limited step these writes start (a ``step_started`` in the
    commit itself), by step name, in name order (the order their limits are locked in)."""
    if not limited:
        return {}
    counts: Counter[str] = Counter()
    for write in writes:
        for event in write.events:
            if isinstance(event, StepStarted):
                task = write.index.steps.get(event.step_id)
                if task is not None and task.name in limited:
                    counts[task.name] += 1
    return dict(sorted(counts.items()))


def queue_limit_guards(
    batch: Batch, starts: Mapping[str, int], now: datetime, generous: frozenset[str]
) -> None:
    """Add to a guarded commit's batch, after its step tasks, the lock and the check of each
    limit it starts attempts under (shared, for a ``generous`` limit and a few attempts): the
    batch fails (and is redone the checking way) when one has no room."""
    for name, count in starts.items():
        shared = name in generous and count <= SHARED_STARTS
        params = {"name": name, "now": now, "starts": count, "shared": shared}
        batch.execute(LOCK_LIMIT_SHARED if shared else LOCK_LIMIT, params)
        batch.execute(LIMIT_GUARD, params)


def full_limit(conn: Connection, starts: Mapping[str, int], now: datetime) -> str | None:
    """In a commit the checking way, after its step tasks: lock and check each limit it starts
    attempts under (as ``queue_limit_guards``); the name of the first with no room (the
    statement failed: roll back to before it), else ``None``."""
    for name, count in starts.items():
        params = {"name": name, "now": now, "starts": count, "shared": False}
        locked = conn.execute(
            "SELECT 1 FROM limits WHERE kind = 'step' AND name = %(name)s AND limited = 1 "
            "FOR UPDATE",
            params,
        ).fetchone()
        if locked is None:
            continue  # the limit is gone: nothing to count under
        try:
            conn.execute(LIMIT_GUARD, params)
        except psycopg.errors.DivisionByZero:
            return name
    return None
