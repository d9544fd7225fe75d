"""The store conformance suite, priorities and pauses (``flow start --priority``, ``flow
pause``): every store takes ready runs and steps by priority, then age, and leaves the runs a
pause holds out of its leases and of when work is next due."""

from __future__ import annotations

from datetime import timedelta

from store_helpers import BUILD, create, schedule_tasks

from flow_cli.model.clock import ManualClock
from flow_cli.store.pauses import PauseKind, PauseTarget
from flow_cli.store.protocol import EventStore, LeaseAsk


def _ask(clock: ManualClock, limit: int = 10, builds: tuple[str, ...] = (BUILD,)) -> LeaseAsk:
    now = clock.now()
    return LeaseAsk("w1", builds, now, now + timedelta(seconds=30), limit)


def test_due_runs_are_leased_by_priority_then_age(store: EventStore, clock: ManualClock) -> None:
    now = clock.now()
    # Created (and due) oldest first: by age alone the order would be a, b, c, d, e.
    create(store, "a-low", now, decide_at=now - timedelta(seconds=5), priority=9)
    create(store, "b-default-old", now, decide_at=now - timedelta(seconds=4))
    create(store, "c-urgent-new", now, decide_at=now - timedelta(seconds=1), priority=1)
    create(store, "d-default-new", now, decide_at=now - timedelta(seconds=2))
    create(store, "e-urgent-old", now, decide_at=now - timedelta(seconds=3), priority=1)
    create(store, "f-urgent-later", now, decide_at=now + timedelta(seconds=1), priority=1)
    assert store.lease_runs(_ask(clock, limit=3)) == [
        "e-urgent-old",
        "c-urgent-new",
        "b-default-old",
    ]
    assert store.lease_runs(_ask(clock)) == ["d-default-new", "a-low"]
    record = store.get_run("c-urgent-new")
    assert record is not None and record.priority == 1


def test_ready_steps_are_leased_by_their_runs_priority_then_age(
    store: EventStore, clock: ManualClock
) -> None:
    now = clock.now()
    create(store, "low", now, priority=7)
    create(store, "urgent", now, priority=2)
    create(store, "default", now)
    schedule_tasks(store, "low", now, s1=now - timedelta(seconds=9))
    schedule_tasks(store, "default", now, s1=now - timedelta(seconds=8))
    schedule_tasks(store, "urgent", now, s2=now - timedelta(seconds=1))
    schedule_tasks(store, "urgent", now, s1=now - timedelta(seconds=2))
    leased = [(lease.run_id, lease.step_id) for lease in store.lease_steps(_ask(clock, limit=3))]
    assert leased == [("urgent", "s1"), ("urgent", "s2"), ("default", "s1")]
    assert [lease.run_id for lease in store.lease_steps(_ask(clock))] == ["low"]


def test_a_pause_holds_runs_and_steps_until_resumed(store: EventStore, clock: ManualClock) -> None:
    now = clock.now()
    due = now - timedelta(seconds=1)
    create(store, "held-run", now, decide_at=due)
    create(store, "of-held-workflow", now, decide_at=due, workflow="billing")
    create(store, "of-held-build", now, decide_at=due, build="shop-0")
    create(store, "free", now, decide_at=now + timedelta(seconds=5))
    create(store, "stepping", now, workflow="billing")
    schedule_tasks(store, "stepping", now, s1=due)
    targets = [
        PauseTarget(kind=PauseKind.RUN, name="held-run"),
        PauseTarget(kind=PauseKind.WORKFLOW, name="billing"),
        PauseTarget(kind=PauseKind.BUILD, name="shop-0"),
    ]
    assert store.add_pauses(targets, "deploy", now) == 3
    assert store.add_pauses(targets[:1], "still", now + timedelta(seconds=1)) == 0
    listed = store.list_pauses()
    assert [(str(p.target), p.reason) for p in listed] == [
        ("run:held-run", "still"),
        ("workflow:billing", "deploy"),
        ("build:shop-0", "deploy"),
    ]
    assert listed[0].paused_at == now  # a pause repeated keeps its first time
    builds = (BUILD, "shop-0")
    assert store.lease_runs(_ask(clock, builds=builds)) == []
    assert store.lease_steps(_ask(clock, builds=builds)) == []
    # An idle worker must not see held work as due (it would spin): the free run's time is.
    assert store.next_due(builds) == now + timedelta(seconds=5)
    # A run started after a workflow's pause is held too.
    create(store, "started-later", now, decide_at=due, workflow="billing")
    assert store.lease_runs(_ask(clock, builds=builds)) == []

    assert store.remove_pauses(targets[1:]) == 2
    assert store.remove_pauses(targets[1:]) == 0
    assert store.next_due(builds) == due
    assert sorted(store.lease_runs(_ask(clock, builds=builds))) == [
        "of-held-build",
        "of-held-workflow",
        "started-later",
    ]
    assert [lease.run_id for lease in store.lease_steps(_ask(clock, builds=builds))] == ["stepping"]
    assert store.remove_pauses(targets[:1]) == 1
    assert store.list_pauses() == []
    assert store.lease_runs(_ask(clock, builds=builds)) == ["held-run"]
