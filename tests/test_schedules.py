"""Schedules on a manual clock: fire times (cron, intervals, aliases, DST days in
Europe/Berlin and America/New_York), firing through ``Engine.tick``, every overlap policy,
catch-up inside and outside the window, pause and resume, trigger, backfill idempotence and
``apply``. The firing tests run on every store."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest
from engine_workflows import data, make_engine
from schedule_workflows import runtime

from flow_cli.engine.engine import Engine
from flow_cli.errors import ScheduleExists, ScheduleInvalid, ScheduleNotFound
from flow_cli.model.clock import ManualClock
from flow_cli.model.schedule import Overlap, ScheduleSpec, run_id_for, utc_text
from flow_cli.model.status import RunStatus
from flow_cli.store.memory import MemoryStore
from flow_cli.store.protocol import EventStore

T0 = datetime(2026, 12, 4, 8, 59, 30, tzinfo=UTC)


def times(spec: ScheduleSpec, after: datetime, n: int = 4) -> list[str]:
    found: list[str] = []
    for moment in spec.fire_times(after):
        found.append(utc_text(moment))
        if len(found) == n:
            break
    return found


def cron(expr: str, zone: str = "UTC", **more: object) -> ScheduleSpec:
    return ScheduleSpec(schedule_id="s", workflow="report", cron=expr, timezone=zone, **more)  # type: ignore[arg-type]


# -- fire times -------------------------------------------------------------------------------


def test_cron_and_aliases_fire_in_their_zone() -> None:
    assert times(cron("0 9 * * 1-5", "Europe/Berlin"), T0, 3) == [
        "2026-12-07T08:00:00Z",  # Friday 09:00 Berlin passed at 08:00Z; next weekday: Monday
        "2026-12-08T08:00:00Z",
        "2026-12-09T08:00:00Z",
    ]
    assert times(cron("0 9 * * *"), T0, 2) == ["2026-12-04T09:00:00Z", "2026-12-05T09:00:00Z"]
    assert times(cron("@hourly"), T0, 2) == ["2026-12-04T09:00:00Z", "2026-12-04T10:00:00Z"]
    assert times(cron("@daily"), T0, 1) == ["2026-12-05T00:00:00Z"]
    assert times(cron("@weekly"), T0, 1) == ["2026-12-06T00:00:00Z"]  # Sunday
    assert times(cron("@monthly"), T0, 1) == ["2027-01-01T00:00:00Z"]
    assert times(cron("0 9 * * *", "America/New_York"), T0, 1) == ["2026-12-04T14:00:00Z"]


def test_intervals_sit_on_a_grid_from_the_epoch_or_start_at() -> None:
    every = ScheduleSpec(schedule_id="s", workflow="report", every=timedelta(minutes=15))
    assert times(every, T0, 3) == [
        "2026-12-04T09:00:00Z",
        "2026-12-04T09:15:00Z",
        "2026-12-04T09:30:00Z",
    ]
    anchored = ScheduleSpec(
        schedule_id="s",
        workflow="report",
        every=timedelta(minutes=15),
        start_at=datetime(2026, 12, 4, 9, 7, tzinfo=UTC),
        end_at=datetime(2026, 12, 4, 9, 40, tzinfo=UTC),
    )
    assert times(anchored, T0, 5) == [
        "2026-12-04T09:07:00Z",
        "2026-12-04T09:22:00Z",
        "2026-12-04T09:37:00Z",
    ]  # end_at stops it


@pytest.mark.parametrize(
    ("zone", "spring", "fall", "spring_fire", "fall_fires"),
    [
        # 2026: Europe changes on March 29 and October 25 at 01:00Z.
        (
            "Europe/Berlin",
            datetime(2026, 3, 28, 12, tzinfo=UTC),
            datetime(2026, 10, 24, 12, tzinfo=UTC),
            "2026-03-29T01:00:00Z",  # 02:30 does not exist: fires at 03:00 CEST
            ["2026-10-25T00:30:00Z", "2026-10-26T01:30:00Z"],  # 02:30 twice that night: once
        ),
        # 2026: the US changes on March 8 and November 1.
        (
            "America/New_York",
            datetime(2026, 3, 7, 12, tzinfo=UTC),
            datetime(2026, 10, 31, 12, tzinfo=UTC),
            "2026-03-08T07:00:00Z",  # 02:30 does not exist: fires at 03:00 EDT
            ["2026-11-01T05:30:00Z", "2026-11-02T06:30:00Z"],  # 01:30 EDT only, then 01:30 EST
        ),
    ],
)
def test_daylight_saving_days(
    zone: str, spring: datetime, fall: datetime, spring_fire: str, fall_fires: list[str]
) -> None:
    assert times(cron("30 2 * * *", zone), spring, 1) == [spring_fire]
    fall_expr = "30 2 * * *" if zone == "Europe/Berlin" else "30 1 * * *"
    assert times(cron(fall_expr, zone), fall, 2) == fall_fires


def test_an_hourly_cron_fires_each_real_hour_of_a_fall_back_night() -> None:
    # Every UTC hour is a distinct fire time and run id, the repeated local hour included.
    assert times(cron("0 * * * *", "Europe/Berlin"), datetime(2026, 10, 24, 23, tzinfo=UTC)) == [
        "2026-10-25T00:00:00Z",  # 02:00 CEST
        "2026-10-25T01:00:00Z",  # 02:00 CET
        "2026-10-25T02:00:00Z",
        "2026-10-25T03:00:00Z",
    ]


@pytest.mark.parametrize(
    ("fields", "problem", "example"),
    [
        ({"cron": "0 25 * * *"}, "not valid", "--cron '0 9 * * 1-5'"),
        ({"cron": "0 9 * *"}, "five fields", "--cron"),
        ({"cron": "@fortnightly"}, "@fortnightly", "--cron @daily"),
        ({"cron": "0 9 * * *", "every": timedelta(minutes=5)}, "exactly one", "--cron"),
        ({"every": timedelta(seconds=0.5)}, "whole number", "15m"),
        ({"cron": "0 9 * * *", "timezone": "Mars/Olympus"}, "Mars/Olympus", "Europe/Berlin"),
        (
            {
                "every": timedelta(hours=1),
                "start_at": datetime(2027, 1, 1, tzinfo=UTC),
                "end_at": datetime(2026, 1, 1, tzinfo=UTC),
            },
            "is after --end-at",
            "--start-at",
        ),
    ],
)
def test_a_bad_definition_says_what_and_shows_a_right_one(
    fields: dict[str, object], problem: str, example: str
) -> None:
    with pytest.raises(ScheduleInvalid) as caught:
        ScheduleSpec(schedule_id="s", workflow="report", **fields)  # type: ignore[arg-type]
    assert problem in str(caught.value) and example in str(caught.value)


def test_run_ids_name_the_fire_time_in_utc() -> None:
    berlin = datetime(2026, 12, 4, 10, 0, tzinfo=UTC).astimezone()
    assert run_id_for("nightly", berlin) == "nightly@2026-12-04T10:00:00Z"


# -- firing -----------------------------------------------------------------------------------


@pytest.fixture
def engine(store: EventStore, clock: ManualClock) -> Engine:
    clock.set(T0)
    return make_engine(store, [runtime], clock)


def every(schedule_id: str = "s", workflow: str = "report", **more: object) -> ScheduleSpec:
    fields: dict[str, object] = {"every": timedelta(minutes=1)}
    fields.update(more)
    return ScheduleSpec(schedule_id=schedule_id, workflow=workflow, **fields)  # type: ignore[arg-type]


def run_ids(engine: Engine) -> list[str]:
    return sorted(r.run_id for r in engine.list_runs())


def test_a_fire_time_starts_one_run_that_reads_its_fire_time(
    engine: Engine, clock: ManualClock
) -> None:
    engine.schedules.create(every(input={"k": 1}))
    assert engine.tick(until_idle=True).schedules_fired == 0  # 08:59:30: nothing due
    clock.set(datetime(2026, 12, 4, 9, 0, 0, 400_000, tzinfo=UTC))
    report = engine.tick(until_idle=True)
    assert report.schedules_fired == 1
    run = "s@2026-12-04T09:00:00Z"
    assert run_ids(engine) == [run]
    snap = engine.snapshot(run)
    assert snap.status is RunStatus.COMPLETED
    assert snap.outcome is not None and snap.outcome.result == {
        "scheduled_at": "2026-12-04T09:00:00+00:00",
        "in": {"k": 1},
    }
    assert data(engine, run, "run_started")[0]["spec"]["schedule"] == {
        "id": "s",
        "scheduled_at": "2026-12-04T09:00:00Z",
    }
    assert engine.tick(until_idle=True).schedules_fired == 0  # the same fire time: once
    schedule = engine.schedules.get("s")
    assert schedule.state.next_fire_at == datetime(2026, 12, 4, 9, 1, tzinfo=UTC)
    assert engine.schedules.recent(schedule) == [
        {"scheduled_at": "2026-12-04T09:00:00Z", "run_id": run, "status": "Completed"}
    ]


def test_a_run_started_without_a_schedule_reads_none(engine: Engine) -> None:
    engine.start("report", run_id="plain")
    engine.tick(until_idle=True)
    outcome = engine.snapshot("plain").outcome
    assert outcome is not None and outcome.result == {"scheduled_at": None, "in": None}


def test_a_fire_time_whose_run_exists_starts_nothing_new(
    engine: Engine, clock: ManualClock
) -> None:
    # A worker that started the run and died before saving the schedule: the next one finds
    # the run there (same id, same input) and only advances.
    engine.schedules.create(every())
    engine.start("report", None, run_id="s@2026-12-04T09:00:00Z")
    clock.set(datetime(2026, 12, 4, 9, 0, 1, tzinfo=UTC))
    assert engine.tick(until_idle=True).schedules_fired == 0
    assert run_ids(engine) == ["s@2026-12-04T09:00:00Z"]
    assert engine.schedules.get("s").state.next_fire_at == datetime(2026, 12, 4, 9, 1, tzinfo=UTC)


def _open_then_fire(engine: Engine, clock: ManualClock, overlap: Overlap) -> None:
    engine.schedules.create(every(workflow="long", overlap=overlap))
    clock.set(datetime(2026, 12, 4, 9, 0, 1, tzinfo=UTC))
    engine.tick(until_idle=True)  # 09:00 starts and waits for "done"
    clock.set(datetime(2026, 12, 4, 9, 1, 1, tzinfo=UTC))
    engine.tick(until_idle=True)  # 09:01: the 09:00 run is still open


def status(engine: Engine, run_id: str) -> str:
    return engine.get_run(run_id).status.value


def test_skip_counts_the_fire_time_and_starts_nothing(engine: Engine, clock: ManualClock) -> None:
    _open_then_fire(engine, clock, Overlap.SKIP)
    assert run_ids(engine) == ["s@2026-12-04T09:00:00Z"]
    assert engine.schedules.get("s").state.skipped == 1


def test_allow_all_starts_it_anyway(engine: Engine, clock: ManualClock) -> None:
    _open_then_fire(engine, clock, Overlap.ALLOW_ALL)
    assert run_ids(engine) == ["s@2026-12-04T09:00:00Z", "s@2026-12-04T09:01:00Z"]


def test_buffer_one_starts_it_when_the_previous_ends_and_keeps_only_one(
    engine: Engine, clock: ManualClock
) -> None:
    _open_then_fire(engine, clock, Overlap.BUFFER_ONE)
    clock.set(datetime(2026, 12, 4, 9, 2, 1, tzinfo=UTC))
    engine.tick(until_idle=True)  # 09:02: one is buffered already, so this one is skipped
    state = engine.schedules.get("s").state
    assert state.buffered_at == datetime(2026, 12, 4, 9, 1, tzinfo=UTC) and state.skipped == 1
    assert run_ids(engine) == ["s@2026-12-04T09:00:00Z"]
    engine.signal("s@2026-12-04T09:00:00Z", "done", 1)
    engine.tick(until_idle=True)
    clock.advance(seconds=2)  # the buffered fire time is looked at every second
    engine.tick(until_idle=True)
    assert run_ids(engine) == ["s@2026-12-04T09:00:00Z", "s@2026-12-04T09:01:00Z"]
    assert engine.schedules.get("s").state.buffered_at is None


def test_cancel_other_cancels_the_previous_then_starts(engine: Engine, clock: ManualClock) -> None:
    _open_then_fire(engine, clock, Overlap.CANCEL_OTHER)
    assert status(engine, "s@2026-12-04T09:00:00Z") == "Cancelled"
    clock.advance(seconds=2)
    engine.tick(until_idle=True)
    assert run_ids(engine) == ["s@2026-12-04T09:00:00Z", "s@2026-12-04T09:01:00Z"]
    assert status(engine, "s@2026-12-04T09:01:00Z") == "Suspended"


def test_terminate_other_ends_the_previous_and_starts_at_once(
    engine: Engine, clock: ManualClock
) -> None:
    _open_then_fire(engine, clock, Overlap.TERMINATE_OTHER)
    assert status(engine, "s@2026-12-04T09:00:00Z") == "Cancelled"
    outcome = engine.snapshot("s@2026-12-04T09:00:00Z").outcome
    assert outcome is not None and outcome.forced
    assert run_ids(engine) == ["s@2026-12-04T09:00:00Z", "s@2026-12-04T09:01:00Z"]


def test_catch_up_fires_inside_the_window_and_counts_the_rest_missed(
    engine: Engine, clock: ManualClock
) -> None:
    engine.schedules.create(
        every(every=timedelta(minutes=10), catchup_window=timedelta(minutes=25))
    )
    # No worker from 08:59:30 until 10:00:05: 09:00 ... 10:00 came due (7 fire times).
    clock.set(datetime(2026, 12, 4, 10, 0, 5, tzinfo=UTC))
    engine.tick(until_idle=True)
    assert run_ids(engine) == [
        "s@2026-12-04T09:40:00Z",
        "s@2026-12-04T09:50:00Z",
        "s@2026-12-04T10:00:00Z",
    ]
    state = engine.schedules.get("s").state
    assert state.missed == 4  # 09:00, 09:10, 09:20, 09:30
    assert state.next_fire_at == datetime(2026, 12, 4, 10, 10, tzinfo=UTC)


def test_catch_up_of_a_cron_schedule(engine: Engine, clock: ManualClock) -> None:
    engine.schedules.create(cron("0 * * * *", catchup_window=timedelta(hours=1)))
    clock.set(datetime(2026, 12, 4, 13, 30, tzinfo=UTC))
    engine.tick(until_idle=True)
    assert run_ids(engine) == ["s@2026-12-04T13:00:00Z"]  # 12:30 is the window's edge
    assert engine.schedules.get("s").state.missed == 4  # 09, 10, 11, 12


def test_jitter_delays_the_start_but_not_the_run_id(engine: Engine, clock: ManualClock) -> None:
    spec = every(jitter=timedelta(seconds=50))
    engine.schedules.create(spec)
    fire = datetime(2026, 12, 4, 9, 0, tzinfo=UTC)
    delay = spec.jitter_for(fire)
    assert timedelta(0) < delay <= timedelta(seconds=50)
    clock.set(fire + delay - timedelta(milliseconds=1))
    engine.tick(until_idle=True)
    assert run_ids(engine) == []
    clock.set(fire + delay)
    engine.tick(until_idle=True)
    assert run_ids(engine) == ["s@2026-12-04T09:00:00Z"]


def test_pause_and_resume(engine: Engine, clock: ManualClock) -> None:
    engine.schedules.create(every())
    paused = engine.schedules.pause("s", note="maintenance")
    assert paused.spec.paused and paused.spec.note == "maintenance" and paused.due_at is None
    assert engine.schedules.next_fire_times(paused) == []
    clock.set(datetime(2026, 12, 4, 9, 5, 30, tzinfo=UTC))
    engine.tick(until_idle=True)
    assert run_ids(engine) == []
    resumed = engine.schedules.resume("s")
    # Fire times while paused are not fired afterwards: the next is the first after now.
    assert resumed.state.next_fire_at == datetime(2026, 12, 4, 9, 6, tzinfo=UTC)
    assert engine.schedules.next_fire_times(resumed)[:2] == [
        datetime(2026, 12, 4, 9, 6, tzinfo=UTC),
        datetime(2026, 12, 4, 9, 7, tzinfo=UTC),
    ]
    clock.set(datetime(2026, 12, 4, 9, 6, 0, tzinfo=UTC))
    engine.tick(until_idle=True)
    assert run_ids(engine) == ["s@2026-12-04T09:06:00Z"]


def test_trigger_starts_one_run_now_under_the_overlap_policy(
    engine: Engine, clock: ManualClock
) -> None:
    engine.schedules.create(every(workflow="long"))
    clock.set(datetime(2026, 12, 4, 8, 59, 40, 250_000, tzinfo=UTC))
    fired = engine.schedules.trigger("s")
    assert (fired.action, fired.run_id) == ("started", "s@2026-12-04T08:59:40Z")
    clock.advance(seconds=3)
    assert engine.schedules.trigger("s").action == "skipped"  # the first is open
    assert engine.schedules.get("s").state.skipped == 1


def test_backfill_twice_starts_no_new_runs(engine: Engine) -> None:
    engine.schedules.create(cron("0 6 * * *", "Europe/Berlin"))
    start, end = datetime(2026, 11, 1, tzinfo=UTC), datetime(2026, 11, 3, 23, tzinfo=UTC)
    first = engine.schedules.backfill("s", start, end)
    assert [(f.action, f.run_id) for f in first] == [
        ("started", "s@2026-11-01T05:00:00Z"),
        ("started", "s@2026-11-02T05:00:00Z"),
        ("started", "s@2026-11-03T05:00:00Z"),
    ]
    again = engine.schedules.backfill("s", start, end)
    assert [f.action for f in again] == ["existing"] * 3
    assert len(engine.list_runs()) == 3
    with pytest.raises(ScheduleInvalid, match="is after --to"):
        engine.schedules.backfill("s", end, start)


def test_backfill_with_skip_skips_while_the_previous_is_open(engine: Engine) -> None:
    engine.schedules.create(every(workflow="long", every=timedelta(hours=1)))
    start, end = datetime(2026, 11, 1, tzinfo=UTC), datetime(2026, 11, 1, 2, tzinfo=UTC)
    fired = engine.schedules.backfill("s", start, end, Overlap.SKIP)
    assert [f.action for f in fired] == ["started", "skipped", "skipped"]
    assert [f.action for f in engine.schedules.backfill("s", start, end, Overlap.SKIP)] == [
        "existing",
        "skipped",
        "skipped",
    ]


def test_create_duplicate_update_delete(engine: Engine, clock: ManualClock) -> None:
    engine.schedules.create(every())
    with pytest.raises(ScheduleExists):
        engine.schedules.create(every())
    clock.set(datetime(2026, 12, 4, 9, 2, 10, tzinfo=UTC))
    updated = engine.schedules.update("s", lambda s: replace(s, every=timedelta(minutes=5)))
    assert updated.state.next_fire_at == datetime(2026, 12, 4, 9, 5, tzinfo=UTC)
    assert updated.version == 2
    same_timing = engine.schedules.update("s", lambda s: replace(s, input={"x": 1}))
    assert same_timing.state.next_fire_at == updated.state.next_fire_at
    engine.schedules.delete("s")
    with pytest.raises(ScheduleNotFound):
        engine.schedules.delete("s")
    with pytest.raises(ScheduleNotFound):
        engine.schedules.get("s")


def test_apply_creates_updates_and_deletes() -> None:
    clock = ManualClock(T0)
    engine = make_engine(MemoryStore(), [runtime], clock)
    engine.schedules.create(every("old"))
    engine.schedules.create(every("kept"))
    engine.schedules.create(every("changed"))
    wanted = [every("kept"), every("changed", every=timedelta(minutes=5)), every("new")]
    plan = engine.schedules.apply(wanted, dry_run=True)
    assert plan.to_json() == {
        "create": ["new"],
        "update": ["changed"],
        "delete": ["old"],
        "unchanged": ["kept"],
    }
    assert [s.schedule_id for s in engine.schedules.all()] == ["changed", "kept", "old"]
    engine.schedules.apply(wanted)
    assert [s.spec for s in engine.schedules.all()] == sorted(wanted, key=lambda s: s.schedule_id)
    changed = engine.schedules.get("changed")
    assert changed.state.next_fire_at == datetime(2026, 12, 4, 9, 0, tzinfo=UTC)
    again = engine.schedules.apply(wanted)
    assert again.unchanged == ("changed", "kept", "new") and not again.create + again.delete


def test_doctor_names_a_late_schedule_with_no_live_worker(
    engine: Engine, clock: ManualClock
) -> None:
    from flow_cli.ops.doctor import diagnose
    from flow_cli.store.protocol import RunFilter

    engine.schedules.create(every())
    engine.schedules.create(every("resting", paused=True))
    clock.set(datetime(2026, 12, 4, 9, 0, 20, tzinfo=UTC))
    schedules = engine.schedules.all()
    assert diagnose(engine, RunFilter(), clock.now(), schedules=schedules).ok  # 20 s: not yet
    clock.set(datetime(2026, 12, 4, 9, 0, 31, tzinfo=UTC))
    report = diagnose(engine, RunFilter(), clock.now(), schedules=schedules)
    assert not report.ok and report.summary["schedule-late"] == 1
    (late,) = report.runs
    assert (late.run_id, late.cause, late.workflow) == (
        "s@2026-12-04T09:00:00Z",
        "schedule-late",
        "report",
    )
    assert late.detail.startswith("schedule 's' was due at ") and "no live worker" in late.detail
    engine.tick()  # a worker fires it: nothing is late any more
    assert diagnose(engine, RunFilter(), clock.now(), schedules=engine.schedules.all()).ok


def test_many_schedules_due_at_once_each_start_their_run(
    engine: Engine, clock: ManualClock
) -> None:
    for n in range(25):
        engine.schedules.create(every(f"s{n:02d}", input={"n": n}))
    clock.set(datetime(2026, 12, 4, 9, 0, 0, tzinfo=UTC))
    assert engine.tick(until_idle=True).schedules_fired == 25  # one claim, fired together
    assert run_ids(engine) == [f"s{n:02d}@2026-12-04T09:00:00Z" for n in range(25)]
    assert {r.status for r in engine.list_runs()} == {RunStatus.COMPLETED}
    assert all(s.state.last_fired_at == clock.now() for s in engine.schedules.all())


def test_skip_sees_a_continue_as_new_chain_as_the_previous_run(
    engine: Engine, clock: ManualClock
) -> None:
    engine.schedules.create(every(workflow="relay"))
    clock.set(datetime(2026, 12, 4, 9, 0, 1, tzinfo=UTC))
    engine.tick(until_idle=True)  # 09:00 continued as new; its successor waits
    assert status(engine, "s@2026-12-04T09:00:00Z") == "ContinuedAsNew"
    clock.set(datetime(2026, 12, 4, 9, 1, 1, tzinfo=UTC))
    engine.tick(until_idle=True)
    # No 09:01 run: the 09:00 chain is still open in its successor.
    assert run_ids(engine) == ["s@2026-12-04T09:00:00Z", "s@2026-12-04T09:00:00Z~1"]
    assert engine.schedules.get("s").state.skipped == 1
