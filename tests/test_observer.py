"""The engine's ``Observer``: what it is told, in-process, on every store.

The real-process tests (tests/test_worker_observe.py) check the log lines and the metrics; these
check the calls that are hard to provoke from outside: a lease lost while the handler runs, the
database coming back, and the cheap default.
"""

from __future__ import annotations

import threading
from datetime import timedelta
from typing import Any

import pytest

from flow_cli import Runtime
from flow_cli.engine.engine import Engine
from flow_cli.engine.observe import NOTHING, Observer, Observers, RunRef, StepRef
from flow_cli.engine.worker import Worker
from flow_cli.errors import StoreError
from flow_cli.model.clock import ManualClock
from flow_cli.model.status import RunStatus
from flow_cli.store.protocol import EventStore, StepLease


class Recorder(Observer):
    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []
        self.lock = threading.Lock()

    def _add(self, *call: Any) -> None:
        with self.lock:
            self.calls.append(call)

    def names(self) -> list[str]:
        with self.lock:
            return [c[0] for c in self.calls]

    def decisions(self, made: int, failed: int) -> None:
        if made or failed:
            self._add("decisions", made, failed)

    def step_finished(self, step: StepRef, outcome: str, seconds: float) -> None:
        self._add("step_finished", step.step_id, outcome)

    def step_failed(
        self, step: StepRef, error_type: str, message: str, next_at: Any, traceback: Any = None
    ) -> None:
        self._add("step_failed", step.step_id, step.attempt, error_type, next_at)

    def run_ended(self, run: RunRef, status: RunStatus, error: Any) -> None:
        self._add("run_ended", run.run_id, status)

    def lease_lost(self, lease: StepLease) -> None:
        self._add("lease_lost", lease.run_id, lease.step_id, lease.attempt)

    def store_error(self, error: StoreError) -> None:
        self._add("store_error")

    def store_recovered(self, seconds: float) -> None:
        self._add("store_recovered")


slow = Runtime(build_id="observe-1")
TAKEOVER: list[Any] = []
"""Called by the step handler: the test's other worker takes the attempt meanwhile."""


@slow.workflow("slow")
def _slow(ctx):  # type: ignore[no-untyped-def]
    out = ctx.step("work", "work", None)
    ctx.receive("go", "go")
    return ctx.complete(out)


@slow.step("work")
def _work(input, info):  # type: ignore[no-untyped-def]
    if TAKEOVER:
        TAKEOVER.pop()()
    return info.worker


def test_nobody_listens_by_default(store: EventStore, clock: ManualClock) -> None:
    engine = Engine(store, [slow], clock=clock)
    assert engine.observer is NOTHING and not NOTHING.listening
    assert Recorder().listening and Observers([NOTHING, Recorder()]).listening
    assert not Observers([NOTHING]).listening


def test_a_result_whose_attempt_another_worker_took_is_a_lost_lease(
    store: EventStore, clock: ManualClock
) -> None:
    first = Engine(store, [slow], clock=clock, worker_id="w1")
    other = Engine(store, [slow], clock=clock, worker_id="w2")
    seen = Recorder()
    first.observe(seen)
    first.start("slow", run_id="r")

    def takeover() -> None:  # w1 stalls past its lease; w2 runs the same attempt and ends it
        clock.advance(timedelta(seconds=31))
        other.tick()

    TAKEOVER.append(takeover)
    first.tick()  # decides, starts the step and runs it: w2 takes it meanwhile
    assert first.snapshot("r").steps["work"].output == "w2"
    assert ("lease_lost", "r", "work", 1) in seen.calls
    assert ("step_finished", "work", "discarded") in seen.calls


def test_a_lease_renewal_refused_twice_is_told_once(store: EventStore, clock: ManualClock) -> None:
    seen = Recorder()
    engine = Engine(store, [slow], clock=clock, worker_id="w1")
    engine.observe(seen)
    keeper = engine.work.lease_keeper(30)
    lease = StepLease(run_id="r", step_id="s", attempt=1, lease_until=clock.now())
    keeper.hold(lease)  # the store knows no such attempt: every renewal is refused
    keeper.renew_now()
    assert seen.calls == []  # once may be the attempt's own end, an instant before its drop
    keeper.renew_now()
    keeper.renew_now()
    assert seen.calls == [("lease_lost", "r", "s", 1)]
    keeper.drop(lease)
    other = StepLease(run_id="r", step_id="t", attempt=1, lease_until=clock.now())
    keeper.hold(other)
    keeper.renew_now()
    keeper.drop(other)  # refused once, then dropped: its end, not a loss
    keeper.renew_now()
    assert seen.calls == [("lease_lost", "r", "s", 1)]


class Outage:
    """A store whose ``lease_runs`` fails while ``down`` is set."""

    def __init__(self, inner: EventStore) -> None:
        self._inner = inner
        self.down = threading.Event()

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._inner, name)
        if name != "lease_runs":
            return attr

        def call(*args: Any, **kwargs: Any) -> Any:
            if self.down.is_set():
                raise StoreError("simulated: the database went away")
            return attr(*args, **kwargs)

        return call


def test_the_worker_tells_when_the_database_is_back(store: EventStore) -> None:
    flaky = Outage(store)
    flaky.down.set()
    engine = Engine(flaky, [slow])  # type: ignore[arg-type]
    seen = Recorder()
    engine.observe(seen)
    errors: list[StoreError] = []
    worker = Worker(engine, max_idle_sleep=0.05, on_store_error=errors.append)
    thread = threading.Thread(target=worker.run)
    thread.start()
    try:
        for _ in range(200):
            if errors:
                break
            threading.Event().wait(0.01)
        flaky.down.clear()
        for _ in range(500):
            if "store_recovered" in seen.names():
                break
            threading.Event().wait(0.01)
    finally:
        worker.stop()
        thread.join(timeout=10)
    assert errors and seen.names().count("store_recovered") == 1


def test_a_scrape_while_the_database_is_away_leaves_out_only_open_runs(store: EventStore) -> None:
    from prometheus_client import generate_latest

    from flow_cli.engine.metrics import MetricsObserver

    class Away:
        def count_runs(self, *args: Any, **kwargs: Any) -> Any:
            raise StoreError("simulated: the database went away")

    metrics = MetricsObserver(Away())  # type: ignore[arg-type]
    metrics.decisions(3, 1)
    text = generate_latest(metrics.registry).decode()
    assert "flow_decisions_total 3.0" in text and "flow_decision_failures_total 1.0" in text
    assert "flow_open_runs{" not in text
    present = MetricsObserver(store)
    assert 'flow_open_runs{status="Pending"} 0.0' in generate_latest(present.registry).decode()


def test_an_error_without_a_message_leaves_no_colon_dangling(
    caplog: pytest.LogCaptureFixture,
) -> None:
    from flow_cli.engine.observe import LogObserver, RunRef
    from flow_cli.model.status import RunStatus

    observer = LogObserver()
    run = RunRef("order-1", "order", "shop-1")
    with caplog.at_level("DEBUG", logger=observer.log.name):
        observer.run_ended(run, RunStatus.FAILED, {"type": "ShippingFailed", "message": ""})
        observer.decision_failed(run, "KeyError", "", None)
    assert [r.getMessage() for r in caplog.records] == [
        "run failed: order-1 (order, build shop-1): ShippingFailed",
        "decision failed: run order-1 (order, build shop-1): KeyError",
    ]
