"""The rebuilt decision loop (issue 7): one decision function, its guards, its costs.

- A rule lives in one place: breaking it on purpose changes what the engine records *and* what
  replay-check accepts.
- A failed decision is recorded once per cause (a deadline read from the clock changes on every
  call but is one cause) and retried after a back-off that grows.
- A step name the build does not have is a failed decision at decision time, not three burnt
  attempts; the run goes on once fixed code is deployed.
- The snapshot cache is bounded in bytes; ``flow tick`` renews the leases of its steps; a commit
  in another process rings a SQLite waiter's doorbell.
"""

from __future__ import annotations

import itertools
import subprocess
import sys
import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from engine_workflows import StepLog, hang_step, keys, make_engine, scenario_runtime

from flow_cli import Runtime
from flow_cli.engine.engine import Engine
from flow_cli.engine.replay_check import replay_history
from flow_cli.engine.streams import Streams
from flow_cli.model import decision
from flow_cli.model.clock import ManualClock
from flow_cli.model.decision import DECISION_RETRY_MAX, DECISION_RETRY_MIN
from flow_cli.model.snapshot import project
from flow_cli.store.memory import MemoryStore
from flow_cli.store.protocol import EventStore
from flow_cli.store.sqlite import SQLiteStore

# -- one place per rule ----------------------------------------------------------------------------


def test_breaking_the_closing_rule_changes_the_engine_and_replay_check_alike(
    store: EventStore, clock: ManualClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Rule 4 (closing events before a terminal event) exists once: in the decision function."""

    def exhaust(engine: Engine, run_id: str) -> None:
        engine.start("batch-terminate", run_id=run_id)
        engine.decide(run_id)
        hang_step(engine, run_id, "b")  # "b" stays unsettled; "a" fails and is retried
        for _ in range(3):
            clock.advance(10)
            engine.tick(until_idle=True)

    engine = make_engine(store, [scenario_runtime(StepLog())], clock)
    exhaust(engine, "good")
    good = engine.history("good")
    assert "step_cancelled" in [e.event_key for e in good]
    assert replay_history(scenario_runtime(StepLog()), good).ok

    monkeypatch.setattr(decision, "closing_events", lambda snapshot, reason: [])
    # The engine no longer writes the closing events ...
    broken = make_engine(store, [scenario_runtime(StepLog())], clock, "w2")
    exhaust(broken, "bad")
    assert "step_cancelled" not in keys(broken, "bad")
    assert keys(broken, "bad")[-1] == "run_failed"
    # ... and replay-check, running the same function, no longer accepts the good history.
    result = replay_history(scenario_runtime(StepLog()), good)
    assert not result.ok
    assert any(d.identity.startswith("step ") for d in result.divergences)


# -- failed decisions ------------------------------------------------------------------------------


_ticks = itertools.count()


def _wall_clock() -> datetime:
    """A clock the guard of flow_cli.model.deciding cannot see (like ``from time import time``
    bound before Flow was imported): it moves on every call."""
    return datetime(2100, 1, 1, tzinfo=UTC) + timedelta(seconds=next(_ticks))


def _clock_reader() -> Runtime:
    rt = Runtime(build_id="clock-1")

    @rt.workflow("reads-clock")
    def reads_clock(ctx):  # type: ignore[no-untyped-def]
        # The mistake: a deadline from the wall clock, different on every call.
        ctx.sleep_until("deadline", _wall_clock() + timedelta(hours=1))
        return ctx.complete(None)

    return rt


def test_a_clock_read_is_one_decision_failed_however_often_it_is_retried(
    store: EventStore, clock: ManualClock
) -> None:
    engine = make_engine(store, [_clock_reader()], clock)
    engine.start("reads-clock", run_id="clock")
    # The timer is recorded with one deadline; asked again at once, the code proposes another.
    engine.tick(until_idle=True)
    assert keys(engine, "clock") == ["run_started", "wait_started", "decision_failed"]
    for _ in range(6):  # every retry reads the clock again: still the same cause
        clock.advance(DECISION_RETRY_MAX.total_seconds())
        engine.tick(until_idle=True)
    failed = [e for e in engine.history("clock") if e.event_key == "decision_failed"]
    assert len(failed) == 1
    (mismatch,) = failed[0].event.to_data()["mismatches"]
    assert (mismatch["identity"], mismatch["field"]) == ("wait 'deadline'", "deadline")


def test_retries_of_a_failing_decision_back_off_from_5_seconds_to_the_cap(
    store: EventStore, clock: ManualClock
) -> None:
    rt = Runtime(build_id="raise-1")

    @rt.workflow("raises")
    def raises(ctx):  # type: ignore[no-untyped-def]
        raise ValueError("always")

    engine = make_engine(store, [rt], clock)
    engine.start("raises", run_id="r")
    start = clock.now()
    retries: list[float] = []
    for _ in range(12):
        engine.tick(until_idle=True)
        due = engine.get_run("r").decide_at
        assert due is not None
        retries.append((due - clock.now()).total_seconds())
        clock.advance((due - clock.now()).total_seconds())
    assert retries[0] == DECISION_RETRY_MIN.total_seconds()
    assert retries == sorted(retries)  # never shorter than the one before
    assert retries[-1] == DECISION_RETRY_MAX.total_seconds()
    assert (clock.now() - start) > DECISION_RETRY_MAX
    assert keys(engine, "r") == ["run_started", "decision_failed"]


def test_an_unknown_step_name_fails_the_decision_not_the_run_and_fixed_code_resumes(
    store: EventStore, clock: ManualClock
) -> None:
    calls: list[str] = []

    def build(name: str) -> Runtime:
        rt = Runtime(build_id="typo-1")

        @rt.workflow("typo")
        def typo(ctx):  # type: ignore[no-untyped-def]
            return ctx.complete(ctx.step("s", name, {"n": 1}))

        @rt.step("send")
        def send(input, info):  # type: ignore[no-untyped-def]
            calls.append(info.step_id)
            return input

        return rt

    engine = make_engine(store, [build("nopp")], clock)
    engine.start("typo", run_id="t")
    engine.tick(until_idle=True)
    assert keys(engine, "t") == ["run_started", "decision_failed"]
    (failed,) = [e.event.to_data() for e in engine.history("t") if e.event_key == "decision_failed"]
    assert failed["error_type"] == "UnknownStep"
    assert "'nopp'" in failed["message"] and "known steps: send" in failed["message"]
    assert calls == []  # no attempt burnt
    assert not engine.snapshot("t").terminal

    fixed = make_engine(store, [build("send")], clock, "w2")
    clock.advance(DECISION_RETRY_MIN.total_seconds())
    fixed.tick(until_idle=True)
    assert calls == ["s"]
    outcome = fixed.snapshot("t").outcome
    assert outcome is not None and outcome.result == {"n": 1}


# -- the snapshot cache ----------------------------------------------------------------------------


def test_the_snapshot_cache_is_bounded_in_bytes(clock: ManualClock) -> None:
    store = MemoryStore()
    engine = Engine(store, [scenario_runtime(StepLog())], clock=clock)
    streams = Streams(store, cache_bytes=200_000)
    payload = {"blob": "x" * 10_000}
    for i in range(100):
        engine.start("one-signal", payload, run_id=f"r{i}")
        streams.load(f"r{i}")
        assert streams.cached_bytes <= 200_000
    assert streams.cached_bytes > 100_000  # it does cache what fits
    engine.start("one-signal", {"blob": "x" * 100_000}, run_id="huge")
    before = streams.cached_bytes
    streams.load("huge")  # bigger than an eighth of the budget: read, never cached
    assert streams.cached_bytes == before


def test_a_lease_history_continues_the_cached_snapshot_or_is_left_to_a_read(
    clock: ManualClock,
) -> None:
    store = MemoryStore()
    engine = Engine(store, [scenario_runtime(StepLog())], clock=clock, eager_start=False)
    engine.start("one-signal", {}, run_id="r")
    streams = Streams(store)
    streams.load("r")  # cached at sequence 1
    assert streams.cached_sequence("r") == 1
    assert streams.cached_sequence("other") == 0
    engine.signal("r", "go", {"n": 1})
    engine.signal("r", "go", {"n": 2})
    later = store.read_history("r", after_sequence=1)
    # Events that continue the cached snapshot are folded into it, and the caller owns it.
    handed = streams.handed("r", later)
    assert handed is not None and handed.last_sequence == 3
    assert streams.cached_sequence("r") == 0
    # Events that do not continue what is cached (nor start the run): the attempt reads.
    streams.put(project(store.read_history("r")[:1]))
    assert streams.handed("r", later[1:]) is None
    assert streams.cached_sequence("r") == 1  # what was cached stays
    # Events from the first one on need nothing cached.
    whole = streams.handed("r", store.read_history("r"))
    assert whole is not None and whole.last_sequence == 3


# -- leases held by `flow tick` --------------------------------------------------------------------


def test_tick_renews_the_lease_of_a_step_it_is_running(tmp_path: Path) -> None:
    rt = Runtime(build_id="slow-1")
    started = threading.Event()

    @rt.workflow("slow")
    def slow(ctx):  # type: ignore[no-untyped-def]
        return ctx.complete(ctx.step("s", "slow"))

    @rt.step("slow")
    def slow_step(input, info):  # type: ignore[no-untyped-def]
        started.set()
        time.sleep(2.0)  # four times the lease
        return "done"

    url = tmp_path / "flow.db"
    ticker = Engine(SQLiteStore(url), [rt], worker_id="ticker")
    other = Engine(SQLiteStore(url), [rt], worker_id="other")
    ticker.start("slow", run_id="r")
    thread = threading.Thread(target=ticker.tick, kwargs={"until_idle": True, "lease_seconds": 0.5})
    thread.start()
    stolen = []
    started.wait(10)
    while thread.is_alive():
        stolen += other.work.lease_steps(0.5, 10)
        time.sleep(0.05)
    thread.join()
    assert stolen == []
    history = [e.event_key for e in ticker.history("r")]
    assert history.count("step_started") == 1
    assert history[-1] == "run_completed"
    ticker.close()
    other.close()


# -- doorbells -------------------------------------------------------------------------------------


_COMMIT_A_RUN = (
    "import sys; from datetime import datetime, UTC\n"
    "from flow_cli.store.sqlite import SQLiteStore\n"
    "from flow_cli.store.protocol import NewRun\n"
    "from flow_cli.model.spec import WorkflowSpec\n"
    "s = SQLiteStore(sys.argv[1])\n"
    "spec = WorkflowSpec(workflow='w', input=None, runtime_build_id='b', patches=())\n"
    "now = datetime.now(UTC)\n"
    "due = now if sys.argv[3] == 'due' else None\n"
    "s.commit([], [NewRun(run_id=sys.argv[2], spec=spec, seed='00', decide_at=due)], now)\n"
)


def test_a_commit_in_another_process_rings_a_sqlite_waiters_doorbell(tmp_path: Path) -> None:
    db = tmp_path / "flow.db"
    waiter = SQLiteStore(db)
    assert waiter._doorbell.listen()
    subprocess.run([sys.executable, "-c", _COMMIT_A_RUN, str(db), "r", "due"], check=True)
    assert waiter._doorbell.wait(10)  # a datagram arrived: no poll involved
    waiter.close()
    assert not any(waiter._doorbell.directory.glob("*.sock"))  # its sockets are gone with it


def test_a_commit_without_work_does_not_ring_a_workers_doorbell(tmp_path: Path) -> None:
    """A worker sleeps on the doorbell that only commits making work ring: a run created with
    no decision due (like a step its committer runs, or a run's end) wakes whoever waits for any
    change, not a worker; a run due for a decision wakes both."""
    db = tmp_path / "flow.db"
    waiter = SQLiteStore(db)
    assert waiter._doorbell.listen()
    subprocess.run([sys.executable, "-c", _COMMIT_A_RUN, str(db), "quiet", "later"], check=True)
    assert not waiter._doorbell.wait(0.3, work_only=True)
    assert waiter._doorbell.wait(10)  # the wait for any change heard it
    subprocess.run([sys.executable, "-c", _COMMIT_A_RUN, str(db), "due", "due"], check=True)
    assert waiter._doorbell.wait(10, work_only=True)
    waiter.close()


def test_a_worker_with_threads_free_sleeps_on_the_store_while_its_steps_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """New work must not wait for the worker's running attempts: while a thread is free the
    worker sleeps on the store's wait for work; only with every thread taken does it wait for
    an attempt to end."""
    from concurrent.futures import Future

    from flow_cli.engine.worker import Worker

    engine = Engine(SQLiteStore(tmp_path / "flow.db"), [Runtime(build_id="b")])
    waits: list[dict[str, object]] = []
    monkeypatch.setattr(engine.store, "wait_for_change", lambda timeout, **how: waits.append(how))
    running: Future[None] = Future()  # an attempt still running
    Worker(engine, concurrency=2)._idle({running})
    assert waits == [{"work_only": True}]
    full = Worker(engine, concurrency=1)
    full._step_done.set()  # an attempt just ended: the wait for it returns at once
    full._idle({running})
    assert waits == [{"work_only": True}]  # no store wait while every thread is taken
    engine.close()


def test_a_worker_is_woken_by_an_attempts_end_only_once_it_is_done(tmp_path: Path) -> None:
    """The pass an attempt's end wakes must see that attempt finished: were the worker woken
    before its future is done, it would count it as running and wait for it once more."""
    from concurrent.futures import ThreadPoolExecutor

    from flow_cli.engine.worker import Worker

    engine = Engine(SQLiteStore(tmp_path / "flow.db"), [Runtime(build_id="b")])
    worker = Worker(engine, concurrency=1)
    release = threading.Event()
    worker._run_step = lambda lease, snapshot=None: release.wait(10)  # type: ignore[method-assign]
    with ThreadPoolExecutor(1) as pool:
        for _ in range(20):
            worker._step_done.clear()
            release.set()
            future = worker._submit(pool, None, None)  # type: ignore[arg-type]
            assert worker._step_done.wait(10)
            assert future.done()
    engine.close()


def test_flow_show_says_when_a_failing_decision_is_tried_next(tmp_path: Path) -> None:
    from cli_helpers import FlowProject

    project = FlowProject(tmp_path)
    rt = Runtime(build_id="cli-1")

    @rt.workflow("raises")
    def raises(ctx):  # type: ignore[no-untyped-def]
        raise ValueError("always")

    engine = Engine(SQLiteStore(project.db), [rt])
    engine.start("raises", run_id="r")
    engine.tick(until_idle=True)
    due = engine.get_run("r").decide_at
    engine.close()
    assert due is not None
    shown = project.run("show", "r", "--json")
    assert shown.code == 0
    assert shown.json()["next_decision_at"] == due.isoformat()
    text = project.run("show", "r")
    assert "failing" in text.stdout and "next try" in text.stdout


def test_events_the_engine_appends_count_against_the_cache_budget(clock: ManualClock) -> None:
    rt = Runtime(build_id="big-1")

    @rt.workflow("big")
    def big(ctx):  # type: ignore[no-untyped-def]
        return ctx.complete(ctx.step("s", "big"))

    @rt.step("big")
    def big_step(input, info):  # type: ignore[no-untyped-def]
        return "x" * 50_000

    engine = Engine(MemoryStore(), [rt], clock=clock)
    engine.start("big", run_id="r")
    engine.tick(until_idle=True)
    # The output was never read back from the store, only committed: still counted.
    assert engine.streams.cached_bytes == 0 or engine.streams.cached_bytes > 50_000
    snapshot = engine.streams.take("r")
    assert snapshot.size > 50_000
