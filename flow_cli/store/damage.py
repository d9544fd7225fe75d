"""Sentences for stored data that cannot be read (``DatabaseCorrupt``), shared by the stores.

A damaged page, a text column that is not UTF-8 or an event that does not decode is reported as
one sentence that names the run and the event or column but never quotes the damaged bytes
(they may hold terminal escape sequences), and sends the operator to ``flow check``.
"""

from __future__ import annotations

import re

from flow_cli.errors import DatabaseCorrupt

REASON_LIMIT = 80
"""How much of a decoding error a message quotes."""

_NOT_UTF8 = re.compile(r"Could not decode to UTF-8 column '(?P<column>\w*)")


class Unreadable(ValueError):
    """A stored row does not decode; the store adds where (``DatabaseCorrupt``)."""


def reason(exc: BaseException) -> str:
    """A decoding error, short: ``Invalid isoformat string: 'garb…'``."""
    if isinstance(exc, KeyError):
        text = f"unknown or missing name {exc.args[0]!r}" if exc.args else "a name is missing"
    else:
        text = str(exc) or type(exc).__name__
    text = " ".join(text.split())
    return text if len(text) <= REASON_LIMIT else text[: REASON_LIMIT - 1] + "…"


def unreadable_event(
    where: str, run_id: str, sequence: object, exc: BaseException
) -> DatabaseCorrupt:
    return DatabaseCorrupt(
        where,
        f"event {sequence} of run {run_id!r} cannot be read ({reason(exc)}; or a newer Flow "
        "wrote it)",
    )


def not_utf8(where: str, message: str) -> DatabaseCorrupt | None:
    """SQLite's "Could not decode to UTF-8 column ..." as ``DatabaseCorrupt``, else None."""
    found = _NOT_UTF8.search(message)
    if found is None:
        return None
    column = found.group("column")
    return DatabaseCorrupt(where, f"a value of column {column!r} is not UTF-8 text")
