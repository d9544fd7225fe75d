"""Run filters, counts and hook listings (schema version 2): conformance over every store,
plus SQLite query plans and the upgrade of a version 1 database."""

from __future__ import annotations

import json
import re
import sqlite3
from datetime import timedelta
from pathlib import Path

import pytest
from store_helpers import BUILD, create, idx, new_run, signal

import flow_cli.store.sqlite.schema as schema_module
from flow_cli.errors import RunNotFound
from flow_cli.model.clock import ManualClock
from flow_cli.model.events import (
    EventEnvelope,
    HookCreated,
    HookResolved,
    RunCompleted,
    RunStarted,
    SignalWaitStarted,
    StepScheduled,
    WaitStarted,
)
from flow_cli.model.retry import RetryPolicy
from flow_cli.model.snapshot import project
from flow_cli.model.spec import WorkflowSpec
from flow_cli.model.status import RunStatus
from flow_cli.store.index import index_for, waiting_on
from flow_cli.store.protocol import EventStore, HookEntry, RunFilter, RunIndex
from flow_cli.store.sqlite import MIGRATIONS, SQLiteStore

SUSPENDED = RunStatus.SUSPENDED


def ids(store: EventStore, **where: object) -> list[str]:
    return [r.run_id for r in store.find_runs(RunFilter(**where))]  # type: ignore[arg-type]


def populate(store: EventStore, clock: ManualClock) -> None:
    """Four runs, a minute apart.

    a: orders, shop-1, waits on a signal; b: orders, shop-2, failing, child of a;
    c: refunds, completed; d: orders, waits on a step and a timer.
    """
    create(store, "a", clock.now())
    store.append_if_sequence(
        "a", 1, [signal(1)], idx(SUSPENDED, waiting_on="signal:shipped"), clock.now()
    )
    create(store, "b", clock.advance(60), build="shop-2", parent="a")
    store.append_if_sequence("b", 1, [signal(1)], idx(failing="KeyError: sku"), clock.now())
    create(store, "c", clock.advance(60), workflow="refunds")
    store.append_if_sequence(
        "c", 1, [RunCompleted(result=1)], idx(RunStatus.COMPLETED), clock.now()
    )
    create(store, "d", clock.advance(60))
    store.append_if_sequence(
        "d", 1, [signal(1)], idx(waiting_on="step:charge timer:pay%20deadline"), clock.now()
    )
    clock.advance(60)


def test_find_runs_applies_each_filter(store: EventStore, clock: ManualClock) -> None:
    start = clock.now()
    populate(store, clock)
    assert ids(store) == ["d", "c", "b", "a"]
    assert ids(store, statuses=(SUSPENDED, RunStatus.COMPLETED)) == ["c", "a"]
    assert ids(store, workflow="orders") == ["d", "b", "a"]
    assert ids(store, build_id="shop-2") == ["b"]
    assert ids(store, since=start + timedelta(seconds=60)) == ["d", "c", "b"]
    assert ids(store, until=start + timedelta(seconds=60)) == ["a"]
    assert ids(store, failing=True) == ["b"]
    assert ids(store, waiting_on="signal") == ["a"]
    assert ids(store, waiting_on="signal:shipped") == ["a"]
    assert ids(store, waiting_on="signal:ship") == []
    assert ids(store, waiting_on="step:charge") == ["d"]
    assert ids(store, waiting_on="timer:pay deadline") == ["d"]
    assert ids(store, waiting_on="hook") == []
    assert ids(store, top_level=True) == ["d", "c", "a"]
    assert ids(store, idle_since=start + timedelta(seconds=60)) == ["b", "a"]
    assert ids(store, workflow="orders", build_id=BUILD, top_level=True) == ["d", "a"]
    assert ids(store, workflow="nothing") == []
    [record] = store.find_runs(RunFilter(waiting_on="step"))
    assert record.waiting_on == "step:charge timer:pay%20deadline"


def test_find_runs_pages_with_a_cursor(store: EventStore, clock: ManualClock) -> None:
    for n in range(5):
        create(store, f"r{n}", clock.now())  # same instant: creation order breaks ties
    assert ids(store, limit=2) == ["r4", "r3"]
    assert ids(store, limit=2, after="r3") == ["r2", "r1"]
    assert ids(store, after="r1") == ["r0"]
    assert ids(store, after="r0") == []
    with pytest.raises(RunNotFound):
        store.find_runs(RunFilter(after="nope"))


def test_count_runs_groups(store: EventStore, clock: ManualClock) -> None:
    populate(store, clock)
    assert store.count_runs(RunFilter()).total == 4
    assert store.count_runs(RunFilter()).groups == {}
    by_status = store.count_runs(RunFilter(), by="status")
    assert by_status.total == 4
    assert by_status.groups == {"Completed": 1, "Running": 2, "Suspended": 1}
    assert store.count_runs(RunFilter(workflow="orders"), by="build_id").groups == {
        "shop-1": 2,
        "shop-2": 1,
    }
    assert store.count_runs(RunFilter(limit=1), by="workflow").groups == {"orders": 3, "refunds": 1}
    assert store.count_runs(RunFilter(workflow="nothing"), by="status").total == 0


def test_terminal_runs_wait_on_nothing(store: EventStore, clock: ManualClock) -> None:
    create(store, "a", clock.now())
    store.append_if_sequence("a", 1, [signal(1)], idx(waiting_on="hook:ok"), clock.now())
    assert ids(store, waiting_on="hook:ok") == ["a"]
    store.append_if_sequence("a", 2, [signal(2)], idx(), clock.now())  # KEEP keeps it
    assert ids(store, waiting_on="hook:ok") == ["a"]
    done = RunIndex(status=RunStatus.COMPLETED, waiting_on="hook:ok")
    store.append_if_sequence("a", 3, [RunCompleted(result=None)], done, clock.now())
    assert ids(store, waiting_on="hook") == []
    assert store.get_run("a").waiting_on is None  # type: ignore[union-attr]


def test_list_hooks_keeps_creation_time_and_metadata(store: EventStore, clock: ManualClock) -> None:
    created_at = clock.now()
    create(store, "a", created_at)
    create(store, "b", created_at)
    open_a = HookEntry(token="ta", hook_id="approve", resolved=False, metadata={"amount": 10})
    store.append_if_sequence("a", 1, [signal(1)], idx(hooks=[open_a]), created_at)
    later = clock.advance(30)
    open_b = HookEntry(token="tb", hook_id="approve", resolved=False, metadata="plain")
    store.append_if_sequence("b", 1, [signal(1)], idx(hooks=[open_b]), later)
    resolved = HookEntry(token="ta", hook_id="approve", resolved=True, metadata={"amount": 10})
    store.append_if_sequence("a", 2, [signal(2)], idx(hooks=[resolved]), clock.advance(30))
    rows = store.list_hooks()
    assert [(h.run_id, h.token, h.resolved) for h in rows] == [
        ("a", "ta", True),
        ("b", "tb", False),
    ]
    assert rows[0].created_at == created_at and rows[1].created_at == later
    assert rows[0].metadata == {"amount": 10} and rows[1].metadata == "plain"
    assert [h.token for h in store.list_hooks(open_only=True)] == ["tb"]
    assert [h.token for h in store.list_hooks("a")] == ["ta"]
    assert store.list_hooks("a", open_only=True) == []
    assert store.list_hooks("unknown") == []
    # A hook of a run that ended waits for nothing any more.
    done = RunIndex(status=RunStatus.COMPLETED)
    store.append_if_sequence("b", 2, [RunCompleted(result=None)], done, clock.now())
    assert store.list_hooks(open_only=True) == []
    assert [h.token for h in store.list_hooks()] == ["ta", "tb"]


# -- the planner's waiting_on ---------------------------------------------------------------------


def test_index_for_says_what_an_open_run_waits_on(clock: ManualClock) -> None:
    now = clock.now()
    spec = WorkflowSpec(workflow="orders", input={}, runtime_build_id=BUILD, patches=())
    events = [
        RunStarted(spec=spec, seed="s"),
        StepScheduled(step_id="charge", name="charge", input={}, retry=RetryPolicy()),
        WaitStarted(wait_id="pay deadline", deadline=now + timedelta(hours=1)),
        SignalWaitStarted(wait_id="w1", signal_name="shipped"),
        HookCreated(hook_id="approval", token="t", metadata=None),
    ]
    snapshot = project(
        EventEnvelope(run_id="r", sequence=n, recorded_at=now, event=e)
        for n, e in enumerate(events, 1)
    )
    expected = "signal:shipped hook:approval timer:pay%20deadline step:charge"
    assert waiting_on(snapshot) == expected
    assert index_for(snapshot, events[1:]).waiting_on == expected
    resolve = HookResolved(hook_id="approval", token="t", payload=1)
    snapshot.apply(EventEnvelope(run_id="r", sequence=6, recorded_at=now, event=resolve))
    assert "hook:" not in (waiting_on(snapshot) or "")
    snapshot.apply(
        EventEnvelope(run_id="r", sequence=7, recorded_at=now, event=RunCompleted(result=1))
    )
    assert waiting_on(snapshot) is None
    assert index_for(snapshot, []).waiting_on is None


# -- SQLite: plans and upgrade --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("where", "index"),
    [
        (RunFilter(statuses=(SUSPENDED,)), "runs_status_created"),
        (RunFilter(workflow="orders"), "runs_workflow_created"),
        (RunFilter(build_id=BUILD), "runs_build_created"),
        (RunFilter(failing=True), "runs_failing"),
        (RunFilter(waiting_on="signal:shipped"), "runs_waiting"),
        (RunFilter(top_level=True), "runs_parent_created"),
    ],
)
def test_sqlite_filters_read_an_index(tmp_path: Path, where: RunFilter, index: str) -> None:
    store = SQLiteStore(tmp_path / "flow.db")
    statements: list[str] = []
    store._conn().set_trace_callback(statements.append)
    store.find_runs(where)
    store.count_runs(where, by="status")
    store._conn().set_trace_callback(None)
    with sqlite3.connect(tmp_path / "flow.db") as conn:
        for sql in [s for s in statements if s.startswith("SELECT")]:
            plan = " | ".join(row[3] for row in conn.execute(f"EXPLAIN QUERY PLAN {sql}"))
            assert f"INDEX {index}" in plan, (sql, plan)
            assert not re.search(r"SCAN runs(?! USING)", plan), (sql, plan)
    store.close()


def test_sqlite_version_1_database_is_upgraded_with_hook_rows(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, clock: ManualClock
) -> None:
    path = tmp_path / "flow.db"
    with monkeypatch.context() as patch:
        patch.setattr(schema_module, "MIGRATIONS", MIGRATIONS[:1])
        patch.setattr(SQLiteStore, "_opened", lambda self: None)  # no limits table at v1
        old = SQLiteStore(path)
        old.close()
    # What a version 1 Flow wrote for a run with a hook: events, a runs row, a hooks row
    # without creation time or metadata.
    stamp = clock.now().isoformat(timespec="microseconds")
    started = RunStarted(spec=new_run("a").spec, seed="s")
    created = HookCreated(hook_id="approve", token="tok", metadata={"amount": 5})
    with sqlite3.connect(path) as conn:
        conn.execute(
            "INSERT INTO runs (run_id, workflow, status, build_id, created_at, updated_at, "
            "last_sequence) VALUES ('a', 'orders', 'Suspended', ?, ?, ?, 1)",
            (BUILD, stamp, stamp),
        )
        for sequence, event in ((1, started), (2, created)):
            conn.execute(
                "INSERT INTO events VALUES ('a', ?, ?, ?, ?)",
                (sequence, event.event_key(), stamp, json.dumps(event.to_data())),
            )
        conn.execute("UPDATE runs SET last_sequence = 2 WHERE run_id = 'a'")
        conn.execute("INSERT INTO hooks VALUES ('tok', 'a', 'approve', 0)")
    conn.close()
    store = SQLiteStore(path)
    [hook] = store.list_hooks()
    assert (hook.token, hook.created_at, hook.metadata) == ("tok", clock.now(), {"amount": 5})
    assert store.get_run("a").waiting_on is None  # type: ignore[union-attr]
    store.close()
