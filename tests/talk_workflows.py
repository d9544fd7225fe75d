"""Workflows with queries and updates, for the tests of talking to running runs.

``build()`` makes the same code under any build id; ``changed=True`` changes the answer of the
``change-address`` update handler, as a deploy would (recorded answers must still replay).
"""

from __future__ import annotations

from typing import Any

from flow_cli import Runtime, StepInfo, UpdateRejected, WorkflowContext
from flow_cli.model.commands import RuntimeCommand


def build(build_id: str = "talk-1", *, changed: bool = False) -> Runtime:
    runtime = Runtime(build_id=build_id)

    @runtime.workflow("order", signals=["approval", "delivered"])
    def order(ctx: WorkflowContext) -> RuntimeCommand:
        ctx.step("charge", "charge", {"amount": ctx.input["amount"]})
        approved = ctx.receive("approval", "approval")
        address = current_address(ctx)
        ctx.step("ship", "ship", {"address": address, "approved": approved})
        return ctx.complete({"address": address, "updates": len(ctx.updates("counter"))})

    def current_address(ctx: WorkflowContext) -> Any:
        changes = ctx.updates("change-address")
        return changes[-1].result["address"] if changes else ctx.input["address"]

    @runtime.query("order", "status")
    def status(ctx: WorkflowContext, args: Any) -> Any:
        return {
            "charged": ctx.step_output("charge") is not None,
            "shipped": ctx.step_output("ship") is not None,
            "address": current_address(ctx),
            "echo": args,
        }

    @runtime.query("order", "boom")
    def boom(ctx: WorkflowContext, args: Any) -> Any:
        raise ValueError("no status today")

    @runtime.query("order", "sneaky")
    def sneaky(ctx: WorkflowContext, args: Any) -> Any:
        return ctx.complete("done by a query")

    @runtime.query("order", "waits")
    def waits(ctx: WorkflowContext, args: Any) -> Any:
        return ctx.step("charge", "charge", {"amount": ctx.input["amount"]})

    @runtime.update("order", "change-address")
    def change_address(ctx: WorkflowContext, args: Any) -> Any:
        if ctx.step_state("ship") is not None:
            raise UpdateRejected("the parcel has left the warehouse")
        if not isinstance(args, dict) or not isinstance(args.get("address"), str):
            raise UpdateRejected('give {"address": TEXT}')
        address = args["address"].upper() if changed else args["address"]
        return {"address": address}

    @runtime.update("order", "counter")
    def counter(ctx: WorkflowContext, args: Any) -> Any:
        # The answer depends on the history the handler saw: a caller that lost a race must
        # be answered on the history its update is recorded after.
        return {"n": len(ctx.updates("counter")) + 1}

    @runtime.update("order", "broken")
    def broken(ctx: WorkflowContext, args: Any) -> Any:
        raise KeyError("missing")

    @runtime.update("order", "not-json")
    def not_json(ctx: WorkflowContext, args: Any) -> Any:
        return {1, 2}

    @runtime.workflow("looper")
    def looper(ctx: WorkflowContext) -> RuntimeCommand:
        n = ctx.input["n"]
        if n >= 2:
            return ctx.complete(n)
        ctx.receive("go", "go")
        return ctx.continue_as_new({"n": n + 1})

    @runtime.query("looper", "n")
    def looper_n(ctx: WorkflowContext, args: Any) -> Any:
        return ctx.input["n"]

    @runtime.update("looper", "note")
    def note(ctx: WorkflowContext, args: Any) -> Any:
        return {"n": ctx.input["n"], "note": args}

    @runtime.workflow("parent")
    def parent(ctx: WorkflowContext) -> RuntimeCommand:
        return ctx.complete(ctx.child("kid", "order", ctx.input).result)

    @runtime.step("charge")
    def charge(input: Any, info: StepInfo) -> Any:
        return {"charged": input["amount"]}

    @runtime.step("ship")
    def ship(input: Any, info: StepInfo) -> Any:
        return {"shipped_to": input["address"]}

    return runtime


runtime = build()
changed = build("talk-2", changed=True)
"""The same workflows under another build whose ``change-address`` handler answers otherwise."""
ORDER = {"amount": 30, "address": "1 Old Road"}
