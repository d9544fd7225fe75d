"""A workflow that continues as new before it waits, for the chain-following CLI tests."""

from __future__ import annotations

from flow_cli import Runtime, WorkflowContext
from flow_cli.model.commands import RuntimeCommand

runtime = Runtime(build_id="chain-1")


@runtime.workflow("relay")
def relay(ctx: WorkflowContext) -> RuntimeCommand:
    generation = ctx.input["generation"]
    if generation < 2:
        return ctx.continue_as_new({"generation": generation + 1})
    answer = ctx.hook("ack", token=f"ack-{ctx.first_run_id}")
    go = ctx.receive("go", "go")
    return ctx.complete({"go": go, "ack": answer, "first": ctx.first_run_id})


@runtime.workflow("doomed")
def doomed(ctx: WorkflowContext) -> RuntimeCommand:
    """Continues as new once, then fails: the chain's outcome is its last run's."""
    if ctx.input["generation"] < 1:
        return ctx.continue_as_new({"generation": 1})
    return ctx.fail({"type": "Doomed", "message": "the chain failed"})
