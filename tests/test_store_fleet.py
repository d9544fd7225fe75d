"""Store conformance for the fleet-health queries (workers registry, open-run index, builds).

Runs once per ``store`` param (memory, SQLite, PostgreSQL when configured), like
the store conformance suites (``test_store_*.py``).
"""

from __future__ import annotations

import sqlite3
from datetime import timedelta
from pathlib import Path

from engine_workflows import SCN_BUILD, hang_step, scenario_runtime

from flow_cli import Runtime
from flow_cli.engine.engine import Engine
from flow_cli.model.clock import ManualClock
from flow_cli.model.status import RunStatus
from flow_cli.ops.builds import build_reports
from flow_cli.ops.doctor import CAUSES, Diagnosis, diagnose
from flow_cli.store.protocol import (
    WORKER_RETENTION,
    BuildUsage,
    EventStore,
    RunFilter,
    StepTask,
    WorkerInfo,
)
from flow_cli.store.sqlite import SQLiteStore


def worker(worker_id: str, clock: ManualClock, builds: tuple[str, ...] = ("b1",)) -> WorkerInfo:
    now = clock.now()
    return WorkerInfo(
        worker_id=worker_id,
        host="host-a",
        pid=4242,
        builds=builds,
        started_at=now,
        heartbeat_at=now,
        heartbeat_seconds=2.0,
    )


def test_register_list_heartbeat_and_stop(store: EventStore, clock: ManualClock) -> None:
    store.register_worker(worker("w1", clock, ("b1", "b2")))
    clock.advance(seconds=1)
    store.register_worker(worker("w2", clock))
    listed = store.list_workers()
    assert [w.worker_id for w in listed] == ["w2", "w1"]  # most recently started first
    first = listed[1]
    assert (first.host, first.pid, first.builds, first.heartbeat_seconds) == (
        "host-a",
        4242,
        ("b1", "b2"),
        2.0,
    )
    assert first.stopped_at is None and first.live(clock.now())

    clock.advance(seconds=7)
    assert store.heartbeat("w1", clock.now()) is True
    by_id = {w.worker_id: w for w in store.list_workers()}
    assert by_id["w1"].heartbeat_at == clock.now()
    assert by_id["w1"].live(clock.now())
    assert not by_id["w2"].live(clock.now())  # 7 s silent > 3 intervals of 2 s: gone

    store.worker_stopped("w1", clock.now())
    stopped = {w.worker_id: w for w in store.list_workers()}["w1"]
    assert stopped.stopped_at == clock.now()
    assert not stopped.live(clock.now())
    assert store.heartbeat("w1", clock.now()) is False  # a stopped worker must register again
    assert store.heartbeat("nobody", clock.now()) is False


def test_registering_again_revives_and_old_workers_are_forgotten(
    store: EventStore, clock: ManualClock
) -> None:
    store.register_worker(worker("old", clock))
    store.register_worker(worker("w1", clock))
    store.worker_stopped("w1", clock.now())
    store.register_worker(worker("w1", clock))
    assert {w.worker_id: w.stopped_at for w in store.list_workers()}["w1"] is None
    clock.advance(seconds=WORKER_RETENTION.total_seconds() + 1)
    store.register_worker(worker("new", clock))
    assert [w.worker_id for w in store.list_workers()] == ["new"]


def test_liveness_counts_three_heartbeat_intervals(clock: ManualClock) -> None:
    info = worker("w", clock)
    assert info.live(clock.now() + timedelta(seconds=6))
    assert not info.live(clock.now() + timedelta(seconds=6.01))


# -- run_states, build_usage and the doctor's classification, on every store -------------------


def _crash_runtime(build_id: str = "crash-1") -> Runtime:
    rt = Runtime(build_id=build_id)

    @rt.workflow("crash")
    def crash(ctx):  # type: ignore[no-untyped-def]
        raise ValueError("the order book is missing")

    return rt


def _engine(store: EventStore, clock: ManualClock) -> Engine:
    runtimes = [
        scenario_runtime(fail_times={"flaky": 5}),
        scenario_runtime(build_id="other-1", patches=["p-2", "p-1"]),
        _crash_runtime(),
    ]
    # The tests look at runs between their creation and their first decision.
    return Engine(
        store, runtimes, clock=clock, worker_id="w1", default_build=SCN_BUILD, eager_start=False
    )


def _causes(
    store: EventStore, clock: ManualClock, where: RunFilter | None = None
) -> dict[str, str]:
    report = diagnose(store, where or RunFilter(), clock.now())
    return {d.run_id: d.cause for d in report.runs}


def _diagnosis(store: EventStore, clock: ManualClock, run_id: str) -> Diagnosis:
    [found] = [d for d in diagnose(store, RunFilter(), clock.now()).runs if d.run_id == run_id]
    return found


def _host(store: EventStore, clock: ManualClock, worker_id: str, *builds: str) -> None:
    store.register_worker(worker(worker_id, clock, builds))


def test_run_states_read_leases_and_step_tasks(store: EventStore, clock: ManualClock) -> None:
    engine = _engine(store, clock)
    engine.start("retry-once", {"max_attempts": 3, "handler": "ok"}, run_id="r")
    engine.start("one-signal", run_id="s")
    [fresh, _] = store.run_states(RunFilter())
    assert (fresh.run_id, fresh.lease_owner, fresh.tasks) == ("s", None, ())
    assert fresh.decide_at == clock.now() and fresh.status is RunStatus.PENDING

    assert engine.work.lease_runs(60, 10) == ["r", "s"]
    leased = {s.run_id: s for s in store.run_states(RunFilter())}
    assert leased["r"].lease_owner == "w1"
    assert leased["r"].decide_at == clock.now() + timedelta(seconds=60)

    engine.decide("r")
    [state] = store.run_states(RunFilter(workflow="retry-once"))
    assert (state.lease_owner, state.decide_at, state.waiting_on) == (None, None, "step:s")
    assert state.tasks == (
        StepTask(step_id="s", attempt=1, available_at=clock.now(), owner=None, name="ok"),
    )
    hang_step(engine, "r", "s", lease_seconds=90)
    [state] = store.run_states(RunFilter(workflow="retry-once"))
    assert state.tasks[0].owner == "hung-worker"
    assert state.tasks[0].available_at == clock.now() + timedelta(seconds=90)
    # Filters, limit and cursor as find_runs has them: newest first.
    assert [s.run_id for s in store.run_states(RunFilter(limit=1))] == ["s"]
    assert [s.run_id for s in store.run_states(RunFilter(after="s"))] == ["r"]
    assert store.run_states(RunFilter(statuses=(RunStatus.COMPLETED,))) == []


def test_doctor_names_waits_retries_and_busy_runs(store: EventStore, clock: ManualClock) -> None:
    engine = _engine(store, clock)
    _host(store, clock, "live", SCN_BUILD, "crash-1")
    engine.start("crash", run_id="failing")
    engine.start("retry-once", {"max_attempts": 3, "handler": "flaky"}, run_id="retry")
    engine.start("one-signal", run_id="signal")
    engine.start("hook", run_id="hook")
    engine.start("parent", {"child": "child-waits"}, run_id="parent")
    engine.start("timer", {"seconds": 3600}, run_id="timer")
    engine.start("retry-once", {"max_attempts": 3, "handler": "ok"}, run_id="running")
    for run_id in ("failing", "retry", "signal", "hook", "parent", "timer", "running"):
        engine.decide(run_id)
    [child] = [r.run_id for r in engine.list_runs() if r.parent_run_id == "parent"]
    engine.decide(child)
    hang_step(engine, "running", "s")  # runs flaky's first attempt too: it fails, retry in 2 s
    engine.start("one-signal", run_id="new")

    assert _causes(store, clock) == {
        "failing": "decision-failing",
        "retry": "step-retrying",
        "signal": "waiting-signal",
        "hook": "waiting-hook",
        "parent": "waiting-child",
        child: "waiting-signal",
        "timer": "sleeping",  # its timer is an hour away: it wakes by itself
        "running": "step-running",
        "new": "runnable",
    }
    report = diagnose(store, RunFilter(), clock.now())
    assert not report.ok and report.workers_live == 1  # the failing decision is stuck
    assert diagnose(store, RunFilter(statuses=(RunStatus.SUSPENDED,)), clock.now()).ok
    assert [d.cause for d in report.runs] == sorted(
        (d.cause for d in report.runs), key=CAUSES.index
    )
    failing = _diagnosis(store, clock, "failing")
    assert failing.detail == "ValueError: the order book is missing" and failing.stuck
    assert _diagnosis(store, clock, "retry").detail == (
        f"step 's' attempt 2 starts at {(clock.now() + timedelta(seconds=2)).isoformat()}"
    )
    assert _diagnosis(store, clock, "signal").detail == "signal 'approve'"
    assert _diagnosis(store, clock, "hook").detail == "hook 'h'"
    assert _diagnosis(store, clock, "parent").detail == "child 'c'"
    assert _diagnosis(store, clock, "timer").detail.startswith("timer 'nap' is due at ")
    assert _diagnosis(store, clock, "running").detail == (
        "step 's' attempt 1 is running on worker hung-worker"
    )
    new = _diagnosis(store, clock, "new")
    assert (new.detail, new.since) == ("its next decision is due", clock.now())
    # Filters select what is classified; terminal statuses select nothing.
    assert _causes(store, clock, RunFilter(workflow="hook")) == {"hook": "waiting-hook"}
    assert _causes(store, clock, RunFilter(statuses=(RunStatus.COMPLETED,))) == {}
    assert diagnose(store, RunFilter(failing=True), clock.now()).summary["decision-failing"] == 1


def test_doctor_ignores_ended_runs(store: EventStore, clock: ManualClock) -> None:
    engine = _engine(store, clock)
    engine.start("one-signal", run_id="done")
    engine.decide("done")
    engine.signal("done", "approve", True)
    engine.decide("done")
    assert engine.get_run("done").status is RunStatus.COMPLETED
    report = diagnose(store, RunFilter(), clock.now())
    assert (report.runs, report.ok) == ([], True)
    assert set(report.summary.values()) == {0} and list(report.summary) == list(CAUSES)


def test_doctor_finds_overdue_timers_and_ready_steps_nobody_runs(
    store: EventStore, clock: ManualClock
) -> None:
    engine = _engine(store, clock)
    _host(store, clock, "tick", SCN_BUILD)
    store.worker_stopped("tick", clock.now())  # a `flow tick` that ended: hosted, none live
    engine.start("timer", {"seconds": 10}, run_id="timer")
    engine.start("one-signal", run_id="signal")
    engine.start("retry-once", {"max_attempts": 3, "handler": "ok"}, run_id="step")
    for run_id in ("timer", "signal", "step"):
        engine.decide(run_id)
    start = clock.now()
    clock.advance(10 + 30)  # the timer was due 30 s ago: not yet overdue; the step 40 s ago
    assert _causes(store, clock) == {
        "timer": "runnable",
        "signal": "waiting-signal",
        "step": "timer-overdue",
    }
    assert _diagnosis(store, clock, "timer").detail == "its next decision is due"
    clock.advance(1)
    assert _causes(store, clock) == {
        "timer": "timer-overdue",
        "signal": "waiting-signal",
        "step": "timer-overdue",
    }
    timer = _diagnosis(store, clock, "timer")
    deadline = start + timedelta(seconds=10)
    assert timer.since == deadline
    assert timer.detail == f"timer 'nap' was due at {deadline.isoformat()}; nothing fired it"
    step = _diagnosis(store, clock, "step")
    assert step.since == start
    assert (
        step.detail == f"step 's' attempt 1 was ready at {start.isoformat()}; no worker started it"
    )
    assert not diagnose(store, RunFilter(), clock.now()).ok
    # A shorter grace finds them sooner.
    assert (
        diagnose(store, RunFilter(), start + timedelta(seconds=11), timedelta(0)).summary[
            "timer-overdue"
        ]
        == 2
    )


def test_doctor_finds_expired_leases(store: EventStore, clock: ManualClock) -> None:
    engine = _engine(store, clock)
    _host(store, clock, "gone", SCN_BUILD)
    store.worker_stopped("gone", clock.now())
    engine.start("retry-once", {"max_attempts": 3, "handler": "ok"}, run_id="step")
    engine.decide("step")
    hang_step(engine, "step", "s", lease_seconds=60)
    engine.start("one-signal", run_id="decision")
    assert engine.work.lease_runs(60, 10) == ["decision"]  # ... and the worker dies deciding it
    assert _causes(store, clock) == {"step": "step-running", "decision": "runnable"}
    assert _diagnosis(store, clock, "decision").detail == "being decided by worker w1"
    clock.advance(60 + 31)
    assert _causes(store, clock) == {"step": "lease-expired", "decision": "lease-expired"}
    end = clock.now() - timedelta(seconds=31)
    step = _diagnosis(store, clock, "step")
    assert step.detail == (
        f"step 's' attempt 1: the lease of worker hung-worker ended at {end.isoformat()}"
    )
    assert step.since == end
    decision = _diagnosis(store, clock, "decision")
    assert decision.detail == f"decision: the lease of worker w1 ended at {end.isoformat()}"
    # A live worker hosting the build does not make an expired lease healthy by itself.
    _host(store, clock, "live", SCN_BUILD)
    assert _causes(store, clock)["step"] == "lease-expired"


def test_build_unhosted_rule(store: EventStore, clock: ManualClock) -> None:
    engine = _engine(store, clock)
    engine.start("one-signal", run_id="signal")
    engine.decide("signal")
    engine.start("crash", run_id="failing")
    engine.decide("failing")
    # No worker ever registered: nothing will run the build.
    assert _causes(store, clock) == {"signal": "build-unhosted", "failing": "decision-failing"}
    assert _diagnosis(store, clock, "signal").detail == f"no worker hosts build {SCN_BUILD!r}"

    # Hosted by a worker that is gone (the fleet is down): judged by what is overdue.
    _host(store, clock, "old", SCN_BUILD, "crash-1")
    store.worker_stopped("old", clock.now())
    last_seen = clock.now()
    assert _causes(store, clock)["signal"] == "waiting-signal"

    # A live worker that does not host it: the fleet runs without the build.
    clock.advance(5)
    _host(store, clock, "new", "other-1")
    signal = _diagnosis(store, clock, "signal")
    assert signal.cause == "build-unhosted"
    assert signal.detail == (
        f"no live worker hosts build {SCN_BUILD!r} "
        f"(last host seen {last_seen.isoformat(timespec='seconds')})"
    )
    assert signal.since == max(last_seen, engine.get_run("signal").updated_at)
    assert not diagnose(store, RunFilter(), clock.now()).ok

    # Hosted by a live worker again.
    _host(store, clock, "fixed", SCN_BUILD)
    assert _causes(store, clock)["signal"] == "waiting-signal"
    assert diagnose(store, RunFilter(workflow="one-signal"), clock.now()).ok


def test_build_usage(store: EventStore, clock: ManualClock) -> None:
    engine = _engine(store, clock)
    assert store.build_usage() == []
    engine.start("one-signal", run_id="a-old")
    engine.start("one-signal", run_id="a-new")
    engine.start("timer", {"seconds": 60}, run_id="o-1", build_id="other-1")
    engine.start("crash", run_id="done", build_id="crash-1")
    engine.decide("a-old")
    engine.terminate("done")
    usage = {u.build_id: u for u in store.build_usage()}
    assert list(usage) == ["crash-1", "other-1", SCN_BUILD]
    assert usage[SCN_BUILD] == BuildUsage(
        build_id=SCN_BUILD,
        open={"Pending": 1, "Suspended": 1},
        oldest_open_run="a-old",  # created in the same instant: creation order decides
        oldest_open_at=clock.now(),
        patches=(),
    )
    assert usage["other-1"].patches == ("p-1", "p-2")
    assert usage["other-1"].open == {"Pending": 1}
    assert usage["crash-1"] == BuildUsage(
        build_id="crash-1", open={}, oldest_open_run=None, oldest_open_at=None, patches=()
    )

    _host(store, clock, "live", SCN_BUILD, "spare-1")
    _host(store, clock, "gone", "other-1")
    store.worker_stopped("gone", clock.now())
    reports = {r.build_id: r for r in build_reports(store, clock.now(), ["next-1"])}
    assert sorted(reports) == ["crash-1", "next-1", "other-1", SCN_BUILD, "spare-1"]
    assert reports[SCN_BUILD].to_json() == {
        "build_id": SCN_BUILD,
        "open": {"Pending": 1, "Suspended": 1},
        "oldest_open_run": "a-old",
        "oldest_open_at": usage[SCN_BUILD].oldest_open_at.isoformat(),
        "workers": ["live"],
        "patches": [],
        "retirable": False,
    }
    assert reports["other-1"].workers == [] and not reports["other-1"].retirable
    assert all(reports[b].retirable for b in ("crash-1", "next-1", "spare-1"))


def _fixable_runtime(broken: dict[str, bool]) -> Runtime:
    rt = Runtime(build_id="fix-1")

    @rt.workflow("fixable")
    def fixable(ctx):  # type: ignore[no-untyped-def]
        if broken["now"]:
            raise ValueError(f"broken at {ctx.now:%H:%M:%S}")  # a new fact, a new message
        return ctx.complete(ctx.receive("go", "go"))

    return rt


def test_failing_since_is_when_the_decisions_began_to_fail(
    store: EventStore, clock: ManualClock
) -> None:
    broken = {"now": True}
    engine = Engine(store, [_fixable_runtime(broken)], clock=clock, worker_id="w1")
    engine.start("fixable", run_id="r")
    began = clock.now()
    engine.decide("r")
    [state] = store.run_states(RunFilter())
    assert (state.failing, state.failing_since) == ("ValueError: broken at 09:00:00", began)
    clock.advance(60)
    engine.signal("r", "nudge", 1)  # the run changes, and its decision fails another way
    engine.decide("r")
    [state] = store.run_states(RunFilter())
    assert state.failing == "ValueError: broken at 09:01:00"
    assert (state.updated_at, state.failing_since) == (clock.now(), began)
    assert _diagnosis(store, clock, "r").since == began

    broken["now"] = False  # fixed code deployed: the next retry recovers
    clock.advance(600)
    engine.decide("r")
    [state] = store.run_states(RunFilter())
    assert (state.failing, state.failing_since) == (None, None)
    assert _causes(store, clock) == {"r": "build-unhosted"}  # nobody registered hosts fix-1
    broken["now"] = True
    engine.signal("r", "nudge", 2)
    engine.decide("r")
    [state] = store.run_states(RunFilter())
    assert state.failing_since == clock.now()


def test_sqlite_version_3_database_gets_failing_since(tmp_path: Path, clock: ManualClock) -> None:
    path = tmp_path / "flow.db"
    store = SQLiteStore(path)
    engine = Engine(store, [_fixable_runtime({"now": True})], clock=clock, worker_id="w1")
    engine.start("fixable", run_id="r")
    failed_at = clock.now()
    engine.decide("r")
    clock.advance(30)
    engine.signal("r", "nudge", 1)
    engine.start("fixable", run_id="fine")
    store.close()
    with sqlite3.connect(path) as conn:  # what a version 3 Flow left: no failing_since
        conn.execute("ALTER TABLE runs DROP COLUMN failing_since")
        conn.execute("DROP INDEX runs_error_type")
        conn.execute("ALTER TABLE runs DROP COLUMN error_type")
        conn.execute("ALTER TABLE runs DROP COLUMN error")
        conn.execute("UPDATE flow_meta SET value = '3' WHERE key = 'schema_version'")
    conn.close()
    upgraded = SQLiteStore(path)
    try:
        since = {s.run_id: s.failing_since for s in upgraded.run_states(RunFilter())}
        assert since == {"r": failed_at, "fine": None}  # the decision_failed event's time
    finally:
        upgraded.close()
