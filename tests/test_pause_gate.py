"""``PauseGate``: one thread reads the pauses table when the copy is old, the others answer from
the copy meanwhile; with no copy (first question, or after ``forget``) each waits for a read
that began after it asked."""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime
from types import SimpleNamespace

import pytest
from store_helpers import create, idx, signal

from flow_cli.engine import pauses
from flow_cli.engine.pauses import PauseGate
from flow_cli.model.clock import ManualClock
from flow_cli.store.memory import MemoryStore
from flow_cli.store.pauses import Pause, PauseKind, PauseProbeRequests, PauseTarget
from flow_cli.store.protocol import CommitGroup, EventStore, StreamWrite

HELD = Pause(
    target=PauseTarget(kind=PauseKind.WORKFLOW, name="gated"),
    reason="deploy",
    paused_at=datetime(2026, 12, 5, tzinfo=UTC),
)


class SlowPauses:
    """A pauses table whose reads wait for ``go`` (once ``hold`` is set), counted."""

    def __init__(self) -> None:
        self.reads = 0
        self.table: list[Pause] = []
        self.hold = threading.Event()
        self.go = threading.Event()
        self.reading = threading.Event()

    def list_pauses(self) -> list[Pause]:
        self.reads += 1
        now = list(self.table)
        if self.hold.is_set():
            self.reading.set()
            assert self.go.wait(10)
        return now


def test_threads_finding_the_copy_old_at_once_read_the_table_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    store = SlowPauses()
    gate = PauseGate(store)  # type: ignore[arg-type]
    assert not gate.current() and store.reads == 1
    monkeypatch.setattr(pauses, "MAX_AGE", 0.0)  # the copy is old from now on
    store.hold.set()
    reader = threading.Thread(target=gate.current)
    reader.start()
    assert store.reading.wait(10)  # one thread reads, and waits in the read
    answers = []
    threads = [threading.Thread(target=lambda: answers.append(gate.current())) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    assert len(answers) == 8 and store.reads == 2  # the others answered from the copy
    store.go.set()
    reader.join(10)


def test_after_forget_a_question_waits_for_a_read_that_began_after_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    store = SlowPauses()
    gate = PauseGate(store)  # type: ignore[arg-type]
    gate.current()
    monkeypatch.setattr(pauses, "MAX_AGE", 0.0)
    store.hold.set()
    reader = threading.Thread(target=gate.current)
    reader.start()
    assert store.reading.wait(10)  # a read began: it will not see the pause below
    monkeypatch.setattr(pauses, "MAX_AGE", 60.0)  # what that read returns would stay fresh
    store.table.append(HELD)  # this process pauses a workflow...
    gate.forget()  # ...and drops the copy
    answer: list[object] = []
    asker = threading.Thread(target=lambda: answer.append(gate.holds("r1", "gated", "b1")))
    asker.start()
    store.go.set()
    asker.join(10)
    reader.join(10)
    assert answer == [True] and store.reads == 3  # it read again after the older read


def test_a_copy_past_half_its_age_is_read_again_on_another_thread(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    store = SlowPauses()
    readers: list[str] = []
    read = store.list_pauses

    def list_pauses() -> list[Pause]:
        readers.append(threading.current_thread().name)
        return read()

    store.list_pauses = list_pauses  # type: ignore[method-assign]
    gate = PauseGate(store)  # type: ignore[arg-type]
    assert not gate.current() and store.reads == 1
    monkeypatch.setattr(pauses, "MAX_AGE", 60.0)
    gate._read_at -= 40.0  # type: ignore[operator]  # past half its age, not old
    store.table.append(HELD)
    store.hold.set()  # the read waits: the question must not
    assert not gate.holds("r1", "gated", "b1")  # answered from the copy, at once
    assert store.reading.wait(10)  # while the gate's thread reads
    assert readers[-1] == "flow-pauses"
    store.go.set()
    for _ in range(1000):
        if gate.holds("r1", "gated", "b1"):
            break
        threading.Event().wait(0.01)
    assert gate.holds("r1", "gated", "b1")  # the copy it read is the one in use now
    assert store.reads == 2


class AskedStore:
    """A pauses table whose store's next commit can be asked to look (``PauseProbeRequests``)."""

    def __init__(self) -> None:
        self.reads = 0
        self.table: list[Pause] = []
        self.probe: tuple[float, bool] | None = None
        self.asked = 0

    def list_pauses(self) -> list[Pause]:
        self.reads += 1
        return list(self.table)

    def last_pause_probe(self) -> tuple[float, bool] | None:
        return self.probe

    def want_pause_probe(self) -> None:
        self.asked += 1


def test_while_nothing_is_paused_the_gate_asks_the_next_commit_to_look(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """No read on the gate's thread beside the work: the store's next commit looks instead,
    and its answer, newer than the copy, answers the questions after it."""
    now = [100.0]
    monkeypatch.setattr(pauses, "time", SimpleNamespace(monotonic=lambda: now[0]))
    store = AskedStore()
    gate = PauseGate(store)  # type: ignore[arg-type]
    assert not gate.current() and (store.reads, store.asked) == (1, 0)  # no copy: read
    now[0] = 100.15  # the copy is past half its age
    assert not gate.current() and (store.reads, store.asked) == (1, 1)
    assert gate._refresher is None  # no thread of the gate's own
    store.probe = (100.16, False)  # the next commit looked
    now[0] = 100.30  # the copy is old, the commit's look is not
    assert not gate.current() and (store.reads, store.asked) == (1, 2)
    now[0] = 100.45  # both are old: read before answering
    assert not gate.current() and store.reads == 2
    # Something paused: the gate must learn what, so its thread reads.
    store.table = [HELD]
    gate.forget()
    assert gate.current().holding("r", "gated", "b") is not None and store.reads == 3
    now[0] = 100.60
    asked = store.asked
    assert gate.current().holding("r", "gated", "b") is not None and store.asked == asked
    refresher = gate._refresher
    assert refresher is not None
    refresher.join(timeout=10)  # it ends once idle (IDLE_REFRESHER)
    assert store.reads == 4


def test_a_group_commit_looks_at_the_pauses_only_when_asked(
    store: EventStore, clock: ManualClock
) -> None:
    """``want_pause_probe`` on the SQL stores: the next group commit looks, in its own
    transaction, and ``last_pause_probe`` tells what it found."""
    if isinstance(store, MemoryStore):
        pytest.skip("the memory store's pauses are read from memory: no read to save")
    assert isinstance(store, PauseProbeRequests)
    now = clock.now()
    create(store, "r1", now)

    def write(sequence: int) -> None:
        group = CommitGroup(
            writes=[
                StreamWrite(
                    run_id="r1", expected_sequence=sequence, events=[signal(sequence)], index=idx()
                )
            ],
            creates=[],
            now=now,
        )
        assert store.commit_groups([group]) == [None]

    write(1)
    assert store.last_pause_probe() is None  # not asked: no look
    store.want_pause_probe()
    before = time.monotonic()
    write(2)
    probe = store.last_pause_probe()
    assert probe is not None and probe[0] >= before and probe[1] is False
    store.add_pauses([PauseTarget(kind=PauseKind.WORKFLOW, name="other")], None, now)
    assert store.last_pause_probe() is None  # a pause made here forgets the look
    write(3)
    assert store.last_pause_probe() is None  # asked once, looked once
    store.want_pause_probe()
    write(4)
    probe = store.last_pause_probe()
    assert probe is not None and probe[1] is True
