"""The default store: one SQLite file shared by many threads and processes.

``connection`` (durability, concurrency, the schema opened or migrated), ``schema`` (the
migrations), ``rows`` (times, events and run records in and out), ``reads`` and ``store`` (writes,
leases, waits). ``SQLiteStore`` is the whole of it.
"""

from flow_cli.store.sqlite.connection import SYNCHRONOUS_MODES
from flow_cli.store.sqlite.schema import MIGRATIONS
from flow_cli.store.sqlite.store import SQLiteStore

__all__ = ["MIGRATIONS", "SYNCHRONOUS_MODES", "SQLiteStore"]
