"""Event stores: the ``EventStore`` protocol and ``open_store``, which picks a backend by URL.

Backends are imported inside ``open_store`` so that ``import flow_cli.store`` stays light: neither
sqlite-utils nor psycopg is loaded until a store of that kind is opened.
"""

from __future__ import annotations

from typing import TYPE_CHECKING
from urllib.parse import parse_qsl

from flow_cli.errors import ConfigError
from flow_cli.store.protocol import EventStore

if TYPE_CHECKING:
    from flow_cli.store.sqlite import SQLiteStore

__all__ = ["EventStore", "open_store"]

_SQLITE_OPTIONS = {"synchronous", "busy_timeout_ms"}


def open_store(url: str, *, create: bool = True) -> EventStore:
    """Open the store that ``url`` names.

    Accepted forms:

    - ``memory://``: a fresh in-process store (tests, experiments).
    - ``sqlite:///flow.db`` (relative to the working directory), ``sqlite:////abs/flow.db``
      (absolute, as in SQLAlchemy), or a bare path such as ``/abs/flow.db`` or ``~/flow.db``.
      Query options: ``?synchronous=NORMAL`` (faster, may lose the last commits on power loss)
      and ``?busy_timeout_ms=5000``.
    - ``postgresql://...`` or ``postgres://...``: PostgreSQL (needs the ``postgres`` extra);
      ``?schema=NAME`` keeps Flow's tables in that schema (default ``flow``).

    Args:
        url: The database URL (``--db`` / ``FLOW_DB`` / ``flow.toml``).
        create: Create a missing SQLite file. Read-only commands pass ``False`` so that a wrong
            path is reported instead of creating an empty database.

    Raises:
        ConfigError: the URL names no supported backend, or a backend's package is missing.
        StoreError: the database cannot be opened.
    """
    text = url.strip()
    scheme, sep, rest = text.partition("://")
    scheme = scheme.lower() if sep else ""
    if scheme == "memory":
        from flow_cli.store.memory import MemoryStore

        return MemoryStore()  # returning it as EventStore makes mypy check the protocol
    if scheme in ("postgresql", "postgres"):
        try:
            from flow_cli.store.postgres import PostgresStore
        except ModuleNotFoundError as exc:
            if (exc.name or "").startswith("psycopg"):
                raise ConfigError(
                    "PostgreSQL support needs psycopg: pip install 'flow-cli[postgres]'."
                ) from None
            raise
        url_without, schema = _pop_schema(text)
        return PostgresStore(url_without, schema=schema, create=create)
    if scheme == "sqlite":
        if not rest.startswith("/"):
            raise ConfigError(f"SQLite URL {text!r} must look like sqlite:///PATH.")
        text = rest[1:]
    elif sep:
        raise ConfigError(
            f"Unsupported database URL scheme {scheme!r}; "
            "use sqlite:///PATH, postgresql://... or memory://."
        )
    return _sqlite(text, create)


def _pop_schema(url: str) -> tuple[str, str | None]:
    """Take Flow's own ``schema=`` query option out of a PostgreSQL URL (libpq rejects it)."""
    from urllib.parse import urlencode, urlsplit, urlunsplit

    parts = urlsplit(url)
    pairs = parse_qsl(parts.query, keep_blank_values=True)
    schema = next((v for k, v in pairs if k == "schema"), None)
    rest = urlencode([(k, v) for k, v in pairs if k != "schema"])
    return urlunsplit(parts._replace(query=rest)), schema or None


def _sqlite(location: str, create: bool) -> SQLiteStore:
    from flow_cli.store.sqlite import SQLiteStore

    path, _, query = location.partition("?")
    if not path:
        raise ConfigError("The SQLite URL names no file; use sqlite:///PATH.")
    options = dict(parse_qsl(query, keep_blank_values=True))
    unknown = set(options) - _SQLITE_OPTIONS
    if unknown:
        raise ConfigError(
            f"Unknown SQLite option {sorted(unknown)[0]!r}; "
            f"known: {', '.join(sorted(_SQLITE_OPTIONS))}."
        )
    try:
        busy_timeout_ms = int(options.get("busy_timeout_ms", "5000"))
    except ValueError:
        raise ConfigError("SQLite option busy_timeout_ms must be a whole number.") from None
    return SQLiteStore(
        path,
        synchronous=options.get("synchronous", "FULL"),
        busy_timeout_ms=busy_timeout_ms,
        create=create,
    )
