"""The ``Limits`` role on SQL (``DESIGN.md`` §6.4): the ``limits`` table (what code declared,
what an operator overrode, and the limit in effect), the ``limit_starts`` log a rate counts,
and the lease of step attempts a limit holds back, enforced in the lease's transaction.

The ordinary step lease passes limited steps by (``UNLIMITED_STEP``, one primary-key probe per
candidate); they are leased here instead, one limit at a time: the limit's row is locked first
(PostgreSQL ``FOR UPDATE``; SQLite's ``BEGIN IMMEDIATE`` serializes every writer anyway), then
the attempts in flight (leased, lease not lapsed) and the starts in the rate's window are
counted, and only the free slots are leased. A worker that dies holding a slot frees it when
its lease lapses: an attempt counts only while ``available_at`` (its lease's end) is ahead.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from datetime import datetime, timedelta
from typing import Any

from flow_cli.model.limits import DeclaredLimit, LimitState, Rate, free_slots, parse_target
from flow_cli.store.pauses_sql import unpaused_or_not_held
from flow_cli.store.sql import OPEN_LIST, TERMINAL_LIST, SQLRole

UNLIMITED_RUN = (
    "NOT ({table}.status = 'Pending' AND EXISTS (SELECT 1 FROM limits l WHERE"
    " l.kind = 'workflow' AND l.name = {table}.workflow AND l.limited = 1))"
)
"""The condition the ordinary run lease adds: the run is not one whose first decision waits
for a slot of its workflow's limit (those are admitted by ``_lease_limited_runs``)."""

UNLIMITED_STEP = (
    "NOT EXISTS (SELECT 1 FROM limits l WHERE l.kind = 'step' AND l.name = {table}.step_name"
    " AND l.limited = 1)"
)
"""The condition the ordinary step lease adds: the task's step has no limit in effect (a task
indexed before limits existed has no ``step_name`` and none)."""

ANY_LIMITED_RUN_PENDING = (
    "SELECT 1 FROM runs r WHERE r.status = 'Pending' AND EXISTS (SELECT 1 FROM limits l"
    " WHERE l.kind = 'workflow' AND l.name = r.workflow AND l.limited = 1) LIMIT 1"
)
"""A row when some run of a limited workflow is ``Pending``: the limited run lease has something
to look at (a read, so that a worker with nothing to admit takes no lock of the limits)."""

_LOOKING = threading.Lock()


@contextmanager
def looking_alone(first: bool) -> Iterator[bool]:
    """Whether this thread looks up what limits are in effect now: one thread at a time, so
    that a worker's step threads, all finding the last look too old at once, do not each ask
    (and each take a connection for it). The ``first`` look always asks: nothing was seen."""
    if first:
        yield True
        return
    alone = _LOOKING.acquire(blocking=False)
    try:
        yield alone
    finally:
        if alone:
            _LOOKING.release()


LIMITS_LOOK_SECONDS = 2.0
"""How long a store trusts what it last saw of whether any limit is in effect, before it looks
again (a store looks when it opens). A limit set in another process where there was none is
enforced at once (the ordinary leases pass its steps and runs by), and what it holds is leased
under it at most this much later."""

PRUNE_EVERY = 16
"""A rate's log of starts is pruned of those its window has passed every this many looks at
the rate."""

THROTTLE_POLL = timedelta(milliseconds=50)
"""While a limit holds ready attempts back, how soon the worker looks again (``next_due``):
a slot frees when an attempt ends or its lease lapses, or when a rate's window moves on."""


_TASK_NOT_HELD = unpaused_or_not_held(
    "step_tasks", workflow="(SELECT w.workflow FROM runs w WHERE w.run_id = step_tasks.run_id)"
)
"""A limited attempt of a run a pause holds waits too (``pauses_sql``)."""


def unlimited_step(table: str) -> str:
    """``UNLIMITED_STEP`` for the step tasks table as the query names it."""
    return UNLIMITED_STEP.format(table=table)


def unlimited_run(table: str) -> str:
    """``UNLIMITED_RUN`` for the runs table as the query names it."""
    return UNLIMITED_RUN.format(table=table)


def limit_key(input_json: Any, field: str | None) -> str:
    """The value of a run's input field ``field`` that a keyed limit counts by, as text (a
    run whose input has no such field shares the key ``""``)."""
    if field is None:
        return ""
    data = json.loads(input_json) if isinstance(input_json, str) else input_json
    spec = data.get("spec", {}) if isinstance(data, dict) else {}
    value = spec.get("input") if isinstance(spec, dict) else None
    found = value.get(field) if isinstance(value, dict) else None
    if found is None:
        return ""
    return found if isinstance(found, str) else json.dumps(found, sort_keys=True)


def _rate_text(rate: Rate | None) -> str | None:
    return None if rate is None else str(rate)


def _rate_of(count: Any, seconds: Any) -> Rate | None:
    return None if count is None else Rate(int(count), int(seconds))


class SQLLimits(SQLRole):
    """``Limits`` for a store that provides ``_sql_write`` / ``_sql_read`` (one
    transaction, one read), ``_sql_dialect`` and ``_sql_time``; ``_limit_lock`` is
    what locks a limit's row in a SELECT."""

    _limit_lock: str = ""
    _limit_lease_lock: str = ""
    """What locks the limits' rows a lease counts under (PostgreSQL: ``FOR UPDATE SKIP LOCKED``:
    two workers never count at once, and one never waits for the other)."""
    _limits_seen: tuple[float, frozenset[str]] = (float("-inf"), frozenset())
    _kinds_seen: tuple[frozenset[str] | None, frozenset[str]] = (None, frozenset())
    _throttled_until: datetime | None = None
    _starts_seen: int = 0
    _limited_runs_left = True
    """Whether the last limited run lease left runs of a limited workflow ``Pending`` (waiting
    for a slot, or admitted and not yet decided): the next one looks without asking first."""

    def _limit_write(self) -> AbstractContextManager[Any]:
        """The transaction ``declare_limits`` writes in: no wait for the disk (a worker
        declares its code's limits again whenever it starts)."""
        return self._sql_write()

    # -- declared and overridden limits -----------------------------------------------------------

    def declare_limits(self, limits: Sequence[DeclaredLimit]) -> None:
        """Record what code declares (source ``code``); an override in place stays in effect."""
        p = self._sql_dialect.param
        with self._limit_write() as conn:
            for limit in limits:
                kind, name = parse_target(limit.target)
                rate = limit.rate
                values = (
                    limit.concurrency,
                    _rate_text(rate),
                    None if rate is None else rate.count,
                    None if rate is None else rate.seconds,
                    limit.key,
                )
                conn.execute(
                    "INSERT INTO limits (kind, name, code_concurrency, code_rate, code_rate_count, "
                    "code_rate_seconds, code_key, overridden, concurrency, rate_count, "
                    f"rate_seconds, limited) VALUES ({p}, {p}, {p}, {p}, {p}, {p}, {p}, 0, "
                    f"{p}, {p}, {p}, {p}) ON CONFLICT (kind, name) DO UPDATE SET "
                    "code_concurrency = EXCLUDED.code_concurrency, code_rate = EXCLUDED.code_rate, "
                    "code_rate_count = EXCLUDED.code_rate_count, "
                    "code_rate_seconds = EXCLUDED.code_rate_seconds, code_key = EXCLUDED.code_key",
                    (kind, name, *values, values[0], values[2], values[3], int(limit.limited)),
                )
                conn.execute(
                    "UPDATE limits SET concurrency = code_concurrency, rate_count = "
                    "code_rate_count, rate_seconds = code_rate_seconds, limited = CASE WHEN "
                    "code_concurrency IS NULL AND code_rate_count IS NULL THEN 0 ELSE 1 END "
                    f"WHERE kind = {p} AND name = {p} AND overridden = 0",
                    (kind, name),
                )
        self._limits_seen = (float("-inf"), frozenset())

    def override_limit(self, target: str, concurrency: int | None, rate: Rate | None) -> bool:
        """Put ``concurrency`` and/or ``rate`` in effect for a known target fleet-wide (source
        ``override``; a value not given stays as it is). False, writing nothing, when no
        worker ever declared the target."""
        kind, name = parse_target(target)
        p = self._sql_dialect.param
        with self._sql_write() as conn:
            row = conn.execute(
                "SELECT concurrency, rate_count, rate_seconds FROM limits "
                f"WHERE kind = {p} AND name = {p} {self._limit_lock}",
                (kind, name),
            ).fetchone()
            if row is None:
                return False
            new_concurrency = row[0] if concurrency is None else concurrency
            new_rate = _rate_of(row[1], row[2]) if rate is None else rate
            conn.execute(
                f"UPDATE limits SET overridden = 1, concurrency = {p}, rate_count = {p}, "
                f"rate_seconds = {p}, limited = {p} WHERE kind = {p} AND name = {p}",
                (
                    new_concurrency,
                    None if new_rate is None else new_rate.count,
                    None if new_rate is None else new_rate.seconds,
                    int(new_concurrency is not None or new_rate is not None),
                    kind,
                    name,
                ),
            )
        self._limits_seen = (float("-inf"), frozenset())
        return True

    def clear_override(self, target: str) -> bool:
        """Put the code's values back in effect (source ``code``); False when the target is
        unknown."""
        kind, name = parse_target(target)
        p = self._sql_dialect.param
        with self._sql_write() as conn:
            cur = conn.execute(
                "UPDATE limits SET overridden = 0, concurrency = code_concurrency, "
                "rate_count = code_rate_count, rate_seconds = code_rate_seconds, limited = CASE "
                "WHEN code_concurrency IS NULL AND code_rate_count IS NULL THEN 0 ELSE 1 END "
                f"WHERE kind = {p} AND name = {p}",
                (kind, name),
            )
        self._limits_seen = (float("-inf"), frozenset())
        return bool(cur.rowcount)

    def known_limit(self, target: str) -> bool:
        """Whether some worker declared ``target`` (a workflow or step of its code)."""
        kind, name = parse_target(target)
        p = self._sql_dialect.param
        with self._sql_read() as conn:
            row = conn.execute(
                f"SELECT 1 FROM limits WHERE kind = {p} AND name = {p}", (kind, name)
            ).fetchone()
        return row is not None

    def limit_states(self, now: datetime) -> list[LimitState]:
        """Every limit in effect, by target, with its use at ``now``."""
        d = self._sql_dialect
        p = d.param
        with self._sql_read() as conn:
            rows = conn.execute(
                "SELECT kind, name, concurrency, rate_count, rate_seconds, overridden FROM limits "
                "WHERE limited = 1 ORDER BY kind, name"
            ).fetchall()
            found = []
            for kind, name, concurrency, count, seconds, overridden in rows:
                in_use = waiting = 0
                if kind == "workflow":
                    in_use, waiting = conn.execute(
                        "SELECT (SELECT count(*) FROM run_slots s JOIN runs r ON r.run_id = "
                        f"s.run_id WHERE s.workflow = {p} AND s.admitted = 1 AND r.status IN "
                        f"({OPEN_LIST})), (SELECT count(*) FROM runs r WHERE r.workflow = {p} "
                        "AND r.status = 'Pending' AND NOT EXISTS (SELECT 1 FROM run_slots s "
                        "WHERE s.run_id = r.run_id AND s.admitted = 1))",
                        (name, name),
                    ).fetchone()
                if kind == "step":
                    in_use, waiting = conn.execute(
                        "SELECT coalesce(sum(CASE WHEN lease_owner IS NOT NULL AND available_at > "
                        f"{p} THEN 1 ELSE 0 END), 0), coalesce(sum(CASE WHEN available_at <= {p} "
                        f"THEN 1 ELSE 0 END), 0) FROM step_tasks WHERE step_name = {p}",
                        (d.time(now), d.time(now), name),
                    ).fetchone()
                found.append(
                    LimitState(
                        target=f"{kind}:{name}",
                        concurrency=None if concurrency is None else int(concurrency),
                        rate=_rate_of(count, seconds),
                        in_use=int(in_use),
                        waiting=int(waiting),
                        source="override" if overridden else "code",
                    )
                )
        return found

    def limited_targets(self) -> frozenset[str]:
        """The targets (``step:NAME``, ``workflow:NAME``) a limit is in effect for."""
        with self._sql_read() as conn:
            rows = conn.execute("SELECT kind, name FROM limits WHERE limited = 1").fetchall()
        return frozenset(f"{kind}:{name}" for kind, name in rows)

    # -- the lease of limited steps ---------------------------------------------------------------

    def _limit_kinds(self) -> frozenset[str]:
        """The kinds (``step``, ``workflow``) some limit is in effect for, as last looked up
        (at most ``LIMITS_LOOK_SECONDS`` ago, else looked up now)."""
        targets = self._limits_in_effect()
        seen, kinds = self._kinds_seen
        if seen is not targets:  # derived once per look: asked for every step and lease
            kinds = frozenset(target.split(":", 1)[0] for target in targets)
            self._kinds_seen = (targets, kinds)
        return kinds

    def _limits_in_effect(self) -> frozenset[str]:
        """The targets (``step:NAME``, ``workflow:NAME``) some limit is in effect for, as last
        looked up (at most ``LIMITS_LOOK_SECONDS`` ago, else looked up now)."""
        looked, targets = self._limits_seen
        if time.monotonic() - looked < LIMITS_LOOK_SECONDS:
            return targets
        with looking_alone(first=looked == float("-inf")) as alone:
            if alone:  # else another thread is looking: what was last seen serves meanwhile
                targets = self.limited_targets()
                self._limits_seen = (time.monotonic(), targets)
        return targets

    def _limited_step_names(self) -> frozenset[str]:
        """The steps some limit is in effect for, as last looked up (``_limits_in_effect``)."""
        return frozenset(
            target[5:] for target in self._limits_in_effect() if target.startswith("step:")
        )

    def _step_limits_present(self) -> bool:
        """Whether any step limit is in effect, as last looked up (``_limit_kinds``)."""
        return "step" in self._limit_kinds()

    def _run_limits_present(self) -> bool:
        """Whether any workflow limit is in effect, as last looked up (``_limit_kinds``)."""
        return "workflow" in self._limit_kinds()

    def _lease_limited(
        self,
        conn: Any,
        worker: str,
        build_ids: Sequence[str],
        now: datetime,
        lease_until: datetime,
        room: int,
        lock_runs: Callable[[Any, list[str]], None] | None = None,
    ) -> list[tuple[str, str, int]]:
        """In the caller's write transaction on ``conn``: lease up to ``room`` ready attempts of
        limited steps of these builds, as their limits leave slots free, by their runs' priority
        then oldest first per step, and log their starts for the rates. Rows of (run_id, step_id,
        attempt); the caller records their ``step_started``. ``lock_runs`` locks the runs' rows
        first (PostgreSQL: in the order a commit locks them)."""
        self._throttled_until = None
        if room <= 0 or not build_ids or not self._step_limits_present():
            return []
        d = self._sql_dialect
        p = d.param
        marks = ", ".join([p] * len(build_ids))
        limits = self._lock_limits(conn, "step", "name, concurrency, rate_count, rate_seconds", now)
        chosen: list[tuple[str, bool, str, str, int]] = []
        for name, concurrency, count, seconds in limits:
            if len(chosen) >= room:
                break
            rate = _rate_of(count, seconds)
            window = now - timedelta(seconds=rate.seconds if rate is not None else 0)
            # One round trip per limit: the ready attempts, those in flight, the starts in the
            # rate's window (the counts are read once, not per row).
            ready = conn.execute(
                "SELECT run_id, step_id, attempt, (SELECT count(*) FROM step_tasks WHERE "
                f"step_name = {p} AND lease_owner IS NOT NULL AND available_at > {p}), "
                f"(SELECT count(*) FROM limit_starts WHERE name = {p} AND started_at > {p}) "
                f"FROM step_tasks WHERE step_name = {p} AND available_at <= {p} "
                f"AND build_id IN ({marks}) AND {_TASK_NOT_HELD} "
                f"ORDER BY priority, available_at, run_id, step_id LIMIT {p}",
                (
                    name,
                    d.time(now),
                    name,
                    d.time(window),
                    name,
                    d.time(now),
                    *build_ids,
                    room - len(chosen),
                ),
            ).fetchall()
            if not ready:
                continue
            in_flight, started = int(ready[0][3]), int(ready[0][4]) if rate is not None else 0
            if rate is not None and self._prune_starts():
                conn.execute(
                    f"DELETE FROM limit_starts WHERE name = {p} AND started_at <= {p}",
                    (name, d.time(window)),
                )
            free = free_slots(
                None if concurrency is None else int(concurrency), rate, in_flight, started
            )
            take = ready if free is None else ready[:free]
            if len(take) < len(ready):
                self._throttled_until = now + THROTTLE_POLL
            chosen.extend((name, rate is not None, row[0], row[1], int(row[2])) for row in take)
        if not chosen:
            return []
        if lock_runs is not None:  # all of them at once, in run id order (as commits lock)
            lock_runs(conn, sorted({row[2] for row in chosen}))
        # Re-checked as they are leased (still ready, same attempt): one statement for all.
        rows = ", ".join([f"({p}, {p}, {p})"] * len(chosen))
        moved = conn.execute(
            f"UPDATE step_tasks SET available_at = {p}, lease_owner = {p} "
            f"WHERE available_at <= {p} AND (run_id, step_id, attempt) IN (VALUES {rows}) "
            "RETURNING run_id, step_id, attempt",
            (
                d.time(lease_until),
                worker,
                d.time(now),
                *(value for row in chosen for value in row[2:]),
            ),
        ).fetchall()
        done = {(row[0], row[1]) for row in moved}
        leased = [(r, s, a) for _, _, r, s, a in chosen if (r, s) in done]
        starts = [
            (name, d.time(now)) for name, rated, r, s, _ in chosen if rated and (r, s) in done
        ]
        if starts:
            conn.execute(
                "INSERT INTO limit_starts (name, started_at) VALUES "
                + ", ".join([f"({p}, {p})"] * len(starts)),
                tuple(value for start in starts for value in start),
            )
        return leased

    def _lock_limits(
        self, conn: Any, kind: str, columns: str, now: datetime
    ) -> list[tuple[Any, ...]]:
        """The ``columns`` of the limits of ``kind`` (``step`` or ``workflow``) that hold
        something back, locked for this lease. One locked by another worker leasing under it
        is not waited for (this lease's time would be stale by then): left out, and looked at
        again shortly (``_throttled_until``)."""
        rows = conn.execute(
            f"SELECT {columns}, (SELECT count(*) FROM limits WHERE kind = '{kind}' AND "
            f"limited = 1) FROM limits WHERE kind = '{kind}' AND limited = 1 "
            f"ORDER BY name {self._limit_lease_lock}"
        ).fetchall()
        if not rows or len(rows) < int(rows[0][-1]):
            self._throttled_until = now + THROTTLE_POLL
        return [tuple(row[:-1]) for row in rows]

    def _prune_starts(self) -> bool:
        """Whether to forget the starts a rate's window has left behind now (every
        ``PRUNE_EVERY``th look at a rate: the count reads only the window anyway)."""
        self._starts_seen += 1
        return self._starts_seen % PRUNE_EVERY == 1

    def _limited_runs_pending(self) -> bool:
        """Whether the limited run lease may find something: a run limit is in effect and the
        last lease left runs waiting, or a run of a limited workflow is ``Pending`` now
        (``ANY_LIMITED_RUN_PENDING``, read before the lease takes any lock)."""
        if not self._run_limits_present():
            return False
        if self._limited_runs_left:
            return True
        with self._sql_read() as conn:
            return conn.execute(ANY_LIMITED_RUN_PENDING).fetchone() is not None

    def _lease_limited_runs(
        self,
        conn: Any,
        worker: str,
        build_ids: Sequence[str],
        now: datetime,
        until: datetime,
        room: int,
    ) -> list[str]:
        """In the caller's write transaction on ``conn``: lease up to ``room`` runs of limited
        workflows for their first decision, as their limits leave slots, in start order per
        key (``created_at``, then run id), each admitted run holding its slot until it ends.
        A run admitted before (its lease lapsed) is leased again without another slot."""
        if room <= 0 or not build_ids or not self._run_limits_present():
            return []
        self._limited_runs_left = True  # until this lease has seen every limit's waiting runs
        d = self._sql_dialect
        p = d.param
        hosted = set(build_ids)
        limits = self._lock_limits(conn, "workflow", "name, concurrency, code_key", now)
        chosen: list[tuple[str, bool]] = []
        left = False
        for name, concurrency, field in limits:
            if len(chosen) >= room:
                left = True
                break
            if self._prune_starts():  # now and then: the count below reads open runs only
                conn.execute(
                    f"DELETE FROM run_slots WHERE workflow = {p} AND EXISTS (SELECT 1 FROM runs "
                    f"r WHERE r.run_id = run_slots.run_id AND (r.status IN ({TERMINAL_LIST}) OR "
                    "(run_slots.admitted = 0 AND r.status <> 'Pending')))",
                    (name,),
                )
            fresh = conn.execute(
                "SELECT e.run_id, e.data FROM runs r JOIN events e ON e.run_id = r.run_id "
                f"AND e.sequence = 1 WHERE r.workflow = {p} AND r.status = 'Pending' AND NOT "
                "EXISTS (SELECT 1 FROM run_slots s WHERE s.run_id = r.run_id)",
                (name,),
            ).fetchall()
            for at in range(0, len(fresh), 500):  # each new run's key, computed once
                some = fresh[at : at + 500]
                conn.execute(
                    "INSERT INTO run_slots (run_id, workflow, key, admitted) VALUES "
                    + ", ".join([f"({p}, {p}, {p}, 0)"] * len(some)),
                    tuple(v for r, data in some for v in (r, name, limit_key(data, field))),
                )
            used = dict(
                conn.execute(
                    "SELECT s.key, count(*) FROM run_slots s JOIN runs r ON r.run_id = s.run_id "
                    f"WHERE s.workflow = {p} AND s.admitted = 1 AND r.status IN ({OPEN_LIST}) "
                    "GROUP BY s.key",
                    (name,),
                ).fetchall()
            )
            waiting = conn.execute(
                "SELECT s.run_id, s.key, s.admitted, r.decide_at, r.build_id FROM run_slots s "
                f"JOIN runs r ON r.run_id = s.run_id WHERE s.workflow = {p} "
                f"AND r.status = 'Pending' AND {unpaused_or_not_held('r')} "
                "ORDER BY r.created_at, r.run_id",
                (name,),
            ).fetchall()
            left = left or bool(waiting)
            for run_id, key, admitted, decide_at, build_id in waiting:
                if len(chosen) >= room:
                    break
                due = decide_at is not None and self._sql_time(decide_at) <= now
                if admitted:
                    if due and build_id in hosted:
                        chosen.append((run_id, False))
                    continue
                if int(used.get(key, 0)) >= int(concurrency):
                    self._throttled_until = now + THROTTLE_POLL
                    continue
                if not due or build_id not in hosted:
                    continue
                used[key] = int(used.get(key, 0)) + 1
                chosen.append((run_id, True))
        # A run a limit skipped (locked by another worker) may still wait: look again.
        self._limited_runs_left = left or self._throttled_until is not None
        if not chosen:
            return []
        ids = sorted(run_id for run_id, _ in chosen)
        marks = ", ".join([p] * len(ids))
        if self._limit_lock:  # in run id order, as commits lock rows
            conn.execute(
                f"SELECT run_id FROM runs WHERE run_id IN ({marks}) ORDER BY run_id "
                f"{self._limit_lock}",
                ids,
            ).fetchall()
        moved = {
            row[0]
            for row in conn.execute(
                f"UPDATE runs SET decide_at = {p}, lease_owner = {p} WHERE run_id IN ({marks}) "
                f"AND decide_at <= {p} AND status = 'Pending' RETURNING run_id",
                (d.time(until), worker, *ids, d.time(now)),
            ).fetchall()
        }
        admitted = [run_id for run_id, admit in chosen if admit and run_id in moved]
        if admitted:
            conn.execute(
                "UPDATE run_slots SET admitted = 1 WHERE run_id IN "
                f"({', '.join([p] * len(admitted))})",
                admitted,
            )
        leased = [run_id for run_id in ids if run_id in moved]
        return leased

    def _throttled_due(self, due: datetime | None) -> datetime | None:
        """``due``, or sooner when the last lease left attempts ready that a limit held back
        (the worker then looks again in ``THROTTLE_POLL``)."""
        held, self._throttled_until = self._throttled_until, None  # said once per lease
        if held is None:
            return due
        return held if due is None or held < due else due
