"""Workflows for the operator-view CLI tests (``tests/test_cli_operator_views.py``)."""

from __future__ import annotations

from typing import Any

from flow_cli import RetryPolicy, Runtime, StepInfo, WorkflowContext
from flow_cli.model.commands import RuntimeCommand

runtime = Runtime(build_id="ops-1")


@runtime.workflow("guardian")
def guardian(ctx: WorkflowContext) -> RuntimeCommand:
    """Waits for a child that sleeps for an hour."""
    outcome = ctx.child("kid", "napper", {})
    return ctx.complete({"child": outcome.result})


@runtime.workflow("napper")
def napper(ctx: WorkflowContext) -> RuntimeCommand:
    ctx.sleep("nap", 3600)
    return ctx.complete("rested")


@runtime.workflow("callback")
def callback(ctx: WorkflowContext) -> RuntimeCommand:
    answer = ctx.hook("cb", token=f"token-{ctx.run_id}")
    return ctx.complete(answer)


@runtime.step("ship")
def ship(input: Any, info: StepInfo) -> Any:
    if input.get("fail"):
        raise ShippingFailed(f"no carrier for {input['to']}")
    return {"shipped": input["to"]}


class ShippingFailed(Exception):
    pass


@runtime.workflow("order")
def order(ctx: WorkflowContext) -> RuntimeCommand:
    shipped = ctx.step("ship", "ship", ctx.input, retry=RetryPolicy(max_attempts=1))
    return ctx.complete(shipped)


@runtime.workflow("broken")
def broken(ctx: WorkflowContext) -> RuntimeCommand:
    raise KeyError("missing")


NOT_A_RUNTIME = 3
