"""Shared fixtures: ``clock`` and ``store`` (memory, SQLite and, when configured, PostgreSQL)."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from flow_cli.model.clock import ManualClock
from flow_cli.store.protocol import EventStore

POSTGRES_ENV = "FLOW_TEST_POSTGRES"


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("flow simulation")
    group.addoption(
        "--seed",
        type=int,
        default=None,
        help="Run the deterministic simulation (tests/simulation) for this one seed only.",
    )
    group.addoption(
        "--sim-seeds",
        type=int,
        default=None,
        help="How many simulation seeds to run (default 1000, or FLOW_SIM_SEEDS).",
    )


"""A ``postgresql://`` URL; the PostgreSQL store tests run only when it is set."""


@pytest.fixture
def clock() -> ManualClock:
    """A clock that moves only when the test says so (2026-12-01 09:00 UTC at first)."""
    return ManualClock()


def _open_store(kind: str, tmp_path: Path) -> EventStore:
    if kind == "memory":
        from flow_cli.store.memory import MemoryStore

        return MemoryStore()
    if kind == "sqlite":
        from flow_cli.store.sqlite import SQLiteStore

        return SQLiteStore(tmp_path / "flow.db")
    url = os.environ.get(POSTGRES_ENV)
    if not url:
        pytest.skip(f"set {POSTGRES_ENV}=postgresql://... to run the PostgreSQL store tests")
    # Set but unreachable must fail loudly, so no skip below: a connection error errors the test.
    from flow_cli.store.postgres import PostgresStore

    return PostgresStore(url, schema=f"flow_test_{uuid.uuid4().hex[:16]}")


@pytest.fixture(params=["memory", "sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[EventStore]:
    """Every ``EventStore`` implementation, one test run each; PostgreSQL gets its own schema."""
    opened = _open_store(request.param, tmp_path)
    try:
        yield opened
    finally:
        drop_schema = getattr(opened, "drop_schema", None)
        try:
            if drop_schema is not None:
                drop_schema()
        finally:
            opened.close()
