"""``cause_tally`` (``flow_cli.store.causes``): ``flow doctor``'s causes counted by the store,
the same as ``classify`` gives run by run, on every store; and ``flow doctor``'s table from it
the same as from the walk."""

from __future__ import annotations

import random
from collections import Counter
from datetime import UTC, datetime, timedelta

import pytest
from engine_workflows import hang_step, make_engine, scenario_runtime

from flow_cli import Runtime, WorkflowContext
from flow_cli.engine.engine import Engine
from flow_cli.model.clock import ManualClock
from flow_cli.model.commands import RuntimeCommand
from flow_cli.model.status import RunStatus
from flow_cli.ops.doctor import Hosting, classify, diagnose
from flow_cli.store.causes import cause_of
from flow_cli.store.protocol import CauseQuery, EventStore, RunFilter, RunState, StepTask

broken = Runtime(build_id="broken-1")


@broken.workflow("broken")
def broken_workflow(ctx: WorkflowContext) -> RuntimeCommand:
    raise RuntimeError("this code always raises")


OPEN = tuple(s for s in RunStatus if not s.terminal)
GRACE = timedelta(seconds=30)


@pytest.fixture
def engine(store: EventStore, clock: ManualClock) -> Engine:
    engine = make_engine(store, [scenario_runtime(), broken], clock)
    engine.start("retry-once", {"handler": "boom", "max_attempts": 5}, run_id="retrying")
    engine.start("timer", {"seconds": 3600}, run_id="sleeping")
    engine.start("one-signal", None, run_id="signal")
    engine.start("hook", None, run_id="hook")
    engine.start("parent", {"child": "child-waits"}, run_id="parent")
    engine.start("broken", None, run_id="broken")
    engine.tick(until_idle=True)  # steps retried, waits recorded, broken fails
    engine.start("retry-once", {"handler": "ok", "max_attempts": 1}, run_id="running")
    engine.decide("running")
    hang_step(engine, "running", "s")
    clock.advance(timedelta(seconds=1))  # the retry (in 2 s) still waits
    engine.start("one-signal", None, run_id="fresh")  # due now, never decided
    return engine


def reference(
    engine: Engine, where: RunFilter, query: CauseQuery, hosting: Hosting
) -> tuple[dict[str, int], list[tuple[str, str]]]:
    """Counts and samples by ``classify``, run by run."""
    found = sorted(
        (d.cause, d.since, d.run_id)
        for d in (
            classify(state, hosting, query.now, query.now - query.late)
            for state in engine.run_states(where)
        )
    )
    counts = Counter(cause for cause, _, _ in found)
    samples = [
        (cause, run_id)
        for cause, _, run_id in found
        if [c for c, _, _ in found].index(cause) + query.keep
        > found.index(next(f for f in found if f[2] == run_id))
    ]
    return dict(counts), samples


def hostings(engine: Engine, now: datetime) -> list[Hosting]:
    builds = sorted({s.build_id for s in engine.run_states(RunFilter(statuses=OPEN))})
    seen = {build: now - timedelta(minutes=1) for build in builds}
    return [
        Hosting(frozenset(builds), seen, any_live=True),
        Hosting(frozenset(), {}, any_live=True),  # a fleet without these builds
        Hosting(frozenset(builds[:1]), {builds[-1]: now + timedelta(hours=1)}, any_live=True),
    ]


@pytest.mark.parametrize(
    "later", [timedelta(0), timedelta(seconds=3), timedelta(minutes=10), timedelta(days=2)]
)
def test_the_store_counts_what_classify_finds(engine: Engine, later: timedelta) -> None:
    now = engine.clock.now() + later
    wheres = [RunFilter(statuses=OPEN), RunFilter(statuses=OPEN, workflow="one-signal")]
    for hosting in hostings(engine, now):
        for where in wheres:
            for keep in (1, 3):
                query = CauseQuery(
                    now=now,
                    late=now - GRACE,
                    hosted=hosting.live,
                    last_seen=hosting.known,
                    keep=keep,
                )
                tally = engine.cause_tally(where, query)
                counts, samples = reference(engine, where, query, hosting)
                assert dict(tally.counts) == counts, (hosting, where)
                assert sorted((c, s.run_id) for c, s in tally.samples) == sorted(samples)
    # The fixture reaches most causes at one time or another.
    causes: set[str] = set()
    for later_ in (timedelta(0), timedelta(seconds=3), timedelta(days=2)):
        at = engine.clock.now() + later_
        hosting = hostings(engine, at)[0]
        query = CauseQuery(now=at, late=at - GRACE, hosted=hosting.live, last_seen=hosting.known)
        causes |= set(engine.cause_tally(RunFilter(statuses=OPEN), query).counts)
    assert causes >= {
        "decision-failing",
        "step-retrying",
        "step-running",
        "waiting-signal",
        "waiting-hook",
        "waiting-child",
        "sleeping",
        "runnable",
        "timer-overdue",
        "lease-expired",
    }, causes


@pytest.mark.parametrize("later", [timedelta(0), timedelta(days=2)])
def test_doctor_table_from_the_tally_is_the_table_from_the_walk(
    engine: Engine, later: timedelta, monkeypatch: pytest.MonkeyPatch
) -> None:
    now = engine.clock.now() + later
    walked = diagnose(engine, RunFilter(), now, keep=None)
    asked: list[RunFilter] = []
    real = engine.run_states

    def run_states(where: RunFilter) -> list[RunState]:
        asked.append(where)
        return real(where)

    monkeypatch.setattr(engine, "run_states", run_states)
    counted = diagnose(engine, RunFilter(), now, keep=3)
    assert asked == []  # counted by the store: no run walked
    assert counted.summary == walked.summary and counted.ok == walked.ok
    assert counted.total == walked.total
    expected = [
        d
        for n, d in enumerate(walked.runs)
        if [x.cause for x in walked.runs[:n]].count(d.cause) < 3
    ]
    assert counted.runs == expected


NOW = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)


def _random_state(rng: random.Random, n: int) -> RunState:
    def moment() -> datetime:
        return NOW + timedelta(seconds=rng.choice([-7200, -31, -30, -29, 0, 1, 3600]))

    def maybe(value: object) -> object:
        return value if rng.random() < 0.5 else None

    kinds = ["signal:a", "hook:h", "child:c", "timer:t", "unknown:s"]
    waiting = " ".join(k for k in kinds if rng.random() < 0.3) or None
    tasks = tuple(
        StepTask(
            step_id=f"s{i}",
            attempt=rng.choice([1, 2]),
            available_at=moment(),
            owner=rng.choice([None, "w9"]),
        )
        for i in range(rng.choice([0, 0, 1, 2]))
    )
    return RunState(
        run_id=f"r{n}",
        workflow="w",
        status=rng.choice(OPEN),
        build_id=rng.choice(["b1", "b2", "b3"]),
        created_at=NOW - timedelta(hours=3),
        updated_at=moment(),
        decide_at=maybe(moment()),  # type: ignore[arg-type]
        lease_owner=maybe("w1"),  # type: ignore[arg-type]
        failing=rng.choice([None, None, None, "ValueError: x"]),
        failing_since=maybe(moment()),  # type: ignore[arg-type]
        waiting_on=waiting,
        tasks=tasks,
    )


def test_the_rule_table_is_classify() -> None:
    """``RULES`` (the memory store's side) against ``classify`` on random index rows."""
    rng = random.Random(32)
    hostings = [
        Hosting(frozenset({"b1"}), {"b1": NOW, "b2": NOW + timedelta(hours=1)}, any_live=True),
        Hosting(frozenset(), {"b2": NOW - timedelta(days=1)}, any_live=False),
    ]
    for n in range(4000):
        state = _random_state(rng, n)
        hosting = hostings[n % 2]
        hosted = hosting.live if hosting.any_live else frozenset(hosting.known)
        query = CauseQuery(now=NOW, late=NOW - GRACE, hosted=hosted, last_seen=hosting.known)
        expected = classify(state, hosting, NOW, GRACE)
        assert cause_of(state, query) == (expected.cause, expected.since), state


def _insert(store: EventStore, states: list[RunState]) -> None:
    """Write index rows as they are (no history): every combination the rule table knows,
    including ones no workflow reaches in a short test (unknown outcomes, held leases)."""
    runs = [
        (
            s.run_id,
            s.workflow,
            s.status.value,
            s.build_id,
            s.created_at,
            s.updated_at,
            s.decide_at,
            s.lease_owner,
            s.failing,
            s.failing_since,
            s.waiting_on,
        )
        for s in states
    ]
    tasks = [
        (s.run_id, t.step_id, s.build_id, t.attempt, t.available_at, t.owner, t.step_id)
        for s in states
        for t in s.tasks
    ]
    run_sql = (
        "INSERT INTO runs (run_id, workflow, status, build_id, created_at, updated_at, "
        "last_sequence, decide_at, lease_owner, failing, failing_since, waiting_on) "
        "VALUES ({p}, {p}, {p}, {p}, {p}, {p}, 1, {p}, {p}, {p}, {p}, {p})"
    )
    task_sql = (
        "INSERT INTO step_tasks (run_id, step_id, build_id, attempt, available_at, "
        "lease_owner, step_name) VALUES ({p}, {p}, {p}, {p}, {p}, {p}, {p})"
    )
    if hasattr(store, "path"):
        import sqlite3

        from flow_cli.store.sqlite.rows import ts

        def text(row: tuple[object, ...]) -> tuple[object, ...]:
            return tuple(ts(v) if isinstance(v, datetime) else v for v in row)

        with sqlite3.connect(store.path) as conn:
            conn.executemany(run_sql.format(p="?"), [text(r) for r in runs])
            conn.executemany(task_sql.format(p="?"), [text(t) for t in tasks])
        return
    import os

    import psycopg
    from psycopg import sql

    url = os.environ["FLOW_TEST_POSTGRES"]
    with psycopg.connect(url) as conn:
        conn.execute(sql.SQL("SET search_path TO {}").format(sql.Identifier(store.schema)))  # type: ignore[attr-defined]
        with conn.cursor() as cur:
            cur.executemany(run_sql.format(p="%s"), runs)  # type: ignore[arg-type]
            cur.executemany(task_sql.format(p="%s"), tasks)  # type: ignore[arg-type]


def test_the_sql_counts_random_index_rows_as_classify_does(store: EventStore) -> None:
    if not hasattr(store, "path") and not hasattr(store, "schema"):
        pytest.skip("the memory store's tally is the rule table itself (tested above)")
    rng = random.Random(6)
    states = [_random_state(rng, n) for n in range(400)]
    _insert(store, states)
    where = RunFilter(statuses=OPEN)
    read = store.run_states(where)
    assert len(read) == len(states)
    for hosting in (
        Hosting(frozenset({"b1"}), {"b1": NOW, "b2": NOW + timedelta(hours=1)}, any_live=True),
        Hosting(frozenset(), {"b2": NOW - timedelta(days=1)}, any_live=False),
    ):
        hosted = hosting.live if hosting.any_live else frozenset(hosting.known)
        query = CauseQuery(
            now=NOW, late=NOW - GRACE, hosted=hosted, last_seen=hosting.known, keep=2
        )
        found = sorted(
            (d.cause, d.since, d.run_id) for d in (classify(s, hosting, NOW, GRACE) for s in read)
        )
        tally = store.cause_tally(where, query)
        assert dict(tally.counts) == dict(Counter(c for c, _, _ in found))
        assert len(tally.counts) >= 10, tally.counts  # the rows reach most causes
        firsts = [
            (c, r) for n, (c, _, r) in enumerate(found) if [x[0] for x in found[:n]].count(c) < 2
        ]
        assert sorted((c, s.run_id) for c, s in tally.samples) == sorted(firsts)


def test_ranking_in_passing_is_the_databases_ranking() -> None:
    """``ranked_in_passing`` (SQLite's tally) counts and picks as ``tally_sql``'s window does:
    by since with none first, then run id in code point order, ``keep`` a cause."""
    from flow_cli.store.causes import ranked_in_passing

    rows = [
        ("stuck", "2026-01-02", "r9"),
        ("late", "2026-01-01", "r1"),
        ("stuck", None, "r5"),
        ("stuck", "2026-01-01", "rB"),
        ("stuck", "2026-01-01", "ra"),
        ("late", "2026-01-03", "r2"),
        ("stuck", "2026-01-01", "rA"),
    ]
    assert ranked_in_passing(iter(rows), 3) == [
        ("late", "2026-01-01", "r1", 2),
        ("late", "2026-01-03", "r2", 2),
        ("stuck", None, "r5", 5),
        ("stuck", "2026-01-01", "rA", 5),
        ("stuck", "2026-01-01", "rB", 5),
    ]
