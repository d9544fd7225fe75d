"""A workflow and a step under flow-control limits (docs/operations.md, "Limits").

At most one ``sync-customer`` run per customer is in progress at once (the others wait,
``Pending``, and start in start order); ``chargeCard`` has at most two attempts in flight
fleet-wide and at most 100 started per minute.
"""

from __future__ import annotations

from typing import Any

from flow_cli import Runtime, WorkflowContext
from flow_cli.model.commands import RuntimeCommand
from flow_cli.runtime import StepInfo

runtime = Runtime(build_id="limits-2026.12.1")


@runtime.step("chargeCard", concurrency=2, rate="100/1m")
def charge_card(order: Any, info: StepInfo) -> Any:
    return {"charged": order["amount"], "key": info.idempotency_key("charge")}


@runtime.workflow("sync-customer", concurrency=1, concurrency_key="customer")
def sync_customer(ctx: WorkflowContext) -> RuntimeCommand:
    charged = ctx.step("charge", charge_card, ctx.input)
    ctx.receive("confirmed", "confirmed")  # waiting holds the slot too
    return ctx.complete(charged)
