"""Timers (acceptance 6): a wait fires at its deadline, never before, and waiting costs nothing.

Rule 7: the scheduler finds due timers through an index on due time, so one pass reads as many
rows with 10,000 runs waiting as with 10.
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

from engine_workflows import data, events, keys, make_engine, scenario_runtime

from flow_cli.model.clock import ManualClock
from flow_cli.model.status import RunStatus
from flow_cli.store.protocol import EventStore, RunFilter
from flow_cli.store.sqlite import SQLiteStore


def test_wait_until_fires_at_its_deadline_and_not_before(
    store: EventStore, clock: ManualClock
) -> None:
    engine = make_engine(store, [scenario_runtime()], clock)
    t0 = clock.now()
    deadline = t0 + timedelta(seconds=60)
    engine.start("timer", {"seconds": 60}, run_id="nap")
    engine.tick(until_idle=True)
    assert keys(engine, "nap") == ["run_started", "wait_started"]
    assert data(engine, "nap", "wait_started") == [
        {"wait_id": "nap", "deadline": deadline.isoformat()}
    ]
    assert engine.snapshot("nap").status is RunStatus.SUSPENDED
    # Waiting holds nothing but a due time in the index.
    assert engine.get_run("nap").decide_at == deadline
    assert engine.next_due() == deadline

    clock.advance(59.999)
    assert engine.tick(until_idle=True).idle
    assert keys(engine, "nap") == ["run_started", "wait_started"]
    # Even when something wakes the run just before the deadline, the timer does not fire.
    engine.signal("nap", "poke")
    engine.tick(until_idle=True)
    engine.decide("nap")
    assert keys(engine, "nap") == ["run_started", "wait_started", "signal_received"]

    clock.advance(0.001)
    engine.tick(until_idle=True)
    assert keys(engine, "nap") == [
        "run_started",
        "wait_started",
        "signal_received",
        "wait_completed",
        "run_completed",
    ]
    (fired,) = events(engine, "nap", "wait_completed")
    assert fired.event.to_data() == {"wait_id": "nap", "deadline": deadline.isoformat()}
    assert fired.recorded_at >= deadline
    snapshot = engine.snapshot("nap")
    assert snapshot.waits["nap"].done
    assert snapshot.waits["nap"].fired_at == deadline
    assert snapshot.status is RunStatus.COMPLETED
    assert engine.next_due() is None


def test_a_late_tick_fires_the_timer_once(store: EventStore, clock: ManualClock) -> None:
    engine = make_engine(store, [scenario_runtime()], clock)
    engine.start("timer", {"seconds": 30}, run_id="late")
    engine.tick(until_idle=True)
    clock.advance(timedelta(days=3))
    engine.tick(until_idle=True)
    engine.tick(until_idle=True)
    assert keys(engine, "late") == [
        "run_started",
        "wait_started",
        "wait_completed",
        "run_completed",
    ]
    assert events(engine, "late", "wait_completed")[0].recorded_at == clock.now()


def test_a_deadline_already_past_fires_without_waiting(
    store: EventStore, clock: ManualClock
) -> None:
    engine = make_engine(store, [scenario_runtime()], clock)
    engine.start("timer", {"seconds": 0}, run_id="now")
    engine.tick(until_idle=True)
    assert keys(engine, "now") == [
        "run_started",
        "wait_started",
        "wait_completed",
        "run_completed",
    ]


# -- the scheduler's cost ------------------------------------------------------------------------

FAR = 365 * 86400
"""A year: timers that stay pending through the test."""
DUE = 3
"""Runs whose timer comes due in the measured pass."""


def _one_pass_cost(path: Path, waiting: int) -> tuple[int, int, int]:
    """Rows the scheduler reads, and SQLite VM instructions spent, in one ``tick()`` pass with
    ``waiting`` runs waiting on far timers and ``DUE`` runs whose timer is due."""
    # synchronous=OFF: durability is not under test, and it keeps 10,000 starts fast.
    store = SQLiteStore(path, synchronous="OFF")
    try:
        clock = ManualClock()
        engine = make_engine(store, [scenario_runtime()], clock)
        for i in range(waiting):
            engine.start("timer", {"seconds": FAR}, run_id=f"far-{i:05d}")
        for i in range(DUE):
            engine.start("timer", {"seconds": 60}, run_id=f"near-{i}")
        engine.tick(until_idle=True, batch=1000)
        suspended = store.find_runs(RunFilter(statuses=(RunStatus.SUSPENDED,)))
        assert len(suspended) == waiting + DUE
        clock.advance(61)

        instructions = 0

        def count() -> int:
            nonlocal instructions
            instructions += 1
            return 0  # go on

        store.stats.scheduler_rows_read = 0
        conn = store._conn()  # this thread's connection: the one tick() uses
        conn.set_progress_handler(count, 1)
        try:
            report = engine.tick()
        finally:
            conn.set_progress_handler(None, 1)
        assert report.passes == 1
        assert report.runs_decided == DUE
        for i in range(DUE):
            assert keys(engine, f"near-{i}")[-1] == "run_completed"
        assert len(store.find_runs(RunFilter(statuses=(RunStatus.SUSPENDED,)))) == waiting
        rows = store.stats.scheduler_rows_read

        # And a pass with nothing due reads nothing, however many runs wait.
        store.stats.scheduler_rows_read = 0
        assert engine.tick().idle
        idle_rows = store.stats.scheduler_rows_read
        return rows, instructions, idle_rows
    finally:
        store.close()


def test_scheduler_reads_the_same_rows_for_10_000_waiting_runs_as_for_10(
    tmp_path: Path,
) -> None:
    """10,000 runs wait on timers a year away (driven to their wait by the engine) next to 3
    runs whose timer is due; one pass must cost what it costs with 10 runs waiting."""
    small_rows, small_vm, small_idle = _one_pass_cost(tmp_path / "small.db", 10)
    large_rows, large_vm, large_idle = _one_pass_cost(tmp_path / "large.db", 10_000)

    assert small_rows == large_rows
    assert small_rows >= DUE  # the due runs were read, so the counter counts
    assert small_idle == large_idle == 0
    # The work SQLite does is not proportional either (a full scan of 10,000 rows would be
    # tens of thousands of VM instructions more than the indexed lookup).
    assert large_vm <= small_vm * 1.1 + 50
