"""``PauseGate``: one thread reads the pauses table when the copy is old, the others answer from
the copy meanwhile; with no copy (first question, or after ``forget``) each waits for a read
that began after it asked."""

from __future__ import annotations

import threading
from datetime import UTC, datetime

import pytest

from flow_cli.engine import pauses
from flow_cli.engine.pauses import PauseGate
from flow_cli.store.pauses import Pause, PauseKind, PauseTarget

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
