"""Event stores: the ``EventStore`` protocol and ``open_store``, which picks a backend by URL.

Backends are imported inside ``open_store`` so that ``import flow_cli.store`` stays light: neither
sqlite-utils nor psycopg is loaded until a store of that kind is opened.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING
from urllib.parse import parse_qsl

from flow_cli.errors import ConfigError
from flow_cli.store.locations import Backend, classify, redact
from flow_cli.store.protocol import EventStore

if TYPE_CHECKING:
    from flow_cli.store.sqlite import SQLiteStore

__all__ = ["EventStore", "open_store"]

_SQLITE_OPTIONS = {"synchronous", "busy_timeout_ms"}
_KEYWORD_SCHEMA = re.compile(r"(?:^|\s)schema\s*=\s*(['\"]?)([^\s'\"]*)\1(?=\s|$)")


def open_store(url: str, *, create: bool = True, read_only: bool = False) -> EventStore:
    """Open the store that ``url`` names.

    Accepted forms:

    - ``memory://``: a fresh in-process store (tests, experiments).
    - ``sqlite:///flow.db`` (relative to the working directory), ``sqlite:////abs/flow.db``
      (absolute, as in SQLAlchemy), or a bare path such as ``/abs/flow.db`` or ``~/flow.db``
      (a bare path must end in ``.db``, ``.sqlite`` or ``.sqlite3`` or name an existing file).
      Query options: ``?synchronous=NORMAL`` (faster, may lose the last commits on power loss)
      and ``?busy_timeout_ms=5000``.
    - ``postgresql://...`` or ``postgres://...``, or a libpq key/value string
      (``host=db dbname=flow``): PostgreSQL (needs the ``postgres`` extra); ``?schema=NAME``
      (``schema=NAME`` in key/value form) keeps Flow's tables in that schema (default ``flow``).

    Anything else is refused with ``ConfigError`` (see ``flow_cli.store.locations``).

    Args:
        url: The database URL (``--db`` / ``FLOW_DB`` / ``flow.toml``).
        create: Create a missing SQLite file. Read-only commands pass ``False`` so that a wrong
            path is reported instead of creating an empty database.
        read_only: Open a SQLite file with ``mode=ro`` (writes refused; works on a read-only
            file, directory or mount). Ignored by the other backends.

    Raises:
        ConfigError: the URL names no supported backend, or a backend's package is missing.
        StoreError: the database cannot be opened.
    """
    location = classify(url)
    if location.backend is Backend.MEMORY:
        from flow_cli.store.memory import MemoryStore

        return MemoryStore()  # returning it as EventStore makes mypy check the protocol
    if location.backend is Backend.POSTGRES:
        try:
            from flow_cli.store.postgres import PostgresStore
        except ModuleNotFoundError as exc:
            if (exc.name or "").startswith("psycopg"):
                raise ConfigError(
                    "PostgreSQL support needs psycopg: pip install 'flow-cli[postgres]'."
                ) from None
            raise
        url_without, schema = _pop_schema(location.target)
        return PostgresStore(url_without, schema=schema, create=create)
    return _sqlite(location.target, create, read_only)


def _pop_schema(url: str) -> tuple[str, str | None]:
    """Take Flow's own ``schema=`` option out of a PostgreSQL URL (libpq rejects it)."""
    from urllib.parse import urlencode, urlsplit, urlunsplit

    if "://" not in url:  # key/value form: schema=NAME is one of the pairs
        match = _KEYWORD_SCHEMA.search(url)
        if match is None:
            return url, None
        return (url[: match.start()] + url[match.end() :]).strip(), match.group(2) or None
    try:
        parts = urlsplit(url)
    except ValueError as exc:  # e.g. an unclosed "[" of an IPv6 host
        raise ConfigError(
            f"PostgreSQL URL {redact(url)!r} is malformed ({exc}); write it as "
            "postgresql://user@host:5432/database."
        ) from None
    pairs = parse_qsl(parts.query, keep_blank_values=True)
    schema = next((v for k, v in pairs if k == "schema"), None)
    rest = urlencode([(k, v) for k, v in pairs if k != "schema"])
    return urlunsplit(parts._replace(query=rest)), schema or None


def _sqlite(location: str, create: bool, read_only: bool = False) -> SQLiteStore:
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
        read_only=read_only,
    )
