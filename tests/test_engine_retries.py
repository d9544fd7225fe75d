"""Retries and rule 4 (acceptance 5): durable backoff, exhaustion, and closing a batch."""

from __future__ import annotations

from datetime import timedelta

from engine_workflows import StepLog, data, events, hang_step, keys, make_engine, scenario_runtime

from flow_cli.model.clock import ManualClock
from flow_cli.model.clock import parse_utc as utc
from flow_cli.model.status import RunStatus, StepStatus
from flow_cli.store.protocol import EventStore


def test_exhausted_step_in_a_batch_cancels_unsettled_siblings_before_run_failed(
    store: EventStore, clock: ManualClock
) -> None:
    log = StepLog()
    engine = make_engine(store, [scenario_runtime(log)], clock)
    t0 = clock.now()
    engine.start("batch-terminate", run_id="trio")
    engine.decide("trio")
    assert keys(engine, "trio") == ["run_started", *["step_scheduled"] * 3]
    assert [d["batch_id"] for d in data(engine, "trio", "step_scheduled")] == ["trio"] * 3

    # Leasing records step_started: "b" and "c" are attempts of a worker that then hung (their
    # outcome is unknown); "a": its first attempt fails, the retry is due one second later.
    leases = {lease.step_id: lease for lease in engine.work.lease_steps(3600, 10)}
    assert set(leases) == {"a", "b", "c"}
    assert engine.work.execute_step(leases["a"]).state == "retrying"

    engine.tick(until_idle=True)  # before the backoff elapsed: nothing runs
    assert log.calls == [("trio", "a", 1)]
    clock.advance(1)
    engine.tick(until_idle=True)
    assert log.calls == [("trio", "a", 1), ("trio", "a", 2)]
    clock.advance(1.5)  # the second backoff is two seconds
    engine.tick(until_idle=True)
    assert len(log.calls) == 2
    clock.advance(0.5)
    engine.tick(until_idle=True)
    assert log.calls == [("trio", "a", 1), ("trio", "a", 2), ("trio", "a", 3)]

    history = engine.history("trio")
    assert [e.event.event_key() for e in history] == [
        "run_started",
        "step_scheduled",
        "step_scheduled",
        "step_scheduled",
        "step_started",  # a 1
        "step_started",  # b, never finished
        "step_started",  # c, never finished
        "step_failed",
        "step_started",  # a 2
        "step_failed",
        "step_started",  # a 3
        "step_failed",  # exhausted
        "step_cancelled",  # b: started, outcome unknown
        "step_cancelled",  # c: started, outcome unknown
        "run_failed",
    ]
    assert [e.sequence for e in history] == list(range(1, 16))
    failed = data(engine, "trio", "step_failed")
    assert [(f["step_id"], f["attempt"], f["exhausted"]) for f in failed] == [
        ("a", 1, False),
        ("a", 2, False),
        ("a", 3, True),
    ]
    assert [f["next_attempt_at"] for f in failed] == [
        (t0 + timedelta(seconds=1)).isoformat(),
        (t0 + timedelta(seconds=3)).isoformat(),
        None,
    ]
    cancelled = data(engine, "trio", "step_cancelled")
    assert [(c["step_id"], c["outcome_unknown"]) for c in cancelled] == [
        ("b", True),
        ("c", True),
    ]
    assert all("'a' exhausted" in c["reason"] for c in cancelled)
    (run_failed,) = data(engine, "trio", "run_failed")
    assert run_failed["error"]["type"] == "StepExhausted"
    assert run_failed["error"]["step_id"] == "a"
    assert run_failed["error"]["step_error"] == {
        "type": "RuntimeError",
        "message": "boom on attempt 3",
        "attempt": 3,
    }
    # The three closing events and the terminal one were one append (one commit time).
    tail = history[-3:]
    assert len({e.recorded_at for e in tail}) == 1

    snapshot = engine.snapshot("trio")
    assert snapshot.status is RunStatus.FAILED
    assert {s: snapshot.steps[s].status for s in "abc"} == {
        "a": StepStatus.FAILED,
        "b": StepStatus.CANCELLED,
        "c": StepStatus.CANCELLED,
    }
    # Nothing of the run is left to lease: the hung and dead leases expire into nothing.
    clock.advance(7200)
    assert engine.tick(until_idle=True).idle
    assert len(log.calls) == 3
    assert len(engine.history("trio")) == 15


def test_retry_attempts_are_numbered_and_wait_for_next_attempt_at(
    store: EventStore, clock: ManualClock
) -> None:
    log = StepLog()
    engine = make_engine(store, [scenario_runtime(log)], clock)
    t0 = clock.now()
    engine.start("retry-once", {"max_attempts": 3, "handler": "boom"}, run_id="r")
    engine.tick(until_idle=True)
    assert log.calls == [("r", "s", 1)]
    (first,) = data(engine, "r", "step_failed")
    assert first["attempt"] == 1
    assert first["error_type"] == "RuntimeError"
    assert first["message"] == "boom on attempt 1"
    assert first["exhausted"] is False
    assert utc(first["next_attempt_at"]) == t0 + timedelta(seconds=2)
    assert engine.snapshot("r").steps["s"].status is StepStatus.BACKOFF
    assert engine.snapshot("r").status is RunStatus.SUSPENDED

    clock.advance(1.999)
    assert engine.tick(until_idle=True).steps_run == 0
    assert len(log.calls) == 1
    clock.advance(0.001)
    engine.tick(until_idle=True)
    assert log.calls == [("r", "s", 1), ("r", "s", 2)]
    second = data(engine, "r", "step_failed")[1]
    assert second["attempt"] == 2
    assert utc(second["next_attempt_at"]) == t0 + timedelta(seconds=2 + 6)

    clock.advance(5)
    assert engine.tick(until_idle=True).steps_run == 0
    clock.advance(1)
    engine.tick(until_idle=True)
    assert log.calls == [("r", "s", 1), ("r", "s", 2), ("r", "s", 3)]
    third = data(engine, "r", "step_failed")[2]
    assert (third["attempt"], third["exhausted"], third["next_attempt_at"]) == (3, True, None)
    assert [d["attempt"] for d in data(engine, "r", "step_started")] == [1, 2, 3]
    # Each attempt started at or after the time its predecessor named, never before.
    started = events(engine, "r", "step_started")
    assert started[1].recorded_at == t0 + timedelta(seconds=2)
    assert started[2].recorded_at == t0 + timedelta(seconds=8)
    assert keys(engine, "r")[-1] == "run_failed"


def test_a_retried_step_completes_with_the_later_attempt(
    store: EventStore, clock: ManualClock
) -> None:
    log = StepLog()
    engine = make_engine(store, [scenario_runtime(log)], clock)
    engine.start("retry-once", {"max_attempts": 3, "handler": "flaky"}, run_id="r")
    engine.tick(until_idle=True)
    clock.advance(2)
    engine.tick(until_idle=True)
    assert keys(engine, "r") == [
        "run_started",
        "step_scheduled",
        "step_started",
        "step_failed",
        "step_started",
        "step_completed",
        "run_completed",
    ]
    assert data(engine, "r", "step_failed")[0]["error_type"] == "ConnectionError"
    assert data(engine, "r", "run_completed")[0]["result"] == {"flaky": {"x": 1}, "attempt": 2}
    assert log.calls == [("r", "s", 1), ("r", "s", 2)]


def test_non_retryable_error_fails_the_step_at_once(store: EventStore, clock: ManualClock) -> None:
    log = StepLog()
    engine = make_engine(store, [scenario_runtime(log)], clock)
    engine.start(
        "retry-once",
        {"max_attempts": 5, "handler": "bad-input", "non_retryable": ["ValueError"]},
        run_id="r",
    )
    engine.tick(until_idle=True)
    assert keys(engine, "r") == [
        "run_started",
        "step_scheduled",
        "step_started",
        "step_failed",
        "run_failed",
    ]
    (failed,) = data(engine, "r", "step_failed")
    assert "raise ValueError" in failed.pop("traceback")
    assert failed == {
        "step_id": "s",
        "attempt": 1,
        "error_type": "ValueError",
        "message": "the input can never work",
        "next_attempt_at": None,
        "exhausted": True,
    }
    assert log.calls == [("r", "s", 1)]
    clock.advance(3600)
    engine.tick(until_idle=True)
    assert log.calls == [("r", "s", 1)]


def test_surface_lets_the_workflow_handle_the_failure(
    store: EventStore, clock: ManualClock
) -> None:
    engine = make_engine(store, [scenario_runtime()], clock)
    engine.start("surface", {"handle": True}, run_id="r")
    engine.tick(until_idle=True)
    clock.advance(1)
    engine.tick(until_idle=True)
    assert keys(engine, "r") == [
        "run_started",
        "step_scheduled",
        "step_started",
        "step_failed",
        "step_started",
        "step_failed",
        "run_completed",
    ]
    assert data(engine, "r", "step_failed")[1]["exhausted"] is True
    assert data(engine, "r", "run_completed")[0]["result"] == {
        "handled": {"type": "RuntimeError", "message": "boom on attempt 2", "attempt": 2}
    }


def test_surface_with_the_sequential_helper_raises_step_failed_error(
    store: EventStore, clock: ManualClock
) -> None:
    engine = make_engine(store, [scenario_runtime()], clock)
    engine.start("surface-seq", run_id="r")
    engine.tick(until_idle=True)
    assert keys(engine, "r")[-2:] == ["step_failed", "run_completed"]
    assert data(engine, "r", "run_completed")[0]["result"] == {
        "caught": {"type": "RuntimeError", "message": "boom on attempt 1", "attempt": 1}
    }


def test_reissuing_a_surfaced_failed_step_is_workflow_stuck_not_a_hang(
    store: EventStore, clock: ManualClock
) -> None:
    engine = make_engine(store, [scenario_runtime()], clock)
    engine.start("surface", {"handle": False}, run_id="r")
    engine.tick(until_idle=True)
    clock.advance(1)
    report = engine.tick(until_idle=True)
    assert report.decision_failures == 1
    history = keys(engine, "r")
    assert history[-3:] == ["step_started", "step_failed", "decision_failed"]
    (stuck,) = data(engine, "r", "decision_failed")
    assert stuck["error_type"] == "WorkflowStuck"
    assert "already settled" in stuck["message"]
    snapshot = engine.snapshot("r")
    assert not snapshot.terminal
    assert snapshot.decision_error is not None
    assert snapshot.decision_error.to_data() == stuck
    for _ in range(3):
        clock.advance(10)
        engine.tick(until_idle=True)
    assert keys(engine, "r") == history


def test_any_terminal_transition_cancels_unsettled_steps_first(
    store: EventStore, clock: ManualClock
) -> None:
    log = StepLog()
    engine = make_engine(store, [scenario_runtime(log)], clock)
    engine.start("complete-early", run_id="r")
    engine.decide("r")
    hang_step(engine, "r", "slow")  # "fast" completes, "slow" hangs
    engine.tick(until_idle=True)
    assert keys(engine, "r")[-2:] == ["step_cancelled", "run_completed"]
    (cancelled,) = data(engine, "r", "step_cancelled")
    assert (cancelled["step_id"], cancelled["outcome_unknown"]) == ("slow", True)
    assert cancelled["reason"] == "run completed"
    # The hung attempt's lease expires into nothing: the run has ended.
    clock.advance(7200)
    engine.tick(until_idle=True)
    assert log.calls == [("r", "fast", 1)]
    assert keys(engine, "r")[-1] == "run_completed"


def test_an_attempt_whose_worker_died_runs_again_with_the_same_number(
    store: EventStore, clock: ManualClock
) -> None:
    log = StepLog()
    engine = make_engine(store, [scenario_runtime(log)], clock)
    engine.start("retry-once", {"max_attempts": 3, "handler": "ok"}, run_id="r")
    engine.decide("r")
    hang_step(engine, "r", "s", lease_seconds=30)
    assert data(engine, "r", "step_started")[0]["attempt"] == 1

    clock.advance(29)  # the lease still holds: nobody runs it
    assert engine.tick(until_idle=True).steps_run == 0
    clock.advance(1)  # the lease expired
    engine.tick(until_idle=True)
    assert log.calls == [("r", "s", 1)]
    assert keys(engine, "r") == [
        "run_started",
        "step_scheduled",
        "step_started",  # the dead worker's
        "step_started",  # the same attempt again
        "step_completed",
        "run_completed",
    ]
    assert [d["attempt"] for d in data(engine, "r", "step_started")] == [1, 1]
    assert [d["worker"] for d in data(engine, "r", "step_started")] == ["hung-worker", "w1"]
    assert data(engine, "r", "step_completed")[0]["attempt"] == 1


def test_cancelling_a_run_with_a_running_step_marks_its_outcome_unknown(
    store: EventStore, clock: ManualClock
) -> None:
    engine = make_engine(store, [scenario_runtime()], clock)
    engine.start("retry-once", {"max_attempts": 3, "handler": "ok"}, run_id="r")
    engine.decide("r")
    hang_step(engine, "r", "s")
    engine.cancel("r", "stop")
    engine.tick(until_idle=True)
    assert keys(engine, "r") == [
        "run_started",
        "step_scheduled",
        "step_started",
        "cancel_requested",
        "step_cancelled",
        "run_cancelled",
    ]
    assert data(engine, "r", "step_cancelled") == [
        {"step_id": "s", "reason": "stop", "outcome_unknown": True}
    ]
