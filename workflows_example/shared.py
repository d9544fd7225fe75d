"""Step handlers and workflows that every build of the example shop shares."""

from __future__ import annotations

import os
import time
from datetime import timedelta
from typing import Any

from flow_cli import TIMED_OUT, RetryPolicy, Runtime, RuntimeCommand, StepInfo, WorkflowContext
from workflows_example.services import apply_once, record_call


class CardDeclined(Exception):
    """The card was refused: retrying will not help (a non-retryable error type)."""


class PaymentGatewayTimeout(Exception):
    """The gateway did not answer: worth retrying."""


def register_shared(runtime: Runtime) -> None:
    """Add the shared steps and workflows to ``runtime``."""

    @runtime.step("reserveStock")
    def reserve_stock(input: dict[str, Any], info: StepInfo) -> dict[str, Any]:
        # e.g. order-2026-0001:reserve-stock:sku-8842
        key = info.idempotency_key(input["sku"])
        record_call(key, info.attempt)
        applied = apply_once(
            key,
            {
                "effect": "reserve",
                "sku": input["sku"],
                "quantity": input["quantity"],
                "attempt": info.attempt,
            },
        )
        # The window the seed warns about: the external call succeeded, the event is not yet
        # committed. FLOW_EXAMPLE_STEP_DELAY widens it so crash tests can kill a worker here.
        time.sleep(float(os.environ.get("FLOW_EXAMPLE_STEP_DELAY", "0")))
        return {"reservation": key, "applied_now": applied}

    @runtime.step("releaseStock")
    def release_stock(input: dict[str, Any], info: StepInfo) -> dict[str, Any]:
        key = info.idempotency_key(input["sku"])
        apply_once(key, {"effect": "release", "sku": input["sku"]})
        return {"released": key}

    @runtime.step("chargePayment")
    def charge_payment(input: dict[str, Any], info: StepInfo) -> dict[str, Any]:
        # A test card number makes the gateway time out on the first attempts.
        if input.get("card") == "4000-flaky" and info.attempt < 3:
            raise PaymentGatewayTimeout(f"gateway timed out (attempt {info.attempt})")
        if input.get("card") == "4000-declined":
            raise CardDeclined("card declined by issuer")
        key = info.idempotency_key("payment")
        apply_once(key, {"effect": "charge", "amount": input["amount"]})
        return {"charge_id": key, "amount": input["amount"], "currency": input["currency"]}

    @runtime.step("packParcel")
    def pack_parcel(input: dict[str, Any], info: StepInfo) -> dict[str, Any]:
        return {"parcel": input["parcel"], "label": f"LBL-{input['parcel'].upper()}"}

    @runtime.step("readExchangeRate")
    def read_exchange_rate(input: dict[str, Any], info: StepInfo) -> dict[str, Any]:
        return {"pair": input["pair"], "rate": 0.1384}

    @runtime.step("pollInbox")
    def poll_inbox(input: dict[str, Any], info: StepInfo) -> dict[str, Any]:
        return {"round": input["round"], "messages": input["round"] % 3}

    @runtime.workflow("exchange-rate")
    def exchange_rate(ctx: WorkflowContext) -> RuntimeCommand:
        # The seed's example: the rate is read in a step, never in workflow code.
        if (rate := ctx.step_output("read-rate")) is not None:
            return ctx.complete(rate)
        return ctx.schedule_step("read-rate", "readExchangeRate", {"pair": "CNY/USD"})

    @runtime.workflow("parcel")
    def parcel(ctx: WorkflowContext) -> RuntimeCommand:
        packed = ctx.step("pack", pack_parcel, {"parcel": ctx.input["parcel"]})
        return ctx.complete(packed)

    @runtime.workflow("inbox-poller")
    def inbox_poller(ctx: WorkflowContext) -> RuntimeCommand:
        # A long-running loop: a few rounds per run, then continue as new with a fresh history.
        state = ctx.input or {}
        round_no = state.get("round", 0)
        total = state.get("total", 0)
        rounds_per_run = state.get("rounds_per_run", 3)
        stop_after = state.get("stop_after", 9)
        for offset in range(rounds_per_run):
            current = round_no + offset
            if current >= stop_after:
                return ctx.complete({"rounds": current, "messages": total})
            polled = ctx.step(f"poll-{current}", "pollInbox", {"round": current})
            total += polled["messages"]
            ctx.sleep_until(f"pause-{current}", ctx.started_at + _pause(offset))
        return ctx.continue_as_new({**state, "round": round_no + rounds_per_run, "total": total})

    @runtime.step("sendReminder")
    def send_reminder(input: dict[str, Any], info: StepInfo) -> dict[str, Any]:
        apply_once(info.idempotency_key("reminder"), {"effect": "remind", "round": input["round"]})
        return {"reminded": input["round"]}

    @runtime.workflow("fan-in")
    def fan_in(ctx: WorkflowContext) -> RuntimeCommand:
        # 50 steps and 5 children, each group one atomic batch, read back in order.
        quotes = [ctx.schedule_step(f"r-{i}", read_exchange_rate, {"pair": i}) for i in range(50)]
        rates = ctx.all_steps(quotes)
        boxes = [ctx.start_child(f"box-{p}", "parcel", {"parcel": f"b{p}"}) for p in range(5)]
        kids = ctx.all_children(boxes)
        return ctx.complete({"rates": len(rates), "labels": [k.result["label"] for k in kids]})

    @runtime.workflow("approval")
    def approval(ctx: WorkflowContext) -> RuntimeCommand:
        # Wait up to 30 days from the start of the chain for a decision, reminding every 7 days,
        # with a fresh history every two rounds.
        expires = ctx.chain_started_at + APPROVAL_EXPIRES
        first = (ctx.input or {}).get("round", 0)
        for k in range(first, first + 2):
            round_end = min(ctx.chain_started_at + REMIND_EVERY * (k + 1), expires)
            answer = ctx.receive(f"decision-{k}", "decision", deadline=round_end)
            if answer is not TIMED_OUT:
                return ctx.complete({"approved": bool(answer.get("ok")), "round": k})
            if round_end >= expires:
                return ctx.complete({"approved": False, "expired": True})
            ctx.step(f"remind-{k}", send_reminder, {"round": k})
        return ctx.continue_as_new({"round": first + 2})


def _pause(offset: int) -> timedelta:
    return timedelta(minutes=5 * (offset + 1))


REMIND_EVERY = timedelta(days=7)
APPROVAL_EXPIRES = timedelta(days=30)


PAYMENT_RETRY = RetryPolicy(
    max_attempts=5,
    initial_interval=2.0,
    backoff_coefficient=2.0,
    max_interval=30.0,
    non_retryable=[CardDeclined],
)
