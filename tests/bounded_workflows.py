"""Workflows with bounded steps for tests that run real worker processes.

``FLOW_BOUNDED_DIR`` names a directory where each handler call appends a line to ``calls`` (so a
test counts invocations across processes) and reads ``hang`` / ``die`` marker files.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from flow_cli import RetryPolicy, Runtime

runtime = Runtime(build_id="bounded-1")


def _dir() -> Path:
    return Path(os.environ["FLOW_BOUNDED_DIR"])


def _call(name: str, attempt: int) -> None:
    with open(_dir() / "calls", "a", encoding="utf-8") as out:
        out.write(f"{name} {attempt}\n")


def calls() -> list[str]:
    """Every handler call so far, ``"name attempt"``."""
    path = _dir() / "calls"
    return path.read_text(encoding="utf-8").splitlines() if path.exists() else []


@runtime.step("slow-first")
def slow_first(input: Any, info: Any) -> Any:
    """Sleeps past its timeout on the first attempt; answers at once on the next."""
    _call("slow-first", info.attempt)
    if info.attempt == 1:
        time.sleep(input["sleep"])
        return {"late": True}
    return {"attempt": info.attempt}


@runtime.workflow("timed")
def timed(ctx: Any) -> Any:
    out = ctx.step(
        "slow",
        slow_first,
        {"sleep": 6},
        retry=RetryPolicy(max_attempts=3, initial_interval=0.1),
        timeout=2,
    )
    return ctx.complete(out)


@runtime.step("progress")
def progress(input: Any, info: Any) -> Any:
    """Heartbeats ``{"done": 40}`` then blocks (the test kills the worker) on attempt 1;
    returns what the previous attempt reported on the next."""
    _call("progress", info.attempt)
    if info.last_heartbeat is None:
        info.heartbeat({"done": 40})
        time.sleep(120)
    return {"resumed_from": info.last_heartbeat}


@runtime.workflow("resumable")
def resumable(ctx: Any) -> Any:
    return ctx.complete(ctx.step("p", progress, None, retry=RetryPolicy(initial_interval=0.1)))


@runtime.step("charge", on_lost="unknown")
def charge(input: Any, info: Any) -> Any:
    """A charge through an API without idempotency keys: never blindly run twice."""
    _call("charge", info.attempt)
    time.sleep(120)  # the test kills the worker meanwhile
    return {"charge": "ch_real"}


@runtime.step("receipt")
def receipt(input: Any, info: Any) -> Any:
    return {"receipt": input}


@runtime.workflow("charge")
def charge_flow(ctx: Any) -> Any:
    charged = ctx.step("charge", charge, ctx.input)
    return ctx.complete(ctx.step("receipt", receipt, charged))


@runtime.workflow("fragile")
def fragile(ctx: Any) -> Any:
    """Its decision fails while a ``broken`` marker exists (the bug before the hotfix)."""
    if (_dir() / "broken").exists():
        raise RuntimeError("the bug the hotfix removes")
    return ctx.complete("fixed")


@runtime.step("flaky")
def flaky(input: Any, info: Any) -> Any:
    _call("flaky", info.attempt)
    if info.attempt == 1:
        raise ConnectionError("gateway down")
    return {"attempt": info.attempt}


@runtime.workflow("long-backoff")
def long_backoff(ctx: Any) -> Any:
    policy = RetryPolicy(max_attempts=3, initial_interval=300)
    return ctx.complete(ctx.step("flaky", flaky, None, retry=policy))
