"""The ``Retention`` role in memory: the reference for ``store.retention_sql``."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from flow_cli.store.protocol import RunRecord


class MemoryRetention:
    """Leases in a dict; run deletes reach into ``MemoryStore``'s per-run dicts under its lock."""

    _lock: threading.RLock
    _runs: dict[str, Any]
    _tasks: dict[tuple[str, str], Any]
    _heartbeats: dict[tuple[str, str], Any]
    _hooks: dict[str, Any]
    _hook_rows: dict[str, Any]

    def __init__(self) -> None:
        self._leases: dict[str, tuple[str, datetime]] = {}

    def children_of(self, run_ids: Sequence[str]) -> list[RunRecord]:
        """The runs whose parent is one of ``run_ids``."""
        parents = set(run_ids)
        with self._lock:
            return [r.record() for r in self._runs.values() if r.row.parent_run_id in parents]

    def delete_runs(self, run_ids: Sequence[str]) -> list[str]:
        """Delete the ended ones of ``run_ids`` with every row that belongs to them: the run
        with its events, step tasks, heartbeats and hooks (the per-run dicts, as
        ``retention_sql.RUN_TABLES`` lists the tables). Returns the ids deleted."""
        with self._lock:
            gone = [i for i in dict.fromkeys(run_ids) if i in self._runs]
            gone = [i for i in gone if self._runs[i].row.status.terminal]
            doomed = set(gone)
            for keyed in (self._tasks, self._heartbeats):
                for key in [k for k in keyed if k[0] in doomed]:
                    del keyed[key]
            for token in [t for t, h in self._hooks.items() if h.run_id in doomed]:
                del self._hooks[token]
                self._hook_rows.pop(token, None)
            for run_id in gone:
                del self._runs[run_id]
            return gone

    def take_lease(self, name: str, owner: str, now: datetime, until: datetime) -> bool:
        """Take the named lease if free, expired or ``owner``'s; False while another holds it."""
        with self._lock:
            held = self._leases.get(name)
            if held is not None and held[0] != owner and held[1] > now:
                return False
            self._leases[name] = (owner, until)
            return True

    def release_lease(self, name: str, owner: str) -> None:
        with self._lock:
            held = self._leases.get(name)
            if held is not None and held[0] == owner:
                del self._leases[name]

    def reclaim_space(self) -> None:
        """Nothing to give back in memory."""
