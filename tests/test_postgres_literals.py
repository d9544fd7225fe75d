"""Values bound into a ``Batch``'s ``EXECUTE`` arguments reach the server unchanged.

Flow writes the common types (text, integers, booleans, NULL, aware datetimes) as SQL literals
itself, and leaves every other type to psycopg. A quoting mistake here would corrupt data or
let a value's text be read as SQL, so each type makes a round trip through a real server.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

pytestmark = pytest.mark.postgres

psycopg = pytest.importorskip("psycopg")

from flow_cli.store.postgres.batch import Batch, Prepared  # noqa: E402

PG = os.environ.get("FLOW_TEST_POSTGRES")
_PREPARED: dict[int, Prepared] = {}


@pytest.fixture(scope="module")
def conn() -> Iterator[Any]:
    if not PG:
        pytest.skip("set FLOW_TEST_POSTGRES=postgresql://... to run the PostgreSQL store tests")
    with psycopg.connect(PG, autocommit=True) as connection:
        _PREPARED[id(connection)] = Prepared()  # what is prepared on it, as a store keeps it
        yield connection


def _round_trip(conn: Any, cast: str, value: Any) -> tuple[Any, str]:
    """``value`` sent as a prepared statement's argument and read back; and the query text."""
    sent: list[str] = []
    batch = Batch(conn, _PREPARED[id(conn)])
    batch.execute(f"SELECT %s::{cast}", (value,))
    original = psycopg.ClientCursor.execute

    def spy(self: Any, query: Any, *args: Any, **kw: Any) -> Any:
        sent.append(query)
        return original(self, query, *args, **kw)

    psycopg.ClientCursor.execute = spy  # type: ignore[method-assign]
    try:
        (rows,) = batch.results()
    finally:
        psycopg.ClientCursor.execute = original  # type: ignore[method-assign]
    assert rows is not None
    return rows[0][0], sent[0]


_SETTINGS = settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)


@_SETTINGS
@given(st.text(alphabet=st.characters(blacklist_characters="\x00", blacklist_categories=("Cs",))))
def test_any_text_round_trips(conn: Any, text: str) -> None:
    assert _round_trip(conn, "text", text)[0] == text


@pytest.mark.parametrize(
    "text",
    ["it's", "\\", "\\'; DROP TABLE runs; --", "'\\''", "E'x'", "$$", "naïve ☃ 𝄞", "\n\t\r"],
)
def test_quotes_and_backslashes_mean_nothing_in_either_string_mode(conn: Any, text: str) -> None:
    for mode in ("on", "off"):
        conn.execute(f"SET standard_conforming_strings = {mode}")
        try:
            assert _round_trip(conn, "text", text)[0] == text
        finally:
            conn.execute("RESET standard_conforming_strings")


@_SETTINGS
@given(st.integers(min_value=-(2**63), max_value=2**63 - 1))
def test_integers_round_trip(conn: Any, number: int) -> None:
    value, query = _round_trip(conn, "bigint", number)
    assert value == number and type(value) is int
    assert "::" not in query.split("EXECUTE", 1)[1]  # written by Flow, not psycopg


@_SETTINGS
@given(
    st.datetimes(
        min_value=datetime(1900, 1, 1),
        max_value=datetime(2200, 1, 1),
        timezones=st.sampled_from([UTC, timezone(timedelta(hours=5, minutes=30))]),
    )
)
def test_aware_datetimes_round_trip(conn: Any, moment: datetime) -> None:
    assert _round_trip(conn, "timestamptz", moment)[0] == moment


def test_null_and_booleans_round_trip(conn: Any) -> None:
    assert _round_trip(conn, "text", None)[0] is None
    assert _round_trip(conn, "boolean", True)[0] is True
    assert _round_trip(conn, "boolean", False)[0] is False


@_SETTINGS
@given(
    st.lists(
        st.text(alphabet=st.characters(blacklist_characters="\x00", blacklist_categories=("Cs",))),
        max_size=5,
    )
)
def test_lists_of_text_round_trip(conn: Any, texts: list[str]) -> None:
    assert _round_trip(conn, "text[]", texts)[0] == texts


def test_lists_of_integers_round_trip(conn: Any) -> None:
    for numbers in ([], [1], [-(2**63), 0, 2**63 - 1]):
        value, query = _round_trip(conn, "bigint[]", numbers)
        assert value == numbers
        assert "::" not in query.split("EXECUTE", 1)[1]


def test_other_types_are_bound_by_psycopg(conn: Any) -> None:
    assert _round_trip(conn, "float8", 1.5)[0] == 1.5
    assert _round_trip(conn, "text[]", ["a", None])[0] == ["a", None]
    naive = datetime(2026, 12, 1, 9, 0)
    assert _round_trip(conn, "timestamp", naive)[0] == naive


def test_text_postgresql_cannot_hold_is_refused_as_before(conn: Any) -> None:
    with pytest.raises(psycopg.DataError):
        _round_trip(conn, "text", "a\x00b")
    with pytest.raises(UnicodeEncodeError):  # a lone surrogate is not UTF-8
        _round_trip(conn, "text", "a\ud800b")
