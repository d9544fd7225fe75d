"""Rule 1, the replay loop, on the seed's exchange-rate flow (DESIGN.md section 2)."""

from __future__ import annotations

from engine_workflows import keys, make_engine, runtime

from flow_cli.model.clock import ManualClock
from flow_cli.model.events import RunCompleted, RunStarted, StepCompleted, StepScheduled
from flow_cli.model.snapshot import project
from flow_cli.model.status import RunStatus
from flow_cli.store.protocol import EventStore


def test_exchange_rate_completes_with_five_gapless_events(
    store: EventStore, clock: ManualClock
) -> None:
    engine = make_engine(store, [runtime], clock)
    started = engine.start("exchange-rate", run_id="fx-1")
    assert started.created

    engine.tick(until_idle=True)

    history = engine.history("fx-1")
    assert [e.event.event_key() for e in history] == [
        "run_started",
        "step_scheduled",
        "step_started",
        "step_completed",
        "run_completed",
    ]
    assert [e.sequence for e in history] == [1, 2, 3, 4, 5]
    first = history[0].event
    assert isinstance(first, RunStarted)
    assert first.spec.workflow == "exchange-rate"
    assert first.spec.runtime_build_id == "shop-2026.12.1"
    assert first.spec.patches == ("tax-rounding-fix",)
    scheduled = history[1].event
    assert isinstance(scheduled, StepScheduled)
    assert (scheduled.step_id, scheduled.name, scheduled.input) == (
        "read-rate",
        "readExchangeRate",
        {"pair": "CNY/USD"},
    )
    assert history[2].event.to_data()["attempt"] == 1
    assert history[2].event.to_data()["worker"] == "w1"
    rate = {"pair": "CNY/USD", "rate": 0.1384}
    assert history[3].event == StepCompleted(step_id="read-rate", attempt=1, output=rate)
    assert history[4].event == RunCompleted(result=rate)

    snapshot = engine.snapshot("fx-1")
    assert snapshot.status is RunStatus.COMPLETED
    assert snapshot.outcome is not None and snapshot.outcome.result == rate
    # The snapshot is a projection: rebuilt from history alone it is the same.
    assert project(history) == snapshot
    # Nothing is left to do, and more ticks add nothing.
    assert engine.tick(until_idle=True).idle
    assert keys(engine, "fx-1")[-1] == "run_completed" and len(engine.history("fx-1")) == 5


def test_the_step_output_is_invisible_until_step_completed_commits(
    store: EventStore, clock: ManualClock
) -> None:
    engine = make_engine(store, [runtime], clock)
    engine.start("exchange-rate", run_id="fx-2")
    engine.decide("fx-2")  # one decision: schedules the step, then waits on it
    assert keys(engine, "fx-2") == ["run_started", "step_scheduled"]
    # Deciding again only re-issues the open step: no new event, no error.
    engine.decide("fx-2")
    assert keys(engine, "fx-2") == ["run_started", "step_scheduled"]
    assert engine.snapshot("fx-2").status is RunStatus.RUNNING
    assert engine.snapshot("fx-2").decision_error is None
