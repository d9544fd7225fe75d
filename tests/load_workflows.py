"""Workflows for the multi-process tests: five sequential steps with an idempotent effect."""

from __future__ import annotations

from typing import Any

from flow_cli import Runtime, StepInfo, WorkflowContext
from flow_cli.model.commands import RuntimeCommand
from workflows_example.services import apply_once

runtime = Runtime(build_id="load-1")


@runtime.step("work")
def work(input: dict[str, Any], info: StepInfo) -> dict[str, Any]:
    if input.get("effects"):
        apply_once(info.idempotency_key("effect"), {"attempt": info.attempt})
    return {"n": input["n"] + 1}


@runtime.workflow("five-steps")
def five_steps(ctx: WorkflowContext) -> RuntimeCommand:
    value = 0
    for index in range(5):
        out = ctx.step(
            f"s{index}", "work", {"n": value, "effects": ctx.input.get("effects", False)}
        )
        value = out["n"]
    return ctx.complete({"value": value})


@runtime.workflow("wait-signal")
def wait_signal(ctx: WorkflowContext) -> RuntimeCommand:
    return ctx.complete(ctx.receive("go", "go"))
