"""The store conformance suite, the run index every commit writes: statuses, decision times,
failing runs, step tasks, hooks, and a run created together with its first decision."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime, timedelta

import pytest
from store_helpers import (
    BUILD,
    RUNNING,
    create,
    idx,
    new_run,
    signal,
)

from flow_cli.model.clock import ManualClock
from flow_cli.model.events import (
    Event,
    RunCompleted,
)
from flow_cli.model.status import RunStatus
from flow_cli.store.protocol import (
    KEEP,
    EventStore,
    HookEntry,
    LeaseAsk,
    RunFilter,
    RunIndex,
    StepRenewal,
    StepTask,
    StreamWrite,
)

# -- the runs index ------------------------------------------------------------------------------


def test_index_status_decide_at_and_failing_with_keep(
    store: EventStore, clock: ManualClock
) -> None:
    now = clock.now()
    create(store, "r1", now, decide_at=now)
    soon = now + timedelta(minutes=5)
    store.append_if_sequence(
        "r1", 1, [signal(1)], idx(RunStatus.SUSPENDED, decide_at=soon, failing="E: bad"), now
    )
    record = store.get_run("r1")
    assert record is not None
    assert (record.status, record.decide_at, record.failing) == (
        RunStatus.SUSPENDED,
        soon,
        "E: bad",
    )
    later = clock.advance(1)
    store.append_if_sequence(
        "r1", 2, [signal(2)], idx(RUNNING, decide_at=KEEP, failing=KEEP), later
    )
    record = store.get_run("r1")
    assert record is not None
    assert (record.status, record.decide_at, record.failing) == (RUNNING, soon, "E: bad")
    assert (record.updated_at, record.created_at) == (later, now)
    store.append_if_sequence(
        "r1", 3, [signal(3)], idx(RUNNING, decide_at=None, failing=None), later
    )
    record = store.get_run("r1")
    assert record is not None and (record.decide_at, record.failing) == (None, None)


def test_step_tasks_upsert_and_delete(store: EventStore, clock: ManualClock) -> None:
    now = clock.now()
    create(store, "r1", now)
    steps = {
        "s1": StepTask(step_id="s1", attempt=1, available_at=now),
        "s2": StepTask(step_id="s2", attempt=1, available_at=now + timedelta(seconds=1)),
    }
    store.append_if_sequence("r1", 1, [signal(1)], idx(steps=steps), now)
    until = now + timedelta(seconds=30)
    leases = store.lease_steps(LeaseAsk("w1", [BUILD], now, until, 10))
    assert [(s.step_id, s.attempt, s.lease_until) for s in leases] == [("s1", 1, until)]
    # Upsert: a new attempt replaces the task and ends w1's lease; None deletes s2.
    # (The lease recorded s1's step_started: sequence 3.)
    retry = {"s1": StepTask(step_id="s1", attempt=2, available_at=now), "s2": None}
    store.append_if_sequence("r1", 3, [signal(3)], idx(steps=retry), now)
    assert not store.renew_step(StepRenewal("r1", "s1", "w1", until))
    later = clock.advance(10)
    again = store.lease_steps(LeaseAsk("w2", [BUILD], later, later + timedelta(seconds=30), 10))
    assert [(s.run_id, s.step_id, s.attempt) for s in again] == [("r1", "s1", 2)]


def test_terminal_status_clears_due_work(store: EventStore, clock: ManualClock) -> None:
    now = clock.now()
    create(store, "r1", now, decide_at=now)
    task = {"s1": StepTask(step_id="s1", attempt=1, available_at=now)}
    store.append_if_sequence("r1", 1, [signal(1)], idx(steps=task), now)
    # The index "forgets" the step delete and asks for a decide time: a finished run gets neither.
    store.append_if_sequence(
        "r1", 2, [RunCompleted(result=1)], idx(RunStatus.COMPLETED, decide_at=now), now
    )
    record = store.get_run("r1")
    assert record is not None and (record.status, record.decide_at) == (RunStatus.COMPLETED, None)
    assert store.lease_steps(LeaseAsk("w", [BUILD], now, now, 10)) == []
    assert store.lease_runs(LeaseAsk("w", [BUILD], now, now, 10)) == []
    assert store.next_due([BUILD]) is None


# -- a run created with its first decision -------------------------------------------------------


def _first_decisions(run_id: str, now: datetime) -> dict[str, RunIndex]:
    task = StepTask(step_id="s", attempt=1, available_at=now)
    hook = HookEntry(token=f"tok-{run_id}", hook_id="h", resolved=False, metadata={"m": 1})
    return {
        "step": idx(decide_at=None, steps={"s": task}, waiting_on="step:s"),
        "timer": idx(RunStatus.SUSPENDED, decide_at=now + timedelta(hours=1), waiting_on="t"),
        "kept": idx(),
        "failing": idx(RunStatus.PENDING, failing="ValueError: boom"),
        "hook": idx(RunStatus.SUSPENDED, decide_at=None, hooks=[hook], waiting_on="hook:h"),
        "ended": idx(RunStatus.COMPLETED, decide_at=None),
        "moved": idx(build_id="shop-2", steps={"s": task}),
    }


@pytest.mark.parametrize("case", list(_first_decisions("x", datetime.now(UTC))))
def test_a_run_created_with_its_first_decision_is_indexed_as_if_written_after(
    store: EventStore, clock: ManualClock, case: str
) -> None:
    """A store may write a new run's row as its first decision leaves it when both come in
    one commit (``Engine.start`` does so): what it indexes is what creating the run and then
    appending the decision gives."""
    now = clock.now()
    events: list[Event] = [signal(1), signal(2)]
    for run_id, together in (("together", True), ("apart", False)):
        write = StreamWrite(
            run_id=run_id,
            expected_sequence=1,
            events=events,
            index=_first_decisions(run_id, now)[case],
        )
        created = new_run(run_id, decide_at=now)
        if together:
            store.commit([write], [created], now)
        else:
            store.commit([], [created], now)
            store.commit([write], [], now)
    states = {s.run_id: s for s in store.run_states(RunFilter())}
    together, apart = states["together"], states["apart"]
    assert dataclasses.replace(together, run_id="apart") == apart
    records = {r: store.get_run(r) for r in ("together", "apart")}
    assert records["together"] == dataclasses.replace(records["apart"], run_id="together")
    histories = {r: store.read_history(r) for r in ("together", "apart")}
    assert [e.event_key for e in histories["together"]] == [
        "run_started",
        *(["signal_received"] * 2),
    ]
    assert [(e.sequence, e.event) for e in histories["together"][1:]] == [
        (e.sequence, e.event) for e in histories["apart"][1:]
    ]
    hooks = [(h.hook_id, h.resolved, h.metadata) for h in store.list_hooks("together")]
    assert hooks == [(h.hook_id, h.resolved, h.metadata) for h in store.list_hooks("apart")]
