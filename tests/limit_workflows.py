"""Workflows for the flow-control limit tests (``tests/test_limits*.py``): a one-step workflow
whose step has a concurrency limit, one whose step has a rate, one with no limit, and one of
three steps under a concurrency of 1."""

from __future__ import annotations

import os
import time
from typing import Any

from flow_cli import Runtime, WorkflowContext
from flow_cli.model.commands import RuntimeCommand
from flow_cli.runtime import StepInfo

runtime = Runtime(build_id="limits-1")

PAUSE = float(os.environ.get("FLOW_TEST_LIMIT_PAUSE", "0.05"))
"""How long a limited step's attempt takes in the worker-process tests."""


@runtime.step("charge", concurrency=3)
def charge(value: Any, info: StepInfo) -> Any:
    time.sleep(PAUSE)
    return value


@runtime.step("ping", rate="20/1s")
def ping(value: Any, info: StepInfo) -> Any:
    return value


@runtime.step("solo", concurrency=1)
def solo(value: Any, info: StepInfo) -> Any:
    time.sleep(PAUSE / 4)
    return value


@runtime.step("plain")
def plain(value: Any, info: StepInfo) -> Any:
    return value


@runtime.workflow("pay")
def pay(ctx: WorkflowContext) -> RuntimeCommand:
    return ctx.complete(ctx.step("charge", charge, ctx.input))


@runtime.workflow("poll")
def poll(ctx: WorkflowContext) -> RuntimeCommand:
    return ctx.complete(ctx.step("ping", ping, ctx.input))


@runtime.workflow("solos")
def solos(ctx: WorkflowContext) -> RuntimeCommand:
    for i in range(3):  # each next attempt may start in the commit that ends the one before
        ctx.step(f"solo{i}", solo, ctx.input)
    return ctx.complete(ctx.input)


@runtime.workflow("simple")
def simple(ctx: WorkflowContext) -> RuntimeCommand:
    return ctx.complete(ctx.step("plain", plain, ctx.input))


@runtime.workflow("sync", concurrency=1, concurrency_key="customer")
def sync(ctx: WorkflowContext) -> RuntimeCommand:
    return ctx.complete(ctx.receive("done", "done"))  # waiting holds the slot too


@runtime.workflow("batch", concurrency=2)
def batch(ctx: WorkflowContext) -> RuntimeCommand:
    return ctx.complete(ctx.receive("done", "done"))
