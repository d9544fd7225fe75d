"""A step lease tells the worker's pass when work is next due (``flow_cli.store.due``).

The look for due runs and the read of the next due time that follow a lease in a worker's pass
cost no query; and the hint never hides work: not after a write of this process, not after a
commit elsewhere once the worker has waited, not once time reaches it, not once it is old.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from store_helpers import BUILD, create, idx, signal

from flow_cli.model.clock import ManualClock
from flow_cli.store import due
from flow_cli.store.protocol import EventStore, LeaseAsk, StepTask

POSTGRES_ENV = "FLOW_TEST_POSTGRES"


def _open(kind: str, tmp_path: Path, schema: str) -> EventStore:
    if kind == "sqlite":
        from flow_cli.store.sqlite import SQLiteStore

        return SQLiteStore(tmp_path / "flow.db")
    url = os.environ.get(POSTGRES_ENV)
    if not url:
        pytest.skip(f"set {POSTGRES_ENV}=postgresql://... to run the PostgreSQL store tests")
    from flow_cli.store.postgres import PostgresStore

    return PostgresStore(url, schema=schema)


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def pair(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[EventStore, Any]]:
    """A store, and another one on the same database (as another process would open it)."""
    schema = f"flow_test_{uuid.uuid4().hex[:16]}"
    store = _open(request.param, tmp_path, schema)
    other = _open(request.param, tmp_path, schema)
    try:
        yield store, other
    finally:
        other.close()
        drop_schema = getattr(store, "drop_schema", None)
        try:
            if drop_schema is not None:
                drop_schema()
        finally:
            store.close()


def _ready_step(store: EventStore, run_id: str, now: datetime) -> None:
    create(store, run_id, now)
    task = StepTask(step_id="s", attempt=1, available_at=now)
    store.append_if_sequence(run_id, 1, [signal(1)], idx(steps={"s": task}), now)


def _lease(store: EventStore, now: datetime) -> list[str]:
    until = now + timedelta(seconds=30)
    return [lease.run_id for lease in store.lease_steps(LeaseAsk("w", [BUILD], now, until, 10))]


def _lease_runs(store: EventStore, now: datetime) -> list[str]:
    return store.lease_runs(LeaseAsk("w", [BUILD], now, now + timedelta(seconds=30), 10))


def _finds_due(store: EventStore, now: datetime) -> None:
    """The run "due" (due a second before ``now``) is seen: as next due, and leased."""
    assert store.next_due([BUILD]) == now - timedelta(seconds=1)
    assert _lease_runs(store, now) == ["due"]


def _queries(store: Any, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Record the statements ``store`` runs from here on, on this thread."""
    seen: list[str] = []
    if hasattr(store, "_reading"):  # PostgreSQL: every read and write checks out a connection
        for name in ("_reading", "_transaction"):
            method = getattr(store, name)

            def counted(*args: Any, _method: Any = method, _name: str = name, **kw: Any) -> Any:
                seen.append(_name)
                return _method(*args, **kw)

            monkeypatch.setattr(store, name, counted)
    else:  # SQLite: this thread's connection
        store._conn().set_trace_callback(seen.append)
    return seen


def test_the_look_for_due_runs_and_the_next_due_time_after_a_lease_cost_no_query(
    pair: tuple[EventStore, Any], clock: ManualClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    store, _ = pair
    now = clock.now()
    _ready_step(store, "r1", now)
    create(store, "later", now, decide_at=now + timedelta(minutes=5))
    assert _lease(store, now) == ["r1"]
    seen = _queries(store, monkeypatch)
    assert _lease_runs(store, now) == []
    assert store.next_due([BUILD]) == now + timedelta(seconds=30)  # r1's lease runs out first
    assert seen == []
    # Once the worker has waited, both ask the database again.
    store.wait_for_change(0, work_only=True)
    seen.clear()
    assert _lease_runs(store, now) == []
    assert store.next_due([BUILD]) == now + timedelta(seconds=30)
    assert seen != []


def test_a_write_of_this_process_after_the_lease_is_seen(
    pair: tuple[EventStore, Any], clock: ManualClock
) -> None:
    store, _ = pair
    now = clock.now()
    _ready_step(store, "r1", now)
    assert _lease(store, now) == ["r1"]
    create(store, "due", now, decide_at=now - timedelta(seconds=1))
    _finds_due(store, now)


def test_a_commit_elsewhere_is_seen_once_the_worker_has_waited(
    pair: tuple[EventStore, Any], clock: ManualClock
) -> None:
    store, other = pair
    now = clock.now()
    store.wait_for_change(0, work_only=True)  # listening (PostgreSQL listens from the first wait)
    _ready_step(store, "r1", now)
    assert _lease(store, now) == ["r1"]
    create(other, "due", now, decide_at=now - timedelta(seconds=1))
    store.wait_for_change(5, work_only=True)  # woken by the commit, as a worker is
    _finds_due(store, now)


def test_a_run_the_hint_shows_due_later_is_leased_once_its_time_comes(
    pair: tuple[EventStore, Any], clock: ManualClock
) -> None:
    store, _ = pair
    now = clock.now()
    _ready_step(store, "r1", now)
    create(store, "timer", now, decide_at=now + timedelta(seconds=10))
    assert _lease(store, now) == ["r1"]
    assert _lease_runs(store, now + timedelta(seconds=9)) == []
    assert _lease_runs(store, now + timedelta(seconds=10)) == ["timer"]


def test_an_old_hint_is_not_trusted(
    pair: tuple[EventStore, Any], clock: ManualClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A caller that never waits (``flow tick`` between its leases) still sees commits made
    elsewhere once the hint is older than ``due.MAX_AGE``."""
    store, other = pair
    now = clock.now()
    _ready_step(store, "r1", now)
    assert _lease(store, now) == ["r1"]
    create(other, "due", now, decide_at=now - timedelta(seconds=1))
    assert _lease_runs(store, now) == []  # the hint is young: not looked for yet
    monkeypatch.setattr(due, "MAX_AGE", 0.0)
    _finds_due(store, now)


def test_a_look_up_to_a_time_need_not_see_work_due_after_it(
    pair: tuple[EventStore, Any], clock: ManualClock
) -> None:
    """A worker wakes every second or so: it asks only up to then (``until``), so the store
    reads the due-time index no further, while a look without a bound finds any time."""
    store, _ = pair
    now = clock.now()
    later = now + timedelta(minutes=5)
    create(store, "later", now, decide_at=later)
    assert store.next_due([BUILD], now + timedelta(seconds=60)) is None
    assert store.next_due([BUILD], now + timedelta(minutes=10)) == later
    assert store.next_due([BUILD]) == later


def test_a_hint_that_looked_so_far_answers_only_as_far() -> None:
    now = datetime(2026, 12, 5, tzinfo=UTC)
    horizon = now + due.HORIZON
    found = due.DueHint(("b",), now + timedelta(seconds=5), None, 0, 0.0, until=horizon)
    empty = due.DueHint(("b",), None, None, 0, 0.0, until=horizon)
    whole = due.DueHint(("b",), None, None, 0, 0.0)
    assert found.answers(None) and found.answers(horizon + timedelta(days=1))
    assert empty.answers(now + timedelta(seconds=1)) and empty.answers(horizon)
    assert not empty.answers(None) and not empty.answers(horizon + timedelta(seconds=1))
    assert whole.answers(None)
