"""Workflows the schedule tests start: one that ends at once and tells its fire time, one
that stays open until signalled (for the overlap policies)."""

from __future__ import annotations

from flow_cli import Runtime

BUILD = "sched-2026.12.1"

runtime = Runtime(build_id=BUILD)


@runtime.workflow("report")
def report(ctx):  # type: ignore[no-untyped-def]
    at = ctx.scheduled_at
    return ctx.complete({"scheduled_at": None if at is None else at.isoformat(), "in": ctx.input})


@runtime.workflow("long")
def long(ctx):  # type: ignore[no-untyped-def]
    if ctx.cancel_requested:
        return ctx.cancelled("asked to")
    value = ctx.receive("done", "done")
    return ctx.complete(value)


@runtime.workflow("relay")
def relay(ctx):  # type: ignore[no-untyped-def]
    if ctx.input is None:
        return ctx.continue_as_new({"generation": 1})  # the chain goes on in a successor
    value = ctx.receive("done", "done")
    return ctx.complete(value)
