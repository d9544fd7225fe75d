"""Workflows for the worker log and metrics tests (build ``obs-1``).

``chain`` runs N quick steps; ``flaky`` has a step that fails its first attempt; ``doomed`` a
step that fails both its attempts, so the run fails; ``fragile`` fails to decide until the file
named by ``FLOW_TEST_FIXED`` exists (a deploy that fixes the code, in miniature); ``napper``
sleeps on a timer (its input: seconds, default 1).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from flow_cli import RetryPolicy, Runtime, StepInfo, WorkflowContext
from flow_cli.model.commands import RuntimeCommand

runtime = Runtime(build_id="obs-1")
QUICK_RETRY = RetryPolicy(max_attempts=2, initial_interval=0.2)


@runtime.workflow("chain")
def chain(ctx: WorkflowContext) -> RuntimeCommand:
    n = ctx.input["n"] if isinstance(ctx.input, dict) else 3
    total = 0
    for i in range(n):
        total = ctx.step(f"s{i}", "add", {"total": total})["total"]
    return ctx.complete({"total": total})


@runtime.workflow("flaky")
def flaky(ctx: WorkflowContext) -> RuntimeCommand:
    out = ctx.step("charge", "charge", {"fail_first": True}, retry=QUICK_RETRY)
    return ctx.complete(out)


@runtime.workflow("doomed")
def doomed(ctx: WorkflowContext) -> RuntimeCommand:
    out = ctx.step("charge", "decline", {}, retry=QUICK_RETRY)
    return ctx.complete(out)


@runtime.workflow("fragile")
def fragile(ctx: WorkflowContext) -> RuntimeCommand:
    fixed = os.environ.get("FLOW_TEST_FIXED", "")
    if not fixed or not Path(fixed).exists():
        raise ValueError("bad deploy")
    return ctx.complete("fixed")


@runtime.workflow("napper")
def napper(ctx: WorkflowContext) -> RuntimeCommand:
    ctx.sleep("nap", ctx.input if isinstance(ctx.input, int | float) else 1)
    return ctx.complete("rested")


@runtime.step("add")
def add(input: Any, info: StepInfo) -> Any:
    return {"total": input["total"] + 1}


@runtime.step("charge")
def charge(input: Any, info: StepInfo) -> Any:
    if info.attempt == 1:
        raise ConnectionError("gateway timeout")
    return {"charged": True}


@runtime.step("decline")
def decline(input: Any, info: StepInfo) -> Any:
    raise ValueError("card declined")
