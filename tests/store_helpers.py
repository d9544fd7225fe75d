"""What the store conformance suites (tests/test_store_*.py) share."""

from __future__ import annotations

import dataclasses
from datetime import datetime

from flow_cli.model.events import (
    SignalReceived,
)
from flow_cli.model.spec import WorkflowSpec
from flow_cli.model.status import RunStatus
from flow_cli.store.protocol import (
    EventStore,
    NewRun,
    RunIndex,
    StepTask,
)

BUILD = "shop-1"
RUNNING = RunStatus.RUNNING


def make_spec(
    workflow: str = "orders", build: str = BUILD, parent: str | None = None
) -> WorkflowSpec:
    return WorkflowSpec(
        workflow=workflow,
        input={"order": 1},
        runtime_build_id=build,
        patches=("p1",),
        parent_run_id=parent,
    )


def new_run(
    run_id: str,
    *,
    decide_at: datetime | None = None,
    workflow: str = "orders",
    build: str = BUILD,
    parent: str | None = None,
    priority: int = 5,
) -> NewRun:
    return NewRun(
        run_id=run_id,
        spec=dataclasses.replace(make_spec(workflow, build, parent), priority=priority),
        seed=f"seed-{run_id}",
        decide_at=decide_at,
    )


def create(store: EventStore, run_id: str, now: datetime, **kwargs: object) -> None:
    created = store.create_run(new_run(run_id, **kwargs), now)  # type: ignore[arg-type]
    assert created is not None


def signal(n: int) -> SignalReceived:
    return SignalReceived(signal_name="tick", payload=n)


def idx(status: RunStatus = RUNNING, **kwargs: object) -> RunIndex:
    return RunIndex(status=status, **kwargs)  # type: ignore[arg-type]


def keys(store: EventStore, run_id: str) -> list[tuple[int, str]]:
    return [(e.sequence, e.event_key) for e in store.read_history(run_id)]


def schedule_tasks(store: EventStore, run_id: str, now: datetime, **tasks: datetime) -> None:
    steps = {s: StepTask(step_id=s, attempt=1, available_at=at) for s, at in tasks.items()}
    last = store.read_history(run_id)[-1].sequence
    store.append_if_sequence(run_id, last, [signal(last)], idx(steps=steps), now)
