"""``Engine.terminate``: ends a run without running workflow code (``flow terminate``)."""

from __future__ import annotations

from typing import Any

from engine_workflows import make_engine

from flow_cli import Runtime, StepInfo, WorkflowContext
from flow_cli.engine.engine import Engine
from flow_cli.engine.replay_check import replay_history
from flow_cli.model.clock import ManualClock
from flow_cli.model.commands import RuntimeCommand
from flow_cli.model.events import RunCancelled, event_from_data
from flow_cli.model.status import RunStatus
from flow_cli.store.protocol import EventStore
from workflows_example import orders


def test_terminate_ends_an_order_whose_code_raises_on_every_decision(
    store: EventStore, clock: ManualClock
) -> None:
    engine = make_engine(store, [orders.runtime], clock)
    engine.start("order", {"amount": 10, "quantity": 1}, run_id="no-sku")  # KeyError: 'sku'
    engine.tick(until_idle=True)
    assert engine.get_run("no-sku").failing
    assert engine.cancel("no-sku", "customer left")
    clock.advance(60)
    engine.tick(until_idle=True)
    assert engine.snapshot("no-sku").status is RunStatus.CANCELLING  # cancel alone cannot end it

    assert engine.terminate("no-sku", "input has no sku") is True
    snap = engine.snapshot("no-sku")
    assert snap.status is RunStatus.CANCELLED
    assert snap.outcome is not None
    assert snap.outcome.to_json() == {
        "kind": "Cancelled",
        "reason": "input has no sku",
        "forced": True,
    }
    record = engine.get_run("no-sku")
    assert record.failing is None and record.decide_at is None
    last = engine.history("no-sku")[-1]
    assert last.event == RunCancelled(reason="input has no sku", forced=True)
    assert engine.terminate("no-sku") is False  # idempotent
    # The forced end is not a decision of the code: replay does not ask the code about it.
    result = replay_history(orders.runtime, engine.history("no-sku"))
    assert [d.field for d in result.divergences] == []


def test_terminate_cancels_a_started_step_with_outcome_unknown(
    store: EventStore, clock: ManualClock
) -> None:
    runtime = Runtime(build_id="term-1")
    engines: list[Engine] = []

    @runtime.workflow("slow")
    def slow(ctx: WorkflowContext) -> RuntimeCommand:
        ctx.step("work", "work", {})
        return ctx.complete(None)

    @runtime.step("work")
    def work(input: Any, info: StepInfo) -> Any:
        # The operator terminates the run while this attempt is running.
        assert engines[0].terminate(info.run_id, "stop") is True
        return "late"

    engine = make_engine(store, [runtime], clock)
    engines.append(engine)
    engine.start("slow", None, run_id="o1")
    engine.tick(until_idle=True)
    closing = [e.event.to_data() for e in engine.history("o1")[-2:]]
    assert closing == [
        {"step_id": "work", "reason": "stop", "outcome_unknown": True},
        {"reason": "stop", "forced": True},
    ]
    assert engine.snapshot("o1").steps["work"].output is None  # the late output is not recorded


def test_run_cancelled_keeps_its_bytes_when_not_forced() -> None:
    assert RunCancelled(reason="x").to_data() == {"reason": "x"}
    assert event_from_data("run_cancelled", {"reason": "x"}) == RunCancelled(reason="x")
    forced = event_from_data("run_cancelled", {"reason": "x", "forced": True})
    assert forced == RunCancelled(reason="x", forced=True)
