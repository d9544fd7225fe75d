"""The default store: one SQLite file shared by many threads and processes.

Durability: the journal is WAL and ``synchronous=FULL`` by default, so an acknowledged event
survives a power cut; leases, and a step's ``step_started`` with its lease, do not wait for the
disk (see ``_LEASE_SYNC``). ``synchronous="NORMAL"`` (``sqlite:///flow.db?synchronous=NORMAL``)
is the documented speed trade-off: a power cut may lose the last commits, never consistency.

Concurrency: each thread gets its own connection. Every write is one ``BEGIN IMMEDIATE``
transaction, which takes the write lock up front: a writer that finds the lock taken waits in the
busy handler (up to ``busy_timeout_ms``) instead of failing when another connection commits
between its read and its write, as a deferred transaction would.

Schema: ``flow_meta.schema_version`` records the version. Opening a database runs the missing
``MIGRATIONS`` in order, in one transaction, and refuses a database written by a newer Flow.
Every ``sqlite3`` error leaving a public method becomes a one-sentence ``StoreError``.
"""

from flow_cli.store.sqlite.connection import SYNCHRONOUS_MODES
from flow_cli.store.sqlite.schema import MIGRATIONS
from flow_cli.store.sqlite.store import SQLiteStore

__all__ = ["MIGRATIONS", "SYNCHRONOUS_MODES", "SQLiteStore"]
