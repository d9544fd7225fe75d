"""PostgreSQL-only behaviour of ``PostgresStore``: schema versions, real concurrency between
connections and processes, LISTEN/NOTIFY wake-ups, outages and the due-work index.

Runs when ``FLOW_TEST_POSTGRES`` names a server (each test in a schema of its own); skipped when
it is unset, and failing, not skipped, when it is set but the server cannot be reached.
"""

from __future__ import annotations

import multiprocessing
import os
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from flow_cli.store.pauses import PauseKind, PauseTarget
from flow_cli.store.protocol import LeaseAsk, RunFilter

pytestmark = pytest.mark.postgres

psycopg = pytest.importorskip("psycopg")

from psycopg.conninfo import conninfo_to_dict, make_conninfo  # noqa: E402

from flow_cli.errors import EventConflict, StoreError  # noqa: E402
from flow_cli.model.events import (  # noqa: E402
    RunCompleted,
    RunStarted,
    SignalReceived,
    StepScheduled,
)
from flow_cli.model.retry import RetryPolicy  # noqa: E402
from flow_cli.model.spec import WorkflowSpec  # noqa: E402
from flow_cli.model.status import RunStatus  # noqa: E402
from flow_cli.store.postgres import PostgresStore, redact_url  # noqa: E402
from flow_cli.store.postgres import schema as postgres_schema  # noqa: E402
from flow_cli.store.postgres import tables as postgres_tables  # noqa: E402
from flow_cli.store.protocol import (  # noqa: E402
    CommitGroup,
    HookEntry,
    HookRecord,
    NewRun,
    RunIndex,
    StepTask,
    StreamWrite,
)

BUILD = "shop-1"
NOW = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)
RUNNING = RunIndex(status=RunStatus.RUNNING)


@pytest.fixture
def url() -> str:
    value = os.environ.get("FLOW_TEST_POSTGRES")
    if not value:
        pytest.skip("set FLOW_TEST_POSTGRES=postgresql://... to run the PostgreSQL store tests")
    return value


@pytest.fixture
def schema(url: str) -> Iterator[str]:
    name = f"flow_pgtest_{uuid.uuid4().hex[:12]}"
    yield name
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f'DROP SCHEMA IF EXISTS "{name}" CASCADE')


@pytest.fixture
def store(url: str, schema: str) -> Iterator[PostgresStore]:
    opened = PostgresStore(url, schema=schema)
    try:
        yield opened
    finally:
        opened.close()


def admin(url: str, schema: str) -> Any:
    """A plain autocommit connection looking at the test's schema."""
    conn = psycopg.connect(url, autocommit=True)
    conn.execute(f'SET search_path TO "{schema}"')
    return conn


def new_run(run_id: str, decide_at: datetime | None = NOW) -> NewRun:
    spec = WorkflowSpec(workflow="orders", input={"order": run_id}, runtime_build_id=BUILD)
    return NewRun(run_id=run_id, spec=spec, seed="seed", decide_at=decide_at)


def signal(n: int, name: str = "s") -> SignalReceived:
    return SignalReceived(signal_name=name, payload=n)


# -- schema versions ---------------------------------------------------------------------------


def test_schema_version_is_recorded_in_flow_meta(
    url: str, schema: str, store: PostgresStore
) -> None:
    with admin(url, schema) as conn:
        (version,) = conn.execute(
            "SELECT value FROM flow_meta WHERE key = 'schema_version'"
        ).fetchone()
        tables = {
            row[0]
            for row in conn.execute(
                "SELECT tablename FROM pg_tables WHERE schemaname = %s", (schema,)
            )
        }
    assert version == str(postgres_schema.SCHEMA_VERSION)
    assert {"flow_meta", "events", "runs", "step_tasks", "hooks"} <= tables


def test_reopening_keeps_the_data(url: str, schema: str, store: PostgresStore) -> None:
    store.create_run(new_run("r1"), NOW)
    again = PostgresStore(url, schema=schema)
    try:
        assert [e.sequence for e in again.read_history("r1")] == [1]
    finally:
        again.close()


def test_older_schema_is_upgraded_in_place(
    url: str, schema: str, store: PostgresStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    store.create_run(new_run("r1"), NOW)
    store.close()

    def add_probe(conn: Any) -> None:
        conn.execute("ALTER TABLE runs ADD COLUMN probe text NOT NULL DEFAULT 'upgraded'")

    newer = (*postgres_schema.MIGRATIONS, postgres_schema.Migration(99, "probe", add_probe))
    monkeypatch.setattr(postgres_schema, "MIGRATIONS", newer)
    upgraded = PostgresStore(url, schema=schema)
    try:
        with admin(url, schema) as conn:
            assert conn.execute("SELECT value FROM flow_meta").fetchone() == ("99",)
            assert conn.execute("SELECT probe FROM runs").fetchall() == [("upgraded",)]
        assert upgraded.get_run("r1") is not None
    finally:
        upgraded.close()


def test_many_openers_of_a_fresh_schema_create_it_once(url: str, schema: str) -> None:
    barrier = threading.Barrier(6)

    def open_one(_: int) -> int:
        barrier.wait()
        opened = PostgresStore(url, schema=schema)
        opened.close()
        return 1

    with ThreadPoolExecutor(6) as pool:
        assert sum(pool.map(open_one, range(6))) == 6
    with admin(url, schema) as conn:
        rows = conn.execute("SELECT key, value FROM flow_meta").fetchall()
    assert rows == [("schema_version", str(postgres_schema.SCHEMA_VERSION))]


def test_newer_schema_version_is_refused(url: str, schema: str, store: PostgresStore) -> None:
    with admin(url, schema) as conn:
        conn.execute("UPDATE flow_meta SET value = '999' WHERE key = 'schema_version'")
    with pytest.raises(StoreError, match=r"version 999, newer than") as caught:
        PostgresStore(url, schema=schema)
    assert "upgrade Flow" in str(caught.value)


def test_a_schema_holding_other_tables_is_refused(url: str, schema: str) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f'CREATE SCHEMA "{schema}"')
        conn.execute(f'CREATE TABLE "{schema}".invoices (id int)')
    with pytest.raises(StoreError, match=r"not Flow's \(invoices\)"):
        PostgresStore(url, schema=schema)


def test_connection_settings_fall_back_to_pg_environment(
    url: str, schema: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    params = conninfo_to_dict(url)
    for key, env in (
        ("host", "PGHOST"),
        ("port", "PGPORT"),
        ("dbname", "PGDATABASE"),
        ("user", "PGUSER"),
        ("password", "PGPASSWORD"),
    ):
        if key in params:
            monkeypatch.setenv(env, str(params[key]))
    from_env = PostgresStore(None, schema=schema)
    try:
        assert from_env.create_run(new_run("r1"), NOW) is not None
    finally:
        from_env.close()


# -- concurrency ---------------------------------------------------------------------------------


def _lease_all(
    stores: list[PostgresStore], lease: Callable[[PostgresStore], list[Any]]
) -> list[Any]:
    """Every store leases in its own thread until nothing is left; all leases, in one list."""
    barrier = threading.Barrier(len(stores))

    def drain(one: PostgresStore) -> list[Any]:
        barrier.wait()
        got: list[Any] = []
        while batch := lease(one):
            got.extend(batch)
        return got

    with ThreadPoolExecutor(len(stores)) as pool:
        return [item for part in pool.map(drain, stores) for item in part]


def test_concurrent_workers_never_lease_the_same_run(url: str, schema: str) -> None:
    stores = [PostgresStore(url, schema=schema) for _ in range(4)]
    try:
        stores[0].commit([], [new_run(f"r{i:03}") for i in range(300)], NOW)
        until = NOW + timedelta(minutes=5)
        leased = _lease_all(stores, lambda s: s.lease_runs(LeaseAsk("w", [BUILD], NOW, until, 7)))
        assert sorted(leased) == [f"r{i:03}" for i in range(300)]  # each exactly once
    finally:
        for one in stores:
            one.close()


def test_concurrent_workers_never_lease_the_same_step(url: str, schema: str) -> None:
    stores = [PostgresStore(url, schema=schema) for _ in range(4)]
    try:
        stores[0].create_run(new_run("r1", decide_at=None), NOW)
        steps = {
            f"s{i:03}": StepTask(step_id=f"s{i:03}", attempt=1, available_at=NOW)
            for i in range(300)
        }
        scheduled = [
            StepScheduled(step_id=step_id, name="work", input=None, retry=RetryPolicy())
            for step_id in steps
        ]
        index = RunIndex(status=RunStatus.RUNNING, steps=steps)
        stores[0].append_if_sequence("r1", 1, scheduled, index, NOW)
        until = NOW + timedelta(minutes=5)
        leased = _lease_all(stores, lambda s: s.lease_steps(LeaseAsk("w", [BUILD], NOW, until, 7)))
        assert sorted(lease.step_id for lease in leased) == sorted(steps)
    finally:
        for one in stores:
            one.close()


def _append_worker(url: str, schema: str, worker: int, count: int, start_at: float) -> int:
    """Append ``count`` events to run r1 the way the engine does; return the conflicts seen."""
    store = PostgresStore(url, schema=schema)
    conflicts = 0
    try:
        time.sleep(max(start_at - time.time(), 0.0))
        for i in range(count):
            while True:
                last = store.read_history("r1")[-1].sequence
                try:
                    store.append_if_sequence(
                        "r1", last, [signal(i, name=f"w{worker}")], RUNNING, NOW
                    )
                    break
                except EventConflict:
                    conflicts += 1
    finally:
        store.close()
    return conflicts


@pytest.mark.slow
def test_concurrent_appender_processes_leave_a_gapless_history(
    url: str, schema: str, store: PostgresStore
) -> None:
    store.create_run(new_run("r1"), NOW)
    workers, count = 4, 25
    start_at = time.time() + 3.0  # after every process has started and connected
    with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn")) as pool:
        futures = [
            pool.submit(_append_worker, url, schema, w, count, start_at) for w in range(workers)
        ]
        conflicts = sum(f.result(timeout=120) for f in futures)
    history = store.read_history("r1")
    assert [e.sequence for e in history] == list(range(1, workers * count + 2))
    appended = [(e.event.signal_name, e.event.payload) for e in history[1:]]  # type: ignore[union-attr]
    assert sorted(appended) == sorted((f"w{w}", i) for w in range(workers) for i in range(count))
    record = store.get_run("r1")
    assert record is not None and record.last_sequence == workers * count + 1
    assert conflicts > 0, "the processes never raced; the test proved nothing"


def test_group_commits_writing_runs_in_opposite_orders_queue_instead_of_deadlocking(
    url: str, schema: str, store: PostgresStore
) -> None:
    # Each batch writes every run, one thread in the opposite order of the other: the guarded
    # updates lock rows in run id order, so the batches queue; a deadlock would be a StoreError.
    run_ids = [f"r{i}" for i in range(4)]
    for run_id in run_ids:
        store.create_run(new_run(run_id), NOW)
    rounds, committed = 20, [0, 0]
    together = threading.Barrier(2, timeout=30)  # both batches in flight at once

    def writer(w: int) -> None:
        mine = PostgresStore(url, schema=schema)
        try:
            order = run_ids if w == 0 else run_ids[::-1]
            for n in range(rounds):
                last = {r: len(mine.read_history(r)) for r in order}
                groups = [
                    CommitGroup(
                        writes=[
                            StreamWrite(
                                run_id=r,
                                expected_sequence=last[r],
                                events=[signal(n)],
                                index=RUNNING,
                            )
                            for r in pair
                        ],
                        creates=[],
                        now=NOW,
                    )
                    for pair in (order[:2], order[2:])
                ]
                together.wait()
                results = mine.commit_groups(groups)
                assert all(r is None or isinstance(r, EventConflict) for r in results), results
                committed[w] += sum(r is None for r in results)
        finally:
            mine.close()

    with ThreadPoolExecutor(2) as pool:
        for future in [pool.submit(writer, w) for w in range(2)]:
            future.result(timeout=120)
    for run_id in run_ids:
        history = store.read_history(run_id)
        assert [e.sequence for e in history] == list(range(1, len(history) + 1))
        record = store.get_run(run_id)
        assert record is not None and record.last_sequence == len(history)
    assert sum(len(store.read_history(r)) - 1 for r in run_ids) == 2 * sum(committed)


def test_primary_key_stops_a_writer_the_sequence_check_missed(
    url: str, schema: str, store: PostgresStore
) -> None:
    store.create_run(new_run("r1"), NOW)
    store.append_if_sequence("r1", 1, [signal(1)], RUNNING, NOW)
    with admin(url, schema) as conn:  # an index row lagging behind its history
        conn.execute("UPDATE runs SET last_sequence = 1 WHERE run_id = 'r1'")
    conflicts = store.stats.conflicts
    with pytest.raises(EventConflict) as caught:
        store.append_if_sequence("r1", 1, [signal(2), signal(3)], RUNNING, NOW)
    assert caught.value.run_id == "r1" and caught.value.expected_sequence == 1
    assert store.stats.conflicts == conflicts + 1
    assert [e.sequence for e in store.read_history("r1")] == [1, 2]


def test_an_idle_worker_looks_before_leasing_and_writes_nothing(
    url: str, schema: str, store: PostgresStore
) -> None:
    store.create_run(new_run("r1"), NOW)
    until = NOW + timedelta(seconds=30)
    assert store.lease_runs(LeaseAsk("w", [BUILD], NOW, until, 10)) == ["r1"]
    leased = store.stats.index_commits
    # Right after finding work the next pass leases without looking first: one write...
    assert store.lease_runs(LeaseAsk("w", [BUILD], NOW, until, 10)) == []
    assert store.stats.index_commits == leased + 1
    # ...and having found nothing, the passes after it only look: no write transaction.
    for _ in range(3):
        assert store.lease_runs(LeaseAsk("w", [BUILD], NOW, until, 10)) == []
    assert store.stats.index_commits == leased + 1
    # A commit announcing work (NOTIFY): the next pass looks, finds the run and leases it.
    store.wait_for_change(0)
    _commit_later(url, schema, 0).join()
    store.wait_for_change(5)
    [late] = store.lease_runs(LeaseAsk("w", [BUILD], NOW, until, 10))
    assert late.startswith("late-") and store.stats.index_commits == leased + 2


def test_a_read_of_one_statement_is_one_round_trip(store: PostgresStore) -> None:
    """Reads of one statement run in autocommit mode: no BEGIN and COMMIT round trips around
    them (a worker's ``next_due`` runs on every idle pass, and an operator's ``get_run`` on every
    poll of ``flow result --wait``). Counted from libpq's own trace of the connection."""
    store.create_run(new_run("r1"), NOW)
    conn = store._checkout()
    store._checkin(conn)  # the pool hands out its newest idle connection first: this one
    with tempfile.TemporaryFile("w+") as trace:
        conn.pgconn.trace(trace.fileno())
        conn.pgconn.set_trace_flags(psycopg.pq.Trace.SUPPRESS_TIMESTAMPS)
        try:
            assert store.get_run("r1") is not None
            assert store.next_due([BUILD]) is not None
            assert [r.run_id for r in store.find_runs(RunFilter(limit=5))] == ["r1"]
            assert store.find_hook("no-such-token") is None
        finally:
            conn.pgconn.untrace()
        trace.seek(0)
        log = trace.read()
    assert log.count("\tQuery\t") + log.count("\tParse\t") == 4, log
    assert log.count("\tReadyForQuery\t") == 4, log


def test_a_step_lease_looks_first_only_when_no_work_is_expected(
    url: str, schema: str, store: PostgresStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Leasing steps locks and leases in one round trip; a read-only look goes first only when
    nothing suggests a step is ready (the last lease found none and no NOTIFY came since), so an
    idle worker takes no lock, and a woken one starts its step one round trip sooner."""
    looks: list[int] = []
    reading = store._reading

    def counted() -> Any:
        looks.append(1)
        return reading()

    monkeypatch.setattr(store, "_reading", counted)
    until = NOW + timedelta(seconds=30)
    commits = store.stats.durable_commits
    assert store.lease_steps(LeaseAsk("w", [BUILD], NOW, until, 10)) == []
    assert (len(looks), store.stats.durable_commits) == (1, commits)
    # Another process schedules a step: its NOTIFY wakes this one, which leases without a look.
    store.wait_for_change(0)
    other = PostgresStore(url, schema=schema)
    try:
        other.create_run(new_run("r1", decide_at=None), NOW)
        task = StepTask(step_id="s", attempt=1, available_at=NOW)
        scheduled = StepScheduled(step_id="s", name="work", input=None, retry=RetryPolicy())
        index = RunIndex(status=RunStatus.RUNNING, steps={"s": task})
        other.append_if_sequence("r1", 1, [scheduled], index, NOW)
    finally:
        other.close()
    store.wait_for_change(5)
    looks.clear()
    [lease] = store.lease_steps(LeaseAsk("w", [BUILD], NOW, until, 10))
    assert (lease.run_id, lease.step_id, looks) == ("r1", "s", [])
    assert store.stats.durable_commits == commits + 1
    assert [e.event_key for e in store.read_history("r1")][-1] == "step_started"
    # Having found a step, the next lease locks straight away too; finding nothing, it writes
    # nothing and counts no commit, and the lease after it looks first again.
    looks.clear()
    assert store.lease_steps(LeaseAsk("w", [BUILD], NOW, until, 10)) == []
    assert (looks, store.stats.durable_commits) == ([], commits + 1)
    assert store.lease_steps(LeaseAsk("w", [BUILD], NOW, until, 10)) == []
    assert (len(looks), store.stats.durable_commits) == (1, commits + 1)
    assert len(store.read_history("r1")) == 3


def test_a_step_lease_keeps_odd_run_and_step_ids_intact(store: PostgresStore) -> None:
    """The ready steps travel between the lease's two statements as array text in a setting:
    ids with quotes, commas, braces, backslashes and spaces must come back as they were."""
    odd = ['a,"b\\{c}', "NULL", " x y ", "é'"]
    until = NOW + timedelta(seconds=30)
    for run_id in odd:
        store.create_run(new_run(run_id, decide_at=None), NOW)
        task = StepTask(step_id=run_id, attempt=1, available_at=NOW)
        scheduled = StepScheduled(step_id=run_id, name="work", input=None, retry=RetryPolicy())
        index = RunIndex(status=RunStatus.RUNNING, steps={run_id: task})
        store.append_if_sequence(run_id, 1, [scheduled], index, NOW)
    store._steps_expected = True  # lock and lease without the look
    leases = store.lease_steps(LeaseAsk("w", [BUILD], NOW, until, 10))
    assert sorted((lease.run_id, lease.step_id) for lease in leases) == sorted(
        (run_id, run_id) for run_id in odd
    )
    for run_id in odd:
        assert [e.event_key for e in store.read_history(run_id)][-1] == "step_started"


def _sent_batches(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every query string psycopg sends as text (batches), as the test runs."""
    sent: list[str] = []
    for cls in (psycopg.Connection, psycopg.ClientCursor):
        original = cls.execute

        def spy(self: Any, query: Any, *args: Any, _original: Any = original, **kw: Any) -> Any:
            if isinstance(query, str) and ("EXECUTE flow_" in query or "PREPARE flow_" in query):
                sent.append(query)
            return _original(self, query, *args, **kw)

        monkeypatch.setattr(cls, "execute", spy)
    return sent


def test_batches_prepare_their_statements_once_per_connection(
    store: PostgresStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A commit is one query string of EXECUTEs; the PREPAREs ride in the first string that
    needs them on a connection, so later commits are not planned again."""
    sent = _sent_batches(monkeypatch)
    for i in range(3):
        assert store.create_run(new_run(f"p{i}"), NOW) is not None
    assert len(sent) == 3
    assert "PREPARE flow_" in sent[0]
    assert all("PREPARE" not in query and "EXECUTE flow_" in query for query in sent[1:])
    assert [e.event_key for e in store.read_history("p2")] == ["run_started"]


def test_a_batch_whose_statements_were_dropped_prepares_them_again(
    store: PostgresStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """psycopg deallocates all of a connection's prepared statements when it rolls back there
    after preparing some of its own: a batch that finds its statements gone reads back what is
    left and goes again, and nothing is lost or written twice."""
    until = NOW + timedelta(seconds=30)
    store.create_run(new_run("d1", decide_at=None), NOW)
    task = StepTask(step_id="s", attempt=1, available_at=NOW)
    scheduled = StepScheduled(step_id="s", name="work", input=None, retry=RetryPolicy())
    store.append_if_sequence(
        "d1", 1, [scheduled], RunIndex(status=RunStatus.RUNNING, steps={"s": task}), NOW
    )
    store._steps_expected = True
    assert [
        lease.step_id for lease in store.lease_steps(LeaseAsk("w", [BUILD], NOW, until, 10))
    ] == ["s"]
    (conn,) = store._idle  # the one pooled connection, its statements prepared
    conn.execute("DEALLOCATE ALL")  # behind the store's back, as psycopg does
    conn.commit()
    sent = _sent_batches(monkeypatch)
    assert store.create_run(new_run("d2"), NOW) is not None  # an implicit transaction
    assert [e.event_key for e in store.read_history("d2")] == ["run_started"]
    assert sum("PREPARE flow_" in query for query in sent) == 1  # the retry prepared again
    conn.execute("DEALLOCATE ALL")
    conn.commit()
    store.append_if_sequence(
        "d1",
        3,
        [
            scheduled_again := StepScheduled(
                step_id="t", name="work", input=None, retry=RetryPolicy()
            )
        ],
        RunIndex(
            status=RunStatus.RUNNING,
            steps={"t": StepTask(step_id="t", attempt=1, available_at=NOW)},
        ),
        NOW,
    )
    conn.execute("DEALLOCATE ALL")
    conn.commit()
    [lease] = store.lease_steps(
        LeaseAsk("w", [BUILD], NOW, until, 10)
    )  # a transaction its string opens
    assert lease.step_id == scheduled_again.step_id
    keys = [e.event_key for e in store.read_history("d1")]
    assert keys == [
        "run_started",
        "step_scheduled",
        "step_started",
        "step_scheduled",
        "step_started",
    ]


# -- wake-ups ------------------------------------------------------------------------------------


def _commit_later(url: str, schema: str, delay: float) -> threading.Thread:
    def commit() -> None:
        time.sleep(delay)
        other = PostgresStore(url, schema=schema)
        try:
            other.create_run(new_run(f"late-{uuid.uuid4().hex[:6]}"), NOW)
        finally:
            other.close()

    thread = threading.Thread(target=commit)
    thread.start()
    return thread


def test_wait_for_change_returns_promptly_after_another_connection_commits(
    url: str, schema: str, store: PostgresStore
) -> None:
    store.wait_for_change(0)  # starts listening
    thread = _commit_later(url, schema, 0.3)
    started = time.monotonic()
    store.wait_for_change(10)
    waited = time.monotonic() - started
    thread.join()
    assert 0.2 < waited < 1.5


def test_wait_for_change_ignores_other_schemas_and_failed_commits(
    url: str, schema: str, store: PostgresStore
) -> None:
    store.create_run(new_run("r1"), NOW)
    store.wait_for_change(0)
    other_schema = f"{schema}_other"
    other = PostgresStore(url, schema=other_schema)
    try:
        other.create_run(new_run("elsewhere"), NOW)
        with pytest.raises(EventConflict):
            store.append_if_sequence(
                "r1", 0, [signal(1)], RunIndex(status=RunStatus.RUNNING, decide_at=NOW), NOW
            )
        started = time.monotonic()
        store.wait_for_change(0.5)
        assert time.monotonic() - started >= 0.45
    finally:
        other.drop_schema()
        other.close()


def test_a_started_step_wakes_nobody_a_ready_one_does(
    url: str, schema: str, store: PostgresStore
) -> None:
    store.create_run(new_run("r1", decide_at=None), NOW)
    store.wait_for_change(0)  # starts listening
    until = NOW + timedelta(seconds=30)
    started = {"a": StepTask(step_id="a", attempt=1, available_at=until, owner="w1")}
    other = PostgresStore(url, schema=schema)
    try:
        # The committing worker runs a step it started itself: no other worker is woken.
        other.append_if_sequence(
            "r1", 1, [signal(1)], RunIndex(status=RunStatus.RUNNING, steps=started), NOW
        )
        began = time.monotonic()
        store.wait_for_change(0.4)
        assert time.monotonic() - began >= 0.35
        ready = {"b": StepTask(step_id="b", attempt=1, available_at=NOW)}
        other.append_if_sequence(
            "r1", 2, [signal(2)], RunIndex(status=RunStatus.RUNNING, steps=ready), NOW
        )
        began = time.monotonic()
        store.wait_for_change(5)
        assert time.monotonic() - began < 1
    finally:
        other.close()


def test_parking_wakes_workers_only_when_it_parks(
    url: str, schema: str, store: PostgresStore
) -> None:
    store.create_run(new_run("r1", decide_at=None), NOW)
    store.wait_for_change(0)  # starts listening
    other = PostgresStore(url, schema=schema)
    try:
        assert not other.park_run("r1", 2, NOW)  # stale: nothing parked, nobody woken
        began = time.monotonic()
        store.wait_for_change(0.4)
        assert time.monotonic() - began >= 0.35
        assert other.park_run("r1", 1, NOW)
        began = time.monotonic()
        store.wait_for_change(5)
        assert time.monotonic() - began < 1
        record = store.get_run("r1")
        assert record is not None and record.decide_at == NOW
    finally:
        other.close()


def test_a_change_between_waits_is_not_lost(url: str, schema: str, store: PostgresStore) -> None:
    store.wait_for_change(0)
    _commit_later(url, schema, 0).join()
    started = time.monotonic()
    store.wait_for_change(5)
    assert time.monotonic() - started < 0.5
    # ...and it is reported once, not once per queued notification.
    started = time.monotonic()
    store.wait_for_change(0.3)
    assert time.monotonic() - started >= 0.25


def test_close_does_not_wait_for_a_blocked_waiter(store: PostgresStore) -> None:
    store.wait_for_change(0)
    waiter = threading.Thread(target=store.wait_for_change, args=(1.0,))
    waiter.start()
    time.sleep(0.1)
    started = time.monotonic()
    store.close()
    assert time.monotonic() - started < 0.5
    waiter.join()
    with pytest.raises(StoreError, match="closed"):
        store.wait_for_change(0)
    with pytest.raises(StoreError, match="closed"):
        store.get_run("r1")


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork()")
def test_a_forked_child_opens_its_own_connections(store: PostgresStore) -> None:
    store.create_run(new_run("r1"), NOW)

    def child() -> None:
        ok = store.get_run("r1") is not None and store.read_history("r1")[0].sequence == 1
        store.close()  # must not close the parent's sessions, which share the sockets
        os._exit(0 if ok else 1)

    process = multiprocessing.get_context("fork").Process(target=child)
    process.start()
    process.join(30)
    assert process.exitcode == 0
    # The parent's store carries on.
    assert store.append_if_sequence("r1", 1, [signal(1)], RUNNING, NOW)[0].sequence == 2


# -- outages -------------------------------------------------------------------------------------


def test_unreachable_server_is_a_store_error_without_the_password() -> None:
    with pytest.raises(StoreError) as caught:
        PostgresStore("postgresql://flow:s3cret-pa55@127.0.0.1:1/flowdb", connect_timeout=2)
    message = str(caught.value)
    assert message.startswith("PostgreSQL at 127.0.0.1:1/flowdb is unreachable (")
    assert "s3cret-pa55" not in message and "s3cret-pa55" not in repr(caught.value.__cause__)
    assert "\n" not in message


def test_missing_database_is_refused_without_the_password(url: str) -> None:
    missing = make_conninfo(
        url, password="s3cret-pa55", dbname=f"flow_missing_{uuid.uuid4().hex[:8]}"
    )
    with pytest.raises(StoreError, match="refused the connection") as caught:
        PostgresStore(missing)
    assert "s3cret-pa55" not in str(caught.value)


def test_redact_url_hides_passwords() -> None:
    assert redact_url("postgresql://flow:pw@db:5432/flow") == "postgresql://flow:***@db:5432/flow"
    assert redact_url("postgresql://db/flow?password=pw&sslmode=require") == (
        "postgresql://db/flow?password=***&sslmode=require"
    )
    assert redact_url("host=db password='p w' user=flow") == "host=db password=*** user=flow"
    assert redact_url("postgresql://flow@db/flow") == "postgresql://flow@db/flow"


def _kill_backends(url: str, application_name: str) -> int:
    with psycopg.connect(url, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE application_name = %s AND pid <> pg_backend_pid()",
            (application_name,),
        ).fetchall()
    return len(rows)


def test_store_reconnects_after_its_connections_are_killed(url: str, schema: str) -> None:
    name = f"flow-kill-{uuid.uuid4().hex[:8]}"
    store = PostgresStore(make_conninfo(url, application_name=name), schema=schema)
    try:
        store.create_run(new_run("r1"), NOW)
        store.wait_for_change(0)  # the listening connection dies too
        assert _kill_backends(url, name) >= 2
        time.sleep(0.2)
        try:
            store.get_run("r1")
        except StoreError as exc:
            assert "unreachable" in str(exc)
        assert store.get_run("r1") is not None
        assert store.append_if_sequence("r1", 1, [signal(1)], RUNNING, NOW)[0].sequence == 2
        with pytest.raises(StoreError, match="unreachable"):
            store.wait_for_change(1)
        store.wait_for_change(0)
        thread = _commit_later(url, schema, 0.2)
        started = time.monotonic()
        store.wait_for_change(10)
        thread.join()
        assert time.monotonic() - started < 1.5
    finally:
        store.close()


def test_a_wait_for_an_end_listens_again_after_its_connection_is_killed(
    url: str, schema: str
) -> None:
    name = f"flow-kill-{uuid.uuid4().hex[:8]}"
    store = PostgresStore(make_conninfo(url, application_name=name), schema=schema)
    other = PostgresStore(url, schema=schema)
    try:
        store.create_run(new_run("r1"), NOW)
        store.wait_for_change(0, ending="r1")  # listens for ends too
        assert _kill_backends(url, name) >= 1
        time.sleep(0.2)
        try:  # the dead connection is reported, or replaced at once (the wait returns early)
            store.wait_for_change(1, ending="r1")
        except StoreError as exc:
            assert "unreachable" in str(exc)
            store.wait_for_change(1, ending="r1")  # a new connection: listening again

        def end() -> None:
            time.sleep(0.2)
            ended = RunIndex(status=RunStatus.COMPLETED)
            other.append_if_sequence("r1", 1, [RunCompleted(result=None)], ended, NOW)

        thread = threading.Thread(target=end)
        thread.start()
        started = time.monotonic()
        store.wait_for_change(20, ending="r1")
        thread.join()
        assert time.monotonic() - started < 10
    finally:
        store.close()
        other.close()


def test_threads_waiting_for_ends_each_hear_their_own_beside_an_idle_worker(
    url: str, schema: str, store: PostgresStore
) -> None:
    # A web server waiting for several outcomes at once, in a process whose worker is idle:
    # one connection hears the ends for every waiting thread, and none is swallowed by another
    # thread's wait (the worker's wait for work included).
    other = PostgresStore(url, schema=schema)
    runs = [f"r{i}" for i in range(5)]
    try:
        for run_id in runs:
            store.create_run(new_run(run_id), NOW)
        store.wait_for_change(0, ending=runs[0])  # starts listening for ends
        waited: dict[str, float] = {}

        def wait(run_id: str) -> None:
            started = time.monotonic()
            store.wait_for_change(30, ending=run_id)
            waited[run_id] = time.monotonic() - started

        worker = threading.Thread(target=store.wait_for_change, args=(1.5,))
        waiters = [threading.Thread(target=wait, args=(run_id,)) for run_id in runs]
        for thread in [worker, *waiters]:
            thread.start()
        time.sleep(0.3)
        ended = RunIndex(status=RunStatus.COMPLETED)
        for run_id in runs:
            other.append_if_sequence(run_id, 1, [RunCompleted(result=None)], ended, NOW)
            time.sleep(0.05)
        for thread in [worker, *waiters]:
            thread.join(40)
        assert sorted(waited) == runs
        assert max(waited.values()) < 10
    finally:
        other.close()


def test_killed_connection_mid_transaction_is_reported_then_recovered(
    url: str, schema: str
) -> None:
    name = f"flow-kill-{uuid.uuid4().hex[:8]}"
    store = PostgresStore(make_conninfo(url, application_name=name), schema=schema)
    try:
        store.create_run(new_run("r1"), NOW)
        # Hold the run row locked elsewhere so the append blocks inside its transaction,
        # then kill the store's backend while it waits.
        with admin(url, schema) as blocker:
            blocker.execute("BEGIN")
            blocker.execute("SELECT * FROM runs WHERE run_id = 'r1' FOR UPDATE")
            killer = threading.Timer(0.5, _kill_backends, (url, name))
            killer.start()
            with pytest.raises(StoreError, match="unreachable"):
                store.append_if_sequence("r1", 1, [signal(1)], RUNNING, NOW)
            killer.join()
            blocker.execute("ROLLBACK")
        assert [e.sequence for e in store.read_history("r1")] == [1]  # nothing half-written
        assert store.append_if_sequence("r1", 1, [signal(1)], RUNNING, NOW)[0].sequence == 2
    finally:
        store.close()


# -- the due-work index --------------------------------------------------------------------------


def _plan_nodes(plan: Any) -> Iterator[dict[str, Any]]:
    if isinstance(plan, dict):
        if "Node Type" in plan:
            yield plan
        for value in plan.values():
            yield from _plan_nodes(value)
    elif isinstance(plan, list):
        for value in plan:
            yield from _plan_nodes(value)


@pytest.mark.parametrize("paused", [False, True])
def test_due_work_queries_use_the_due_time_indexes(
    url: str, schema: str, store: PostgresStore, paused: bool
) -> None:
    if paused:  # the leases leave held runs out: still by the indexes, with no sort
        store.add_pauses([PauseTarget(kind=PauseKind.WORKFLOW, name="other")], None, NOW)
    with admin(url, schema) as conn:
        conn.execute(
            "INSERT INTO runs (run_id, workflow, status, build_id, created_at, updated_at, "
            "last_sequence, decide_at) SELECT 'future-' || i, 'orders', 'Suspended', %s, %s, "
            "%s, 1, %s + i * interval '1 minute' FROM generate_series(1, 10000) AS i",
            (BUILD, NOW, NOW, NOW),
        )
        conn.execute(
            "INSERT INTO step_tasks (run_id, step_id, build_id, attempt, available_at) "
            "SELECT 'future-' || i, 's', %s, 1, %s + i * interval '1 minute' "
            "FROM generate_series(1, 10000) AS i",
            (BUILD, NOW),
        )
        conn.execute("ANALYZE runs")
        conn.execute("ANALYZE step_tasks")
        params = {
            "now": NOW,
            "builds": [BUILD],
            "until": NOW,
            "worker": "w",
            "limit": 10,
            "due_until": NOW + timedelta(seconds=60),
        }
        conn.execute("ANALYZE pauses")
        # The (priority, due time) indexes serve every due-work query (there is no index on
        # the due time alone); when work is next due is the earliest of each priority's first.
        for query, indexes in (
            (postgres_tables.LEASE_RUNS, {"runs_priority_due"}),
            (postgres_tables.ANY_READY_STEP, {"step_tasks_priority_ready"}),
            (postgres_tables.LOCK_READY, {"step_tasks_priority_ready"}),
            (postgres_tables.NEXT_DUE, {"runs_priority_due"}),
            (postgres_tables.NEXT_DUE, {"step_tasks_priority_ready"}),
        ):
            (plan,) = conn.execute("EXPLAIN (FORMAT JSON) " + query, params).fetchone()
            used = {node.get("Index Name") for node in _plan_nodes(plan)}
            assert indexes & used, f"{indexes} not used by:\n{query}\n{plan}"
    # The cost follows what is due: three due runs among 10,000 waiting read three rows.
    store.commit([], [new_run(f"due-{i}") for i in range(3)], NOW)
    before = store.stats.scheduler_rows_read
    leased = store.lease_runs(LeaseAsk("w", [BUILD], NOW, NOW + timedelta(seconds=30), 100))
    assert sorted(leased) == ["due-0", "due-1", "due-2"]
    assert store.stats.scheduler_rows_read - before == 3
    # A backlog (many due): the leases take by priority, then due time, reading the
    # (priority, due time) indexes as one range per priority, in order: no sort of the backlog.
    with admin(url, schema) as conn:
        conn.execute(
            "UPDATE runs SET decide_at = %s - interval '1 second' WHERE run_id LIKE 'future-%%'",
            (NOW,),
        )
        conn.execute("UPDATE step_tasks SET available_at = %s - interval '1 second'", (NOW,))
        conn.execute("ANALYZE runs")
        conn.execute("ANALYZE step_tasks")
        for query, index in (
            (postgres_tables.LEASE_RUNS, "runs_priority_due"),
            (postgres_tables.LOCK_READY, "step_tasks_priority_ready"),
        ):
            (plan,) = conn.execute("EXPLAIN (FORMAT JSON) " + query, params).fetchone()
            nodes = list(_plan_nodes(plan))
            assert index in {n.get("Index Name") for n in nodes}, f"{query}\n{plan}"
            # (LOCK_READY then sorts the few runs it locks by run id, the order commits lock in.)
            by_priority = [n for n in nodes if "priority" in str(n.get("Sort Key", ""))]
            assert not by_priority, f"{query}\n{plan}"


# -- storage fidelity ----------------------------------------------------------------------------


def test_json_payloads_read_back_exactly(store: PostgresStore) -> None:
    payload = {"z": 1, "a": [1e20, -0.0, 0.1, 10**30, "nul\u0000byte", "é"], "m": {"b": 2, "a": 1}}
    store.create_run(new_run("r1"), NOW)
    store.append_if_sequence(
        "r1", 1, [SignalReceived(signal_name="s", payload=payload)], RUNNING, NOW
    )
    read = store.read_history("r1")[1].event
    assert isinstance(read, SignalReceived)
    assert read.payload == payload
    assert list(read.payload) == ["z", "a", "m"]  # key order kept, as in the other stores
    assert [type(v) for v in read.payload["a"]] == [float, float, float, int, str, str]
    assert str(read.payload["a"][1]) == "-0.0"


def test_values_bound_on_the_client_read_back_exactly(store: PostgresStore) -> None:
    # A commit's statements are bound by psycopg on the client and sent as one query string:
    # quotes, backslashes, placeholders and semicolons in values must stay values.
    tricky = "it's %s %(x)s \\ \\x00 ; DROP TABLE runs; -- $$ \u00e9"
    spec = WorkflowSpec(workflow=tricky, input={"k": tricky}, runtime_build_id=tricky)
    store.create_run(NewRun(run_id=tricky, spec=spec, seed=tricky, decide_at=NOW), NOW)
    entry = HookEntry(token=tricky, hook_id=tricky, resolved=False)
    index = RunIndex(status=RunStatus.RUNNING, waiting_on=tricky, failing=tricky, hooks=[entry])
    store.append_if_sequence(
        tricky, 1, [SignalReceived(signal_name=tricky, payload=tricky)], index, NOW
    )
    started, received = (e.event for e in store.read_history(tricky))
    assert isinstance(started, RunStarted) and started.spec == spec and started.seed == tricky
    assert received == SignalReceived(signal_name=tricky, payload=tricky)
    record = store.get_run(tricky)
    assert record is not None and (record.workflow, record.build_id) == (tricky, tricky)
    assert (record.failing, record.waiting_on) == (tricky, tricky)
    assert store.find_hook(tricky) == HookRecord(
        token=tricky, run_id=tricky, hook_id=tricky, resolved=False
    )


def test_open_store_takes_the_schema_from_the_url(url: str, schema: str) -> None:
    from flow_cli.store import open_store

    sep = "&" if "?" in url else "?"
    opened = open_store(f"{url}{sep}schema={schema}")
    try:
        assert getattr(opened, "schema", None) == schema
        assert opened.create_run(new_run("via-url"), NOW) is not None
    finally:
        opened.close()
    direct = PostgresStore(url, schema=schema)
    try:
        assert [e.sequence for e in direct.read_history("via-url")] == [1]
    finally:
        direct.close()


def test_opening_without_create_refuses_an_empty_schema_and_writes_nothing(
    url: str, schema: str
) -> None:
    with pytest.raises(StoreError, match="No Flow database in schema"):
        PostgresStore(url, schema=schema, create=False)
    with psycopg.connect(url) as conn:
        found = conn.execute(
            "SELECT count(*) FROM pg_namespace WHERE nspname = %s", (schema,)
        ).fetchone()
    assert found == (0,)
    PostgresStore(url, schema=schema).close()  # created by a writer ...
    PostgresStore(url, schema=schema, create=False).close()  # ... then readers open it


def test_version_3_schema_gets_failing_since(url: str, schema: str, store: PostgresStore) -> None:
    from flow_cli.model.events import DecisionFailed
    from flow_cli.store.protocol import RunFilter

    store.create_run(new_run("r"), NOW)
    failed = DecisionFailed(error_type="ValueError", message="boom")
    failing = RunIndex(status=RunStatus.PENDING, failing="ValueError: boom")
    store.append_if_sequence("r", 1, [failed], failing, NOW + timedelta(seconds=5))
    store.append_if_sequence(
        "r",
        2,
        [SignalReceived(signal_name="nudge", payload=1)],
        failing,
        NOW + timedelta(minutes=1),
    )
    store.create_run(new_run("fine"), NOW)
    assert {s.run_id: s.failing_since for s in store.run_states(RunFilter())} == {
        "r": NOW + timedelta(seconds=5),
        "fine": None,
    }
    store.close()
    with admin(url, schema) as conn:  # what a version 3 Flow left: no failing_since
        conn.execute("ALTER TABLE runs DROP COLUMN failing_since")
        conn.execute("DROP TABLE idle_workers")
        conn.execute("ALTER TABLE runs DROP COLUMN error_type, DROP COLUMN error")
        conn.execute("UPDATE flow_meta SET value = '3' WHERE key = 'schema_version'")
    upgraded = PostgresStore(url, schema=schema)
    try:
        since = {s.run_id: s.failing_since for s in upgraded.run_states(RunFilter())}
        assert since == {"r": NOW + timedelta(seconds=5), "fine": None}
    finally:
        upgraded.close()


def test_a_write_stores_the_writers_encoding_of_its_events(store: PostgresStore) -> None:
    """A commit sends ``StreamWrite.data`` (the writer's JSON, made once for its cache) as the
    stored event, on the one-round-trip path and on the checking path alike, and encodes the
    events itself when the writer has no text. (The test gives text that differs from the
    event on purpose, to see which one was stored.)"""
    store.create_run(new_run("r1"), NOW)
    event = SignalReceived(signal_name="x", payload={"é": 1})
    text = '{"signal_name": "x", "payload": {"é": 2}, "key": null}'
    write = StreamWrite(
        run_id="r1", expected_sequence=1, events=[event], index=RUNNING, data=[text]
    )
    store.commit([write], [], NOW)  # one round trip
    stale = StreamWrite(run_id="r1", expected_sequence=1, events=[event], index=RUNNING)
    with pytest.raises(EventConflict):
        store.commit([stale], [], NOW)
    again = StreamWrite(run_id="r1", expected_sequence=2, events=[event], index=RUNNING)
    store.commit([again], [], NOW)
    # The checking path (after a guard fails in a group commit), with the writer's text.
    third = StreamWrite(
        run_id="r1", expected_sequence=3, events=[event], index=RUNNING, data=[text]
    )
    results = store.commit_groups(
        [
            CommitGroup(writes=[stale], creates=[], now=NOW),
            CommitGroup(writes=[third], creates=[], now=NOW),
        ]
    )
    assert isinstance(results[0], EventConflict) and results[1] is None
    payloads = [e.event.payload for e in store.read_history("r1")[1:]]  # type: ignore[attr-defined]
    assert payloads == [{"é": 2}, {"é": 1}, {"é": 2}]


def test_read_histories_is_one_statement(
    store: PostgresStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A worker's pass reads its runs together: one statement, not one per run."""
    for run_id in ("r1", "r2", "r3"):
        store.create_run(new_run(run_id), NOW)
    reading = store._reading
    readings: list[int] = []

    def counted() -> Any:
        readings.append(1)
        return reading()

    monkeypatch.setattr(store, "_reading", counted)
    found = store.read_histories({"r1": 0, "r2": 1, "r3": 0, "nope": 0})
    assert readings == [1]
    assert {run_id: [e.sequence for e in events] for run_id, events in found.items()} == {
        "r1": [1],
        "r2": [],
        "r3": [1],
    }


def test_an_event_this_flow_cannot_decode_is_a_clear_error(
    url: str, schema: str, store: PostgresStore
) -> None:
    store.create_run(new_run("r1"), NOW)
    with admin(url, schema) as conn:
        conn.execute(
            "INSERT INTO events (run_id, sequence, event_key, recorded_at, data) "
            "VALUES ('r1', 2, 'from_the_future', %s, '{}'::jsonb)",
            (NOW,),
        )
    for read in (lambda: store.read_history("r1"), lambda: store.read_histories({"r1": 0})):
        with pytest.raises(StoreError, match=r"Run 'r1' .* cannot decode .*upgrade Flow"):
            read()


def test_a_run_started_with_its_first_decision_writes_its_row_once(
    url: str, schema: str, store: PostgresStore
) -> None:
    """A start that commits the run's first decisions with its creation (eager start) inserts
    the run's row as the decision leaves it and never updates it (each update is a new row
    version, with an entry in every index of the table). A write that does not follow the
    creation still fails, and takes the run with it."""
    with admin(url, schema) as conn:
        conn.execute("CREATE TABLE row_updates (run_id text)")
        conn.execute(
            "CREATE FUNCTION count_update() RETURNS trigger LANGUAGE plpgsql AS "
            "$$ BEGIN INSERT INTO row_updates VALUES (NEW.run_id); RETURN NEW; END $$"
        )
        conn.execute(
            "CREATE TRIGGER count_update AFTER UPDATE ON runs "
            "FOR EACH ROW EXECUTE FUNCTION count_update()"
        )
    received = SignalReceived(signal_name="s", payload=1)
    write = StreamWrite(run_id="r1", expected_sequence=1, events=[received], index=RUNNING)
    store.commit([write], [new_run("r1")], NOW)
    assert [e.sequence for e in store.read_history("r1")] == [1, 2]
    record = store.get_run("r1")
    assert record is not None and (record.status, record.last_sequence) == (RunStatus.RUNNING, 2)
    stale = StreamWrite(run_id="r2", expected_sequence=2, events=[received], index=RUNNING)
    with pytest.raises(EventConflict):
        store.commit([stale], [new_run("r2")], NOW)
    assert store.get_run("r2") is None
    twice = StreamWrite(run_id="r1", expected_sequence=1, events=[received], index=RUNNING)
    with pytest.raises(EventConflict):  # an id that exists: nothing of the commit is written
        store.commit([twice], [new_run("r1")], NOW)
    assert [e.sequence for e in store.read_history("r1")] == [1, 2]
    with admin(url, schema) as conn:
        updates = conn.execute("SELECT run_id FROM row_updates").fetchall()
    assert updates == []


def test_version_8_schema_gains_run_attributes(url: str, schema: str, store: PostgresStore) -> None:
    """A database of the previous version opens and gains ``run_attributes`` (search
    attributes); its runs have none, new ones are indexed and found."""
    from dataclasses import replace

    from flow_cli.store.protocol import RunFilter

    store.create_run(new_run("old"), NOW)
    store.close()
    with admin(url, schema) as conn:  # what a version 8 Flow left: no run_attributes
        conn.execute("DROP TABLE run_attributes")
        conn.execute("DROP TABLE leases")
        conn.execute("UPDATE flow_meta SET value = '8' WHERE key = 'schema_version'")
    upgraded = PostgresStore(url, schema=schema)
    try:
        run = new_run("new")
        upgraded.create_run(replace(run, spec=replace(run.spec, attributes={"c": "acme"})), NOW)
        assert upgraded.get_run("old").attributes == {}  # type: ignore[union-attr]
        found = upgraded.find_runs(RunFilter(attributes=(("c", '"acme"'),)))
        assert [(r.run_id, dict(r.attributes)) for r in found] == [("new", {"c": "acme"})]
    finally:
        upgraded.close()
    with admin(url, schema) as conn:
        version = conn.execute("SELECT value FROM flow_meta WHERE key = 'schema_version'")
        assert version.fetchone() == (str(postgres_schema.SCHEMA_VERSION),)


def test_a_commit_looks_at_the_pauses_only_when_asked(store: PostgresStore) -> None:
    """``want_pause_probe``: the next commit opens its round trip with a look at the pauses
    table, and ``last_pause_probe`` tells what it found; a pause made here forgets it."""
    store.create_run(new_run("r1"), NOW)
    assert store.last_pause_probe() is None  # not asked: no look
    store.want_pause_probe()
    before = time.monotonic()
    store.append_if_sequence("r1", 1, [signal(1)], RUNNING, NOW)
    probe = store.last_pause_probe()
    assert probe is not None and probe[0] >= before and probe[1] is False
    store.add_pauses([PauseTarget(kind=PauseKind.WORKFLOW, name="other")], None, NOW)
    assert store.last_pause_probe() is None
    store.append_if_sequence("r1", 2, [signal(2)], RUNNING, NOW)
    assert store.last_pause_probe() is None  # asked once, looked once
    store.want_pause_probe()
    store.append_if_sequence("r1", 3, [signal(3)], RUNNING, NOW)
    probe = store.last_pause_probe()
    assert probe is not None and probe[1] is True
    assert [e.sequence for e in store.read_history("r1")] == [1, 2, 3, 4]
