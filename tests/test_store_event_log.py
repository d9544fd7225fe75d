"""The store conformance suite, EventLog role: creating runs, reading histories, appending
and committing (optimistic concurrency), group commits, the event codec. Each test runs once
per ``store`` param (memory, SQLite, PostgreSQL)."""

from __future__ import annotations

import itertools
import threading
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from store_helpers import (
    BUILD,
    create,
    idx,
    keys,
    make_spec,
    new_run,
    signal,
)

from flow_cli.errors import EventConflict, HookTokenInUse, RunNotFound
from flow_cli.model.clock import ManualClock
from flow_cli.model.events import (
    EVENT_TYPES,
    AttributesSet,
    BuildUpgraded,
    CancelRequested,
    ChildAbandoned,
    ChildCancelled,
    ChildCompleted,
    ChildScheduled,
    DecisionFailed,
    DecisionRecovered,
    Event,
    HookCreated,
    HookResolved,
    RetryRequested,
    RunCancelled,
    RunCompleted,
    RunContinuedAsNew,
    RunFailed,
    RunStarted,
    SignalReceived,
    SignalWaitStarted,
    StepCancelled,
    StepCompleted,
    StepFailed,
    StepOutcomeUnknown,
    StepScheduled,
    StepStarted,
    UpdateApplied,
    WaitCompleted,
    WaitStarted,
)
from flow_cli.model.retry import RetryPolicy
from flow_cli.model.spec import WorkflowSpec
from flow_cli.model.status import RunStatus
from flow_cli.store.protocol import (
    CommitGroup,
    EventStore,
    HookEntry,
    HookRecord,
    LeaseAsk,
    NewRun,
    StepTask,
    StreamWrite,
)

# -- create_run and read_history -----------------------------------------------------------------


def test_create_run_records_run_started_at_sequence_1(
    store: EventStore, clock: ManualClock
) -> None:
    now = clock.now()
    run = new_run("r1", decide_at=now, parent="p0")
    envelope = store.create_run(run, now)
    assert envelope is not None
    assert (envelope.sequence, envelope.recorded_at) == (1, now)
    assert envelope.event == RunStarted(spec=run.spec, seed=run.seed)
    [stored] = store.read_history("r1")
    assert stored == envelope
    record = store.get_run("r1")
    assert record is not None
    assert (record.workflow, record.status, record.build_id) == ("orders", RunStatus.PENDING, BUILD)
    assert (record.parent_run_id, record.last_sequence, record.failing) == ("p0", 1, None)
    assert record.created_at == record.updated_at == record.decide_at == now
    assert store.get_run("missing") is None


def test_create_run_twice_returns_none_and_writes_nothing(
    store: EventStore, clock: ManualClock
) -> None:
    create(store, "r1", clock.now(), decide_at=clock.now())
    later = clock.advance(5)
    other = NewRun(run_id="r1", spec=make_spec("other"), seed="x", decide_at=later)
    assert store.create_run(other, later) is None
    [only] = store.read_history("r1")
    assert isinstance(only.event, RunStarted) and only.event.spec.workflow == "orders"
    record = store.get_run("r1")
    assert record is not None and record.workflow == "orders" and record.decide_at != later


def test_read_history_in_order_and_after_sequence(store: EventStore, clock: ManualClock) -> None:
    create(store, "r1", clock.now())
    store.append_if_sequence("r1", 1, [signal(1), signal(2)], idx(), clock.now())
    store.append_if_sequence("r1", 3, [signal(3)], idx(), clock.now())
    assert [e.sequence for e in store.read_history("r1")] == [1, 2, 3, 4]
    tail = store.read_history("r1", after_sequence=2)
    assert [(e.sequence, e.event) for e in tail] == [(3, signal(2)), (4, signal(3))]
    assert store.read_history("r1", after_sequence=4) == []


def test_read_history_of_unknown_run_raises(store: EventStore) -> None:
    with pytest.raises(RunNotFound) as caught:
        store.read_history("nope")
    assert caught.value.run_id == "nope"


def test_read_histories_reads_each_run_after_its_own_sequence(
    store: EventStore, clock: ManualClock
) -> None:
    create(store, "r1", clock.now())
    create(store, "r2", clock.now())
    create(store, "r3", clock.now())
    store.append_if_sequence("r1", 1, [signal(1), signal(2)], idx(), clock.now())
    store.append_if_sequence("r2", 1, [signal(3)], idx(), clock.now())
    found = store.read_histories({"r1": 1, "r2": 0, "r3": 1, "nope": 0})
    # An unknown run is left out; a run with nothing new is there, with no events.
    assert set(found) == {"r1", "r2", "r3"}
    assert [(e.sequence, e.event) for e in found["r1"]] == [(2, signal(1)), (3, signal(2))]
    assert [e.sequence for e in found["r2"]] == [1, 2]
    assert found["r2"] == store.read_history("r2")
    assert found["r3"] == []
    assert store.read_histories({}) == {}


def test_read_histories_of_many_runs(store: EventStore, clock: ManualClock) -> None:
    # More runs than one statement of a store may read at once.
    names = [f"r{i}" for i in range(450)]
    for name in names:
        create(store, name, clock.now())
    found = store.read_histories(dict.fromkeys(names, 0))
    assert sorted(found) == sorted(names)
    assert all([e.sequence for e in found[name]] == [1] for name in names)


# -- append_if_sequence --------------------------------------------------------------------------


def test_append_gives_gapless_sequences_stamped_with_now(
    store: EventStore, clock: ManualClock
) -> None:
    create(store, "r1", clock.now())
    first_at = clock.advance(1)
    first = store.append_if_sequence("r1", 1, [signal(1), signal(2)], idx(), first_at)
    second_at = clock.advance(1)
    second = store.append_if_sequence("r1", 3, [signal(3)], idx(), second_at)
    assert [(e.sequence, e.recorded_at, e.event) for e in first] == [
        (2, first_at, signal(1)),
        (3, first_at, signal(2)),
    ]
    assert [(e.sequence, e.recorded_at) for e in second] == [(4, second_at)]
    assert store.read_history("r1")[1:] == first + second
    record = store.get_run("r1")
    assert record is not None and (record.last_sequence, record.updated_at) == (4, second_at)


def test_recorded_at_is_utc_whatever_zone_now_has(store: EventStore, clock: ManualClock) -> None:
    create(store, "r1", clock.now())
    local = clock.now().astimezone(__import__("datetime").timezone(timedelta(hours=8)))
    [envelope] = store.append_if_sequence("r1", 1, [signal(1)], idx(), local)
    [stored] = store.read_history("r1", after_sequence=1)
    assert stored.recorded_at == envelope.recorded_at == clock.now()
    assert stored.recorded_at.utcoffset() == timedelta(0)


def test_stale_append_conflicts_and_writes_nothing(store: EventStore, clock: ManualClock) -> None:
    now = clock.now()
    create(store, "r1", now, decide_at=now)
    store.append_if_sequence("r1", 1, [signal(1)], idx(), now)
    before = store.get_run("r1")
    stale = idx(
        RunStatus.SUSPENDED,
        decide_at=now + timedelta(hours=1),
        failing="boom",
        steps={"s1": StepTask(step_id="s1", attempt=1, available_at=now)},
        hooks=[HookEntry(token="t1", hook_id="h1", resolved=False)],
    )
    with pytest.raises(EventConflict) as caught:
        store.append_if_sequence("r1", 1, [signal(99)], stale, clock.advance(1))
    assert (caught.value.expected_sequence, caught.value.actual_sequence) == (1, 2)
    assert keys(store, "r1") == [(1, "run_started"), (2, "signal_received")]
    assert store.get_run("r1") == before
    assert store.find_hook("t1") is None
    assert store.lease_steps(LeaseAsk("w", [BUILD], clock.now(), clock.now(), 10)) == []
    assert store.stats.conflicts == 1


def test_append_ahead_of_history_conflicts(store: EventStore, clock: ManualClock) -> None:
    create(store, "r1", clock.now())
    with pytest.raises(EventConflict):
        store.append_if_sequence("r1", 5, [signal(1)], idx(), clock.now())
    assert len(store.read_history("r1")) == 1


def test_append_to_unknown_run_raises_run_not_found(store: EventStore, clock: ManualClock) -> None:
    with pytest.raises(RunNotFound):
        store.append_if_sequence("ghost", 1, [signal(1)], idx(), clock.now())
    assert store.get_run("ghost") is None


def test_concurrent_appenders_leave_a_gapless_history(
    store: EventStore, clock: ManualClock
) -> None:
    create(store, "r1", clock.now())
    per_thread, threads = 15, 4
    errors: list[BaseException] = []

    def append_all(worker: int) -> None:
        try:
            for n in range(per_thread):
                while True:
                    last = store.read_history("r1")[-1].sequence
                    try:
                        store.append_if_sequence(
                            "r1", last, [signal(worker * 100 + n)], idx(), clock.now()
                        )
                        break
                    except EventConflict:
                        continue  # someone else won this sequence: re-read and retry
        except BaseException as exc:  # surfaced by the assertion below
            errors.append(exc)

    pool = [threading.Thread(target=append_all, args=(w,)) for w in range(threads)]
    for thread in pool:
        thread.start()
    for thread in pool:
        thread.join()
    assert errors == []
    history = store.read_history("r1")
    assert [e.sequence for e in history] == list(range(1, per_thread * threads + 2))
    payloads = sorted(e.event.payload for e in history[1:])  # type: ignore[union-attr]
    assert payloads == sorted(w * 100 + n for w in range(threads) for n in range(per_thread))


# -- commit --------------------------------------------------------------------------------------


def test_commit_is_atomic_across_streams(store: EventStore, clock: ManualClock) -> None:
    now = clock.now()
    create(store, "a", now, decide_at=now)
    create(store, "b", now, decide_at=now)
    store.append_if_sequence("b", 1, [signal(1)], idx(), now)
    before = (store.get_run("a"), store.get_run("b"))
    good = StreamWrite(
        run_id="a",
        expected_sequence=1,
        events=[signal(2)],
        index=idx(
            RunStatus.SUSPENDED,
            decide_at=None,
            hooks=[HookEntry(token="t", hook_id="h", resolved=False)],
        ),
    )
    stale = StreamWrite(run_id="b", expected_sequence=1, events=[signal(3)], index=idx())
    with pytest.raises(EventConflict) as caught:
        store.commit([good, stale], [new_run("c", decide_at=now)], clock.advance(1))
    assert caught.value.run_id == "b"
    assert len(store.read_history("a")) == 1 and len(store.read_history("b")) == 2
    assert (store.get_run("a"), store.get_run("b")) == before
    assert store.get_run("c") is None and store.find_hook("t") is None


def test_commit_creates_runs_in_the_same_transaction(store: EventStore, clock: ManualClock) -> None:
    now = clock.now()
    create(store, "parent", now)
    create(store, "other", now)
    later = clock.advance(2)
    writes = [
        StreamWrite(
            run_id="parent", expected_sequence=1, events=[signal(1), signal(2)], index=idx()
        ),
        StreamWrite(run_id="other", expected_sequence=1, events=[signal(3)], index=idx()),
    ]
    child = new_run("parent/kid", decide_at=later, parent="parent", workflow="kid")
    result = store.commit(writes, [child], later)
    assert [[e.sequence for e in part] for part in result] == [[2, 3], [2]]
    assert result[0][1].event == signal(2) and result[1][0].run_id == "other"
    [started] = store.read_history("parent/kid")
    assert started.event == RunStarted(spec=child.spec, seed=child.seed)
    assert started.recorded_at == later
    record = store.get_run("parent/kid")
    assert record is not None
    assert (record.parent_run_id, record.workflow, record.status) == (
        "parent",
        "kid",
        RunStatus.PENDING,
    )
    assert record.decide_at == later
    assert store.commit([], [], later) == []


def test_a_run_created_with_writes_at_their_own_times_in_one_commit(
    store: EventStore, clock: ManualClock
) -> None:
    """What ``flow fork`` does: the copy's run and every group of its events, each at the time
    it was recorded, in one transaction; a stale write among them leaves no run at all."""
    start = clock.now()
    times = [start + timedelta(seconds=n) for n in (1, 2, 3)]

    def writes(run_id: str, stale: bool = False) -> list[StreamWrite]:
        return [
            StreamWrite(
                run_id=run_id,
                expected_sequence=n + (5 if stale and n == 2 else 1),
                events=[signal(n)],
                index=idx(),
                recorded_at=at,
            )
            for n, at in enumerate(times, start=0)
        ]

    done = store.commit(writes("copy"), [new_run("copy")], start)
    assert [[e.recorded_at for e in envelopes] for envelopes in done] == [[t] for t in times]
    history = store.read_history("copy")
    assert [e.recorded_at for e in history] == [start, *times]
    assert [e.sequence for e in history] == [1, 2, 3, 4]
    with pytest.raises(EventConflict):
        store.commit(writes("broken", stale=True), [new_run("broken")], start)
    assert store.get_run("broken") is None


def test_commit_with_existing_run_id_conflicts_and_writes_nothing(
    store: EventStore, clock: ManualClock
) -> None:
    now = clock.now()
    create(store, "a", now)
    create(store, "taken", now)
    write = StreamWrite(run_id="a", expected_sequence=1, events=[signal(1)], index=idx())
    with pytest.raises(EventConflict) as caught:
        store.commit([write], [new_run("fresh"), new_run("taken")], now)
    assert caught.value.run_id == "taken"
    assert len(store.read_history("a")) == 1
    assert store.get_run("fresh") is None
    with pytest.raises(EventConflict):
        store.commit([], [new_run("twin"), new_run("twin")], now)
    assert store.get_run("twin") is None
    assert store.stats.conflicts == 2


def test_hook_token_of_another_hook_aborts_the_commit(
    store: EventStore, clock: ManualClock
) -> None:
    now = clock.now()
    create(store, "a", now)
    create(store, "b", now)
    created = HookCreated(hook_id="approve", token="tok", metadata={"who": "ops"})
    hooks = [HookEntry(token="tok", hook_id="approve", resolved=False)]
    store.append_if_sequence("a", 1, [created], idx(RunStatus.SUSPENDED, hooks=hooks), now)
    before = store.get_run("b")
    for run_id, hook_id, expected in (("b", "approve", 1), ("a", "other-hook", 2)):
        clash = [HookEntry(token="tok", hook_id=hook_id, resolved=False)]
        with pytest.raises(HookTokenInUse) as caught:
            store.append_if_sequence(run_id, expected, [signal(1)], idx(hooks=clash), now)
        assert (caught.value.run_id, caught.value.hook_id) == ("a", "approve")
    assert len(store.read_history("b")) == 1 and store.get_run("b") == before
    assert len(store.read_history("a")) == 2
    # Two writes of one commit claiming one token for different hooks clash too.
    writes = [
        StreamWrite(
            run_id=run_id,
            expected_sequence=1,
            events=[signal(2)],
            index=idx(hooks=[HookEntry(token="new", hook_id=run_id, resolved=False)]),
        )
        for run_id in ("b", "c")
    ]
    with pytest.raises(HookTokenInUse):
        store.commit(writes, [new_run("c")], now)
    assert store.find_hook("new") is None and store.get_run("c") is None


def test_group_commit_leaves_out_a_stale_group_and_commits_the_other(
    store: EventStore, clock: ManualClock
) -> None:
    now = clock.now()
    create(store, "a", now)
    create(store, "b", now)
    store.append_if_sequence("b", 1, [signal(1)], idx(), now)
    before = store.get_run("b")
    task = {"s1": StepTask(step_id="s1", attempt=1, available_at=now)}
    fresh = StreamWrite(run_id="a", expected_sequence=1, events=[signal(2)], index=idx(steps=task))
    stale = StreamWrite(
        run_id="b",
        expected_sequence=1,
        events=[signal(3), signal(4)],
        index=idx(RunStatus.SUSPENDED, steps=task, decide_at=now),
    )
    later = clock.advance(1)
    results = store.commit_groups(
        [
            CommitGroup(writes=[stale], creates=[new_run("kid")], now=later),
            CommitGroup(writes=[fresh], creates=[], now=later),
        ]
    )
    assert isinstance(results[0], EventConflict) and results[1] is None
    assert (results[0].run_id, results[0].expected_sequence) == ("b", 1)
    # The stale group wrote nothing: no event, index change, step task or created run.
    assert keys(store, "b") == [(1, "run_started"), (2, "signal_received")]
    assert store.get_run("b") == before and store.get_run("kid") is None
    assert keys(store, "a") == [(1, "run_started"), (2, "signal_received")]
    record = store.get_run("a")
    assert record is not None and (record.last_sequence, record.updated_at) == (2, later)
    leases = store.lease_steps(LeaseAsk("w", [BUILD], later, later + timedelta(seconds=30), 10))
    assert [(s.run_id, s.step_id) for s in leases] == [("a", "s1")]
    assert store.stats.conflicts == 1


@pytest.mark.parametrize("failure", ["EventConflict", "RunNotFound", "HookTokenInUse"])
def test_a_group_alone_that_fails_writes_nothing_and_is_reported(
    store: EventStore, clock: ManualClock, failure: str
) -> None:
    # A store may commit a lone group without a savepoint of its own; it must still write
    # none of it and report the group's error, not raise it.
    now = clock.now()
    create(store, "a", now)
    create(store, "holder", now)
    hook = [HookEntry(token="tok", hook_id="h", resolved=False)]
    store.append_if_sequence("holder", 1, [signal(1)], idx(hooks=hook), now)
    before = store.get_run("a")
    task = {"s1": StepTask(step_id="s1", attempt=1, available_at=now)}
    run_id, expected, hooks = {
        "EventConflict": ("a", 7, []),
        "RunNotFound": ("ghost", 1, []),
        "HookTokenInUse": ("a", 1, [HookEntry(token="tok", hook_id="mine", resolved=False)]),
    }[failure]
    write = StreamWrite(
        run_id=run_id,
        expected_sequence=expected,
        events=[signal(2)],
        index=idx(RunStatus.SUSPENDED, steps=task, hooks=hooks, decide_at=now),
    )
    conflicts = store.stats.conflicts
    [result] = store.commit_groups(
        [CommitGroup(writes=[write], creates=[new_run("kid")], now=clock.advance(1))]
    )
    assert type(result).__name__ == failure
    assert keys(store, "a") == [(1, "run_started")] and store.get_run("a") == before
    assert store.get_run("kid") is None
    assert store.lease_steps(LeaseAsk("w", [BUILD], clock.now(), clock.advance(30), 10)) == []
    assert store.stats.conflicts == conflicts + (failure == "EventConflict")
    # The store goes on: the same group, made right, commits.
    fixed = StreamWrite(run_id="a", expected_sequence=1, events=[signal(2)], index=idx())
    assert store.commit_groups([CommitGroup(writes=[fixed], creates=[], now=now)]) == [None]
    assert [s for s, _ in keys(store, "a")] == [1, 2]


def test_group_commit_reports_each_failing_group_and_keeps_the_rest(
    store: EventStore, clock: ManualClock
) -> None:
    now = clock.now()
    create(store, "a", now)
    create(store, "b", now)
    mine = [HookEntry(token="tok", hook_id="approve", resolved=False)]
    clash = [HookEntry(token="tok", hook_id="other", resolved=False)]
    task = {"s1": StepTask(step_id="s1", attempt=1, available_at=now)}

    def write(run_id: str, expected: int, **index: object) -> StreamWrite:
        return StreamWrite(
            run_id=run_id, expected_sequence=expected, events=[signal(expected)], index=idx(**index)
        )

    def group(*writes: StreamWrite, creates: tuple[NewRun, ...] = ()) -> CommitGroup:
        return CommitGroup(writes=writes, creates=creates, now=now)

    elsewhere = new_run("kid", build="shop-9", parent="a", workflow="kid")
    results = store.commit_groups(
        [
            group(write("a", 1, hooks=mine)),  # a: 1 -> 2, takes the token
            group(write("ghost", 1)),  # no such run
            group(write("b", 1), write("a", 2, hooks=clash)),  # the token is a's now
            group(creates=(new_run("a"),)),  # a exists
            group(write("b", 1), write("a", 2)),  # continues from the first group
            group(write("kid", 1, steps=task), creates=(elsewhere,)),  # creates, then writes
        ]
    )
    assert [type(r).__name__ if r else None for r in results] == [
        None,
        "RunNotFound",
        "HookTokenInUse",
        "EventConflict",
        None,
        None,
    ]
    assert [s for s, _ in keys(store, "a")] == [1, 2, 3]
    assert [s for s, _ in keys(store, "b")] == [1, 2]
    assert [s for s, _ in keys(store, "kid")] == [1, 2]
    with pytest.raises(RunNotFound):
        store.read_history("ghost")
    assert store.find_hook("tok") == HookRecord(
        token="tok", run_id="a", hook_id="approve", resolved=False
    )
    # The created run's step task belongs to the created run's build.
    assert store.lease_steps(LeaseAsk("w", [BUILD], now, now, 10)) == []
    [lease] = store.lease_steps(LeaseAsk("w", ["shop-9"], now, now + timedelta(seconds=30), 10))
    assert (lease.run_id, lease.step_id) == ("kid", "s1")


def test_rewriting_a_token_for_its_own_hook_resolves_it(
    store: EventStore, clock: ManualClock
) -> None:
    now = clock.now()
    create(store, "a", now)
    entry = HookEntry(token="tok", hook_id="approve", resolved=False)
    store.append_if_sequence("a", 1, [signal(1)], idx(hooks=[entry]), now)
    assert store.find_hook("tok") == HookRecord(
        token="tok", run_id="a", hook_id="approve", resolved=False
    )
    resolved = HookEntry(token="tok", hook_id="approve", resolved=True)
    resolve = HookResolved(hook_id="approve", token="tok", payload={"ok": True})
    store.append_if_sequence("a", 2, [resolve], idx(hooks=[resolved]), now)
    assert store.find_hook("tok") == HookRecord(
        token="tok", run_id="a", hook_id="approve", resolved=True
    )
    assert store.find_hook("unknown") is None


# -- the event codec through the store -----------------------------------------------------------

AT = datetime(2026, 12, 1, 9, 30, 15, 123456, tzinfo=UTC)
RETRY = RetryPolicy(max_attempts=5, initial_interval=0.5, non_retryable=("ValueError",))
SAMPLES: list[Event] = [
    RunStarted(spec=make_spec(parent="p"), seed="abc"),
    StepScheduled(step_id="s", name="charge", input={"amount": 12.5}, retry=RETRY, batch_id="b1"),
    StepStarted(step_id="s", attempt=1, worker="w1", lease_until=AT),
    StepCompleted(step_id="s", attempt=1, output=["ok", 1, None]),
    StepFailed(
        step_id="s",
        attempt=2,
        error_type="IOError",
        message="down",
        next_attempt_at=AT,
        exhausted=False,
    ),
    StepFailed(
        step_id="s",
        attempt=3,
        error_type="IOError",
        message="down",
        next_attempt_at=None,
        exhausted=True,
    ),
    StepCancelled(step_id="s", reason="run failed", outcome_unknown=True),
    StepOutcomeUnknown(step_id="s", attempt=2, reason="worker lost"),
    RetryRequested(steps=("s",), decision=True, reason="hotfix"),
    StepCompleted(
        step_id="s", attempt=2, output=1, resolved={"by": "operator", "reason": "checked"}
    ),
    WaitStarted(wait_id="w", deadline=AT),
    WaitCompleted(wait_id="w", deadline=AT),
    SignalWaitStarted(wait_id="sw", signal_name="approve"),
    SignalReceived(signal_name="approve", payload={"by": "ops", "nested": {"x": [1.5, True]}}),
    SignalWaitStarted(wait_id="sel", signal_name="ok", select=("signal:sel", "timer:late")),
    SignalReceived(signal_name="ok", payload=None, key="k", carried_from="r~0"),
    UpdateApplied(update_id="u1", name="change-address", args={"a": "x"}, result={"a": "X"}),
    AttributesSet(attributes={"customer": "acme", "n": 5, "vip": True, "rate": 0.5}),
    HookCreated(hook_id="h", token="tok", metadata={"url": "https://example.test"}),
    HookResolved(hook_id="h", token="tok", payload="yes"),
    ChildScheduled(
        child_id="c", child_run_id="r/c", workflow="kid", input=3, cancellation="abandon"
    ),
    ChildCompleted(child_id="c", child_run_id="r/c", outcome={"kind": "Completed", "result": 1}),
    ChildCancelled(child_id="c", child_run_id="r/c", reason="parent ended"),
    ChildAbandoned(child_id="c", child_run_id="r/c", reason="parent ended"),
    CancelRequested(reason="operator"),
    DecisionRecovered(error_type="KeyError"),
    BuildUpgraded(from_build=BUILD, to_build="shop-2"),
    DecisionFailed(
        error_type="NonDeterminismError",
        message="step changed",
        mismatches=[{"identity": "step 's'", "field": "input", "recorded": 1, "produced": 2}],
    ),
    RunCompleted(result={"total": 12.5}),
    RunFailed(error={"type": "IOError", "message": "down", "step_id": "s"}),
    RunCancelled(reason="operator"),
    RunContinuedAsNew(
        successor_run_id="r~2", input={"page": 2}, runtime_build_id=BUILD, patches=("p1",)
    ),
]


def test_samples_cover_every_event_type() -> None:
    assert {type(e).KEY for e in SAMPLES} == set(EVENT_TYPES)


def test_every_event_type_round_trips(store: EventStore, clock: ManualClock) -> None:
    create(store, "r1", clock.now())
    appended = store.append_if_sequence("r1", 1, SAMPLES, idx(), clock.now())
    stored = store.read_history("r1", after_sequence=1)
    assert [e.event for e in stored] == SAMPLES
    assert stored == appended


_ids = itertools.count()
_text = st.text(max_size=12)
_json = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**53), max_value=2**53)
    | st.floats(allow_nan=False, allow_infinity=False)
    | _text,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_text, inner, max_size=3),
    max_leaves=8,
)
_times = st.datetimes(
    min_value=datetime(2000, 1, 1), max_value=datetime(2100, 1, 1), timezones=st.just(UTC)
)
_retry = st.builds(
    RetryPolicy,
    max_attempts=st.integers(1, 10),
    initial_interval=st.floats(0, 3600),
    backoff_coefficient=st.floats(1, 10),
    max_interval=st.floats(0, 86400),
    non_retryable=st.lists(_text, max_size=2).map(tuple),
    on_exhausted=st.sampled_from(["terminate", "surface"]),
)
_spec = st.builds(
    WorkflowSpec,
    workflow=_text,
    input=_json,
    runtime_build_id=_text,
    patches=st.lists(_text, max_size=3).map(tuple),
    parent_run_id=st.none() | _text,
    parent_child_id=st.none() | _text,
    predecessor_run_id=st.none() | _text,
)
_events: st.SearchStrategy[Event] = st.one_of(
    st.builds(RunStarted, spec=_spec, seed=_text),
    st.builds(
        StepScheduled,
        step_id=_text,
        name=_text,
        input=_json,
        retry=_retry,
        batch_id=st.none() | _text,
    ),
    st.builds(
        StepStarted, step_id=_text, attempt=st.integers(1, 99), worker=_text, lease_until=_times
    ),
    st.builds(StepCompleted, step_id=_text, attempt=st.integers(1, 99), output=_json),
    st.builds(
        StepFailed,
        step_id=_text,
        attempt=st.integers(1, 99),
        error_type=_text,
        message=_text,
        next_attempt_at=st.none() | _times,
        exhausted=st.booleans(),
    ),
    st.builds(StepCancelled, step_id=_text, reason=_text, outcome_unknown=st.booleans()),
    st.builds(WaitStarted, wait_id=_text, deadline=_times),
    st.builds(WaitCompleted, wait_id=_text, deadline=_times),
    st.builds(SignalWaitStarted, wait_id=_text, signal_name=_text),
    st.builds(SignalReceived, signal_name=_text, payload=_json),
    st.builds(HookCreated, hook_id=_text, token=_text, metadata=_json),
    st.builds(HookResolved, hook_id=_text, token=_text, payload=_json),
    st.builds(
        ChildScheduled,
        child_id=_text,
        child_run_id=_text,
        workflow=_text,
        input=_json,
        cancellation=st.sampled_from(["cancel", "abandon"]),
        batch_id=st.none() | _text,
    ),
    st.builds(ChildCompleted, child_id=_text, child_run_id=_text, outcome=_json),
    st.builds(ChildCancelled, child_id=_text, child_run_id=_text, reason=_text),
    st.builds(ChildAbandoned, child_id=_text, child_run_id=_text, reason=_text),
    st.builds(CancelRequested, reason=_text),
    st.builds(DecisionFailed, error_type=_text, message=_text, mismatches=_json),
    st.builds(DecisionRecovered, error_type=_text),
    st.builds(BuildUpgraded, from_build=_text, to_build=_text),
    st.builds(RunCompleted, result=_json),
    st.builds(RunFailed, error=_json),
    st.builds(RunCancelled, reason=_text),
    st.builds(
        RunContinuedAsNew,
        successor_run_id=_text,
        input=_json,
        runtime_build_id=_text,
        patches=st.lists(_text, max_size=3).map(tuple),
    ),
)


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(events=st.lists(_events, min_size=1, max_size=5), now=_times)
def test_generated_events_round_trip(store: EventStore, events: list[Event], now: datetime) -> None:
    run_id = f"gen-{next(_ids)}"
    assert store.create_run(new_run(run_id), now) is not None
    store.append_if_sequence(run_id, 1, events, idx(), now)
    stored = store.read_history(run_id, after_sequence=1)
    assert [e.event for e in stored] == events
    assert all(e.recorded_at == now for e in stored)
