"""What one step costs in commits: the figure the decision loop was rebuilt for (issue 7).

A step used to take six write transactions (lease the run, schedule, park, lease the step,
start, complete). Now scheduling and parking are one decision commit, a step's ``step_started``
is recorded in the transaction that leases it, and a step's completion is committed together
with the run's next decision and the next step's start. These tests count the store's durable
commits on every backend, so the figure cannot regress unnoticed.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta

import pytest

from flow_cli import Runtime
from flow_cli.engine.decider import StartSteps
from flow_cli.engine.engine import Engine
from flow_cli.engine.steps import HANDOVER_FRESH
from flow_cli.engine.worker import Worker
from flow_cli.errors import FlowError
from flow_cli.model.clock import ManualClock
from flow_cli.model.events import EventEnvelope
from flow_cli.model.snapshot import WorkflowRunSnapshot
from flow_cli.model.status import RunStatus, StepStatus
from flow_cli.store.memory import MemoryStore
from flow_cli.store.protocol import CommitGroup, EventStore, StepLease

chain = Runtime(build_id="chain-1")


@chain.workflow("chain")
def _chain(ctx):  # type: ignore[no-untyped-def]
    x = ctx.input["x"]
    for i in range(ctx.input["steps"]):
        x = ctx.step(f"s{i}", "inc", x)
    return ctx.complete(x)


@chain.step("inc")
def _inc(x, info):  # type: ignore[no-untyped-def]
    return x + 1


def _step_lease_waits(store: EventStore) -> int:
    """1 where a step's lease (with its ``step_started``) waits for the disk: PostgreSQL."""
    return int(type(store).__name__ == "PostgresStore")


def test_one_run_of_many_steps_costs_one_commit_per_step(
    store: EventStore, clock: ManualClock
) -> None:
    engine = Engine(store, [chain], clock=clock, worker_id="w")
    steps = 40
    before = store.stats.durable_commits
    engine.start("chain", {"steps": steps, "x": 0}, run_id="w2")
    engine.tick(until_idle=True)
    commits = store.stats.durable_commits - before
    assert engine.snapshot("w2").outcome is not None
    assert engine.snapshot("w2").outcome.result == steps  # type: ignore[union-attr]
    # the start with the first decision, then one commit per step (the last one ends the run);
    # the first step's lease waits for the disk on PostgreSQL only.
    assert commits <= steps + 1 + _step_lease_waits(store), commits


def test_a_one_step_run_waits_for_the_disk_twice(store: EventStore, clock: ManualClock) -> None:
    """Start to end of a one-step run: the start (with the first decision) and the step's end
    (with the run's completion) wait for the disk; the step's lease, which records its
    ``step_started``, does not, except on PostgreSQL (docs/operations.md on durability)."""
    engine = Engine(store, [chain], clock=clock, worker_id="w")
    durable, leases = store.stats.durable_commits, store.stats.index_commits
    engine.start("chain", {"steps": 1, "x": 0}, run_id="w3")
    engine.tick(until_idle=True)
    outcome = engine.snapshot("w3").outcome
    assert outcome is not None and outcome.result == 1
    lease_waits = _step_lease_waits(store)
    assert store.stats.durable_commits - durable == 2 + lease_waits
    assert store.stats.index_commits - leases >= 1 - lease_waits
    assert [e.event_key for e in store.read_history("w3")] == [
        "run_started",
        "step_scheduled",
        "step_started",
        "step_completed",
        "run_completed",
    ]


def test_many_runs_of_ten_steps_cost_one_commit_per_step_and_one_per_start(
    store: EventStore, clock: ManualClock
) -> None:
    engine = Engine(store, [chain], clock=clock, worker_id="w")
    runs, steps = 20, 10
    before = store.stats.durable_commits
    for i in range(runs):
        engine.start("chain", {"steps": steps, "x": i}, run_id=f"w1-{i}")
    engine.tick(until_idle=True)
    commits = store.stats.durable_commits - before
    for i in range(runs):
        outcome = engine.snapshot(f"w1-{i}").outcome
        assert outcome is not None and outcome.result == i + steps
    # One per start (with its first decision), then one per step: its end with the next
    # decision and the next step's start; on PostgreSQL, at most one lease per run too (the
    # first steps, when not started by the decisions that scheduled them).
    assert commits <= runs + runs * steps + runs * _step_lease_waits(store), commits


@chain.workflow("alarm")
def _alarm(ctx):  # type: ignore[no-untyped-def]
    ctx.sleep_until("t", datetime.fromisoformat(ctx.input["at"]))
    return ctx.complete(ctx.step("after", "inc", 0))


def test_timers_that_come_due_at_once_cost_few_commits_per_run(
    store: EventStore, clock: ManualClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A worker drains runs whose timers fired together in a few commits per pass of 100 runs:
    the ends of their steps are handed to the group committer instead of each step thread
    waiting for its own commit, and the pass's decisions join the same transactions."""
    engine = Engine(store, [chain], clock=clock, worker_id="w")
    runs = 200
    at = clock.now() + timedelta(minutes=5)
    for i in range(runs):
        engine.start("alarm", {"at": at.isoformat()}, run_id=f"alarm-{i}")
    engine.tick(until_idle=True)
    assert len(engine.list_runs(status=RunStatus.SUSPENDED)) == runs
    commit_groups = store.commit_groups
    transactions: list[int] = []

    def slow_disk(groups: Sequence[CommitGroup]) -> list[FlowError | None]:
        time.sleep(0.02)  # a flush that takes a while: other threads queue behind it meanwhile
        transactions.append(len(groups))
        return commit_groups(groups)

    monkeypatch.setattr(store, "commit_groups", slow_disk)
    clock.advance(timedelta(minutes=6))
    before = store.stats.durable_commits
    worker = Worker(engine, concurrency=4, max_idle_sleep=0.05)
    thread = threading.Thread(target=worker.run)
    thread.start()
    try:
        deadline = time.monotonic() + 60
        while len(engine.list_runs(status=RunStatus.COMPLETED)) < runs:
            assert time.monotonic() < deadline, "the runs did not drain"
            time.sleep(0.05)
    finally:
        worker.stop()
        thread.join(timeout=30)
    # Per pass: the runs' decisions and a few transactions of step ends (every step thread
    # waiting for its own commit made it about one transaction per four runs, or worse).
    assert sum(transactions) == 2 * runs
    assert len(transactions) <= runs / 20, transactions
    if not isinstance(store, MemoryStore):  # the memory store counts each group as a commit
        # ... and on a database, the runs' lease in each pass.
        commits = store.stats.durable_commits - before
        assert commits <= runs / 10, commits


def test_a_pass_reads_the_histories_of_its_runs_in_one_store_call(
    store: EventStore, clock: ManualClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The runs a worker leases in a pass are read together, not one round trip each; a run
    in the snapshot cache is read only after its cached sequence."""
    setup = Engine(store, [chain], clock=clock, worker_id="setup")
    runs = 30
    at = clock.now() + timedelta(minutes=5)
    for i in range(runs):
        setup.start("alarm", {"at": at.isoformat()}, run_id=f"alarm-{i}")
    setup.tick(until_idle=True)
    engine = Engine(store, [chain], clock=clock, worker_id="w")
    engine.snapshot("alarm-0")  # one of them cached in this engine
    clock.advance(timedelta(minutes=6))
    singles: list[str] = []
    batches: list[dict[str, int]] = []
    read_history, read_histories = store.read_history, store.read_histories

    inside = threading.local()

    def one(run_id: str, after_sequence: int = 0) -> list[EventEnvelope]:
        if not getattr(inside, "batch", False):  # a store's default read_histories loops
            singles.append(run_id)
        return read_history(run_id, after_sequence)

    def many(after: Mapping[str, int]) -> dict[str, list[EventEnvelope]]:
        batches.append(dict(after))
        inside.batch = True
        try:
            return read_histories(after)
        finally:
            inside.batch = False

    monkeypatch.setattr(store, "read_history", one)
    monkeypatch.setattr(store, "read_histories", many)
    run_ids = engine.work.lease_runs(30.0, 100)
    assert len(run_ids) == runs
    engine.decider.decide_many([*run_ids, "no-such-run"])
    assert singles == []
    assert len(batches) == 1 and set(batches[0]) == {*run_ids, "no-such-run"}
    assert batches[0]["alarm-0"] > 1 and batches[0]["alarm-1"] == 0
    for run_id in run_ids:
        assert engine.snapshot(run_id).steps["after"].status is StepStatus.SCHEDULED


CALLS: list[str] = []


@chain.workflow("alarm-logged")
def _alarm_logged(ctx):  # type: ignore[no-untyped-def]
    ctx.sleep_until("t", datetime.fromisoformat(ctx.input["at"]))
    return ctx.complete(ctx.step("after", "logged", 0))


@chain.step("logged")
def _logged(x, info):  # type: ignore[no-untyped-def]
    CALLS.append(info.run_id)
    return x + 1


def _handed_over(
    store: EventStore, clock: ManualClock, monkeypatch: pytest.MonkeyPatch
) -> tuple[Engine, dict[str, WorkflowRunSnapshot], list[StepLease], list[str]]:
    """A run whose timer fired, decided with its step started in the same commit; and a log of
    the histories read from then on."""
    engine = Engine(store, [chain], clock=clock, worker_id="w")
    at = clock.now() + timedelta(minutes=5)
    engine.start("alarm-logged", {"at": at.isoformat()}, run_id="a")
    engine.tick(until_idle=True)
    clock.advance(timedelta(minutes=6))
    report = engine.decider.decide_many(
        engine.work.lease_runs(30, 10), start=StartSteps("w", 30, 10)
    )
    assert [lease.run_id for lease in report.started] == ["a"]
    reads: list[str] = []
    read_history = store.read_history

    def logged(run_id: str, after_sequence: int = 0) -> list[EventEnvelope]:
        reads.append(run_id)
        return read_history(run_id, after_sequence)

    monkeypatch.setattr(store, "read_history", logged)
    CALLS.clear()
    return engine, report.handed, report.started, reads


def test_a_step_started_with_its_decision_runs_on_the_snapshot_handed_over(
    store: EventStore, clock: ManualClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    engine, handed, [lease], reads = _handed_over(store, clock, monkeypatch)
    assert set(handed) == {"a"}
    engine.work.execute_step(lease, 30, snapshot=handed.pop("a"))
    assert reads == []  # the run was not read again before its step ran
    assert CALLS == ["a"]
    outcome = engine.snapshot("a").outcome
    assert outcome is not None and outcome.result == 1


def _cancel_elsewhere(store: EventStore, clock: ManualClock) -> Engine:
    """An operator's engine cancels run "a", its started step with it."""
    other = Engine(store, [chain], clock=clock, worker_id="operator")
    assert other.cancel("a")
    other.tick(until_idle=True)
    assert other.snapshot("a").status is RunStatus.CANCELLED
    return other


def test_a_cancel_recorded_after_the_hand_over_is_met_when_the_step_ends(
    store: EventStore, clock: ManualClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    engine, handed, [lease], reads = _handed_over(store, clock, monkeypatch)
    other = _cancel_elsewhere(store, clock)
    reads.clear()
    engine.work.execute_step(lease, 30, snapshot=handed.pop("a"))
    # The attempt ran on the snapshot it was handed; its end met the stale sequence, the run
    # was read again, and the cancellation stood: the output is not recorded.
    assert CALLS == ["a"] and "a" in reads
    snap = other.snapshot("a")
    assert snap.status is RunStatus.CANCELLED
    assert snap.steps["after"].status is StepStatus.CANCELLED
    assert snap.steps["after"].output is None


def test_a_snapshot_handed_over_long_ago_is_read_again_before_the_step_runs(
    store: EventStore, clock: ManualClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    engine, handed, [lease], reads = _handed_over(store, clock, monkeypatch)
    other = _cancel_elsewhere(store, clock)
    clock.advance(HANDOVER_FRESH + timedelta(milliseconds=1))
    reads.clear()
    engine.work.execute_step(lease, 30, snapshot=handed.pop("a"))
    assert reads == ["a"]
    assert CALLS == []  # the cancellation was seen before the handler ran
    assert other.snapshot("a").status is RunStatus.CANCELLED
