"""OpenTelemetry spans of runs, decisions and step attempts (DESIGN §6.6; extra ``otel``).

Only a process that traces imports this module (``tracing_wanted``: ``OTEL_TRACES_EXPORTER``
names an exporter), so OpenTelemetry is never imported otherwise and the engine's hot path
pays one attribute read per decision (``Observer.timing_decisions``).

``TracingObserver`` turns what the engine tells its observer into spans, all in the run's
trace (``flow_cli.model.trace``): one span per decision and one per step attempt, children of
the run's span, which is exported when the run ends (its start is the run's start, its parent
the span of ``--traceparent`` or of the parent run). The run's and the attempts' span ids are
derived from what they stand for, so the spans that different workers export over the run's
life join up, and ``info.trace_context`` names the attempt's span. Attributes:
``flow.run_id``, ``flow.workflow``, ``flow.build_id`` and, on a step attempt, ``flow.step_id``,
``flow.step``, ``flow.attempt``.

Exporters come from the standard variables: ``OTEL_TRACES_EXPORTER`` (``console``, ``otlp``,
comma-separated), ``OTEL_EXPORTER_OTLP_*``, ``OTEL_SERVICE_NAME``, ``OTEL_RESOURCE_ATTRIBUTES``,
``OTEL_BSP_*``; ``OTEL_SDK_DISABLED=true`` turns tracing off.
"""

from __future__ import annotations

import os
import threading
import time

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import (
    BatchSpanProcessor,
    ConsoleSpanExporter,
    SimpleSpanProcessor,
    SpanExporter,
)
from opentelemetry.sdk.trace.id_generator import IdGenerator, RandomIdGenerator
from opentelemetry.trace import NonRecordingSpan, SpanContext, SpanKind, Status, StatusCode
from opentelemetry.trace import TraceFlags as OtelTraceFlags

from flow_cli.engine.observe import Observer, RunRef, StepRef
from flow_cli.errors import ConfigError
from flow_cli.model.jsonval import JsonValue
from flow_cli.model.status import RunStatus
from flow_cli.model.trace import (
    TraceParent,
    run_span_id,
    run_trace_id,
    step_span_id,
)

OTEL_EXTRA = "pip install 'flow-cli[otel]'"
TRACER_NAME = "flow"


class _DerivedIds(IdGenerator):
    """Random ids, unless the span about to start is one whose id Flow derives."""

    def __init__(self) -> None:
        self._random = RandomIdGenerator()
        self._next = threading.local()

    def set_next(self, trace_id: int | None, span_id: int) -> None:
        self._next.ids = (trace_id, span_id)

    def generate_span_id(self) -> int:
        ids = getattr(self._next, "ids", None)
        if ids is None:
            return self._random.generate_span_id()
        return int(ids[1])

    def generate_trace_id(self) -> int:
        ids = getattr(self._next, "ids", None)
        if ids is None or ids[0] is None:
            return self._random.generate_trace_id()
        return int(ids[0])

    def clear(self) -> None:
        self._next.ids = None


def provider_from_env(exporters: list[SpanExporter] | None = None) -> TracerProvider:
    """A tracer provider exporting where the ``OTEL_*`` variables say (or to ``exporters``).

    Raises ``ConfigError`` for an exporter it does not know or whose package is missing."""
    provider = TracerProvider(resource=Resource.create(), id_generator=_DerivedIds())
    if exporters is not None:
        for exporter in exporters:
            provider.add_span_processor(SimpleSpanProcessor(exporter))
        return provider
    for name in os.environ.get("OTEL_TRACES_EXPORTER", "").split(","):
        name = name.strip().lower()
        if name in ("", "none"):
            continue
        if name == "console":
            provider.add_span_processor(SimpleSpanProcessor(ConsoleSpanExporter()))
        elif name == "otlp":
            provider.add_span_processor(BatchSpanProcessor(_otlp_exporter()))
        else:
            raise ConfigError(
                f"OTEL_TRACES_EXPORTER names {name!r}; Flow exports to console or otlp."
            )
    return provider


def _otlp_exporter() -> SpanExporter:
    grpc = os.environ.get("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf").strip() == "grpc"
    try:
        if grpc:
            from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import (  # type: ignore[import-not-found]
                OTLPSpanExporter,
            )
        else:
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import (  # type: ignore[import-not-found]
                OTLPSpanExporter,
            )
    except ImportError:
        package = "opentelemetry-exporter-otlp-proto-" + ("grpc" if grpc else "http")
        raise ConfigError(
            f"OTEL_TRACES_EXPORTER=otlp needs {package}: pip install {package}"
        ) from None
    exporter: SpanExporter = OTLPSpanExporter()
    return exporter


class TracingObserver(Observer):
    """Spans of runs, decisions and step attempts (see the module docstring)."""

    def __init__(self, provider: TracerProvider) -> None:
        self.provider = provider
        self.tracer = provider.get_tracer(TRACER_NAME)
        ids = provider.id_generator
        self._ids = ids if isinstance(ids, _DerivedIds) else None
        self._lock = threading.Lock()

    @property
    def timing_decisions(self) -> bool:
        return True

    def decided(self, run: RunRef, seconds: float) -> None:
        self._child(run, f"decide {run.workflow}", _run_attributes(run), seconds, None, None)

    def step_finished(self, step: StepRef, outcome: str, seconds: float) -> None:
        run = step.run
        attributes = {
            **_run_attributes(run),
            "flow.step_id": step.step_id,
            "flow.step": step.name,
            "flow.attempt": step.attempt,
            "flow.outcome": outcome,
        }
        span_id = int(step_span_id(run.run_id, step.step_id, step.attempt), 16)
        error = outcome in ("retrying", "failed")
        self._child(run, f"step {step.name}", attributes, seconds, span_id, error)

    def run_ended(self, run: RunRef, status: RunStatus, error: JsonValue) -> None:
        trace_id = int(run_trace_id(run.traceparent, run.run_id), 16)
        if run.traceparent is not None:
            given = TraceParent.parse(run.traceparent)
            parent = _parent(trace_id, int(given.span_id, 16), given.flags)
        else:
            parent = Context()
        now = time.time_ns()
        start = now if run.started_at is None else int(run.started_at.timestamp() * 1e9)
        with self._lock:  # the derived ids are the next span's: one span at a time
            if self._ids is not None:
                self._ids.set_next(None if run.traceparent else trace_id, _run_span(run))
            try:
                span = self.tracer.start_span(
                    f"run {run.workflow}",
                    context=parent,
                    kind=SpanKind.INTERNAL,
                    attributes={**_run_attributes(run), "flow.status": status.value},
                    start_time=min(start, now),
                )
            finally:
                if self._ids is not None:
                    self._ids.clear()
        if status is RunStatus.FAILED:
            span.set_status(Status(StatusCode.ERROR, str(error)))
        span.end(end_time=now)

    def _child(
        self,
        run: RunRef,
        name: str,
        attributes: dict[str, str | int],
        seconds: float,
        span_id: int | None,
        error: bool | None,
    ) -> None:
        trace_id = int(run_trace_id(run.traceparent, run.run_id), 16)
        flags = TraceParent.parse(run.traceparent).flags if run.traceparent else "01"
        parent = _parent(trace_id, _run_span(run), flags)
        now = time.time_ns()
        with self._lock:
            if self._ids is not None and span_id is not None:
                self._ids.set_next(None, span_id)
            try:
                span = self.tracer.start_span(
                    name, context=parent, attributes=attributes, start_time=now - int(seconds * 1e9)
                )
            finally:
                if self._ids is not None and span_id is not None:
                    self._ids.clear()
        if error:
            span.set_status(Status(StatusCode.ERROR))
        span.end(end_time=now)

    def shutdown(self) -> None:
        """Export what is buffered; call once the worker stops."""
        self.provider.shutdown()


def _run_span(run: RunRef) -> int:
    return int(run_span_id(run.run_id), 16)


def _run_attributes(run: RunRef) -> dict[str, str | int]:
    return {"flow.run_id": run.run_id, "flow.workflow": run.workflow, "flow.build_id": run.build_id}


def _parent(trace_id: int, span_id: int, flags: str) -> Context:
    context = SpanContext(
        trace_id=trace_id,
        span_id=span_id,
        is_remote=True,
        trace_flags=OtelTraceFlags(int(flags, 16)),
    )
    return trace.set_span_in_context(NonRecordingSpan(context), Context())
