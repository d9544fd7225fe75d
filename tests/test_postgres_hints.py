"""Ready-step hints (``flow_cli.store.postgres.hints``): a commit's notification names the steps
it made ready, and an idle worker it wakes leases them in one round trip. A hint is only ever a
shortcut: one that went stale (the step taken, the run moved on, a build not hosted here) costs
the ordinary lease, never a wrong event.
"""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Iterator
from datetime import datetime, timedelta
from typing import Any

import pytest
from store_helpers import BUILD, create, idx, keys, signal

from flow_cli.errors import EventConflict
from flow_cli.model.clock import ManualClock
from flow_cli.store.protocol import LeaseAsk, StepTask

pytestmark = pytest.mark.postgres

psycopg = pytest.importorskip("psycopg")

from flow_cli.store.postgres import PostgresStore  # noqa: E402
from flow_cli.store.postgres import hints as postgres_hints  # noqa: E402


@pytest.fixture
def pair() -> Iterator[tuple[PostgresStore, PostgresStore]]:
    """A worker's store, and another process's on the same schema."""
    url = os.environ.get("FLOW_TEST_POSTGRES")
    if not url:
        pytest.skip("set FLOW_TEST_POSTGRES=postgresql://... to run the PostgreSQL store tests")
    schema = f"flow_hints_{uuid.uuid4().hex[:12]}"
    worker = PostgresStore(url, schema=schema)
    other = PostgresStore(url, schema=schema)
    try:
        yield worker, other
    finally:
        other.close()
        worker.drop_schema()
        worker.close()


def _ready_step(store: PostgresStore, run_id: str, now: datetime, step: str = "s") -> None:
    create(store, run_id, now)
    task = StepTask(step_id=step, attempt=1, available_at=now)
    store.append_if_sequence(run_id, 1, [signal(1)], idx(steps={step: task}), now)


def _lease(store: PostgresStore, now: datetime, builds: list[str] | None = None) -> list[str]:
    until = now + timedelta(seconds=30)
    leases = store.lease_steps(LeaseAsk("w", builds or [BUILD], now, until, 10))
    return [f"{lease.run_id}/{lease.step_id}" for lease in leases]


def _round_trips(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every query string sent from here on (a batch is one)."""
    sent: list[str] = []
    for cls in (psycopg.Connection, psycopg.ClientCursor, psycopg.Cursor):
        original = cls.execute

        def spy(self: Any, query: Any, *args: Any, _original: Any = original, **kw: Any) -> Any:
            sent.append(str(query))
            return _original(self, query, *args, **kw)

        monkeypatch.setattr(cls, "execute", spy)
    return sent


def _woken(worker: PostgresStore) -> None:
    worker.wait_for_change(5, work_only=True)


def _woken_by_a_ready_step(
    worker: PostgresStore, other: PostgresStore, run_id: str, now: datetime
) -> None:
    """``worker`` listening and idle, ``other`` commits a ready step, ``worker`` wakes."""
    worker.wait_for_change(0, work_only=True)
    _ready_step(other, run_id, now)
    _woken(worker)


def test_an_idle_worker_leases_the_steps_a_commit_names_in_one_round_trip(
    pair: tuple[PostgresStore, PostgresStore], clock: ManualClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    worker, other = pair
    now = clock.now()
    _woken_by_a_ready_step(worker, other, "r1", now)
    sent = _round_trips(monkeypatch)
    assert _lease(worker, now) == ["r1/s"]
    assert len(sent) == 1 and "BEGIN" in sent[0] and "COMMIT" in sent[0]
    assert keys(worker, "r1") == [(1, "run_started"), (2, "signal_received"), (3, "step_started")]
    record = worker.get_run("r1")
    assert record is not None and record.last_sequence == 3 and record.status.value == "Running"
    # The lease is real: nobody else can take the step now.
    assert _lease(other, now) == []


def test_a_step_another_worker_took_first_is_not_leased_again(
    pair: tuple[PostgresStore, PostgresStore], clock: ManualClock
) -> None:
    worker, other = pair
    now = clock.now()
    worker.wait_for_change(0, work_only=True)
    _ready_step(other, "r1", now)
    assert _lease(other, now) == ["r1/s"]  # another worker was faster
    _woken(worker)
    assert _lease(worker, now) == []
    assert [k for _, k in keys(worker, "r1")].count("step_started") == 1


def test_a_hint_whose_run_moved_on_leases_the_ordinary_way(
    pair: tuple[PostgresStore, PostgresStore], clock: ManualClock
) -> None:
    worker, other = pair
    now = clock.now()
    worker.wait_for_change(0, work_only=True)
    _ready_step(other, "r1", now)
    other.append_if_sequence("r1", 2, [signal(2)], idx(), now)  # the run moves past the hint
    _woken(worker)
    assert _lease(worker, now) == ["r1/s"]
    assert keys(worker, "r1")[-2:] == [(3, "signal_received"), (4, "step_started")]


def test_hints_for_builds_not_hosted_here_lease_nothing(
    pair: tuple[PostgresStore, PostgresStore], clock: ManualClock
) -> None:
    worker, other = pair
    now = clock.now()
    _woken_by_a_ready_step(worker, other, "r1", now)
    assert _lease(worker, now, builds=["another-build"]) == []
    assert _lease(worker, now) == ["r1/s"]


def test_a_ready_step_no_hint_named_is_due_at_once_after_the_hinted_lease(
    pair: tuple[PostgresStore, PostgresStore], clock: ManualClock
) -> None:
    worker, other = pair
    now = clock.now()
    _ready_step(other, "old", now - timedelta(seconds=5))  # ready before the worker waits
    _woken_by_a_ready_step(worker, other, "new", now)
    assert _lease(worker, now) == ["new/s"]  # the hinted lease, in one round trip
    # It read when work is next due: now, so the worker's pass leases again at once.
    assert worker.next_due([BUILD]) == now - timedelta(seconds=5)
    assert _lease(worker, now) == ["old/s"]


def test_a_step_too_long_to_name_is_leased_the_ordinary_way(
    pair: tuple[PostgresStore, PostgresStore], clock: ManualClock
) -> None:
    worker, other = pair
    now = clock.now()
    long_id = "r" * 9_000  # no hint fits in a notification: the commit goes through without
    _woken_by_a_ready_step(worker, other, long_id, now)  # woken by the plain notification
    assert _lease(worker, now) == [f"{long_id}/s"]


def test_a_payload_round_trips_and_foreign_ones_are_ignored() -> None:
    hint = postgres_hints.Hint("r\n1", 's"1', 2, 7, "b-1")
    text = postgres_hints.payload("flow", [hint])
    assert text is not None and len(text.encode()) <= postgres_hints.MAX_PAYLOAD_BYTES
    assert postgres_hints.parse("flow", text) == [hint]
    big = postgres_hints.Hint("ré" * 2_000, "s", 1, 2, "b")  # 8,000+ bytes once escaped
    assert postgres_hints.payload("flow", [big]) is None
    assert postgres_hints.parse("flow", postgres_hints.payload("flow", [big, hint]) or "") == [hint]
    assert postgres_hints.parse("other", text) is None
    assert postgres_hints.parse("flow", "flow") is None
    assert postgres_hints.parse("flow", "flow\nnot json") is None


def _woken_at_once_then_leased(worker: PostgresStore, now: datetime) -> list[str]:
    """What ``worker`` leases after a wait that must end at once: work was announced."""
    began = time.monotonic()
    worker.wait_for_change(5, work_only=True)
    assert time.monotonic() - began < 2.5
    return _lease(worker, now)


def _last_query_of(store: PostgresStore, pid: int) -> str:
    with store._reading() as conn:
        row = conn.execute("SELECT query FROM pg_stat_activity WHERE pid = %s", (pid,)).fetchone()
    return "" if row is None else str(row[0])


def test_a_commit_runs_on_the_listening_connection_when_nobody_waits_on_it(
    pair: tuple[PostgresStore, PostgresStore], clock: ManualClock
) -> None:
    # Its server process woke for the last notification; a pooled one may have slept since
    # this process last wrote (``PostgresStore._batch_on_listener``).
    worker, other = pair
    now = clock.now()
    create(other, "r1", now)
    worker.wait_for_change(0, work_only=True)
    listener = worker._listener
    assert listener is not None
    worker.append_if_sequence("r1", 1, [signal(1)], idx(), now)
    # The text shown is cut at track_activity_query_size: the run id is what is looked for.
    assert "'r1'" in _last_query_of(worker, listener.info.backend_pid)
    assert keys(worker, "r1")[-1] == (2, "signal_received")


def test_a_stale_commit_on_the_listening_connection_is_a_conflict_and_listening_goes_on(
    pair: tuple[PostgresStore, PostgresStore], clock: ManualClock
) -> None:
    worker, other = pair
    now = clock.now()
    create(other, "r1", now)
    worker.wait_for_change(0, work_only=True)
    other.append_if_sequence("r1", 1, [signal(1)], idx(), now)
    with pytest.raises(EventConflict):
        worker.append_if_sequence("r1", 1, [signal(2)], idx(), now)
    assert worker._listener is not None
    _ready_step(other, "r2", now)
    assert _woken_at_once_then_leased(worker, now) == ["r2/s"]


def test_a_notification_that_arrives_during_a_commit_on_the_listener_is_kept(
    pair: tuple[PostgresStore, PostgresStore], clock: ManualClock
) -> None:
    worker, other = pair
    now = clock.now()
    create(other, "r1", now)
    worker.wait_for_change(0, work_only=True)
    # Sent before the commit, so that it is read with the commit's answer: psycopg must keep
    # it for the next wait (3.2.4 and later do), or the worker would sleep through the step.
    _ready_step(other, "r2", now)
    worker.append_if_sequence("r1", 1, [signal(1)], idx(), now)
    assert _woken_at_once_then_leased(worker, now) == ["r2/s"]
