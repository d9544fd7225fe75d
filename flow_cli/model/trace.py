"""W3C trace context for runs (DESIGN §6.6): what a run records, what its spans are called.

A run's trace context is the ``traceparent`` it was started with (``flow start --traceparent``
or ``TRACEPARENT``), recorded in its spec, or the one its parent hands down. Span ids are
derived from what they stand for (the run, one attempt of one step), not drawn at random: a
run lives across processes and days, so the worker that runs a step, the one that ends the
run, and the step handler passing ``info.trace_context`` on to another service all name the
same spans without asking each other. Pure functions: no OpenTelemetry here.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass

from flow_cli.errors import InputError

_TRACEPARENT = re.compile(r"00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})")


class BadTraceparent(InputError):
    """A ``--traceparent`` (or ``TRACEPARENT``) that is not a W3C ``traceparent`` header."""


@dataclass(frozen=True, slots=True)
class TraceParent:
    """A parsed ``traceparent``: ``00-<trace id>-<parent span id>-<flags>``."""

    trace_id: str
    span_id: str
    flags: str

    @classmethod
    def parse(cls, text: str) -> TraceParent:
        """Raises ``BadTraceparent`` with one sentence."""
        found = _TRACEPARENT.fullmatch(text.strip().lower())
        if found is None or set(found[1]) == {"0"} or set(found[2]) == {"0"}:
            raise BadTraceparent(
                f"traceparent {text!r} is not a W3C trace context; write "
                "00-<32 hex trace id>-<16 hex span id>-<2 hex flags>, e.g. "
                "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01."
            )
        return cls(found[1], found[2], found[3])

    def __str__(self) -> str:
        return f"00-{self.trace_id}-{self.span_id}-{self.flags}"


def _derived(*parts: str, digits: int) -> str:
    digest = hashlib.sha256("\x1f".join(parts).encode()).hexdigest()[:digits]
    return digest if set(digest) != {"0"} else "1".rjust(digits, "0")  # all zeros is invalid


def run_span_id(run_id: str) -> str:
    """The span id of the run's span."""
    return _derived("run", run_id, digits=16)


def step_span_id(run_id: str, step_id: str, attempt: int) -> str:
    """The span id of one attempt of one step."""
    return _derived("step", run_id, step_id, str(attempt), digits=16)


def run_trace_id(traceparent: str | None, run_id: str) -> str:
    """The trace the run's spans belong to: its recorded context's, or one of its own."""
    if traceparent is not None:
        return TraceParent.parse(traceparent).trace_id
    return _derived("trace", run_id, digits=32)


def child_traceparent(traceparent: str | None, parent_run_id: str) -> str | None:
    """What a child of a run with ``traceparent`` records: the same trace, under the parent's
    run span. ``None`` when the parent has none, so that its history stays as it was."""
    if traceparent is None:
        return None
    given = TraceParent.parse(traceparent)
    return str(TraceParent(given.trace_id, run_span_id(parent_run_id), given.flags))


def step_trace_context(
    traceparent: str | None, run_id: str, step_id: str, attempt: int
) -> str | None:
    """``info.trace_context``: the ``traceparent`` naming the step attempt's span, to send on
    with the calls the handler makes. ``None`` when the run records no trace context."""
    if traceparent is None:
        return None
    given = TraceParent.parse(traceparent)
    return str(TraceParent(given.trace_id, step_span_id(run_id, step_id, attempt), given.flags))
