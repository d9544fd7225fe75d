"""``Batch``: several PostgreSQL statements sent as one query string, their plans prepared once
per connection.

A query string of several statements is one message out and one answer back, with none of the
per-statement exchange of a pipeline (a send, a flush and a result to process for each). Sent as
text, though, each statement is parsed and planned again every time, which costs about as much as
the statement itself: a run's first commit (seven statements) took 0.92-1.06 ms on the server as
text and 0.59-0.69 ms as ``EXECUTE`` of prepared statements, measured in one loop. So a statement
with parameters goes out as ``EXECUTE flow_N(<values>)``, and a ``PREPARE flow_N AS ...`` goes at
the front of the first string that uses it on a connection (``PREPARE`` is per session and is not
undone by a rollback).

Values are bound by psycopg's client-side binding (``ClientCursor.mogrify``) either way. A
connection's prepared names are tracked in ``Prepared``; when a string that carried ``PREPARE``
fails, which of them ran is not known, so the names are read back from the server before that
connection's next batch.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, TypeAlias

import psycopg
import psycopg.errors
from psycopg import pq
from psycopg.rows import TupleRow

Connection: TypeAlias = psycopg.Connection[TupleRow]

MAX_SHAPES = 1_000
"""Distinct statements a process prepares; past it, new ones are sent as text (statement texts
are Flow's own, so this is a guard against a shape that varies without bound, not a limit one
meets)."""

_PLACEHOLDER = re.compile(r"%(%|s|\((\w+)\)s)")


@dataclass(frozen=True, slots=True)
class _Shape:
    """A statement text prepared under ``name``, with ``$n`` for psycopg's placeholders."""

    name: str
    text: str
    keys: tuple[str, ...] | None
    """The names of ``%(name)s`` parameters in ``$n`` order; ``None`` for positional ones."""
    call: str
    """``EXECUTE name(%s, ...)``, for ``mogrify``."""


_shapes: dict[str, _Shape] = {}
_shapes_lock = threading.Lock()


def _shape(query: str) -> _Shape | None:
    """The prepared form of ``query`` (made once per process), or ``None`` past ``MAX_SHAPES``."""
    shape = _shapes.get(query)
    if shape is not None:
        return shape
    with _shapes_lock:
        shape = _shapes.get(query)
        if shape is None and len(_shapes) < MAX_SHAPES:
            keys: list[str] = []
            count = 0

            def number(match: re.Match[str]) -> str:
                nonlocal count
                if match.group(1) == "%":
                    return "%"
                key = match.group(2)
                if key is None:
                    count += 1
                    return f"${count}"
                if key not in keys:
                    keys.append(key)
                return f"${keys.index(key) + 1}"

            text = _PLACEHOLDER.sub(number, query)
            name = f"flow_{len(_shapes) + 1}"
            arity = len(keys) if keys else count
            call = f"EXECUTE {name}({', '.join(['%s'] * arity)})" if arity else f"EXECUTE {name}"
            shape = _shapes[query] = _Shape(name, text, tuple(keys) if keys else None, call)
    return shape


def _literal(value: Any) -> str | None:
    """``value`` as an SQL literal for an ``EXECUTE`` argument, for the types Flow's statements
    bind on every commit; ``None`` for any other (psycopg's ``mogrify`` binds those).

    ``mogrify`` adapts each value through psycopg's adapter registry, about 30 us for a
    statement of eight values and more for lists, and a commit binds several statements: a
    third of a start's client time before its one round trip. No cast is needed: ``PREPARE``
    fixed the parameters' types, and an ``EXECUTE`` argument is coerced to its parameter's
    type.
    """
    kind = type(value)
    if kind is str:
        return _text(value)
    if kind is list:
        # Lists of text (build ids, run ids) or of integers (sequences), as ARRAY[...]:
        # their type comes from the parameter, as a scalar's does.
        items: list[Any] = value
        if not items:
            return "'{}'"
        if all(type(item) is str for item in items):
            texts = [_text(item) for item in items]
            return None if None in texts else f"ARRAY[{', '.join(map(str, texts))}]"
        if all(type(item) is int for item in items):
            return f"ARRAY[{', '.join(map(str, items))}]"
        return None
    if value is None:
        return "NULL"
    if kind is int:
        return str(value)
    if kind is bool:
        return "true" if value else "false"
    if kind is datetime and value.tzinfo is not None:
        stamp: datetime = value
        return "'" + stamp.isoformat() + "'"
    return None


def _text(text: str) -> str | None:
    """``text`` as an SQL string literal; ``None`` when it holds NUL (PostgreSQL text cannot:
    psycopg then raises its own error)."""
    if "\x00" in text:
        return None
    if "\\" in text:
        # An escape string: backslashes mean the same whatever standard_conforming_strings is.
        return "E'" + text.replace("\\", "\\\\").replace("'", "''") + "'"
    return "'" + text.replace("'", "''") + "'"


@dataclass(slots=True)
class Prepared:
    """The statements prepared on one connection, as far as this process knows.

    psycopg deallocates every prepared statement of a connection (``DEALLOCATE ALL``) when it
    rolls back there after preparing statements of its own; the store marks the set unknown
    when it rolls back, and a batch that still meets a missing statement reads the names back
    and sends itself again (see ``Batch``).
    """

    names: set[str] = field(default_factory=set)
    known: bool = True
    """False when the server may have dropped some: read the names back before use."""

    def refresh(self, conn: Connection) -> None:
        """Read the connection's prepared statements back from the server."""
        rows = conn.execute("SELECT name FROM pg_prepared_statements").fetchall()
        self.names = {row[0] for row in rows}
        self.known = True


class Batch:
    """Statements bound on the client and sent together as one simple-protocol query.

    PostgreSQL runs a query string of several statements as one implicit transaction (unless
    the string opens one itself): all of it commits, or an error rolls all of it back. So a
    whole commit is one round trip. The price is that an answer can be read only once all of it
    ran, which is why a commit's checks are statements that fail (``GUARD_SEQUENCE``, unique
    keys, guarded hook upserts).

    With ``prepared`` (the connection's ``Prepared``), statements with parameters are sent as
    ``EXECUTE`` of statements prepared on that connection (see the module's docstring). A batch
    that finds one of them gone is sent again once, after reading back what is prepared, if it
    was a whole transaction (``whole=True``: an implicit one, or one that its string opens with
    ``BEGIN``): nothing of it ran, since the error rolled it all back.
    """

    __slots__ = ("_client", "_conn", "_parts", "_prepared", "_used", "_whole")

    def __init__(
        self, conn: Connection, prepared: Prepared | None = None, *, whole: bool = True
    ) -> None:
        self._conn = conn
        self._client: psycopg.ClientCursor[TupleRow] | None = None
        self._parts: list[str] = []
        self._prepared = prepared
        self._used: dict[str, str] = {}
        """The prepared statements the parts execute: name -> text."""
        self._whole = whole
        if prepared is not None and not prepared.known:
            prepared.refresh(conn)

    @property
    def _cursor(self) -> psycopg.ClientCursor[TupleRow]:
        """The client-side cursor, made when first needed: most commits bind every value here
        (``_literal``) and send with ``conn.execute``, and never use it."""
        if self._client is None:
            self._client = psycopg.ClientCursor(self._conn)
        return self._client

    def execute(self, query: str, params: Sequence[Any] | Mapping[str, Any] | None = None) -> None:
        """Add one statement; nothing is sent yet."""
        if params is None:  # sent as written: psycopg reads no placeholder in it either
            self._parts.append(query)
            return
        shape = None if self._prepared is None else _shape(query)
        if shape is None:
            self._parts.append(self._cursor.mogrify(query, params))
            return
        assert params is not None
        self._used[shape.name] = shape.text
        if shape.keys is not None and isinstance(params, Mapping):
            values = [params[key] for key in shape.keys]
        else:
            values = [] if isinstance(params, Mapping) else list(params)
        if not values:
            self._parts.append(shape.call)
            return
        literals: list[str] = []
        for value in values:
            literal = _literal(value)
            if literal is None:  # a value of another type: psycopg binds the whole call
                self._parts.append(self._cursor.mogrify(shape.call, values))
                return
            literals.append(literal)
        self._parts.append(f"EXECUTE {shape.name}({', '.join(literals)})")

    def send(self) -> tuple[Any, ...] | None:
        """Run the statements as one implicit transaction (the connection must be in
        autocommit mode, so that psycopg opens no transaction of its own around it). Returns
        the first row of the first statement's answer, if it has one (a look the batch opens
        with; the others' answers are not read)."""
        if not self._parts:
            return None
        sent: list[psycopg.Cursor[TupleRow]] = []
        skip = self._run(lambda query: sent.append(self._conn.execute(query)))
        self._parts = []
        cursor = sent[-1]
        for _ in range(skip):  # the PREPAREs' own answers
            cursor.nextset()
        return cursor.fetchone() if cursor.description else None

    def results(self) -> list[list[tuple[Any, ...]] | None]:
        """Run the statements (one round trip, as ``send``) and return each one's rows, in
        order: ``None`` for a statement that returns none (an ``INSERT`` without
        ``RETURNING``, ``BEGIN``). The statements may open or end a transaction themselves."""
        found: list[list[tuple[Any, ...]] | None] = []
        if not self._parts:
            return found
        skip = self._run(lambda query: self._cursor.execute(query))
        self._parts = []
        while True:
            found.append(self._cursor.fetchall() if self._cursor.description else None)
            if not self._cursor.nextset():
                return found[skip:]  # the PREPAREs' own results are not the caller's

    def _run(self, send: Callable[[str], object]) -> int:
        """Send the parts, preceded by the PREPAREs they need; return how many there were."""
        prepared = self._prepared
        if prepared is None:
            send(";\n".join(self._parts))
            return 0
        for attempt in (1, 2):
            preparing = {n: t for n, t in self._used.items() if n not in prepared.names}
            prepares = [f"PREPARE {name} AS {text}" for name, text in preparing.items()]
            try:
                send(";\n".join(prepares + self._parts))
            except psycopg.errors.InvalidSqlStatementName:
                # Dropped behind our back (see ``Prepared``): nothing of a whole transaction
                # ran, so it can go again once the names are read back.
                prepared.known = False
                if attempt == 2 or not self._whole:
                    raise
                if self._conn.info.transaction_status != pq.TransactionStatus.IDLE:
                    self._conn.execute("ROLLBACK")  # the string's own BEGIN, now aborted
                prepared.refresh(self._conn)
                continue
            except BaseException:
                if preparing:
                    prepared.known = False  # which of the PREPAREs ran is not known
                raise
            prepared.names.update(preparing)
            return len(prepares)
        raise AssertionError("unreachable")
