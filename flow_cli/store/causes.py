"""``cause_tally``: ``flow doctor``'s causes counted by the database, not by a row per run.

``RULES`` is the doctor's rule (``flow_cli.ops.doctor.classify``, pauses and limits aside: the
caller walks the runs instead when either is in force) as a table: each row a condition on the
run's index row and its step tasks, the cause it gives and the time the cause began. The table
is rendered twice from the same rows: as one SQL statement (``tally_sql``, shared by SQLite
and PostgreSQL through their ``Dialect``) whose ``CASE`` classifies every open run, counts per
cause with a window and returns only the first ``keep`` of each; and as Python (``cause_of``)
for the memory store. The doctor classifies the samples again with ``classify`` and walks the
runs if the two ever disagree, so the table can only cost time, never a wrong report.
"""

from __future__ import annotations

from bisect import insort
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from flow_cli.store.queries import CauseQuery, RunFilter, RunState, waiting_needle
from flow_cli.store.sql import Dialect, run_filter


@dataclass(frozen=True, slots=True)
class Facts:
    """What a rule looks at in one open run (Python side; the SQL side reads the same columns
    and the ``tasks`` aggregate of ``tally_sql``)."""

    state: RunState
    query: CauseQuery

    def waits(self, kind: str) -> bool:
        return waiting_needle(kind) in f" {self.state.waiting_on or ''} "

    @property
    def free_late(self) -> datetime | None:
        late = [t.available_at for t in self.state.tasks if t.owner is None]
        return min((t for t in late if t < self.query.late), default=None)

    @property
    def held_late(self) -> datetime | None:
        held = [t.available_at for t in self.state.tasks if t.owner is not None]
        return min((t for t in held if t < self.query.late), default=None)

    @property
    def retrying(self) -> bool:
        return any(
            t.owner is None and t.attempt > 1 and t.available_at > self.query.now
            for t in self.state.tasks
        )

    @property
    def held(self) -> bool:
        return any(t.owner is not None for t in self.state.tasks)

    @property
    def ready(self) -> datetime | None:
        free = [t.available_at for t in self.state.tasks if t.owner is None]
        return min((t for t in free if t <= self.query.now), default=None)

    @property
    def decide_late(self) -> datetime | None:
        """The run's due time when it is overdue and no worker holds the decision."""
        s = self.state
        late = s.decide_at is not None and s.lease_owner is None and s.decide_at < self.query.late
        return s.decide_at if late else None

    @property
    def lease_late(self) -> datetime | None:
        """The end of the run's decision lease when it ended before ``late``."""
        s = self.state
        late = s.decide_at is not None and s.lease_owner is not None
        return s.decide_at if late and s.decide_at < self.query.late else None  # type: ignore[operator]

    @property
    def deciding(self) -> bool:
        s = self.state
        return s.decide_at is not None and (
            s.lease_owner is not None or s.decide_at <= self.query.now
        )


def _least(*times: datetime | None) -> datetime | None:
    return min((t for t in times if t is not None), default=None)


def _unhosted_since(f: Facts) -> datetime:
    last = f.query.last_seen.get(f.state.build_id)
    return max(f.state.updated_at, last or f.state.updated_at)


@dataclass(frozen=True, slots=True)
class Rule:
    cause: str
    when: Callable[[Facts], bool]
    """The condition, in Python."""
    since: Callable[[Facts], datetime | None]
    sql_when: str
    """The condition over ``r`` (the run) and ``t`` (its tasks' aggregate)."""
    sql_since: str


UPDATED = "r.updated_at"
DECIDE_LATE = (
    "CASE WHEN r.decide_at IS NOT NULL AND r.lease_owner IS NULL AND r.decide_at < {late} "
    "THEN r.decide_at END"
)
LEASE_LATE = (
    "CASE WHEN r.decide_at IS NOT NULL AND r.lease_owner IS NOT NULL AND r.decide_at < {late} "
    "THEN r.decide_at END"
)


def _sql_least(a: str, b: str) -> str:
    """The earlier of two times either of which may be NULL (SQLite's ``min`` and
    PostgreSQL's ``LEAST`` disagree on NULL)."""
    return (
        f"(CASE WHEN ({a}) IS NULL THEN ({b}) WHEN ({b}) IS NULL OR ({a}) <= ({b}) "
        f"THEN ({a}) ELSE ({b}) END)"
    )


RULES: tuple[Rule, ...] = (
    Rule(
        "decision-failing",
        lambda f: f.state.failing is not None,
        lambda f: f.state.failing_since or f.state.updated_at,
        "r.failing IS NOT NULL",
        "coalesce(r.failing_since, r.updated_at)",
    ),
    Rule(
        "step-unknown",
        lambda f: f.waits("unknown"),
        lambda f: f.state.updated_at,
        "{waits_unknown}",
        UPDATED,
    ),
    Rule(
        "build-unhosted",
        lambda f: f.state.build_id not in f.query.hosted,
        _unhosted_since,
        "{unhosted}",
        "{unhosted_since}",
    ),
    Rule(
        "timer-overdue",
        lambda f: f.free_late is not None or f.decide_late is not None,
        lambda f: _least(f.free_late, f.decide_late),
        f"t.free_late IS NOT NULL OR ({DECIDE_LATE}) IS NOT NULL",
        _sql_least("t.free_late", DECIDE_LATE),
    ),
    Rule(
        "lease-expired",
        lambda f: f.held_late is not None or f.lease_late is not None,
        lambda f: _least(f.held_late, f.lease_late),
        f"t.held_late IS NOT NULL OR ({LEASE_LATE}) IS NOT NULL",
        _sql_least("t.held_late", LEASE_LATE),
    ),
    Rule(
        "step-retrying",
        lambda f: f.retrying,
        lambda f: f.state.updated_at,
        "t.retrying = 1",
        UPDATED,
    ),
    Rule(
        "step-running",
        lambda f: f.held and not f.deciding,
        lambda f: f.state.updated_at,
        "t.held = 1 AND NOT {deciding}",
        UPDATED,
    ),
    Rule(
        "runnable",
        lambda f: f.state.decide_at is not None and f.state.lease_owner is not None,
        lambda f: f.state.updated_at,
        "r.decide_at IS NOT NULL AND r.lease_owner IS NOT NULL",
        UPDATED,
    ),
    Rule(
        "runnable",
        lambda f: f.state.decide_at is not None and f.state.decide_at <= f.query.now,
        lambda f: f.state.decide_at,
        "r.decide_at IS NOT NULL AND r.decide_at <= {now}",
        "r.decide_at",
    ),
    Rule("runnable", lambda f: f.held, lambda f: f.state.updated_at, "t.held = 1", UPDATED),
    Rule(
        "runnable",
        lambda f: f.ready is not None,
        lambda f: f.ready,
        "t.ready IS NOT NULL",
        "t.ready",
    ),
    Rule(
        "waiting-signal",
        lambda f: f.waits("signal"),
        lambda f: f.state.updated_at,
        "{waits_signal}",
        UPDATED,
    ),
    Rule(
        "waiting-hook",
        lambda f: f.waits("hook"),
        lambda f: f.state.updated_at,
        "{waits_hook}",
        UPDATED,
    ),
    Rule(
        "waiting-child",
        lambda f: f.waits("child"),
        lambda f: f.state.updated_at,
        "{waits_child}",
        UPDATED,
    ),
    Rule(
        "sleeping",
        lambda f: f.state.decide_at is not None,
        lambda f: f.state.updated_at,
        "r.decide_at IS NOT NULL",
        UPDATED,
    ),
    Rule("runnable", lambda f: True, lambda f: f.state.updated_at, "1 = 1", UPDATED),
)
"""``classify``'s order (pauses and limits aside): the first rule that holds gives the cause."""


def cause_of(state: RunState, query: CauseQuery) -> tuple[str, datetime]:
    """The cause of one open run and since when, by ``RULES`` (the memory store's tally)."""
    facts = Facts(state, query)
    for rule in RULES:
        if rule.when(facts):
            return rule.cause, rule.since(facts) or state.updated_at
    raise AssertionError("the last rule always holds")


def tally_sql(
    where: RunFilter,
    query: CauseQuery,
    dialect: Dialect,
    collate: str = "",
    *,
    ranked: bool = True,
) -> tuple[str, dict[str, Any]]:
    """One statement: ``(cause, since, run_id, count of its cause)`` for the first
    ``query.keep`` runs of each cause (by since, then run id; ``collate`` spells the code point
    order of run ids), over the runs ``where`` selects; ``where.statuses`` should be the open
    ones. Unranked, ``(cause, since, run_id)`` of every run, for ``ranked_in_passing``: where
    the database's sort of every run costs more than reading the rows (SQLite: its window
    sorts ~300,000 runs in about twice the time the rows stream by)."""
    conditions, params = run_filter(where, dialect)
    n = dialect.named

    def time(name: str, value: datetime) -> str:
        params[name] = dialect.time(value)
        return dialect.time_param.replace(dialect.param, n(name))

    now, late = time("q_now", query.now), time("q_late", query.late)
    parts: dict[str, str] = {"now": now, "late": late}
    for kind in ("unknown", "signal", "hook", "child"):
        params[f"q_w_{kind}"] = waiting_needle(kind)
        parts[f"waits_{kind}"] = (
            f"{dialect.position}(' ' || coalesce(r.waiting_on, '') || ' ', {n(f'q_w_{kind}')}) > 0"
        )
    hosted = sorted(query.hosted)
    for i, build in enumerate(hosted):
        params[f"q_h{i}"] = build
    names = ", ".join(n(f"q_h{i}") for i in range(len(hosted)))
    parts["unhosted"] = f"r.build_id NOT IN ({names})" if hosted else "1 = 1"
    seen = sorted(query.last_seen.items())
    if seen:
        whens = " ".join(
            f"WHEN {n(f'q_b{i}')} THEN {time(f'q_l{i}', at)}" for i, (_, at) in enumerate(seen)
        )
        params.update({f"q_b{i}": build for i, (build, _) in enumerate(seen)})
        last = f"(CASE r.build_id {whens} END)"
        parts["unhosted_since"] = (
            f"CASE WHEN {last} IS NOT NULL AND {last} > r.updated_at THEN {last} "
            "ELSE r.updated_at END"
        )
    else:
        parts["unhosted_since"] = UPDATED
    parts["deciding"] = (
        f"(r.decide_at IS NOT NULL AND (r.lease_owner IS NOT NULL OR r.decide_at <= {now}))"
    )

    def render(text: str) -> str:
        return text.format(**parts)

    cause = " ".join(f"WHEN {render(r.sql_when)} THEN '{r.cause}'" for r in RULES)
    since = " ".join(f"WHEN {render(r.sql_when)} THEN {render(r.sql_since)}" for r in RULES)
    tasks = (
        "SELECT run_id, "
        f"min(CASE WHEN lease_owner IS NULL AND available_at < {late} THEN available_at END) "
        "AS free_late, "
        f"min(CASE WHEN lease_owner IS NOT NULL AND available_at < {late} THEN available_at END)"
        " AS held_late, "
        "max(CASE WHEN lease_owner IS NULL AND attempt > 1 AND available_at > "
        f"{now} THEN 1 ELSE 0 END) AS retrying, "
        "max(CASE WHEN lease_owner IS NOT NULL THEN 1 ELSE 0 END) AS held, "
        f"min(CASE WHEN lease_owner IS NULL AND available_at <= {now} THEN available_at END) "
        "AS ready FROM step_tasks GROUP BY run_id"
    )
    selected = " AND ".join(conditions) or "1 = 1"
    classified = (
        f"SELECT r.run_id, CASE {cause} END AS cause, CASE {since} END AS since "
        "FROM (SELECT run_id, build_id, updated_at, decide_at, lease_owner, failing, "
        f"failing_since, waiting_on FROM runs WHERE {selected}) r "
        f"LEFT JOIN ({tasks}) t ON t.run_id = r.run_id"
    )
    if not ranked:
        return f"SELECT cause, since, run_id FROM ({classified}) classified", params
    params["q_keep"] = max(1, query.keep)
    statement = (
        "SELECT cause, since, run_id, total FROM ("
        "SELECT cause, since, run_id, count(*) OVER (PARTITION BY cause) AS total, "
        f"row_number() OVER (PARTITION BY cause ORDER BY since, run_id{collate}) AS place "
        f"FROM ({classified}) classified"
        f") ranked WHERE place <= {n('q_keep')}"
    )
    return statement, params


def ranked_in_passing(rows: Iterable[Sequence[Any]], keep: int) -> list[tuple[str, Any, str, int]]:
    """What ``tally_sql`` ranks in the database, ranked here from its unranked rows ``(cause,
    since, run_id)`` as they stream by: each cause's count and its first ``keep`` runs by
    since (none first, as SQL sorts a NULL), then run id (code point order). Memory: ``keep``
    rows a cause, whatever the number of runs; no sort of every run."""
    counts: dict[str, int] = {}
    firsts: dict[str, list[tuple[bool, Any, str]]] = {}
    keep = max(1, keep)
    for cause, since, run_id in rows:
        counts[cause] = counts.get(cause, 0) + 1
        key = (since is not None, since, run_id)
        kept = firsts.setdefault(cause, [])
        if len(kept) < keep:
            insort(kept, key)
        elif key < kept[-1]:
            kept.pop()
            insort(kept, key)
    return [
        (cause, since, run_id, counts[cause])
        for cause in sorted(firsts)
        for _, since, run_id in firsts[cause]
    ]


def states_sql(run_ids: Sequence[str], dialect: Dialect) -> tuple[str, dict[str, Any]]:
    """The ``run_states`` rows (``assemble_states``) of the runs named, by run."""
    params = {f"s{i}": run_id for i, run_id in enumerate(run_ids)}
    names = ", ".join(dialect.named(name) for name in params) or "NULL"
    statement = (
        "SELECT r.run_id, r.workflow, r.status, r.build_id, r.created_at, r.updated_at, "
        "r.decide_at, r.lease_owner, r.failing, r.waiting_on, r.failing_since, "
        "t.step_id, t.attempt, t.available_at, t.lease_owner, t.step_name "
        "FROM runs r LEFT JOIN step_tasks t ON t.run_id = r.run_id "
        f"WHERE r.run_id IN ({names}) ORDER BY r.run_id, t.step_id"
    )
    return statement, params


def tally(
    rows: Iterable[Sequence[Any]], states: Callable[[list[str]], list[RunState]]
) -> tuple[dict[str, int], list[tuple[str, RunState]]]:
    """Counts and samples from ``tally_sql``'s rows (by cause, then since and run id);
    ``states`` reads the sampled runs' states (``states_sql``)."""
    counts: dict[str, int] = {}
    picked: list[tuple[str, Any, str]] = []
    for cause, since, run_id, total in rows:
        counts[cause] = int(total)
        picked.append((cause, since, run_id))
    found = {state.run_id: state for state in states([run_id for _, _, run_id in picked])}
    samples = [(cause, found[run_id]) for cause, _, run_id in picked if run_id in found]
    return counts, samples


__all__ = [
    "RULES",
    "Facts",
    "Rule",
    "cause_of",
    "ranked_in_passing",
    "states_sql",
    "tally",
    "tally_sql",
]
