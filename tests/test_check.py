"""``flow check`` and ``EventStore.check_integrity`` (issue 8, defect 8)."""

from __future__ import annotations

import random
import sqlite3
from pathlib import Path

import pytest
from cli_helpers import FlowProject

from flow_cli.store.sqlite import SQLiteStore


@pytest.fixture
def project(tmp_path: Path) -> FlowProject:
    project = FlowProject(tmp_path)
    for n in range(12):
        project.setup("start", "two-step", "--id", f"run-{n}", "--input", f'{{"n": {n}}}')
    project.setup("tick", "--until-idle")
    return project


def test_an_intact_database_passes(project: FlowProject) -> None:
    result = project.run("check")
    assert (result.code, result.stderr) == (0, "")
    assert result.stdout == f"sqlite:///{project.db}: intact\n"
    assert project.run("check", "--json").json() == {
        "database": f"sqlite:///{project.db}",
        "ok": True,
        "problems": [],
    }


def _scribble(path: Path, seed: int, start: int, length: int = 6000) -> None:
    """Random bytes over part of the file, as a bad disk or a stray write would leave it."""
    rng = random.Random(seed)
    data = bytearray(path.read_bytes())
    for offset in range(start, min(len(data), start + length)):
        data[offset] = rng.randrange(256)
    path.write_bytes(bytes(data))


def test_random_bytes_in_the_file_fail_the_check_with_advice(project: FlowProject) -> None:
    # Over a page of events, past the header and the schema: the file still opens.
    with sqlite3.connect(project.db) as conn:
        (page,) = conn.execute("PRAGMA page_size").fetchone()
        (leaf,) = conn.execute(
            "SELECT max(pageno) FROM dbstat WHERE name = 'events' AND pagetype = 'leaf'"
        ).fetchone()
    conn.close()
    _scribble(project.db, seed=8, start=(leaf - 1) * page + 64, length=page - 128)
    result = project.run("check")
    assert result.code == 1
    assert result.stdout.startswith("SQLite"), result.stdout
    assert "\x1b" not in result.stdout
    line = result.error_line()
    assert line.startswith(f"error: sqlite:///{project.db} failed the integrity check (")
    assert 'sqlite3 DAMAGED.db ".recover" | sqlite3 recovered.db' in line
    data = project.run("check", "--json")
    assert data.code == 1 and data.json()["ok"] is False and data.json()["problems"]


def test_a_damaged_header_fails_the_check(project: FlowProject) -> None:
    _scribble(project.db, seed=3, start=0)
    result = project.run("check")
    assert result.code == 1
    assert result.stdout.startswith("the database cannot be opened: ")
    assert "failed the integrity check (1 problem)" in result.error_line()


def test_flow_checks_find_gaps_and_a_stale_index(project: FlowProject) -> None:
    with sqlite3.connect(project.db) as conn:
        conn.execute("DELETE FROM events WHERE run_id = 'run-1' AND sequence = 2")
        conn.execute("UPDATE runs SET last_sequence = 99 WHERE run_id = 'run-2'")
        conn.execute("UPDATE events SET data = '{oops' WHERE run_id = 'run-3' AND sequence = 3")
        conn.execute("DELETE FROM runs WHERE run_id = 'run-4'")
    store = SQLiteStore(project.db)
    problems = store.check_integrity()
    store.close()
    assert any("run 'run-1': its history has gaps" in p for p in problems)
    assert any("run 'run-2': the runs index says its last event is 99" in p for p in problems)
    assert any("run 'run-3': event 3 does not hold valid JSON" in p for p in problems)
    assert any("run 'run-4': it has events but no row in the runs index" in p for p in problems)
    result = project.run("check")
    assert result.code == 1
    assert result.stdout.splitlines() == problems


def test_check_of_a_missing_database_is_exit_1(tmp_path: Path) -> None:
    project = FlowProject(tmp_path)
    result = project.run("check")
    assert result.code == 1
    assert result.error_line().startswith(f"error: {project.db} does not exist; nothing was ")
    assert not project.db.exists()


@pytest.mark.postgres
def test_check_on_postgres_finds_a_gap(tmp_path: Path) -> None:
    import os
    import uuid

    base = os.environ.get("FLOW_TEST_POSTGRES")
    if not base:
        pytest.skip("set FLOW_TEST_POSTGRES=postgresql://... to run the PostgreSQL tests")
    psycopg = pytest.importorskip("psycopg")
    schema = f"flow_check_{uuid.uuid4().hex[:12]}"
    url = f"{base}{'&' if '?' in base else '?'}schema={schema}"
    project = FlowProject(tmp_path)
    try:
        project.setup("--db", url, "start", "two-step", "--id", "r")
        project.setup("--db", url, "tick", "--until-idle")
        intact = project.run("--db", url, "check")
        assert (intact.code, intact.stderr) == (0, "")
        assert intact.stdout.endswith(": intact\n")
        with psycopg.connect(base, autocommit=True) as conn:
            conn.execute(f"DELETE FROM {schema}.events WHERE run_id = 'r' AND sequence = 3")
        broken = project.run("--db", url, "check")
        assert broken.code == 1
        assert broken.stdout.startswith("run 'r': its history has gaps")
        assert "restore the schema from a backup" in broken.error_line()
    finally:
        from flow_cli.store.postgres import PostgresStore

        store = PostgresStore(base, schema=schema, create=False)
        store.drop_schema()
        store.close()


def _postgres_base() -> str:
    import os

    base = os.environ.get("FLOW_TEST_POSTGRES")
    if not base:
        pytest.skip("set FLOW_TEST_POSTGRES=postgresql://... to run the PostgreSQL tests")
    return base


def _closed_port() -> int:
    """A local TCP port nobody listens on (bound, then released)."""
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.mark.postgres
@pytest.mark.parametrize("case", ["no server", "no database", "no user"])
def test_check_calls_an_unreachable_postgres_a_connection_error(tmp_path: Path, case: str) -> None:
    """Issue 25, item 5: an outage or a refused login is no corruption (no restore advice)."""
    _postgres_base()
    url = {
        "no server": f"postgresql://postgres:s3cret-pw@127.0.0.1:{_closed_port()}/test",
        "no database": "postgresql://postgres:s3cret-pw@127.0.0.1:5432/flow_no_such_database",
        "no user": "postgresql://flow_no_such_user:s3cret-pw@127.0.0.1:5432/test",
    }[case]
    result = FlowProject(tmp_path).run("--db", url, "check")
    assert result.code == 1
    assert result.stdout == ""
    line = result.error_line()
    assert "could not be reached or opened, so it was not checked" in line
    assert "integrity" not in line and "backup" not in line and "restore" not in line
    assert "s3cret-pw" not in result.stderr
    reason = {"no server": "is unreachable", "no database": "does not exist", "no user": "role"}
    assert reason[case] in line


@pytest.mark.postgres
def test_check_of_a_schema_flow_never_created_says_so(tmp_path: Path) -> None:
    base = _postgres_base()
    url = f"{base}{'&' if '?' in base else '?'}schema=flow_check_never_created"
    result = FlowProject(tmp_path).run("--db", url, "check")
    assert result.code == 1 and result.stdout == ""
    line = result.error_line()
    assert "a Flow database in schema 'flow_check_never_created' does not exist" in line
    assert "backup" not in line


def test_check_of_a_missing_file_says_it_does_not_exist_and_creates_nothing(
    tmp_path: Path,
) -> None:
    project = FlowProject(tmp_path)
    missing = tmp_path / "typo.db"
    result = project.run("--db", f"sqlite:///{missing}", "check")
    assert result.code == 1 and result.stdout == ""
    assert result.error_line() == (
        f"error: {missing} does not exist; nothing was checked. Pass --db to point at an "
        "existing database."
    )
    assert not missing.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["flow.toml"]


def test_check_of_a_directory_gives_no_restore_advice(tmp_path: Path) -> None:
    folder = tmp_path / "folder.db"
    folder.mkdir()
    result = FlowProject(tmp_path).run("--db", f"sqlite:///{folder}", "check")
    assert result.code == 1 and result.stdout == ""
    line = result.error_line()
    assert "is a directory" in line and "backup" not in line


def test_check_of_a_locked_file_says_locked_without_restore_advice(project: FlowProject) -> None:
    holder = sqlite3.connect(project.db, isolation_level=None)
    try:
        holder.execute("PRAGMA locking_mode = EXCLUSIVE")
        holder.execute("BEGIN EXCLUSIVE")
        holder.execute("UPDATE runs SET last_sequence = last_sequence WHERE 0")
        result = project.run("--db", f"sqlite:///{project.db}?busy_timeout_ms=200", "check")
    finally:
        holder.execute("COMMIT")
        holder.close()
    assert result.code == 1 and result.stdout == ""
    line = result.error_line()
    assert "could not be reached or opened, so it was not checked" in line
    assert "is locked by another connection" in line and "backup" not in line
