"""The runs index's error (``flow runs``' reason, ``--error-type``, ``count --by error_type``)
on every store, and the migration that fills it for databases written before it existed."""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from flow_cli import Runtime, WorkflowContext
from flow_cli.engine.engine import Engine
from flow_cli.model.clock import ManualClock
from flow_cli.model.commands import RuntimeCommand
from flow_cli.model.status import RunStatus
from flow_cli.store.protocol import NO_GROUP, EventStore, RunFilter
from flow_cli.store.run_error import error_of


def _runtime() -> Runtime:
    rt = Runtime(build_id="errors-1")

    @rt.workflow("ship")
    def ship(ctx: WorkflowContext) -> RuntimeCommand:
        kind = ctx.input["kind"]
        if kind == "typed":
            return ctx.fail({"type": "ShippingFailed", "message": "no carrier\nfor Mars"})
        if kind == "bare":
            return ctx.fail("out of stock")
        if kind == "raises":
            raise KeyError("missing")
        if kind == "wait":
            ctx.receive("go", "go")
        return ctx.complete("ok")

    return rt


def _engine(store: EventStore, clock: ManualClock, runtime: Runtime | None = None) -> Engine:
    return Engine(store, [runtime or _runtime()], clock=clock)


def _record_runs(engine: Engine) -> None:
    for run_id in ("typed", "bare", "raises", "ok", "wait"):
        engine.start("ship", {"kind": run_id}, run_id=run_id)
    engine.tick(until_idle=True)


def _errors(store: EventStore) -> dict[str, tuple[str | None, str | None]]:
    return {r.run_id: (r.error_type, r.error) for r in store.find_runs(RunFilter())}


EXPECTED = {
    "typed": ("ShippingFailed", "ShippingFailed: no carrier for Mars"),
    "bare": (None, "out of stock"),
    "raises": ("KeyError", "KeyError: 'missing'"),
    "ok": (None, None),
    "wait": (None, None),
}


def test_the_index_holds_why_a_run_failed_or_fails(store: EventStore, clock: ManualClock) -> None:
    engine = _engine(store, clock)
    _record_runs(engine)

    assert _errors(store) == EXPECTED
    assert store.get_run("typed").error_type == "ShippingFailed"  # type: ignore[union-attr]
    only = store.find_runs(RunFilter(error_type="KeyError"))
    assert [r.run_id for r in only] == ["raises"]
    assert store.count_runs(RunFilter(error_type="ShippingFailed")).total == 1
    counted = store.count_runs(RunFilter(), by="error_type")
    assert dict(counted.groups) == {"KeyError": 1, "ShippingFailed": 1, NO_GROUP: 3}
    by_status = store.count_runs(RunFilter(statuses=(RunStatus.FAILED,)), by="error_type")
    assert dict(by_status.groups) == {"ShippingFailed": 1, NO_GROUP: 1}


def test_fixed_code_clears_a_failing_decisions_error(store: EventStore, clock: ManualClock) -> None:
    engine = _engine(store, clock)
    _record_runs(engine)
    fixed = Runtime(build_id="errors-1")

    @fixed.workflow("ship")
    def ship(ctx: WorkflowContext) -> RuntimeCommand:
        return ctx.complete("fixed")

    engine = _engine(store, clock, fixed)
    clock.advance(seconds=3600)  # past the decision's back-off
    engine.tick(until_idle=True)
    assert engine.get_run("raises").status is RunStatus.COMPLETED
    assert _errors(store)["raises"] == (None, None)
    assert _errors(store)["typed"] == EXPECTED["typed"]  # an ended run keeps its error


def test_terminating_a_failing_run_clears_its_error(store: EventStore, clock: ManualClock) -> None:
    engine = _engine(store, clock)
    _record_runs(engine)
    engine.terminate("raises", "called off")
    assert _errors(store)["raises"] == (None, None)


def test_error_text_is_one_line_with_no_dangling_colon() -> None:
    assert error_of({"type": "T", "message": ""}).text == "T"
    assert error_of({"type": "T"}).text == "T"
    assert error_of({"type": "T", "detail": 1}).text == 'T: {"detail":1}'
    assert error_of({"message": "a\n  b"}).text == "a b"
    assert error_of(None).text == "null"
    assert error_of({}).text == "(no message)"


# -- the migration, from a database written before the index had the error ---------------------


def _as_before_sqlite(path: Path) -> None:
    """Make the file what schema version 4 wrote: no error columns (nor their index), and no
    schedules table (version 6)."""
    conn = sqlite3.connect(path)
    conn.execute("DROP TABLE schedules")
    conn.execute("DROP INDEX runs_error_type")
    conn.execute("ALTER TABLE runs DROP COLUMN error_type")
    conn.execute("ALTER TABLE runs DROP COLUMN error")
    conn.execute("UPDATE flow_meta SET value = '4' WHERE key = 'schema_version'")
    conn.commit()
    conn.close()


def test_sqlite_migration_fills_the_errors_of_runs_recorded_before(
    tmp_path: Path, clock: ManualClock
) -> None:
    from flow_cli.store.sqlite import MIGRATIONS, SQLiteStore

    path = tmp_path / "flow.db"
    store = SQLiteStore(path)
    _record_runs(_engine(store, clock))
    store.close()
    _as_before_sqlite(path)

    reopened = SQLiteStore(path)
    try:
        assert _errors(reopened) == EXPECTED
        assert [r.run_id for r in reopened.find_runs(RunFilter(error_type="KeyError"))] == [
            "raises"
        ]
    finally:
        reopened.close()
    conn = sqlite3.connect(path)
    version = conn.execute("SELECT value FROM flow_meta WHERE key = 'schema_version'").fetchone()
    conn.close()
    assert version == (str(MIGRATIONS[-1][0]),)


@pytest.mark.postgres
def test_postgres_migration_fills_the_errors_of_runs_recorded_before(clock: ManualClock) -> None:
    url = os.environ.get("FLOW_TEST_POSTGRES")
    if not url:
        pytest.skip("set FLOW_TEST_POSTGRES=postgresql://... to run the PostgreSQL store tests")
    import uuid

    import psycopg

    from flow_cli.store.postgres import PostgresStore
    from flow_cli.store.postgres import schema as postgres_schema

    schema = f"flow_test_{uuid.uuid4().hex[:16]}"
    store = PostgresStore(url, schema=schema)
    try:
        _record_runs(_engine(store, clock))
        # The version before the run errors' migration; later ones (schedules) undone too.
        before = (
            next(
                m.version
                for m in postgres_schema.MIGRATIONS
                if m.apply.__name__ == "_v6_run_errors"
            )
            - 1
        )
        conn: Any = psycopg.connect(url, autocommit=True)
        conn.execute(f'SET search_path TO "{schema}"')
        conn.execute("DROP TABLE schedules")
        conn.execute("DROP INDEX runs_error_type")
        conn.execute("ALTER TABLE runs DROP COLUMN error_type, DROP COLUMN error")
        conn.execute("UPDATE flow_meta SET value = %s WHERE key = 'schema_version'", (str(before),))
        conn.close()
        reopened = PostgresStore(url, schema=schema)
        try:
            assert _errors(reopened) == EXPECTED
            counted = reopened.count_runs(RunFilter(), by="error_type")
            assert dict(counted.groups) == {"KeyError": 1, "ShippingFailed": 1, NO_GROUP: 3}
        finally:
            reopened.close()
    finally:
        store.drop_schema()
        store.close()
