"""Store conformance for the ``Schedules`` role: runs once per ``store`` param (memory, SQLite,
PostgreSQL when configured), like the other ``test_store_*.py`` suites."""

from __future__ import annotations

import dataclasses
from datetime import timedelta

from flow_cli.model.clock import ManualClock
from flow_cli.model.schedule import (
    Overlap,
    RecentRun,
    Schedule,
    ScheduleSpec,
    ScheduleState,
    new_schedule,
)
from flow_cli.store.protocol import EventStore


def make(schedule_id: str, clock: ManualClock, **spec: object) -> Schedule:
    fields: dict[str, object] = {"workflow": "report", "every": timedelta(minutes=15)}
    fields.update(spec)
    return new_schedule(ScheduleSpec(schedule_id=schedule_id, **fields), clock.now())  # type: ignore[arg-type]


def test_create_get_list_and_duplicate(store: EventStore, clock: ManualClock) -> None:
    nightly = make("nightly", clock, cron="0 2 * * *", every=None, timezone="Europe/Berlin")
    assert store.create_schedule(nightly)
    assert store.create_schedule(make("hourly", clock, input={"n": 1}, overlap=Overlap.ALLOW_ALL))
    assert not store.create_schedule(make("nightly", clock))  # taken: nothing written
    got = store.get_schedule("nightly")
    assert got is not None and got.version == 1
    assert got.spec == nightly.spec and got.state == nightly.state
    assert got.due_at == nightly.due_at
    assert [s.schedule_id for s in store.list_schedules()] == ["hourly", "nightly"]
    assert store.get_schedule("missing") is None


def test_save_is_refused_from_a_stale_version(store: EventStore, clock: ManualClock) -> None:
    store.create_schedule(make("s", clock))
    read = store.get_schedule("s")
    assert read is not None
    state = ScheduleState(
        next_fire_at=clock.now(),
        skipped=2,
        missed=1,
        recent=(RecentRun(scheduled_at=clock.now(), run_id="s@x"),),
    )
    assert store.save_schedule(dataclasses.replace(read, state=state))
    assert not store.save_schedule(dataclasses.replace(read, state=ScheduleState()))  # stale
    again = store.get_schedule("s")
    assert again is not None and again.version == 2 and again.state == state


def test_claims_take_due_schedules_once_earliest_first(
    store: EventStore, clock: ManualClock
) -> None:
    now = clock.now()
    for name, minutes in (("late", 3), ("early", 1), ("future", 60)):
        schedule = make(name, clock)
        store.create_schedule(
            dataclasses.replace(schedule, due_at=now + timedelta(minutes=minutes))
        )
    paused = make("paused", clock, paused=True)
    assert paused.due_at is None
    store.create_schedule(paused)
    assert store.next_schedule_due() == now + timedelta(minutes=1)

    later = now + timedelta(minutes=5)
    until = later + timedelta(seconds=30)
    claimed = store.claim_schedules(later, until, 10)
    assert [s.schedule_id for s in claimed] == ["early", "late"]
    assert all(s.due_at == until and s.version == 2 for s in claimed)
    assert store.claim_schedules(later, until, 10) == []  # claimed: passed by
    assert store.next_schedule_due() == until
    # The claimer saves at the version its claim returned; a save from before the claim fails.
    early = claimed[0]
    assert store.save_schedule(dataclasses.replace(early, due_at=now + timedelta(hours=2)))
    assert not store.save_schedule(dataclasses.replace(claimed[0], due_at=None))
    # A claim that runs out is taken again.
    retaken = store.claim_schedules(until, until + timedelta(seconds=30), 1)
    assert [s.schedule_id for s in retaken] == ["late"]


def test_claim_limit_and_delete(store: EventStore, clock: ManualClock) -> None:
    for i in range(5):
        store.create_schedule(dataclasses.replace(make(f"s{i}", clock), due_at=clock.now()))
    assert len(store.claim_schedules(clock.now(), clock.now() + timedelta(seconds=30), 3)) == 3
    assert store.delete_schedule("s0")
    assert not store.delete_schedule("s0")
    assert store.get_schedule("s0") is None
    assert [s.schedule_id for s in store.list_schedules()] == ["s1", "s2", "s3", "s4"]


def test_no_schedule_means_nothing_due(store: EventStore) -> None:
    assert store.next_schedule_due() is None
    assert store.list_schedules() == []
