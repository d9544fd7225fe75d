"""``flow_cli.ops.doctor.classify``: the precedence of causes, on hand-made index rows."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from flow_cli.model.status import RunStatus
from flow_cli.ops.doctor import CAUSES, STUCK, Hosting, classify
from flow_cli.store.protocol import RunState, StepTask, WorkerInfo

NOW = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)
LATE = NOW - timedelta(seconds=31)
SOON = NOW - timedelta(seconds=29)
HOSTED = Hosting(frozenset({"b1"}), {"b1": NOW}, any_live=True)


def run(**changes: object) -> RunState:
    fields: dict[str, object] = {
        "run_id": "r",
        "workflow": "w",
        "status": RunStatus.SUSPENDED,
        "build_id": "b1",
        "created_at": NOW - timedelta(hours=1),
        "updated_at": NOW - timedelta(minutes=10),
        "decide_at": None,
        "lease_owner": None,
        "failing": None,
        "waiting_on": None,
    }
    fields.update(changes)
    return RunState(**fields)  # type: ignore[arg-type]


def task(available_at: datetime, attempt: int = 1, owner: str | None = None) -> StepTask:
    return StepTask(step_id="s", attempt=attempt, available_at=available_at, owner=owner)


def cause(state: RunState, hosting: Hosting = HOSTED) -> str:
    return classify(state, hosting, NOW).cause


def test_stuck_causes_follow_paused() -> None:
    assert CAUSES[0] == "paused" and set(CAUSES[1:7]) == STUCK


def test_precedence_when_several_apply() -> None:
    everything = run(
        failing="ValueError: x",
        build_id="b0",
        decide_at=LATE,
        waiting_on="signal:go hook:h child:c timer:t",
        tasks=(task(LATE, owner="w9"), task(NOW + timedelta(seconds=5), attempt=2)),
    )
    assert cause(everything) == "decision-failing"
    assert cause(run(**{**_fields(everything), "failing": None})) == "build-unhosted"
    hosted = run(**{**_fields(everything), "failing": None, "build_id": "b1"})
    assert cause(hosted) == "timer-overdue"  # before the expired step lease
    assert cause(run(**{**_fields(hosted), "decide_at": None})) == "lease-expired"
    retrying = run(
        waiting_on="signal:go hook:h child:c",
        tasks=(task(NOW + timedelta(seconds=5), attempt=2),),
    )
    assert cause(retrying) == "step-retrying"
    assert cause(run(waiting_on="signal:go hook:h child:c", decide_at=SOON)) == "runnable"
    assert cause(run(waiting_on="signal:go hook:h child:c")) == "waiting-signal"
    assert cause(run(waiting_on="hook:h child:c")) == "waiting-hook"
    assert cause(run(waiting_on="child:c")) == "waiting-child"
    assert cause(run(waiting_on="timer:t", decide_at=NOW + timedelta(hours=1))) == "sleeping"


def _fields(state: RunState) -> dict[str, object]:
    return {name: getattr(state, name) for name in RunState.__dataclass_fields__}


@pytest.mark.parametrize(
    ("state", "expected"),
    [
        (run(decide_at=SOON), "runnable"),  # due, within the grace
        (run(decide_at=LATE), "timer-overdue"),
        (run(decide_at=LATE, lease_owner="w1"), "lease-expired"),
        (run(decide_at=SOON, lease_owner="w1"), "runnable"),  # being decided
        (run(tasks=(task(LATE),)), "timer-overdue"),  # ready, never started
        (run(tasks=(task(SOON),)), "runnable"),
        (run(tasks=(task(LATE, owner="w1"),)), "lease-expired"),
        (run(tasks=(task(NOW + timedelta(seconds=9), owner="w1"),)), "step-running"),
        (run(tasks=(task(LATE, attempt=3),)), "timer-overdue"),  # a retry nobody ran
        (run(tasks=(task(NOW + timedelta(seconds=9), attempt=3),)), "step-retrying"),
        (run(), "runnable"),  # nothing indexed (a run from before schema version 2)
    ],
)
def test_due_times_and_leases(state: RunState, expected: str) -> None:
    assert cause(state) == expected


def test_hosting_rule() -> None:
    gone = WorkerInfo(
        worker_id="old",
        host="h",
        pid=1,
        builds=("b1",),
        started_at=NOW - timedelta(minutes=5),
        heartbeat_at=NOW - timedelta(minutes=1),
        heartbeat_seconds=5,
        stopped_at=NOW - timedelta(minutes=1),
    )
    live_other = WorkerInfo(
        worker_id="new",
        host="h",
        pid=2,
        builds=("b2",),
        started_at=NOW,
        heartbeat_at=NOW,
        heartbeat_seconds=5,
    )
    waiting = run(waiting_on="signal:go")
    assert cause(waiting, Hosting.of([], NOW)) == "build-unhosted"  # nobody ever hosted b1
    assert cause(waiting, Hosting.of([gone], NOW)) == "waiting-signal"  # the fleet is down
    assert cause(waiting, Hosting.of([gone, live_other], NOW)) == "build-unhosted"
    found = classify(waiting, Hosting.of([gone, live_other], NOW), NOW)
    assert found.since == gone.heartbeat_at  # later than the run's last change
    assert (
        found.detail == "no live worker hosts build 'b1' (last host seen 2026-12-01T08:59:00+00:00)"
    )


def test_a_paused_run_is_paused_whatever_else_is_due_and_not_stuck() -> None:
    from flow_cli.store.pauses import Pause, PauseKind, PauseSet, PauseTarget

    held = PauseTarget(kind=PauseKind.WORKFLOW, name="w")
    pauses = PauseSet([Pause(target=held, reason="deploy", paused_at=LATE)])
    overdue = run(decide_at=LATE, failing="ValueError: x")
    found = classify(overdue, HOSTED, NOW, pauses=pauses)
    assert (found.cause, found.stuck, found.since) == ("paused", False, LATE)
    assert found.detail == (
        "paused (deploy): a pause holds its workflow 'w'; `flow resume --workflow w` lets it go on"
    )
    other = PauseSet(
        [Pause(target=PauseTarget(kind=PauseKind.RUN, name="x"), reason=None, paused_at=LATE)]
    )
    assert classify(overdue, HOSTED, NOW, pauses=other).cause == "decision-failing"
