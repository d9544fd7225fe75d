"""DESIGN §6.6: OpenTelemetry spans of runs, decisions and step attempts, in the trace given by
``flow start --traceparent`` (or ``TRACEPARENT``) or by the parent run."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from engine_workflows import make_engine

from flow_cli import RetryPolicy, Runtime
from flow_cli.model.clock import ManualClock
from flow_cli.model.spec import WorkflowSpec
from flow_cli.model.trace import BadTraceparent, TraceParent, run_span_id, step_span_id
from flow_cli.store.protocol import EventStore

pytest.importorskip("opentelemetry.sdk")

from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import (
    InMemorySpanExporter,
)

from flow_cli.engine.tracing import TracingObserver, provider_from_env

TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
CALLER = "00f067aa0ba902b7"
TRACEPARENT = f"00-{TRACE}-{CALLER}-01"
ROOT = Path(__file__).resolve().parent.parent


def _runtime(seen: list[str | None]) -> Runtime:
    rt = Runtime(build_id="trace-1")
    flaky: list[int] = []

    @rt.step("charge")
    def charge(input, info):
        seen.append(info.trace_context)
        flaky.append(1)
        if len(flaky) == 1:
            raise ConnectionError("card network down")
        return "charged"

    @rt.step("ship")
    def ship(input, info):
        seen.append(info.trace_context)
        return "shipped"

    @rt.workflow("order")
    def order(ctx):
        retry = RetryPolicy(max_attempts=3, initial_interval=1.0)
        charged = ctx.step("charge", "charge", None, retry)
        shipped = ctx.step("ship", "ship", None)
        kid = ctx.child("receipt", "receipt", None)
        return ctx.complete([charged, shipped, kid.result])

    @rt.workflow("receipt")
    def receipt(ctx):
        return ctx.complete("sent")

    return rt


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    yield InMemorySpanExporter()


def _hex(value: int, digits: int) -> str:
    return format(value, f"0{digits}x")


def _run(store: EventStore, exporter: InMemorySpanExporter, seen: list[str | None]) -> None:
    clock = ManualClock()
    engine = make_engine(store, [_runtime(seen)], clock)
    tracer = TracingObserver(provider_from_env([exporter]))
    engine.observe(tracer)
    engine.start("order", run_id="o-1", traceparent=TRACEPARENT)
    for _ in range(5):
        engine.tick(until_idle=True)
        clock.advance(10)
    assert engine.get_run("o-1").status.value == "Completed"
    tracer.shutdown()


def test_spans_of_a_run_its_decisions_and_step_attempts_share_the_given_trace(
    store: EventStore, spans: InMemorySpanExporter
) -> None:
    seen: list[str | None] = []
    _run(store, spans, seen)
    found: tuple[ReadableSpan, ...] = spans.get_finished_spans()
    assert {_hex(s.context.trace_id, 32) for s in found} == {TRACE}
    runs = {s.attributes["flow.run_id"]: s for s in found if s.name.startswith("run ")}
    assert "o-1" in runs and len(runs) == 2  # the order and its child
    order = runs["o-1"]
    assert _hex(order.context.span_id, 16) == run_span_id("o-1")
    assert order.parent is not None and _hex(order.parent.span_id, 16) == CALLER
    assert order.attributes["flow.workflow"] == "order"
    assert order.attributes["flow.build_id"] == "trace-1"
    of_order = [s for s in found if s.attributes["flow.run_id"] == "o-1" and s is not order]
    decisions = [s for s in of_order if s.name == "decide order"]
    attempts = [s for s in of_order if s.name.startswith("step ")]
    assert decisions, "no decision span"
    assert sorted(
        (s.attributes["flow.step_id"], s.attributes["flow.attempt"]) for s in attempts
    ) == [
        ("charge", 1),
        ("charge", 2),
        ("ship", 1),
    ]
    for span in of_order:
        assert span.parent is not None and _hex(span.parent.span_id, 16) == run_span_id("o-1")
    failed = next(s for s in attempts if s.attributes["flow.attempt"] == 1)
    assert not failed.status.is_ok
    # info.trace_context names the attempt's own span, in the same trace.
    for span in attempts:
        expected = step_span_id(
            "o-1", span.attributes["flow.step_id"], span.attributes["flow.attempt"]
        )
        assert _hex(span.context.span_id, 16) == expected
        assert f"00-{TRACE}-{expected}-01" in seen
    # The child run joins the trace under the parent's run span.
    (child,) = [s for s in found if s.name == "run receipt"]
    assert child.parent is not None and _hex(child.parent.span_id, 16) == run_span_id("o-1")


def test_a_run_without_a_trace_context_records_none_and_its_history_is_unchanged() -> None:
    spec = WorkflowSpec(workflow="w", input=None, runtime_build_id="b")
    assert "traceparent" not in spec.to_json()
    traced = WorkflowSpec(workflow="w", input=None, runtime_build_id="b", traceparent=TRACEPARENT)
    assert traced.to_json()["traceparent"] == TRACEPARENT
    assert WorkflowSpec.from_json(traced.to_json()) == traced


def test_a_malformed_traceparent_is_refused() -> None:
    for text in ("", "01-" + TRACEPARENT[3:], f"00-{'0' * 32}-{CALLER}-01", "00-xyz-abc-01"):
        with pytest.raises(BadTraceparent):
            TraceParent.parse(text)


def _flow(tmp_path: Path, *args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "flow_cli", "--db", str(tmp_path / "flow.db"), *args],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(ROOT), **env},
        capture_output=True,
        text=True,
        check=False,
    )


def _project(tmp_path: Path) -> None:
    (tmp_path / "flow.toml").write_text(
        '[flow]\nruntimes = ["cli_workflows:runtime"]\n', encoding="utf-8"
    )


def test_flow_start_records_the_traceparent_from_the_option_or_the_environment(
    tmp_path: Path,
) -> None:
    _project(tmp_path)
    env = {"PYTHONPATH": f"{ROOT}{os.pathsep}{ROOT / 'tests'}"}
    done = _flow(tmp_path, "start", "two-step", "--id", "a", "--traceparent", TRACEPARENT, env=env)
    assert done.returncode == 0, done.stderr
    other = f"00-{'1' * 32}-{CALLER}-00"
    done = _flow(tmp_path, "start", "two-step", "--id", "b", env={**env, "TRACEPARENT": other})
    assert done.returncode == 0, done.stderr
    for run_id, expected in (("a", TRACEPARENT), ("b", other)):
        shown = _flow(tmp_path, "history", run_id, "--json", env=env)
        first = json.loads(shown.stdout)[0]
        assert first["data"]["spec"]["traceparent"] == expected
    bad = _flow(tmp_path, "start", "two-step", "--id", "c", "--traceparent", "nope", env=env)
    assert bad.returncode == 2 and "W3C trace context" in bad.stderr
    assert "Traceback" not in bad.stderr
    shown = _flow(tmp_path, "show", "c", env=env)
    assert shown.returncode != 0  # nothing was written


def test_without_otel_variables_nothing_of_opentelemetry_is_imported(tmp_path: Path) -> None:
    _project(tmp_path)
    code = (
        "import sys, runpy; sys.argv = ['flow', '--db', 'flow.db', 'start', 'two-step', "
        "'--traceparent', '" + TRACEPARENT + "']\n"
        "try:\n    runpy.run_module('flow_cli', run_name='__main__')\n"
        "except SystemExit:\n    pass\n"
        "print('otel' if any(m.startswith('opentelemetry') for m in sys.modules) else 'none')\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    env["PYTHONPATH"] = f"{ROOT}{os.pathsep}{ROOT / 'tests'}"
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True
    )
    assert done.stdout.strip().splitlines()[-1] == "none", done.stderr


def test_asking_for_traces_without_the_extra_names_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import importlib.util

    from typer.testing import CliRunner

    from flow_cli.cli.app import app

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *a: None if name.startswith("opentelemetry") else real(name, *a),
    )
    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "console")
    result = CliRunner().invoke(app, ["--db", str(tmp_path / "f.db"), "tick"])
    assert result.exit_code == 2
    assert "pip install 'flow-cli[otel]'" in result.output
    assert not (tmp_path / "f.db").exists()
