"""The previous build of the shop, ``shop-2026.11.1``: before the tax-rounding fix.

Runs started by this build recorded no patch markers; ``orders`` (the current build) replays
them exactly, because its change is guarded by ``ctx.patched("tax-rounding-fix")``.
"""

from __future__ import annotations

from flow_cli import Runtime, WorkflowContext
from flow_cli.model.commands import RuntimeCommand
from workflows_example.orders import run_order
from workflows_example.shared import register_shared

runtime = Runtime(build_id="shop-2026.11.1")
register_shared(runtime)


@runtime.workflow("order")
def order(ctx: WorkflowContext) -> RuntimeCommand:
    return run_order(ctx, float(int(ctx.input["amount"] * 1.2 * 100) / 100))
