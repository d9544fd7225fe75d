"""Writes tests/data/sqlite_v11.sql: the SQL dump of a database that schema version 11's Flow
(commit 21bceb8) wrote for the runs of ``tests/lean_events_workflows.py``. Run it with that
checkout's Python, from this checkout's root:

    /path/to/checkout-at-21bceb8/.venv/bin/python tests/data/make_sqlite_v11.py
"""

from __future__ import annotations

import sqlite3
import sys
import tempfile
from datetime import UTC, datetime
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parent)]

import lean_events_workflows as workflows  # noqa: E402

from flow_cli.engine.engine import Engine  # noqa: E402
from flow_cli.model.clock import ManualClock  # noqa: E402
from flow_cli.store import open_store  # noqa: E402


def main() -> None:
    clock = ManualClock(datetime(2026, 12, 1, 9, 0, 0, 123456, tzinfo=UTC))
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "flow.db"
        engine = Engine(open_store(f"sqlite:///{path}"), [workflows.runtime], clock=clock)
        for i, kind in enumerate(workflows.KINDS * 3):
            engine.start("order", {"customer": f"c{i}", "kind": kind}, run_id=f"v11-{i:02d}")
            clock.advance(0.001017)
            engine.tick(until_idle=True)
            clock.advance(0.250003)
        engine.close()
        with sqlite3.connect(path) as conn:
            version = conn.execute("SELECT value FROM flow_meta WHERE key = 'schema_version'")
            assert version.fetchone()[0] == "11", "run this with schema version 11's Flow"
            dump = "\n".join(conn.iterdump())
        conn.close()
    (HERE / "sqlite_v11.sql").write_text(dump + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
