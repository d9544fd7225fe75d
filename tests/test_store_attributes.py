"""Search attributes in the run index (DESIGN §6.5): conformance over every store, the SQLite
query plan of ``flow runs --attr k=v --limit 50``, and the upgrade of a database written before
``run_attributes`` existed."""

from __future__ import annotations

import re
import sqlite3
from dataclasses import replace
from pathlib import Path

import pytest
from store_helpers import BUILD, idx, new_run, signal

import flow_cli.store.sqlite.schema as schema_module
from flow_cli.model.attributes import attribute_text
from flow_cli.model.clock import ManualClock
from flow_cli.model.events import AttributesSet, StepScheduled
from flow_cli.model.retry import RetryPolicy
from flow_cli.model.status import RunStatus
from flow_cli.store.protocol import (
    NO_GROUP,
    CommitGroup,
    EventStore,
    NewRun,
    RunFilter,
    StreamWrite,
)
from flow_cli.store.sqlite import MIGRATIONS, SQLiteStore


def attrs(**values: object) -> tuple[tuple[str, str], ...]:
    return tuple((k, attribute_text(v)) for k, v in values.items())  # type: ignore[arg-type]


def ids(store: EventStore, **values: object) -> list[str]:
    return [r.run_id for r in store.find_runs(RunFilter(attributes=attrs(**values)))]


def with_attributes(run_id: str, **values: object) -> NewRun:
    run = new_run(run_id)
    return replace(run, spec=replace(run.spec, attributes=values or None))


def populate(store: EventStore, clock: ManualClock) -> None:
    """a: acme, 5, vip; b: acme, "5"; c: globex, 5 then (set) 7; d: none."""
    store.create_run(with_attributes("a", customer="acme", n=5, vip=True), clock.now())
    store.create_run(with_attributes("b", customer="acme", n="5"), clock.advance(1))
    store.create_run(with_attributes("c", customer="globex", n=5), clock.advance(1))
    store.create_run(new_run("d"), clock.advance(1))
    store.append_if_sequence(
        "c",
        1,
        [AttributesSet(attributes={"n": 7, "tier": "gold"}), signal(1)],
        idx(attributes={"n": "7", "tier": '"gold"'}),
        clock.now(),
    )


def test_attributes_are_indexed_filtered_and_replaced(
    store: EventStore, clock: ManualClock
) -> None:
    populate(store, clock)
    record = store.get_run("a")
    assert record is not None and record.attributes == {"customer": "acme", "n": 5, "vip": True}
    assert store.get_run("d").attributes == {}  # type: ignore[union-attr]
    # Setting again replaces: c's n is 7 now, not 5.
    assert store.get_run("c").attributes == {  # type: ignore[union-attr]
        "customer": "globex",
        "n": 7,
        "tier": "gold",
    }
    assert ids(store, customer="acme") == ["b", "a"]
    # Typed: the number 5 is not the text "5"; and c's old value is gone.
    assert ids(store, n=5) == ["a"]
    assert ids(store, n="5") == ["b"]
    assert ids(store, n=7) == ["c"]
    # Several attributes: all must hold.
    assert ids(store, customer="acme", vip=True) == ["a"]
    assert ids(store, customer="acme", n=7) == []
    assert ids(store, nothing="x") == []
    # With the other filters and the listing's cursor and limit.
    where = RunFilter(attributes=attrs(customer="acme"), statuses=(RunStatus.PENDING,), limit=1)
    assert [r.run_id for r in store.find_runs(where)] == ["b"]
    assert [r.run_id for r in store.find_runs(replace(where, after="b"))] == ["a"]
    [listed] = [r for r in store.find_runs(RunFilter()) if r.run_id == "a"]
    assert listed.attributes == {"customer": "acme", "n": 5, "vip": True}


def test_count_filters_and_groups_by_attribute(store: EventStore, clock: ManualClock) -> None:
    populate(store, clock)
    assert store.count_runs(RunFilter(attributes=attrs(customer="acme"))).total == 2
    assert store.count_runs(RunFilter(attributes=attrs(customer="acme", vip=True))).total == 1
    by_customer = store.count_runs(RunFilter(), by="attr:customer")
    assert by_customer.total == 4
    assert dict(by_customer.groups) == {"acme": 2, "globex": 1, NO_GROUP: 1}
    by_n = store.count_runs(RunFilter(attributes=attrs(customer="acme")), by="attr:n")
    assert dict(by_n.groups) == {"5": 2}  # the number 5 and the text "5" both read 5
    by_vip = store.count_runs(RunFilter(), by="attr:vip")
    assert dict(by_vip.groups) == {"true": 1, NO_GROUP: 3}


def test_attributes_of_a_run_created_with_its_first_decision(
    store: EventStore, clock: ManualClock
) -> None:
    """The eager start path: the run and its first decision in one commit."""
    run = with_attributes("e", customer="acme")
    events = [
        AttributesSet(attributes={"stage": "charging"}),
        StepScheduled(step_id="s", name="charge", input=None, retry=RetryPolicy()),
    ]
    write = StreamWrite(
        run_id="e",
        expected_sequence=1,
        events=events,
        index=idx(RunStatus.RUNNING, attributes={"stage": '"charging"'}),
    )
    store.commit([write], [run], clock.now())
    assert store.get_run("e").attributes == {  # type: ignore[union-attr]
        "customer": "acme",
        "stage": "charging",
    }
    assert ids(store, stage="charging") == ["e"]


def test_sqlite_attribute_filter_reads_the_attribute_index(tmp_path: Path) -> None:
    """``flow runs --attr k=v --limit 50``: the run ids come from run_attributes_value, each
    run by its primary key; the runs table is never scanned."""
    store = SQLiteStore(tmp_path / "flow.db")
    statements: list[str] = []
    store._conn().set_trace_callback(statements.append)
    where = RunFilter(attributes=attrs(customer="acme"), limit=51)
    store.find_runs(where)
    store.count_runs(replace(where, limit=None, attributes=attrs(customer="acme", n=5)))
    store._conn().set_trace_callback(None)
    with sqlite3.connect(tmp_path / "flow.db") as conn:
        selects = [s for s in statements if s.startswith("SELECT")]
        assert len(selects) == 2
        for sql in selects:
            plan = " | ".join(row[3] for row in conn.execute(f"EXPLAIN QUERY PLAN {sql}"))
            assert "INDEX run_attributes_value (key=? AND value=?)" in plan, (sql, plan)
            assert not re.search(r"SCAN runs", plan), (sql, plan)
    store.close()


def test_sqlite_database_of_the_previous_version_gains_run_attributes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, clock: ManualClock
) -> None:
    path = tmp_path / "flow.db"
    # What a version 7 Flow left: every table but run_attributes (the later versions' changes
    # are there too, as today's code writes them; their migrations are idempotent).
    without = [m for m in MIGRATIONS if m[1] is not schema_module._v8_run_attributes]
    with monkeypatch.context() as patch:
        patch.setattr(schema_module, "MIGRATIONS", without)
        old = SQLiteStore(path)
        old.create_run(new_run("old"), clock.now())
        old.close()
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE flow_meta SET value = '7' WHERE key = 'schema_version'")
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master")}
    conn.close()
    assert "run_attributes" not in tables
    store = SQLiteStore(path)
    try:
        assert store.get_run("old").attributes == {}  # type: ignore[union-attr]
        store.create_run(with_attributes("new", customer="acme"), clock.advance(1))
        assert ids(store, customer="acme") == ["new"]
        assert store.get_run("old").build_id == BUILD  # type: ignore[union-attr]
    finally:
        store.close()


def test_attributes_through_a_group_commit(store: EventStore, clock: ManualClock) -> None:
    store.create_run(with_attributes("a", n=1), clock.now())
    write = StreamWrite(
        run_id="a",
        expected_sequence=1,
        events=[AttributesSet(attributes={"n": 2}), signal(1)],
        index=idx(attributes={"n": "2"}),
    )
    group = CommitGroup(writes=[write], creates=[with_attributes("b", n=1)], now=clock.now())
    other = CommitGroup(writes=[], creates=[with_attributes("c", n=3)], now=clock.now())
    assert store.commit_groups([group, other]) == [None, None]
    assert ids(store, n=1) == ["b"]
    assert ids(store, n=2) == ["a"]
    assert ids(store, n=3) == ["c"]
