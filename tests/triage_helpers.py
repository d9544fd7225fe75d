"""A ``FlowProject`` on SQLite or PostgreSQL, for the triage and repair end-to-end tests."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from cli_helpers import CONFIG, FlowProject, Result


class TriageProject(FlowProject):
    """A project whose database is flow.toml's (SQLite file or a PostgreSQL schema)."""

    def __init__(self, root: Path, database: str) -> None:
        super().__init__(
            root, CONFIG.replace('database = "sqlite:///flow.db"', f'database = "{database}"')
        )
        self.database = database

    def invoke(self, *args: str, stdin: str | None = None) -> Result:
        from typer.testing import CliRunner

        from flow_cli.cli.app import app

        result = CliRunner().invoke(
            app,
            ["--config", str(self.config), *args],
            input=stdin,
            env={"NO_COLOR": "1", "COLUMNS": "200", "FLOW_DB": self.database},
            prog_name="flow",
        )
        if result.exception is not None and not isinstance(result.exception, SystemExit):
            raise result.exception
        return Result(result.exit_code, result.stdout, result.stderr)


def project_for(backend: str, tmp_path: Path) -> Iterator[TriageProject]:
    """Yield a project on ``backend``; a PostgreSQL schema of its own is dropped afterwards."""
    if backend == "sqlite":
        yield TriageProject(tmp_path, f"sqlite:///{tmp_path / 'flow.db'}")
        return
    url = os.environ.get("FLOW_TEST_POSTGRES")
    if not url:
        pytest.skip("set FLOW_TEST_POSTGRES=postgresql://... to run the PostgreSQL CLI tests")
    schema = f"flow_cli_{uuid.uuid4().hex[:12]}"
    sep = "&" if "?" in url else "?"
    yield TriageProject(tmp_path, f"{url}{sep}schema={schema}")
    from flow_cli.store.postgres import PostgresStore

    store = PostgresStore(url, schema=schema)
    try:
        store.drop_schema()
    finally:
        store.close()
