"""The group committer, and step ends handed to it without waiting (``flow worker``).

A step thread whose attempt ends with the run waiting hands the end to the group committer and
moves on; the thread committing runs what the step thread would have done once it is recorded.
These tests pin what that must keep: a conflict is decided again and recorded, the attempt's
lease is held (renewed) until its end is committed, a failed transaction reaches every member,
and a member may hand over more work from the committing thread without a deadlock.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

import pytest

from flow_cli import Runtime
from flow_cli.engine import group_commit
from flow_cli.engine.engine import Engine
from flow_cli.engine.group_commit import GroupCommitter
from flow_cli.engine.streams import Pending
from flow_cli.engine.worker import Worker
from flow_cli.errors import FlowError, RunAlreadyExists, StoreError
from flow_cli.model.events import SignalReceived, StepCompleted, event_json
from flow_cli.model.status import RunStatus
from flow_cli.store.protocol import CommitGroup
from flow_cli.store.sqlite import SQLiteStore


class Gate:
    """A stand-in store whose ``commit_groups`` waits for the test, and records its batches."""

    def __init__(self, fail: bool = False) -> None:
        self.entered = threading.Event()
        self.release = threading.Event()
        self.batches: list[int] = []
        self.fail = fail

    def commit_groups(self, groups: Sequence[CommitGroup]) -> list[FlowError | None]:
        self.entered.set()
        assert self.release.wait(10)
        self.batches.append(len(groups))
        if self.fail:
            raise StoreError("simulated: the disk is full")
        return [None] * len(groups)


def _group() -> CommitGroup:
    return CommitGroup(writes=[], creates=[], now=datetime.now(UTC))


def _leading(gate: Gate) -> tuple[GroupCommitter, threading.Thread]:
    """A committer with a thread inside ``commit_groups`` (it leads) until the gate opens."""
    committer = GroupCommitter(gate)  # type: ignore[arg-type]
    leader = threading.Thread(target=committer.commit, args=(_group(),))
    leader.start()
    assert gate.entered.wait(10)
    return committer, leader


def test_a_submit_while_another_thread_commits_returns_at_once() -> None:
    gate = Gate()
    committer, leader = _leading(gate)
    told: list[tuple[BaseException | None, str]] = []
    for _ in range(3):
        committer.submit(_group(), lambda e: told.append((e, threading.current_thread().name)))
    assert told == []  # not committed yet, and the submitting thread did not wait
    gate.release.set()
    leader.join(10)
    assert gate.batches == [1, 3]  # the three handed over share the leader's next transaction
    assert [e for e, _ in told] == [None] * 3
    assert {name for _, name in told} == {leader.name}


def test_a_member_may_hand_over_more_from_the_committing_thread() -> None:
    gate = Gate()
    committer, leader = _leading(gate)
    told: list[str] = []

    def again(error: BaseException | None) -> None:
        told.append("first")
        committer.submit(_group(), lambda e: told.append("second"))  # must not wait: it leads

    committer.submit(_group(), again)
    gate.release.set()
    leader.join(10)
    assert not leader.is_alive(), "the committing thread waited for itself"
    assert told == ["first", "second"]
    assert gate.batches == [1, 1, 1]


def test_a_submit_to_a_full_queue_waits_for_its_group(monkeypatch: pytest.MonkeyPatch) -> None:
    """Producers cannot outrun the disk: past ``MAX_GROUPS`` waiting, a submit waits."""
    monkeypatch.setattr(group_commit, "MAX_GROUPS", 2)
    gate = Gate()
    committer, leader = _leading(gate)
    told: list[BaseException | None] = []
    for _ in range(2):
        committer.submit(_group(), told.append)  # room in the queue: returns at once
    third = threading.Thread(target=committer.submit, args=(_group(), told.append))
    third.start()
    third.join(0.3)
    assert third.is_alive(), "a submit to a full queue returned before its group committed"
    gate.release.set()
    third.join(10)
    leader.join(10)
    assert not third.is_alive()
    assert told == [None, None, None]
    assert gate.batches == [1, 2, 1]


def test_a_failed_transaction_reaches_every_member() -> None:
    gate = Gate(fail=True)
    committer = GroupCommitter(gate)  # type: ignore[arg-type]
    told: list[BaseException | None] = []
    failed: list[BaseException] = []

    def lead() -> None:
        try:
            committer.commit_many([_group(), _group()])
        except StoreError as exc:
            failed.append(exc)

    leader = threading.Thread(target=lead)
    leader.start()
    assert gate.entered.wait(10)
    committer.submit(_group(), told.append)
    gate.release.set()
    leader.join(10)
    assert len(failed) == 1  # commit_many raises what failed the whole transaction
    assert len(told) == 1 and isinstance(told[0], StoreError)


# -- step ends handed over by a worker -------------------------------------------------------

runtime = Runtime(build_id="handover-1")
POKED: list[str] = []
SIGNALLER: list[Engine] = []


@runtime.workflow("poked")
def _poked(ctx):  # type: ignore[no-untyped-def]
    ctx.step("poke", "poke", None)
    if ctx.wait_done("go"):
        return ctx.complete(ctx.signal("go"))
    return ctx.wait_for_signal("go", "go")


@runtime.step("poke")
def _poke(_, info):  # type: ignore[no-untyped-def]
    POKED.append(info.run_id)
    # A fact arrives while the handler runs: the end, decided on the history before it, meets
    # an EventConflict when it is committed.
    SIGNALLER[0].signal(info.run_id, "go", "went")
    return None


@runtime.workflow("one")
def _one(ctx):  # type: ignore[no-untyped-def]
    return ctx.complete(ctx.step("s", "slow", None))


@runtime.step("slow")
def _slow(_, info):  # type: ignore[no-untyped-def]
    return "done"


@pytest.fixture
def url(tmp_path: Path) -> Iterator[str]:
    yield f"sqlite:///{tmp_path / 'flow.db'}"
    POKED.clear()
    SIGNALLER.clear()


def _drain(engine: Engine, run_ids: list[str], worker: Worker | None = None) -> Worker:
    worker = worker or Worker(engine, concurrency=2, max_idle_sleep=0.05)
    thread = threading.Thread(target=worker.run)
    thread.start()
    try:
        deadline = time.monotonic() + 20
        while any(engine.get_run(r).status is not RunStatus.COMPLETED for r in run_ids):
            assert time.monotonic() < deadline, "the runs did not complete"
            time.sleep(0.02)
    finally:
        worker.stop()
        thread.join(timeout=30)
    return worker


def test_a_handed_over_end_that_conflicts_is_decided_again_and_recorded(url: str) -> None:
    engine = Engine.open(url, [runtime])
    SIGNALLER.append(Engine.open(url, [runtime]))
    engine.start("poked", None, run_id="p")
    _drain(engine, ["p"])
    assert POKED == ["p"]  # recorded after the conflict: the attempt did not run again
    assert engine.snapshot("p").outcome.result == "went"  # type: ignore[union-attr]
    assert engine.conflicts >= 1
    engine.close()
    SIGNALLER[0].close()


def test_the_lease_of_a_handed_over_end_is_held_until_it_is_committed(url: str) -> None:
    store = SQLiteStore(Path(url.removeprefix("sqlite:///")))
    engine = Engine(store, [runtime])
    worker = Worker(engine, concurrency=2, max_idle_sleep=0.05)
    held_while_committing: list[bool] = []
    commit_groups = store.commit_groups

    def watched(groups: Sequence[CommitGroup]) -> list[FlowError | None]:
        for group in groups:
            for write in group.writes:
                for event in write.events:
                    if isinstance(event, StepCompleted):
                        time.sleep(0.05)  # the step thread has long returned by now
                        held = {(lease.run_id, lease.step_id) for lease in worker._keeper.held}
                        held_while_committing.append((write.run_id, event.step_id) in held)
        return commit_groups(groups)

    store.commit_groups = watched  # type: ignore[method-assign]
    run_ids = [f"one-{i}" for i in range(6)]
    for run_id in run_ids:
        engine.start("one", None, run_id=run_id)
    _drain(engine, run_ids, worker)
    assert held_while_committing and all(held_while_committing), held_while_committing
    assert worker._keeper.held == []  # dropped once recorded
    engine.close()


def test_an_event_is_encoded_once_and_stored_as_the_writer_encoded_it(tmp_path: Path) -> None:
    """``Pending`` encodes each event once (its size for the cache); SQLite writes that text
    rather than encoding the event again, and encodes it itself when the writer did not."""
    store = SQLiteStore(tmp_path / "flow.db")
    engine = Engine(store, [runtime])
    engine.start("one", None, run_id="j")
    snap = engine.snapshot("j")
    before = snap.size
    pending = Pending.on(snap, datetime.now(UTC))
    event = SignalReceived(signal_name="x", payload={"é": 1})
    pending.add([event])
    write = pending.stream_write()
    assert write.data == [event_json(event)]
    assert pending.snapshot.size == before + len(event_json(event))
    marked = replace(write, data=['{"signal_name": "x", "payload": {"é": 1}, "key": null} '])
    store.commit([marked], [], pending.now)
    unmarked = replace(write, expected_sequence=write.expected_sequence + 1, data=None)
    store.commit([unmarked], [], pending.now)
    rows = store._conn().execute("SELECT data FROM events WHERE run_id = 'j' ORDER BY sequence")
    texts = [row[0] for row in rows]
    assert texts[-2].endswith("} ")  # the writer's own text
    assert texts[-1] == event_json(event)
    engine.close()


def test_starts_from_several_threads_share_commits(
    url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A web server starting runs from its request threads: while one start commits, the
    # others queue and go together in the next transaction (one fsync for all of them).
    engine = Engine.open(url, runtimes=[runtime])
    store = engine.store
    real = store.commit_groups
    batches: list[int] = []
    entered, release = threading.Event(), threading.Event()

    def gated(groups: Sequence[CommitGroup]) -> list[FlowError | None]:
        batches.append(len(groups))
        if len(batches) == 1:
            entered.set()
            assert release.wait(10)
        return real(groups)

    monkeypatch.setattr(store, "commit_groups", gated)
    try:
        threads = [
            threading.Thread(target=engine.start, args=("one",), kwargs={"run_id": f"r{i}"})
            for i in range(8)
        ]
        threads[0].start()
        assert entered.wait(10)
        for thread in threads[1:]:
            thread.start()
        committer = engine._start_committer()
        deadline = time.monotonic() + 10
        while len(committer._queue) < 7 and time.monotonic() < deadline:
            time.sleep(0.01)
        release.set()
        for thread in threads:
            thread.join(10)
        assert batches == [1, 7]
        assert [engine.get_run(f"r{i}").status for i in range(8)] == [RunStatus.RUNNING] * 8
        # A start that finds its id taken by another spec still says so, grouped or not.
        with pytest.raises(RunAlreadyExists):
            engine.start("one", {"other": "input"}, run_id="r0")
    finally:
        engine.close()
