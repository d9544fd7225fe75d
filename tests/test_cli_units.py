"""Small pieces of the command line tested directly: exit-code mapping, JSON arguments,
the worker's outage reporter and the one-line log handler."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from flow_cli.cli import exits, logs
from flow_cli.cli.cmd_drive import _OutageReporter
from flow_cli.cli.io import parse_json_arg, short_json
from flow_cli.engine.observe import LogObserver
from flow_cli.errors import (
    BuildNotHosted,
    ConfigError,
    EventConflict,
    FlowError,
    HookAlreadyResolved,
    HookNotFound,
    InputError,
    RunAlreadyExists,
    RunFinished,
    RunNotFound,
    StoreError,
    WorkflowNotFound,
)


@pytest.mark.parametrize(
    ("error", "code"),
    [
        (InputError("x"), 2),
        (RunNotFound("r"), 2),
        (RunAlreadyExists("r", "input"), 2),
        (WorkflowNotFound("w"), 2),
        (BuildNotHosted("b"), 2),
        (HookNotFound("t"), 2),
        (ConfigError("c"), 2),
        (StoreError("s"), 1),
        (RunFinished("r", "Completed", "signal"), 1),
        (HookAlreadyResolved("t", "r", "h"), 1),
        (EventConflict("r", 1, 2), 1),
        (FlowError("other"), 1),
    ],
)
def test_exit_codes(error: FlowError, code: int) -> None:
    assert exits.exit_code(error) == code


def test_parse_json_arg(tmp_path: Path) -> None:
    assert parse_json_arg(None, "--input") is None
    assert parse_json_arg('{"a": [1, 2]}', "--input") == {"a": [1, 2]}
    assert parse_json_arg('"@literal"', "--input") == "@literal"
    payload = tmp_path / "p.json"
    payload.write_text("[true]", encoding="utf-8")
    assert parse_json_arg(f"@{payload}", "--payload") == [True]
    with pytest.raises(InputError, match=r"^--payload is not valid JSON: Expecting value"):
        parse_json_arg("yes", "--payload")


def test_short_json_cuts_long_values() -> None:
    assert short_json({"a": 1}) == '{"a":1}'
    assert short_json("x" * 100, 10) == '"xxxxxxxx…'


def test_outage_reporter_prints_one_line_and_silences_the_duplicate_log(
    capsys: pytest.CaptureFixture[str],
) -> None:
    logs.install()
    reporter = _OutageReporter(LogObserver())
    error = StoreError("Flow database /x.db is locked by another connection;\ngave up.")
    reporter(error)
    assert capsys.readouterr().err == (
        "warning: database unavailable, retrying: "
        "Flow database /x.db is locked by another connection; gave up.\n"
    )
    duplicate = logging.LogRecord("flow.worker", logging.WARNING, "", 0, "%s", (error,), None)
    other = logging.LogRecord("flow.worker", logging.WARNING, "", 0, "%s", ("else",), None)
    assert reporter.already_reported(duplicate) is False
    assert reporter.already_reported(other) is True


def test_log_handler_prints_exceptions_as_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    handler = logs.install()
    logger = logging.getLogger("flow.test")
    try:
        raise ValueError("bad\nthing")
    except ValueError:
        logger.exception("step %s crashed", "s1")
    assert capsys.readouterr().err == "error: step s1 crashed: ValueError: bad thing\n"
    assert handler in logging.getLogger("flow").handlers


def test_json_log_lines_carry_the_event_and_its_fields(capsys: pytest.CaptureFixture[str]) -> None:
    from datetime import UTC, datetime

    from flow_cli.store.protocol import StepLease

    logs.install("json", "info")
    try:
        observer = LogObserver()
        observer.lease_lost(
            StepLease(
                run_id="r-1",
                step_id="charge",
                attempt=2,
                lease_until=datetime(2026, 12, 1, tzinfo=UTC),
            )
        )
        observer.store_error(StoreError("Flow database is locked;\nretry"))
        observer.store_recovered(12.345)
        logging.getLogger("flow.steps").warning("gave up on %s", "r-1")
        records = [json.loads(line) for line in capsys.readouterr().err.splitlines()]
    finally:
        logs.install()
    assert [(r["level"], r["event"]) for r in records] == [
        ("warning", "lease_lost"),
        ("warning", "store_error"),
        ("info", "store_reconnected"),
        ("warning", "log"),
    ]
    lost, outage, back, plain = records
    assert (lost["run_id"], lost["step_id"], lost["attempt"]) == ("r-1", "charge", 2)
    assert outage["message"] == "database unavailable, retrying: Flow database is locked; retry"
    assert outage["error"] == "Flow database is locked;\nretry"  # the field keeps the text
    assert back["outage_seconds"] == 12.345
    assert (plain["logger"], plain["message"]) == ("flow.steps", "gave up on r-1")


def test_text_log_level_hides_what_is_below_it(capsys: pytest.CaptureFixture[str]) -> None:
    logs.install("text", "warning")
    LogObserver().store_recovered(1.0)  # info: hidden
    LogObserver().store_error(StoreError("gone"))
    assert capsys.readouterr().err == "warning: database unavailable, retrying: gone\n"
