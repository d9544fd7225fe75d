"""The PostgreSQL event store: many workers on many machines sharing one database.

Imported lazily by ``flow_cli.store.open_store`` for ``postgresql://`` URLs, so psycopg is needed
only by those who use it. ``store`` says how it works; ``PostgresStore`` is the whole of it.
"""

from flow_cli.store.postgres.connection import DEFAULT_SCHEMA, NOTIFY_CHANNEL
from flow_cli.store.postgres.conninfo import SSL_MODES, redact_url
from flow_cli.store.postgres.store import PostgresStore

__all__ = ["DEFAULT_SCHEMA", "NOTIFY_CHANNEL", "SSL_MODES", "PostgresStore", "redact_url"]
