"""Workflows for the command-line tests, in three builds.

``runtime`` (build ``cli-1``) is what runs start under. ``compatible`` (``cli-1-compatible``) is
the same code under another build id: every history replays on it. ``incompatible``
(``cli-2``) changes the input of the first step of ``two-step``: histories of that workflow
diverge on it.
"""

from __future__ import annotations

from typing import Any

from flow_cli import Runtime, StepInfo, WorkflowContext
from flow_cli.model.commands import RuntimeCommand


def _register(runtime: Runtime, *, changed: bool = False) -> Runtime:
    @runtime.workflow("two-step")
    def two_step(ctx: WorkflowContext) -> RuntimeCommand:
        n = ctx.input["n"] if isinstance(ctx.input, dict) else 1
        first = ctx.step("first", "double", {"n": n + 100 if changed else n})
        second = ctx.step("second", "double", {"n": first["n"]})
        return ctx.complete({"result": second["n"]})

    @runtime.workflow("approval")
    def approval(ctx: WorkflowContext) -> RuntimeCommand:
        decision = ctx.receive("approval", "approve")
        return ctx.complete({"approved": decision})

    @runtime.workflow("callback")
    def callback(ctx: WorkflowContext) -> RuntimeCommand:
        token = ctx.input["token"] if isinstance(ctx.input, dict) else ctx.new_token("callback")
        if not ctx.hook_resolved("callback"):
            return ctx.create_hook("callback", token, {"purpose": "test [not markup]"})
        return ctx.complete({"callback": ctx.hook("callback")})

    @runtime.workflow("parent")
    def parent(ctx: WorkflowContext) -> RuntimeCommand:
        outcome = ctx.child("kid", "two-step", {"n": 1})
        return ctx.complete({"child": outcome.result})

    @runtime.workflow("sleepy")
    def sleepy(ctx: WorkflowContext) -> RuntimeCommand:
        ctx.sleep("nap", 3600)
        return ctx.complete("rested")

    @runtime.workflow("broken")
    def broken(ctx: WorkflowContext) -> RuntimeCommand:
        raise ValueError("boom [red]not markup[/red]")

    @runtime.step("double")
    def double(input: Any, info: StepInfo) -> Any:
        return {"n": input["n"] * 2}

    return runtime


runtime = _register(Runtime(build_id="cli-1"))
compatible = _register(Runtime(build_id="cli-1-compatible"))
incompatible = _register(Runtime(build_id="cli-2"), changed=True)
not_a_runtime = {"build_id": "nope"}
