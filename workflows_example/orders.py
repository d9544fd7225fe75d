"""The seed's order flow, current build ``shop-2026.12.1``.

reserve stock (idempotency key ``{order}:reserve-stock:{sku}``) → manager approval hook, with a
payment deadline timer → charge payment with retries → one child run per parcel → wait for the
``shipped`` signal → complete.

The tax-rounding change is guarded by the patch marker ``tax-rounding-fix``: runs recorded by
the previous build (without the marker) keep the old arithmetic, so they replay unchanged.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from flow_cli import Runtime, RuntimeCommand, WorkflowContext
from workflows_example.shared import PAYMENT_RETRY, register_shared

runtime = Runtime(build_id="shop-2026.12.1", patches=["tax-rounding-fix"])
register_shared(runtime)

PAYMENT_WINDOW = timedelta(hours=2)


def charge_amount(ctx: WorkflowContext, order: dict[str, Any]) -> float:
    if ctx.patched("tax-rounding-fix"):
        return round(order["amount"] * 1.2, 2)
    return float(int(order["amount"] * 1.2 * 100) / 100)


def run_order(ctx: WorkflowContext, amount: float) -> RuntimeCommand:
    """The order flow, given how this build computes the amount to charge."""
    order = ctx.input
    sku = order["sku"]
    ctx.step("reserve-stock", "reserveStock", {"sku": sku, "quantity": order["quantity"]})

    deadline_passed = ctx.timer("payment-deadline", ctx.started_at + PAYMENT_WINDOW)
    approval = ctx.hook("approval")
    if approval is None:
        if deadline_passed:
            ctx.step("release-stock", "releaseStock", {"sku": sku})
            return ctx.fail({"type": "PaymentDeadline", "message": "not approved in time"})
        token = ctx.new_token("approval")
        return ctx.create_hook("approval", token, {"order": ctx.run_id, "amount": amount})
    if not approval.get("approved", False):
        ctx.step("release-stock", "releaseStock", {"sku": sku})
        return ctx.fail({"type": "Rejected", "message": approval.get("note", "rejected")})

    payment = ctx.step(
        "charge-payment",
        "chargePayment",
        {"amount": amount, "currency": "EUR", "card": order.get("card", "4242")},
        retry=PAYMENT_RETRY,
    )

    parcels = order.get("parcels", [])
    packed = ctx.all_children(
        [ctx.start_child(f"parcel-{p}", "parcel", {"parcel": p}) for p in parcels]
    )

    shipment = ctx.receive("shipped", "shipped")
    labels = [outcome.result["label"] for outcome in packed]
    return ctx.complete(
        {
            "order": ctx.run_id,
            "charge": payment["charge_id"],
            "amount": amount,
            "labels": labels,
            "tracking": (shipment or {}).get("tracking"),
        }
    )


@runtime.workflow("order")
def order(ctx: WorkflowContext) -> RuntimeCommand:
    return run_order(ctx, charge_amount(ctx, ctx.input))
