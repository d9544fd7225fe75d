"""The reads the SQLite and PostgreSQL stores make alike: written once on ``SQLRole``."""

from __future__ import annotations

from flow_cli.store.protocol import HookRecord, WorkerInfo
from flow_cli.store.sql import LIST_WORKERS, SQLRole, hook_record, worker_info


class SQLReads(SQLRole):
    """``find_hook`` and ``list_workers`` of a SQL store: the same statements on either
    backend but for the placeholder."""

    def find_hook(self, token: str) -> HookRecord | None:
        """The hook owning ``token``, or ``None``."""
        with self._sql_read() as conn:
            row = conn.execute(
                "SELECT token, run_id, hook_id, resolved FROM hooks WHERE token = "
                + self._sql_dialect.param,
                (token,),
            ).fetchone()
        return hook_record(row)

    def list_workers(self) -> list[WorkerInfo]:
        """Every registered worker, most recently started first."""
        with self._sql_read() as conn:
            rows = conn.execute(LIST_WORKERS).fetchall()
        return [worker_info(row, self._sql_time) for row in rows]
