"""Floats a user sends read back as the same floats on every backend (issue 25).

PostgreSQL's events column is ``json`` so that the text is kept as written, but the batched
insert cast the writer's text to ``jsonb`` first: 1e308 came back as a 309-digit integer and
-0.0 as 0.0, so a run's input changed type in storage and its replay diverged.
"""

from __future__ import annotations

import math
from typing import Any

from flow_cli import Runtime
from flow_cli.engine.engine import Engine
from flow_cli.model.clock import ManualClock

FLOATS = {"max": 1.7976931348623157e308, "e308": 1e308, "e22": 1e22, "neg": -1e300}
"""Floats whose shortest text has an exponent: jsonb prints them as integers."""

runtime = Runtime(build_id="fidelity-1")


@runtime.workflow("echo")
def echo(ctx: Any) -> Any:
    return ctx.complete(ctx.step("s", "same", ctx.input))


@runtime.step("same")
def same(value: Any, info: Any) -> Any:
    return value


def _exactly(value: Any) -> list[tuple[str, str]]:
    """Type and text of each float, -0.0 told apart from 0.0."""
    return sorted(
        (k, f"{type(v).__name__}:{math.copysign(1.0, v)}:{v!r}") for k, v in value.items()
    )


def test_floats_read_back_exactly_from_every_event(store: Any) -> None:
    value = {**FLOATS, "negative_zero": -0.0, "tiny": 5e-324}
    engine = Engine(store, [runtime], clock=ManualClock())
    engine.start("echo", value, run_id="r")
    engine.tick(until_idle=True)
    history = store.read_history("r")
    first: Any = history[0].event
    done: Any = next(e.event for e in history if e.event_key == "step_completed")
    end: Any = history[-1].event
    assert end.event_key() == "run_completed"
    for got in (first.spec.input, done.output, end.result):
        assert _exactly(got) == _exactly(value)
