"""The seed's order flow, current build ``shop-2026.12.1``.

reserve stock (idempotency key ``{order}:reserve-stock:{sku}``) → manager approval hook, with a
payment deadline timer → charge payment with retries → one child run per parcel → wait for the
``shipped`` signal → complete.

Talking to a running order: the ``status`` query answers "where is my order?" from its own
history (nothing written); the ``change-address`` update changes where it ships until the
warehouse reports it shipped, and is recorded for the workflow (``ctx.updates``).

The tax-rounding change is guarded by the patch marker ``tax-rounding-fix``: runs recorded by
the previous build (without the marker) keep the old arithmetic, so they replay unchanged.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from flow_cli import Runtime, RuntimeCommand, UpdateRejected, WorkflowContext
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
    result = {
        "order": ctx.run_id,
        "charge": payment["charge_id"],
        "amount": amount,
        "labels": labels,
        "tracking": (shipment or {}).get("tracking"),
    }
    if ctx.updates("change-address"):
        # Only runs whose address changed say where they went: recorded results stay as they were.
        result["ship_to"] = ship_to(ctx)
    return ctx.complete(result)


def ship_to(ctx: WorkflowContext) -> Any:
    """Where the order ships: the last accepted ``change-address``, else the input's address."""
    changes = ctx.updates("change-address")
    if changes:
        return changes[-1].result["address"]  # type: ignore[index]
    return ctx.input.get("address") if isinstance(ctx.input, dict) else None


@runtime.workflow("order", signals=["shipped"])  # another name is refused at the door
def order(ctx: WorkflowContext) -> RuntimeCommand:
    return run_order(ctx, charge_amount(ctx, ctx.input))


@runtime.query("order", "status")
def order_status(ctx: WorkflowContext, args: Any) -> Any:
    """Where the order is, in the shop's words (``flow query RUN status``)."""
    approval = ctx.hook("approval")
    if ctx.wait_done("shipped"):
        stage = "shipped"
    elif ctx.step_output("charge-payment") is not None:
        stage = "packing"
    elif approval is not None:
        stage = "approved" if approval.get("approved") else "rejected"
    else:
        stage = "awaiting approval"
    return {
        "stage": stage,
        "charged": ctx.step_output("charge-payment") is not None,
        "ship_to": ship_to(ctx),
    }


@runtime.update("order", "change-address")
def change_address(ctx: WorkflowContext, args: Any) -> Any:
    """Change the shipping address until the warehouse reports the order shipped."""
    address = args.get("address") if isinstance(args, dict) else None
    if not isinstance(address, str) or not address.strip():
        raise UpdateRejected('give the new address: {"address": "..."}')
    if ctx.wait_done("shipped"):
        raise UpdateRejected("the order has already shipped")
    return {"address": address.strip(), "was": ship_to(ctx)}
