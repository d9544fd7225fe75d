"""The PostgreSQL event store: many workers on many machines sharing one database.

Imported lazily by ``flow_cli.store.open_store`` for ``postgresql://`` and ``postgres://`` URLs, so
psycopg is needed only by those who use it. The tables and the statements on them live in
``postgres.tables``; this module owns connections, transactions, wake-ups and errors.

- Every public method is one transaction on a connection from a small pool (a connection serves
  one thread at a time). Times come from the caller's clock; SQL ``now()`` is never used.
- Optimistic concurrency: ``commit`` sends everything as one query string whose guards fail it
  when a written run's ``last_sequence`` is not the writer's expectation (``UPDATE ... WHERE
  last_sequence = expected``, which also locks the row), so the common commit is one round trip.
  Only when a guard fails is the commit redone the checking way, locking each written run row
  (``SELECT ... FOR UPDATE``) to name the culprit. ``PRIMARY KEY (run_id, sequence)`` is the
  backstop, its unique violation turned into ``EventConflict`` in one place.
- Leases take due rows with ``FOR UPDATE SKIP LOCKED``: concurrent workers never wait for, or
  receive, the same run or step.
- A commit that schedules work sends ``NOTIFY flow_work`` (payload: the schema) inside its
  transaction; ``wait_for_change`` listens on a connection of its own.
- A lost connection becomes ``StoreError`` and is dropped, so the next call reconnects: a worker
  that catches ``StoreError``, sleeps and retries survives a server restart.
"""

from flow_cli.store.postgres.connection import DEFAULT_SCHEMA, NOTIFY_CHANNEL
from flow_cli.store.postgres.conninfo import SSL_MODES, redact_url
from flow_cli.store.postgres.store import PostgresStore

__all__ = ["DEFAULT_SCHEMA", "NOTIFY_CHANNEL", "SSL_MODES", "PostgresStore", "redact_url"]
