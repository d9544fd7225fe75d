"""Workflows for the ``flow doctor`` and ``flow builds`` tests, in three builds.

``runtime`` (build ``fleet-1``) is what the fleet runs; ``old`` (``fleet-0``) is a build that
is later dropped from the configuration, stranding its runs; ``spare`` (``fleet-2``) is hosted
but never used.
"""

from __future__ import annotations

from flow_cli import Runtime, WorkflowContext
from flow_cli.model.commands import RuntimeCommand


def _register(runtime: Runtime) -> Runtime:
    @runtime.workflow("nap")
    def nap(ctx: WorkflowContext) -> RuntimeCommand:
        ctx.sleep("nap", ctx.input["seconds"])
        return ctx.complete("rested")

    @runtime.workflow("broken")
    def broken(ctx: WorkflowContext) -> RuntimeCommand:
        raise ValueError("the order book is missing")

    @runtime.workflow("approval")
    def approval(ctx: WorkflowContext) -> RuntimeCommand:
        return ctx.complete({"approved": ctx.receive("approval", "approve")})

    @runtime.workflow("callback")
    def callback(ctx: WorkflowContext) -> RuntimeCommand:
        if not ctx.hook_resolved("callback"):
            return ctx.create_hook("callback", ctx.new_token("callback"), None)
        return ctx.complete(ctx.hook("callback"))

    return runtime


runtime = _register(Runtime(build_id="fleet-1", patches=["fleet-fix"]))
old = _register(Runtime(build_id="fleet-0"))
spare = _register(Runtime(build_id="fleet-2"))
