"""Workflows of the chaos run (bench/chaos.py): every step appends to a side-effect ledger.

The ledger is the file named by $FLOW_CHAOS_LEDGER: one ``run_id<TAB>step_id<TAB>attempt`` line
per invocation, appended (O_APPEND, one write) before the handler returns. A committed
``step_completed`` without its line would be a completion nobody performed.
"""

from __future__ import annotations

import os
import random
import time
from typing import Any

from flow_cli import RetryPolicy, Runtime

runtime = Runtime(build_id="chaos-1")

RETRY = RetryPolicy(max_attempts=5, initial_interval=0.5, max_interval=2.0)


def record(run_id: str, step_id: str, attempt: int) -> None:
    """Append this invocation to the ledger (a no-op without $FLOW_CHAOS_LEDGER)."""
    path = os.environ.get("FLOW_CHAOS_LEDGER")
    if not path:
        return
    line = f"{run_id}\t{step_id}\t{attempt}\n".encode()
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        os.write(fd, line)
    finally:
        os.close(fd)


@runtime.step("work")
def work(value: Any, info: Any) -> Any:
    # A little time inside the handler, so that SIGKILLs land mid-step too.
    pause = float(os.environ.get("FLOW_CHAOS_STEP_PAUSE", "0.02"))
    if pause:
        time.sleep(random.uniform(0, pause))
    record(info.run_id, info.step_id, info.attempt)
    return value + 1 if isinstance(value, int) else value


@runtime.step("flaky")
def flaky(value: Any, info: Any) -> Any:
    """Fails its first attempts (``value`` of them), then succeeds: retries under chaos."""
    record(info.run_id, info.step_id, info.attempt)
    if info.attempt <= int(value):
        raise RuntimeError(f"planned failure of attempt {info.attempt}")
    return info.attempt


@runtime.workflow("chain")
def chain(ctx):  # type: ignore[no-untyped-def]
    """input {"steps": n}: n sequential steps."""
    x = 0
    for i in range(ctx.input["steps"]):
        x = ctx.step(f"s{i}", "work", x)
    return ctx.complete(x)


@runtime.workflow("retry")
def retry(ctx):  # type: ignore[no-untyped-def]
    """input {"fails": k}: one step failing k times before it succeeds, then one more step."""
    got = ctx.step("flaky", "flaky", ctx.input["fails"], retry=RETRY)
    return ctx.complete(ctx.step("after", "work", got))


@runtime.workflow("timer")
def timer(ctx):  # type: ignore[no-untyped-def]
    """input {"secs": s}: a durable timer, then one step."""
    ctx.sleep("nap", ctx.input["secs"])
    return ctx.complete(ctx.step("after", "work", 0))


@runtime.workflow("signal")
def signal(ctx):  # type: ignore[no-untyped-def]
    """Waits for signal "go", then one step."""
    payload = ctx.receive("w", "go")
    ctx.step("after", "work", 0)
    return ctx.complete({"got": payload})


@runtime.workflow("hook")
def hook(ctx):  # type: ignore[no-untyped-def]
    """Waits for its hook's callback, then one step."""
    if not ctx.hook_resolved("h"):
        return ctx.create_hook("h", ctx.new_token("h"), {"for": ctx.run_id})
    ctx.step("after", "work", 0)
    return ctx.complete({"hook": ctx.hook("h")})


@runtime.workflow("parent")
def parent(ctx):  # type: ignore[no-untyped-def]
    """A child chain, then one step of its own."""
    kid = ctx.child("kid", "chain", {"steps": ctx.input["steps"]})
    return ctx.complete({"kid": kid.kind, "own": ctx.step("own", "work", 0)})


@runtime.workflow("doomed")
def doomed(ctx):  # type: ignore[no-untyped-def]
    """Sleeps long; the chaos driver cancels these over filters (a cleanup step runs then)."""
    if ctx.cancel_requested:
        ctx.step("undo", "work", 0)
        return ctx.cancelled()
    ctx.sleep("long", 3600)
    return ctx.complete("slept")
