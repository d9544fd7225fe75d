"""What a ``--db`` value names, and how to show it without its password.

Every database location is recognised here or refused with ``ConfigError``, before any file is
created or any server contacted:

- ``memory://``;
- ``sqlite:///PATH`` (relative) or ``sqlite:////ABS/PATH``; a bare path is accepted only when it
  ends in ``.db``, ``.sqlite`` or ``.sqlite3`` or names an existing file, so that a mistyped URL
  never becomes a new SQLite file named after it;
- ``postgresql://...`` or ``postgres://...``, and a libpq key/value string such as
  ``host=db dbname=flow user=flow`` (it starts with ``keyword=``).

Only the standard library is used, so recognising a location costs nothing.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

from flow_cli.errors import ConfigError

SQLITE_SUFFIXES = (".db", ".sqlite", ".sqlite3")
"""Suffixes that make a bare path a SQLite file (``--db flow.db``)."""


class Backend(StrEnum):
    MEMORY = "memory"
    SQLITE = "sqlite"
    POSTGRES = "postgres"


@dataclass(frozen=True, slots=True)
class Location:
    backend: Backend
    target: str
    """SQLite: ``PATH?options``; PostgreSQL: the URL or key/value string as given."""


_KEYWORD_START = re.compile(r"\s*[A-Za-z_][A-Za-z0-9_]*\s*=")
_SCHEME = re.compile(r"([A-Za-z][A-Za-z0-9+.\-]*)://")


def classify(url: str) -> Location:
    """Which backend ``url`` names. Raises ``ConfigError`` (password redacted) for anything else."""
    text = url.strip()
    if not text:
        raise ConfigError(
            "The database URL is empty; use sqlite:///PATH, postgresql://... or memory://."
        )
    scheme = _SCHEME.match(text)
    if scheme is not None:
        name = scheme.group(1).lower()
        rest = text[scheme.end() :]
        if name == "memory":
            return Location(Backend.MEMORY, rest)
        if name in ("postgresql", "postgres"):
            return Location(Backend.POSTGRES, text)
        if name == "sqlite":
            if not rest.startswith("/"):
                raise ConfigError(f"SQLite URL {redact(text)!r} must look like sqlite:///PATH.")
            return Location(Backend.SQLITE, rest[1:])
        raise ConfigError(
            f"Unsupported database URL scheme {name!r} in {redact(text)!r}; "
            "use sqlite:///PATH, postgresql://... or memory://."
        )
    if _KEYWORD_START.match(text):
        return Location(Backend.POSTGRES, text)
    if "://" in text or text.lower().startswith(("postgres:", "postgresql:", "sqlite:")):
        raise ConfigError(
            f"Database URL {redact(text)!r} is malformed; use sqlite:///PATH, "
            "postgresql://user@host:5432/database or memory://."
        )
    path, _, _ = text.partition("?")
    bare = Path(path).expanduser()
    if bare.suffix.lower() in SQLITE_SUFFIXES or bare.is_file():
        return Location(Backend.SQLITE, text)
    raise ConfigError(
        f"Database {redact(text)!r} (--db, FLOW_DB or flow.toml) is neither a database URL "
        f"nor a SQLite file name; write sqlite:///{path} "
        "for a SQLite file (or give it a .db suffix), postgresql://... or host=... dbname=... "
        "for PostgreSQL, or memory://."
    )


# -- passwords ---------------------------------------------------------------------------------

_KEYWORD_PASSWORD = re.compile(
    r"(?<![?&\w])(password\s*=\s*)('(?:[^'\\]|\\.)*'?|\S+)", re.IGNORECASE
)
_QUERY_PASSWORD = re.compile(r"([?&]password=)[^&#\s]*", re.IGNORECASE)


def redact(text: str) -> str:
    """``text`` with every password in it replaced by ``***``.

    Works on anything, parseable or not: URL user info (``scheme://user:PASSWORD@host``), a
    ``?password=`` or ``&password=`` query option, and ``password=...`` in a key/value string
    (quoted values included). It errs on the side of hiding too much.
    """
    out = []
    position = 0
    for match in _SCHEME.finditer(text):
        start = match.end()
        if start < position:
            continue
        # User info runs up to the last "@" before the next whitespace (an unencoded "@" or "/"
        # in a password still ends up hidden).
        end = len(text)
        space = re.search(r"\s", text[start:])
        if space is not None:
            end = start + space.start()
        at = text.rfind("@", start, end)
        if at == -1:
            continue
        userinfo = text[start:at]
        colon = userinfo.find(":")
        if colon == -1:
            continue
        out.append(text[position : start + colon + 1])
        out.append("***")
        position = at
    out.append(text[position:])
    hidden = "".join(out)
    hidden = _QUERY_PASSWORD.sub(r"\1***", hidden)
    return _KEYWORD_PASSWORD.sub(r"\1***", hidden)
