"""Two (or more) `flow hook resolve` processes racing for one token: exactly one wins.

What the adversarial probe could not reach (issue 8). Real processes, so the race is between
connections and transactions, not threads of one store object.
"""

from __future__ import annotations

import os
import uuid
from pathlib import Path

import pytest
from cli_helpers import FlowProject

RACERS = 4


def _race(project: FlowProject, db: str) -> None:
    project.setup("--db", db, "start", "callback", "--id", "cb", "--input", '{"token": "tok-1"}')
    project.setup("--db", db, "tick", "--until-idle")
    racers = [
        project.popen("--db", db, "hook", "resolve", "tok-1", "--payload", f'{{"racer": {n}}}')
        for n in range(RACERS)
    ]
    results = [(p.wait(120), *p.communicate()) for p in racers]
    codes = sorted(code for code, _, _ in results)
    assert codes == [0] + [1] * (RACERS - 1), results
    for code, _, stderr in results:
        if code == 1:
            assert "was already resolved" in stderr, stderr
    history = project.setup("--db", db, "history", "cb", "--json").json()
    resolved = [e for e in history if e["event_key"] == "hook_resolved"]
    assert len(resolved) == 1
    winner = next(out for code, out, _ in results if code == 0)
    assert "resolved" in winner


def test_racing_hook_resolves_on_sqlite(tmp_path: Path) -> None:
    project = FlowProject(tmp_path)
    _race(project, f"sqlite:///{project.db}")


@pytest.mark.postgres
def test_racing_hook_resolves_on_postgres(tmp_path: Path) -> None:
    url = os.environ.get("FLOW_TEST_POSTGRES")
    if not url:
        pytest.skip("set FLOW_TEST_POSTGRES=postgresql://... to run the PostgreSQL tests")
    schema = f"flow_race_{uuid.uuid4().hex[:12]}"
    separator = "&" if "?" in url else "?"
    project = FlowProject(tmp_path)
    try:
        _race(project, f"{url}{separator}schema={schema}")
    finally:
        from flow_cli.store.postgres import PostgresStore

        store = PostgresStore(url, schema=schema, create=False)
        store.drop_schema()
        store.close()
