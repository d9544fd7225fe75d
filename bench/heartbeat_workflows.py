"""The heartbeating steps of ``bench/heartbeats.py``: a build of its own (``beats-1``), so the
W1 worker and the beaters' worker never take each other's work."""

from __future__ import annotations

import time
from typing import Any

from flow_cli import Runtime

runtime = Runtime(build_id="beats-1")


@runtime.step("beat", heartbeat_timeout=5)
def beat(input: Any, info: Any) -> Any:
    """Heartbeats every ``every`` seconds for ``secs`` seconds, its progress as details."""
    end = time.monotonic() + input["secs"]
    beats = 0
    while time.monotonic() < end:
        beats += 1
        info.heartbeat({"beats": beats})
        time.sleep(input["every"])
    return {"beats": beats}


@runtime.workflow("beater")
def beater(ctx: Any) -> Any:
    return ctx.complete(ctx.step("b", beat, ctx.input))
