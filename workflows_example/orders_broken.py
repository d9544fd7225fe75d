"""A build that changes the order flow WITHOUT a patch marker: ``flow replay-check`` fails it.

It charges in cents instead of euros. Runs already past ``charge-payment`` recorded the euro
input, so this code would propose different parameters for a recorded step: a
non-determinism error that would strand every running order if deployed.
"""

from __future__ import annotations

from flow_cli import Runtime, WorkflowContext
from flow_cli.model.commands import RuntimeCommand
from workflows_example.orders import charge_amount, run_order
from workflows_example.shared import register_shared

runtime = Runtime(build_id="shop-2026.12.1-broken", patches=["tax-rounding-fix"])
register_shared(runtime)


@runtime.workflow("order")
def order(ctx: WorkflowContext) -> RuntimeCommand:
    return run_order(ctx, charge_amount(ctx, ctx.input) * 100)
