"""DESIGN §2.6: ``decision_failed`` and ``step_failed`` record where the code raised (its own
frames, at most 8 KiB, no locals); ``flow show`` prints it under the error, ``--json`` has
``"traceback"`` and worker logs carry it."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
from cli_helpers import FlowProject
from engine_workflows import data, make_engine

from flow_cli import RetryPolicy, Runtime
from flow_cli.engine.observe import LogObserver, RunRef
from flow_cli.model.clock import ManualClock
from flow_cli.model.events import DecisionFailed, StepFailed, event_from_data
from flow_cli.model.tracebacks import MAX_TRACEBACK_BYTES
from flow_cli.store.protocol import EventStore
from flow_cli.store.sqlite import SQLiteStore

HERE = Path(__file__).name


def _lookup(order: dict[str, str]) -> str:
    return order["missing"]  # the line the traceback must name


def _deep(n: int) -> None:
    if n == 0:
        raise RecursionError("too deep for this test")
    _deeper(n - 1)  # two functions in turn: no frame repeats the one before it


def _deeper(n: int) -> None:
    _deep(n)


def _runtime() -> Runtime:
    rt = Runtime(build_id="tb-1")

    @rt.step("charge")
    def charge(input, info):
        return _lookup({})

    @rt.workflow("decides-badly")
    def decides_badly(ctx):
        return ctx.complete(_lookup({"sku": "a"}))

    @rt.workflow("charges")
    def charges(ctx):
        return ctx.complete(ctx.step("charge", "charge", None, RetryPolicy(max_attempts=1)))

    @rt.workflow("deep")
    def deep(ctx):
        _deep(300)
        return ctx.complete(None)

    return rt


def test_a_failed_decision_records_the_workflow_codes_traceback(
    store: EventStore, clock: ManualClock
) -> None:
    engine = make_engine(store, [_runtime()], clock)
    engine.start("decides-badly", run_id="d")
    engine.tick(until_idle=True)
    (failed,) = data(engine, "d", "decision_failed")
    trace = failed["traceback"]
    assert trace.startswith("Traceback (most recent call last):\n")
    assert f'{HERE}", line' in trace and "in decides_badly" in trace and "in _lookup" in trace
    assert 'return order["missing"]' in trace
    assert trace.rstrip().endswith("KeyError: 'missing'")
    assert "flow_cli" not in trace  # Flow's own frames say nothing about the mistake
    error = engine.snapshot("d").decision_error
    assert error is not None and error.traceback == trace


def test_a_failed_step_attempt_records_the_handlers_traceback(
    store: EventStore, clock: ManualClock
) -> None:
    engine = make_engine(store, [_runtime()], clock)
    engine.start("charges", run_id="c")
    engine.tick(until_idle=True)
    failures = data(engine, "c", "step_failed")
    assert failures
    assert "in charge" in failures[0]["traceback"] and "in _lookup" in failures[0]["traceback"]
    assert "flow_cli" not in failures[0]["traceback"]
    # Workflow code and the run's outcome see the error without it.
    (ended,) = data(engine, "c", "run_failed")
    assert "traceback" not in ended["error"]["step_error"]


def test_a_long_traceback_keeps_the_innermost_frames_within_8_kib(
    store: EventStore, clock: ManualClock
) -> None:
    engine = make_engine(store, [_runtime()], clock)
    engine.start("deep", run_id="deep")
    engine.tick(until_idle=True)
    trace = data(engine, "deep", "decision_failed")[0]["traceback"]
    assert len(trace.encode()) <= MAX_TRACEBACK_BYTES
    assert "outer frame(s) left out" in trace
    assert "RecursionError: too deep for this test" in trace


def test_histories_written_before_tracebacks_load_and_store_nothing_new() -> None:
    old = event_from_data("decision_failed", {"error_type": "KeyError", "message": "'x'"})
    assert isinstance(old, DecisionFailed) and old.traceback is None
    assert "traceback" not in old.to_data()
    step = event_from_data(
        "step_failed",
        {
            "step_id": "a",
            "attempt": 1,
            "error_type": "E",
            "message": "m",
            "next_attempt_at": None,
            "exhausted": True,
        },
    )
    assert isinstance(step, StepFailed) and step.traceback is None
    assert "traceback" not in step.to_data()


def test_flow_show_prints_the_traceback_under_the_error(tmp_path: Path) -> None:
    project = FlowProject(tmp_path)
    store = SQLiteStore(project.db)
    engine = make_engine(store, [_runtime()], ManualClock())
    engine.start("decides-badly", run_id="d")
    engine.start("charges", run_id="c")
    engine.tick(until_idle=True)
    store.close()

    shown = project.invoke("show", "d")
    assert shown.code == 0, shown.stderr
    lines = shown.stdout.splitlines()
    at = next(i for i, line in enumerate(lines) if "Traceback (most recent call last):" in line)
    assert "failing" in "\n".join(lines[:at]) and "KeyError" in "\n".join(lines[:at])
    assert any('return order["missing"]' in line for line in lines[at:])
    as_json = project.invoke("show", "d", "--json").json()
    assert "in _lookup" in as_json["decision_error"]["traceback"]

    step_shown = project.invoke("show", "c")
    assert "step 'charge', attempt" in step_shown.stdout
    assert "in charge" in step_shown.stdout
    step_json = project.invoke("show", "c", "--json").json()
    assert "in _lookup" in step_json["steps"]["charge"]["error"]["traceback"]


def test_log_lines_carry_the_traceback(capsys: pytest.CaptureFixture[str]) -> None:
    from flow_cli.cli import logs

    handler = logs.install("text", "warning")
    observer = LogObserver()
    run = RunRef("r-1", "w", "b-1")
    trace = (
        'Traceback (most recent call last):\n  File "x.py", line 3, in w\n    f()\nKeyError: 1\n'
    )
    try:
        observer.decision_failed(run, "KeyError", "1", None, trace)
        text = capsys.readouterr().err.splitlines()
        assert text[0].startswith("error: decision failed: run r-1")
        assert text[1:] == [
            "    Traceback (most recent call last):",
            '      File "x.py", line 3, in w',
            "        f()",
            "    KeyError: 1",
        ]
        handler.json = True
        observer.decision_failed(run, "KeyError", "1", None, trace)
        record = json.loads(capsys.readouterr().err)
        assert record["level"] == "error" and record["traceback"] == trace
    finally:
        logging.getLogger("flow").removeHandler(handler)
