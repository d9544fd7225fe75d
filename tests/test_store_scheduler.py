"""The store conformance suite, Scheduler role: leasing runs and steps, parking, renewing,
waiting for change."""

from __future__ import annotations

import threading
import time
from datetime import timedelta

import pytest
from store_helpers import (
    BUILD,
    RUNNING,
    create,
    idx,
    new_run,
    schedule_tasks,
    signal,
)

from flow_cli.model.clock import ManualClock
from flow_cli.model.events import (
    BuildUpgraded,
    RunCompleted,
    StepStarted,
)
from flow_cli.model.status import RunStatus
from flow_cli.store.protocol import (
    CommitGroup,
    EventStore,
    LeaseAsk,
    RunFilter,
    StepLease,
    StepRenewal,
    StepTask,
    StreamWrite,
)

# -- leasing runs --------------------------------------------------------------------------------


def test_lease_runs_takes_only_due_runs_of_hosted_builds(
    store: EventStore, clock: ManualClock
) -> None:
    now = clock.now()
    create(store, "due-2", now, decide_at=now - timedelta(seconds=1))
    create(store, "due-1", now, decide_at=now - timedelta(seconds=2))
    create(store, "exactly-now", now, decide_at=now)
    create(store, "future", now, decide_at=now + timedelta(hours=1))
    create(store, "idle", now, decide_at=None)
    create(store, "other-build", now, decide_at=now, build="shop-0")
    until = now + timedelta(seconds=30)
    assert store.lease_runs(LeaseAsk("w1", [BUILD], now, until, 10)) == [
        "due-1",
        "due-2",
        "exactly-now",
    ]
    record = store.get_run("due-1")
    assert record is not None and record.decide_at == until
    # Leased runs are skipped until the lease expires, then any worker may take them again.
    assert (
        store.lease_runs(
            LeaseAsk("w2", [BUILD], clock.advance(29), until + timedelta(seconds=30), 10)
        )
        == []
    )
    clock.advance(1)
    assert set(store.lease_runs(LeaseAsk("w2", [BUILD, "shop-0"], clock.now(), until, 10))) == {
        "due-1",
        "due-2",
        "exactly-now",
        "other-build",
    }


def test_lease_runs_respects_limit_and_empty_builds(store: EventStore, clock: ManualClock) -> None:
    now = clock.now()
    for n in range(5):
        create(store, f"r{n}", now, decide_at=now - timedelta(seconds=10 - n))
    until = now + timedelta(seconds=30)
    assert store.lease_runs(LeaseAsk("w", [], now, until, 10)) == []
    assert store.lease_runs(LeaseAsk("w", [BUILD], now, until, 2)) == ["r0", "r1"]
    assert store.lease_runs(LeaseAsk("w", [BUILD], now, until, 2)) == ["r2", "r3"]
    assert store.lease_runs(LeaseAsk("w", [BUILD], now, until, 2)) == ["r4"]


def test_park_run_only_at_the_current_sequence(store: EventStore, clock: ManualClock) -> None:
    now = clock.now()
    create(store, "r1", now, decide_at=now)
    store.lease_runs(LeaseAsk("w", [BUILD], now, now + timedelta(seconds=30), 10))
    wake = now + timedelta(hours=1)
    assert store.park_run("r1", 1, wake)
    record = store.get_run("r1")
    assert record is not None and record.decide_at == wake
    assert store.park_run("r1", 1, None)
    record = store.get_run("r1")
    assert record is not None and record.decide_at is None
    store.append_if_sequence("r1", 1, [signal(1)], idx(decide_at=now), now)
    assert not store.park_run("r1", 1, wake)
    record = store.get_run("r1")
    assert record is not None and record.decide_at == now
    assert not store.park_run("ghost", 1, wake)


# -- leasing steps -------------------------------------------------------------------------------


def test_lease_steps_semantics(store: EventStore, clock: ManualClock) -> None:
    now = clock.now()
    create(store, "r1", now)
    create(store, "old", now, build="shop-0")
    schedule_tasks(
        store, "r1", now, a=now - timedelta(seconds=2), b=now, c=now + timedelta(seconds=5)
    )
    schedule_tasks(store, "old", now, x=now - timedelta(seconds=9))
    until = now + timedelta(seconds=30)
    first = store.lease_steps(LeaseAsk("w1", [BUILD], now, until, 1))
    assert [(s.run_id, s.step_id, s.attempt, s.lease_until) for s in first] == [
        ("r1", "a", 1, until)
    ]
    assert [s.step_id for s in store.lease_steps(LeaseAsk("w1", [BUILD], now, until, 10))] == ["b"]
    assert store.lease_steps(LeaseAsk("w2", [BUILD], now, until, 10)) == []
    assert store.lease_steps(LeaseAsk("w2", [], now, until, 10)) == []
    # c becomes ready; a and b stay leased until their lease runs out.
    later = clock.advance(29)
    c_until = later + timedelta(seconds=30)
    assert [s.step_id for s in store.lease_steps(LeaseAsk("w2", [BUILD], later, c_until, 10))] == [
        "c"
    ]
    expired = clock.advance(1)
    again = store.lease_steps(
        LeaseAsk("w3", [BUILD, "shop-0"], expired, expired + timedelta(seconds=30), 10)
    )
    assert sorted((s.run_id, s.step_id) for s in again) == [("old", "x"), ("r1", "a"), ("r1", "b")]


def test_an_index_build_id_moves_the_run_and_its_step_tasks_to_that_build(
    store: EventStore, clock: ManualClock
) -> None:
    now = clock.now()
    create(store, "r1", now, decide_at=now)
    schedule_tasks(store, "r1", now, a=now, b=now)
    until = now + timedelta(seconds=30)
    [held] = store.lease_steps(LeaseAsk("w1", [BUILD], now, until, 1))  # one attempt is running
    upgraded = BuildUpgraded(from_build=BUILD, to_build="shop-2")
    last = len(store.read_history("r1"))
    store.append_if_sequence("r1", last, [upgraded], idx(build_id="shop-2", decide_at=now), now)
    record = store.get_run("r1")
    assert record is not None and record.build_id == "shop-2"
    assert [r.run_id for r in store.find_runs(RunFilter(build_id="shop-2"))] == ["r1"]
    assert store.find_runs(RunFilter(build_id=BUILD)) == []
    assert store.lease_runs(LeaseAsk("old", [BUILD], now, until, 10)) == []
    assert store.lease_steps(LeaseAsk("old", [BUILD], now, until, 10)) == []
    assert store.next_due([BUILD]) is None
    assert store.lease_runs(LeaseAsk("new", ["shop-2"], now, until, 10)) == ["r1"]
    [other] = {"a", "b"} - {held.step_id}
    assert [s.step_id for s in store.lease_steps(LeaseAsk("new", ["shop-2"], now, until, 10))] == [
        other
    ]
    # The attempt that was running keeps its lease; once it runs out, the new build takes it.
    assert store.renew_step(StepRenewal("r1", held.step_id, "w1", until))
    expired = until + timedelta(seconds=1)
    again = store.lease_steps(
        LeaseAsk("new", ["shop-2"], expired, expired + timedelta(seconds=30), 10)
    )
    assert held.step_id in [s.step_id for s in again]


def test_leasing_a_step_records_its_step_started_in_the_same_transaction(
    store: EventStore, clock: ManualClock
) -> None:
    now = clock.now()
    create(store, "r1", now)
    schedule_tasks(store, "r1", now, a=now, b=now)
    until = now + timedelta(seconds=30)
    leases = store.lease_steps(LeaseAsk("w1", [BUILD], now, until, 10))
    assert sorted(s.step_id for s in leases) == ["a", "b"]
    history = store.read_history("r1")
    assert [e.sequence for e in history] == [1, 2, 3, 4]
    started = [e.event for e in history[2:]]
    assert sorted((e.step_id, e.attempt, e.worker, e.lease_until) for e in started) == [  # type: ignore[union-attr]
        ("a", 1, "w1", until),
        ("b", 1, "w1", until),
    ]
    record = store.get_run("r1")
    assert record is not None
    assert (record.last_sequence, record.status) == (4, RUNNING)
    # Nothing ready: no event, no write.
    commits = store.stats.durable_commits
    assert store.lease_steps(LeaseAsk("w2", [BUILD], now, until, 10)) == []
    assert len(store.read_history("r1")) == 4
    assert store.stats.durable_commits == commits


def test_a_lease_can_carry_its_runs_history_with_its_step_started(
    store: EventStore, clock: ManualClock
) -> None:
    now = clock.now()
    create(store, "r1", now)
    create(store, "r2", now)
    schedule_tasks(store, "r1", now, a=now, b=now)
    schedule_tasks(store, "r2", now, x=now)
    until = now + timedelta(seconds=30)
    asked: list[str] = []

    def read_after(run_id: str) -> int:
        asked.append(run_id)
        return 2 if run_id == "r2" else 0  # r2: as if its first two events were known

    leases = store.lease_steps(LeaseAsk("w1", [BUILD], now, until, 10), read_after=read_after)
    assert sorted(asked) == ["r1", "r2"]  # once per run, not per lease
    by_run: dict[str, list[StepLease]] = {}
    for lease in leases:
        by_run.setdefault(lease.run_id, []).append(lease)
    r1_first, r1_second = by_run["r1"]
    (r2_lease,) = by_run["r2"]
    # The first lease of a run carries what was asked for, its step_started events included.
    assert r1_first.history == tuple(store.read_history("r1"))
    assert [e.sequence for e in r1_first.history] == [1, 2, 3, 4]
    assert r1_second.history is None
    assert r2_lease.history == tuple(store.read_history("r2", after_sequence=2))
    assert [type(e.event) for e in r2_lease.history] == [StepStarted]
    # Without read_after, nothing is carried; a carried history does not make leases unequal.
    assert r1_first == StepLease(
        run_id="r1", step_id=r1_first.step_id, attempt=1, lease_until=until
    )
    create(store, "r3", now)
    schedule_tasks(store, "r3", now, y=now)
    (plain,) = store.lease_steps(LeaseAsk("w1", [BUILD], now, until, 10))
    assert plain.history is None


def test_renew_step_only_for_the_lease_holder(store: EventStore, clock: ManualClock) -> None:
    now = clock.now()
    create(store, "r1", now)
    schedule_tasks(store, "r1", now, a=now)
    until = now + timedelta(seconds=30)
    store.lease_steps(LeaseAsk("w1", [BUILD], now, until, 10))
    assert not store.renew_step(StepRenewal("r1", "a", "w2", until + timedelta(seconds=60)))
    assert not store.renew_step(StepRenewal("r1", "missing", "w1", until + timedelta(seconds=60)))
    assert store.renew_step(StepRenewal("r1", "a", "w1", until + timedelta(seconds=60)))
    # The renewed lease outlives the first one: nobody can take the step at its old expiry.
    assert store.lease_steps(LeaseAsk("w2", [BUILD], clock.advance(45), until, 10)) == []
    clock.advance(45)
    assert [
        s.step_id for s in store.lease_steps(LeaseAsk("w2", [BUILD], clock.now(), until, 10))
    ] == ["a"]


def test_step_task_owner_from_the_index_can_renew(store: EventStore, clock: ManualClock) -> None:
    # A started attempt's task names its worker (StepTask.owner): that worker keeps renewing.
    now = clock.now()
    create(store, "r1", now)
    until = now + timedelta(seconds=30)
    started = {"a": StepTask(step_id="a", attempt=1, available_at=until, owner="w1")}
    store.append_if_sequence("r1", 1, [signal(1)], idx(steps=started), now)
    assert not store.renew_step(StepRenewal("r1", "a", "w2", until + timedelta(seconds=60)))
    assert store.renew_step(StepRenewal("r1", "a", "w1", until + timedelta(seconds=60)))
    assert store.lease_steps(LeaseAsk("w2", [BUILD], clock.advance(45), until, 10)) == []


# -- wait_for_change -----------------------------------------------------------------------------


def test_wait_for_change_times_out_when_nothing_happens(store: EventStore) -> None:
    started = time.monotonic()
    store.wait_for_change(0.2)
    assert 0.15 <= time.monotonic() - started < 5


def test_wait_for_change_wakes_on_a_commit(store: EventStore, clock: ManualClock) -> None:
    def later() -> None:
        time.sleep(0.2)
        store.create_run(new_run("woken", decide_at=clock.now()), clock.now())

    writer = threading.Thread(target=later)
    started = time.monotonic()
    writer.start()
    store.wait_for_change(20)
    writer.join()
    assert time.monotonic() - started < 10
    assert store.get_run("woken") is not None


@pytest.mark.parametrize(
    ("grouped", "run_id"),
    [(False, "awaited"), (True, "awaited"), (False, "\N{SLIGHTLY SMILING FACE}" * 3000)],
    ids=["append", "commit_groups", "long-id"],
)
def test_wait_for_change_wakes_when_the_awaited_run_ends(
    store: EventStore, clock: ManualClock, grouped: bool, run_id: str
) -> None:
    # A run's end schedules no work, yet whoever waits for its outcome (``flow result
    # --wait``) must learn of it at once, not at its next poll. However long its id: telling
    # the waiter must not make the end too big to commit.
    create(store, run_id, clock.now())
    create(store, "other", clock.now())
    store.wait_for_change(0, ending=run_id)  # a store may start listening here
    ended = [RunCompleted(result=None)]

    def later() -> None:
        time.sleep(0.2)
        if grouped:
            write = StreamWrite(
                run_id=run_id, expected_sequence=1, events=ended, index=idx(RunStatus.COMPLETED)
            )
            group = CommitGroup(writes=[write], creates=[], now=clock.now())
            assert store.commit_groups([group]) == [None]
        else:
            store.append_if_sequence(run_id, 1, ended, idx(RunStatus.COMPLETED), clock.now())

    writer = threading.Thread(target=later)
    started = time.monotonic()
    writer.start()
    store.wait_for_change(30, ending=run_id)
    writer.join()
    assert time.monotonic() - started < 10
    record = store.get_run(run_id)
    assert record is not None and record.status is RunStatus.COMPLETED
