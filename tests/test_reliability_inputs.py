"""Defects found by the adversarial probe (issue 8), each pinned by a test that failed before:

- every ``--db`` value is recognised or refused, and no message carries a password;
- input beyond Flow's JSON limits is exit 2 with one line, nothing written;
- control characters are refused in ids and names and escaped when printed from stored data;
- a bad PostgreSQL option is named, not reported as an unreachable server.
"""

from __future__ import annotations

import enum
import json
import math
import sqlite3
from pathlib import Path

import pytest
from cli_helpers import FlowProject

from flow_cli.engine.engine import Engine
from flow_cli.errors import ConfigError, InputError
from flow_cli.model.clock import ManualClock
from flow_cli.model.jsonval import MAX_DEPTH, MAX_INT_DIGITS, check_limits, normalise
from flow_cli.model.names import escape_controls
from flow_cli.model.spec import WorkflowSpec
from flow_cli.store import open_store
from flow_cli.store.locations import Backend, classify, redact
from flow_cli.store.memory import MemoryStore
from flow_cli.store.protocol import NewRun
from flow_cli.store.sqlite import SQLiteStore

SECRET = "S3cret-pw"


@pytest.fixture
def project(tmp_path: Path) -> FlowProject:
    return FlowProject(tmp_path)


# -- (1) every --db value is recognised or refused ----------------------------------------------


@pytest.mark.parametrize(
    ("url", "backend"),
    [
        ("memory://", Backend.MEMORY),
        ("sqlite:///flow.db", Backend.SQLITE),
        ("postgresql://u@h/db", Backend.POSTGRES),
        ("postgres://u@h/db", Backend.POSTGRES),
        ("PostgreSQL://u@h/db", Backend.POSTGRES),
        (f"host=127.0.0.1 port=5432 password={SECRET} dbname=x", Backend.POSTGRES),
        ("  dbname=flow", Backend.POSTGRES),
        ("/abs/flow.db", Backend.SQLITE),
        ("~/runs.sqlite3", Backend.SQLITE),
        ("data.sqlite", Backend.SQLITE),
    ],
)
def test_database_locations_are_recognised(url: str, backend: Backend) -> None:
    assert classify(url).backend is backend


@pytest.mark.parametrize(
    "url",
    [
        "mysql://db/flow",
        "flowdata",
        "user@host/db",
        "postgresql:/x",
        "sqlite:flow.db",
        f"pg://u:{SECRET}@h/db",
        "",
    ],
)
def test_unrecognised_locations_are_refused_without_the_password(url: str) -> None:
    with pytest.raises(ConfigError) as caught:
        classify(url)
    assert SECRET not in str(caught.value)


def test_a_bare_existing_file_is_sqlite(tmp_path: Path) -> None:
    existing = tmp_path / "flowdata"
    SQLiteStore(existing).close()
    store = open_store(str(existing))
    assert isinstance(store, SQLiteStore)
    store.close()


def test_key_value_string_goes_to_postgres_and_creates_no_file(
    project: FlowProject,
) -> None:
    """Before: `flow --db 'host=... password=...' start` created a SQLite file named after it."""
    url = f"host=127.0.0.1 port=1 password={SECRET} dbname=x connect_timeout=2"
    result = project.run("--db", url, "start", "two-step")
    assert result.code == 1, result.stderr
    line = result.error_line()
    assert "PostgreSQL at 127.0.0.1:1/x" in line and SECRET not in line
    assert sorted(p.name for p in project.root.iterdir()) == ["flow.toml"]


@pytest.mark.parametrize(
    "url",
    [
        f"postgresql://u:{SECRET}@[bad/db",
        f"postgresql://u:{SECRET}@h/db?foo=1",
        f"postgresql://u:{SECRET}@h/db?sslmode=bogus",
        f"host=h password={SECRET} bogus=1",
        f"host=h password='{SECRET} x",
        f"postgresql://h/db?password={SECRET}&foo=1",
        f"postgresql://u:{SECRET}@h/db?connect_timeout=soon",
    ],
)
def test_bad_postgres_strings_are_exit_2_without_the_password(
    project: FlowProject, url: str
) -> None:
    result = project.run("--db", url, "runs")
    assert (result.code, result.stdout) == (2, "")
    assert SECRET not in result.error_line()
    assert sorted(p.name for p in project.root.iterdir()) == ["flow.toml"]


def test_a_word_that_is_no_url_is_refused(project: FlowProject) -> None:
    result = project.invoke("--db", "flowdata", "start", "two-step")
    assert result.code == 2
    assert result.error_line().startswith("error: Database 'flowdata' (--db, FLOW_DB or flow.toml)")
    assert not (project.root / "flowdata").exists()


def test_redact_hides_passwords_in_every_form() -> None:
    assert redact(f"postgresql://u:{SECRET}@h/db") == "postgresql://u:***@h/db"
    assert redact(f"postgresql://u:{SECRET}@[bad/db") == "postgresql://u:***@[bad/db"
    assert redact(f"postgresql://u:p@ss/w{SECRET}@h/db") == "postgresql://u:***@h/db"
    assert redact(f"host=h password = '{SECRET} x' user=u") == "host=h password = *** user=u"
    assert redact(f"PASSWORD={SECRET}") == "PASSWORD=***"
    assert redact(f"postgres://h/d?sslmode=require&password={SECRET}") == (
        "postgres://h/d?sslmode=require&password=***"
    )
    assert redact("postgresql://u@h/db") == "postgresql://u@h/db"


# -- (7) a bad option is named ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        (
            "postgresql://u@h/db?foo=1",
            "PostgreSQL connection option 'foo' in 'postgresql://u@h/db?foo=1' is unknown to "
            "libpq; remove or correct it (Flow's own option is schema=NAME).",
        ),
        (
            "postgresql://u@h/db?sslmode=bogus",
            "PostgreSQL option sslmode='bogus' is not one of disable, allow, prefer, require, "
            "verify-ca, verify-full.",
        ),
        (
            "postgresql://u@h/db?connect_timeout=abc",
            "PostgreSQL option connect_timeout='abc' must be a whole number of seconds.",
        ),
        ("postgresql://u@h:http/db", "PostgreSQL option port='http' must be a port number."),
    ],
)
def test_bad_postgres_options_are_named(url: str, expected: str) -> None:
    pytest.importorskip("psycopg")
    with pytest.raises(ConfigError) as caught:
        open_store(url)
    assert str(caught.value) == expected


# -- (4) JSON limits -----------------------------------------------------------------------------


def _nested(depth: int) -> str:
    return "[" * depth + "]" * depth


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (
            "1" * 5000,
            "--input is refused: it holds an integer of 5,000 digits; Flow accepts at most 1,000.",
        ),
        (
            "-" + "9" * (MAX_INT_DIGITS + 1),
            "--input is refused: it holds an integer of 1,001 digits; Flow accepts at most 1,000.",
        ),
        (
            _nested(10_000),
            "--input is refused: it is nested more than 100 levels deep (Flow's limit).",
        ),
        (
            _nested(MAX_DEPTH + 1),
            "--input is refused: it is nested more than 100 levels deep (Flow's limit).",
        ),
    ],
)
def test_input_beyond_the_limits_is_exit_2_and_writes_nothing(
    project: FlowProject, value: str, message: str
) -> None:
    result = project.run("start", "two-step", "--input", value)
    assert (result.code, result.stdout) == (2, "")
    assert result.error_line() == f"error: {message}"
    assert not project.db.exists()


def test_payload_limits_on_signal_and_hook_resolve(project: FlowProject) -> None:
    project.setup("start", "two-step", "--id", "r")
    before = project.dump()
    for args in (("signal", "r", "go"), ("hook", "resolve", "tok")):
        for value in ("1" * 5000, _nested(10_000)):
            result = project.invoke(*args, "--payload", value)
            assert (result.code, result.stdout) == (2, ""), args
            assert result.error_line().startswith("error: --payload is refused: "), args
    assert project.dump() == before


def test_input_at_the_limits_is_accepted(project: FlowProject) -> None:
    value = "[" * (MAX_DEPTH - 1) + "9" * MAX_INT_DIGITS + "]" * (MAX_DEPTH - 1)
    assert project.invoke("start", "two-step", "--input", value).code == 0


def test_engine_refuses_values_beyond_the_limits() -> None:
    from cli_workflows import runtime

    engine = Engine(MemoryStore(), [runtime], clock=ManualClock())
    deep: list[object] = []
    for _ in range(10_000):
        deep = [deep]
    huge = 10 ** (MAX_INT_DIGITS + 5)
    for bad in (deep, huge, {"a": [huge]}):
        with pytest.raises(InputError, match="refused"):
            engine.start("two-step", bad)
    engine.start("two-step", None, run_id="r")
    with pytest.raises(InputError, match="the payload is refused: it is nested"):
        engine.signal("r", "go", deep)
    with pytest.raises(InputError, match="the payload is refused: it holds an integer"):
        engine.resolve_hook("tok", huge)
    assert [r.run_id for r in engine.list_runs()] == ["r"]


def test_check_limits_and_normalise() -> None:
    check_limits({"a": [1, 2.5, "x", None, True]})
    with pytest.raises(ValueError, match="nested more than"):
        normalise(json.loads(_nested(MAX_DEPTH + 1)))
    cyclic: list[object] = []
    cyclic.append(cyclic)
    with pytest.raises(ValueError):
        normalise(cyclic)


def test_normalise_gives_scalars_as_they_read_back() -> None:
    """A plain scalar is its own stored form; a subclass of one reads back as its base type,
    and a float that is not JSON is refused, as a round trip through storage would."""

    class Level(enum.IntEnum):
        HIGH = 3

    class Name(str):
        pass

    for plain in ("x", 7, True, None, 2**70):
        assert normalise(plain) == plain and type(normalise(plain)) is type(plain)
    assert type(normalise(Level.HIGH)) is int and normalise(Level.HIGH) == 3
    assert type(normalise(Name("n"))) is str
    assert normalise(-0.0) == 0.0 and normalise(1.5) == 1.5
    for bad in (math.nan, math.inf):
        with pytest.raises(ValueError):
            normalise(bad)
    with pytest.raises(ValueError, match="digits"):
        normalise(10**1001)


# -- (6) control characters ---------------------------------------------------------------------

ESC_ID = "a\x1b]0;owned\x07b"


@pytest.mark.parametrize(
    "args",
    [
        ("start", "two-step", "--id", ESC_ID),
        ("start", "two\x1b[2Jstep"),
        ("signal", "x", "go\x1b[31m"),
        ("start", "two-step", "--id", "a\x7fb"),
        ("start", "two-step", "--id", "a\x85b"),
    ],
)
def test_control_characters_in_ids_and_names_are_refused(
    project: FlowProject, args: tuple[str, ...]
) -> None:
    result = project.invoke(*args)
    assert (result.code, result.stdout) == (2, "")
    line = result.error_line()
    assert "holds the control character" in line and "\x1b" not in line and "\x7f" not in line
    assert not project.db.exists()


def test_engine_refuses_control_characters() -> None:
    from cli_workflows import runtime

    engine = Engine(MemoryStore(), [runtime], clock=ManualClock())
    with pytest.raises(InputError, match="U\\+001B"):
        engine.start("two-step", run_id=ESC_ID)
    engine.start("two-step", run_id="r")
    with pytest.raises(InputError, match="signal name"):
        engine.signal("r", "a\x00b")


def _store_run_with_controls(project: FlowProject) -> None:
    """A run written before ids were checked (or by another tool): ESC in id and input."""
    store = SQLiteStore(project.db)
    spec = WorkflowSpec(
        workflow="two-step", input={"note": "\x1b[31mred\x9b"}, runtime_build_id="cli-1"
    )
    store.create_run(
        NewRun(run_id=ESC_ID, spec=spec, seed="00", decide_at=None), ManualClock().now()
    )
    store.close()


def test_stored_control_characters_are_escaped_when_printed(project: FlowProject) -> None:
    _store_run_with_controls(project)
    for args in (("runs",), ("show", ESC_ID), ("history", ESC_ID)):
        result = project.run(*args)
        assert result.code == 0, (args, result.stderr)
        assert "\x1b" not in result.stdout and "\x07" not in result.stdout, args
        assert "\x9b" not in result.stdout, args
        if args[0] != "history":
            assert escape_controls(ESC_ID) in result.stdout, args


def test_raw_bytes_in_an_error_line_are_escaped(project: FlowProject) -> None:
    project.setup("start", "two-step", "--id", "r")
    with sqlite3.connect(project.db) as conn:
        conn.execute("UPDATE events SET event_key = ? WHERE run_id = 'r'", ("\x1b[2J\x00bad",))
    result = project.run("show", "r")
    assert result.code == 1
    line = result.error_line()
    assert "\x1b" not in line and "\x00" not in line
    assert "\\x1b[2J" in line
