"""Workflows for the retention tests (``flow prune``, background retention): runs that end at
once, runs that wait for a signal, parents with children and continue-as-new chains."""

from __future__ import annotations

from typing import Any

from flow_cli import Runtime, StepInfo, WorkflowContext
from flow_cli.model.commands import RuntimeCommand

runtime = Runtime(build_id="keep-1")


@runtime.workflow("done")
def done(ctx: WorkflowContext) -> RuntimeCommand:
    """Ends at once (with a step when the input asks for one)."""
    if isinstance(ctx.input, dict) and ctx.input.get("step"):
        out = ctx.step("work", "echo", ctx.input)
        return ctx.complete(out)
    return ctx.complete({"input": ctx.input})


@runtime.workflow("waiter")
def waiter(ctx: WorkflowContext) -> RuntimeCommand:
    """Open until signal ``go``."""
    go = ctx.receive("go", "go")
    return ctx.complete({"go": go})


@runtime.workflow("family")
def family(ctx: WorkflowContext) -> RuntimeCommand:
    """A parent waiting for one child (``input["child"]``: ``done`` or ``waiter``); with
    ``input["abandon"]`` the child outlives a terminated parent."""
    policy = "abandon" if ctx.input.get("abandon") else "cancel"
    outcome = ctx.child("kid", ctx.input["child"], {}, policy)
    return ctx.complete({"child": outcome.result})


@runtime.workflow("relay")
def relay(ctx: WorkflowContext) -> RuntimeCommand:
    """Continues as new until generation 2, which waits for ``go`` when ``input["wait"]``."""
    generation = ctx.input["generation"]
    if generation < 2:
        return ctx.continue_as_new({**ctx.input, "generation": generation + 1})
    if ctx.input.get("wait"):
        ctx.receive("go", "go")
    return ctx.complete({"generation": generation})


@runtime.step("echo")
def echo(input: Any, info: StepInfo) -> Any:
    return input
