"""The store conformance suite, RunQueries role: next due times, listings, stats and the
integrity check."""

from __future__ import annotations

from datetime import timedelta

from store_helpers import (
    BUILD,
    create,
    idx,
    schedule_tasks,
    signal,
)

from flow_cli.model.clock import ManualClock
from flow_cli.model.events import (
    HookCreated,
    RunCompleted,
)
from flow_cli.model.status import RunStatus
from flow_cli.store.protocol import (
    EventStore,
    HookEntry,
    LeaseAsk,
    RunFilter,
    StepTask,
)

# -- next_due, list_runs, stats ------------------------------------------------------------------


def test_next_due_is_the_earliest_run_or_step_time(store: EventStore, clock: ManualClock) -> None:
    now = clock.now()
    assert store.next_due([BUILD]) is None
    create(store, "r1", now, decide_at=now + timedelta(minutes=10))
    create(store, "idle", now, decide_at=None)
    create(store, "old", now, decide_at=now - timedelta(days=1), build="shop-0")
    assert store.next_due([BUILD]) == now + timedelta(minutes=10)
    schedule_tasks(store, "r1", now, a=now + timedelta(minutes=3))
    assert store.next_due([BUILD]) == now + timedelta(minutes=3)
    assert store.next_due(["shop-0", BUILD]) == now - timedelta(days=1)
    assert store.next_due([]) is None
    assert store.next_due(["nobody"]) is None


def test_list_runs_filters_newest_first_with_limit(store: EventStore, clock: ManualClock) -> None:
    create(store, "first", clock.now())
    create(store, "second", clock.advance(1), workflow="refunds")
    create(store, "third", clock.advance(1))
    create(store, "same-instant", clock.now())  # ties: creation order decides
    store.append_if_sequence(
        "first", 1, [RunCompleted(result=None)], idx(RunStatus.COMPLETED), clock.now()
    )
    assert [r.run_id for r in store.find_runs(RunFilter())] == [
        "same-instant",
        "third",
        "second",
        "first",
    ]
    assert [r.run_id for r in store.find_runs(RunFilter(limit=2))] == ["same-instant", "third"]
    assert [r.run_id for r in store.find_runs(RunFilter(workflow="orders"))] == [
        "same-instant",
        "third",
        "first",
    ]
    assert [r.run_id for r in store.find_runs(RunFilter(statuses=(RunStatus.COMPLETED,)))] == [
        "first"
    ]
    assert [
        r.run_id
        for r in store.find_runs(RunFilter(statuses=(RunStatus.PENDING,), workflow="refunds"))
    ] == ["second"]
    assert store.find_runs(RunFilter(statuses=(RunStatus.FAILED,))) == []
    [record] = store.find_runs(RunFilter(statuses=(RunStatus.COMPLETED,)))
    assert record == store.get_run("first")


def test_scheduler_rows_read_counts_rows_returned(store: EventStore, clock: ManualClock) -> None:
    now = clock.now()
    for n in range(20):  # many waiting runs cost nothing: only the rows handed back count
        create(store, f"waiting-{n}", now, decide_at=now + timedelta(days=1))
    create(store, "due-a", now, decide_at=now)
    create(store, "due-b", now, decide_at=now)
    schedule_tasks(store, "due-a", now, s1=now)
    assert store.stats.scheduler_rows_read == 0
    until = now + timedelta(seconds=30)
    assert len(store.lease_runs(LeaseAsk("w", [BUILD], now, until, 10))) == 2
    assert store.stats.scheduler_rows_read == 2
    assert len(store.lease_steps(LeaseAsk("w", [BUILD], now, until, 10))) == 1
    # A store may read when work is next due with the lease (see ``flow_cli.store.due``): the
    # same two rows next_due reads, once.
    assert store.stats.scheduler_rows_read in (3, 5)
    store.next_due([BUILD])  # one row from the runs index, one from the step tasks
    assert store.stats.scheduler_rows_read == 5
    store.next_due(["nobody"])
    store.lease_runs(LeaseAsk("w", [BUILD], now, until, 10))
    assert store.stats.scheduler_rows_read == 5


# -- check_integrity -----------------------------------------------------------------------------


def test_check_integrity_passes_on_a_healthy_store(store: EventStore, clock: ManualClock) -> None:
    assert store.check_integrity() == []
    now = clock.now()
    create(store, "a", now)
    create(store, "b", now, decide_at=now)
    created = HookCreated(hook_id="approve", token="tok", metadata=None)
    hooks = [HookEntry(token="tok", hook_id="approve", resolved=False)]
    task = StepTask(step_id="s", attempt=1, available_at=now)
    store.append_if_sequence("a", 1, [created, signal(1)], idx(hooks=hooks, steps={"s": task}), now)
    assert store.check_integrity() == []
