"""Waiting for notifications (``flow_cli.store.postgres.listen``): a wait that runs out sleeps
in the kernel until its end, and what arrives meanwhile is read whole.

psycopg's own timed wait polls with a zero timeout through the last millisecond before its
deadline: a thousand or more polls, about a millisecond of CPU, for every wait that ran out
(one after each step handed to an idle worker). The tests count the polls, not time.
"""

from __future__ import annotations

import os
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from flow_cli import Runtime
from flow_cli.engine.engine import Engine

pytestmark = pytest.mark.postgres

psycopg = pytest.importorskip("psycopg")
psycopg_connection = pytest.importorskip("psycopg.connection")

from flow_cli.store.postgres import PostgresStore  # noqa: E402
from flow_cli.store.postgres.listen import notes_within  # noqa: E402

shop = Runtime(build_id="listen-1")


@shop.workflow("one")
def _one(ctx):  # type: ignore[no-untyped-def]
    return ctx.complete(ctx.step("s", "inc", ctx.input))


@shop.step("inc")
def _inc(x, info):  # type: ignore[no-untyped-def]
    return x + 1


def _url() -> str:
    url = os.environ.get("FLOW_TEST_POSTGRES")
    if not url:
        pytest.skip("set FLOW_TEST_POSTGRES=postgresql://... to run the PostgreSQL store tests")
    return url


@pytest.fixture
def schema() -> str:
    return f"flow_listen_{uuid.uuid4().hex[:12]}"


@pytest.fixture
def engine(schema: str) -> Iterator[Engine]:
    store = PostgresStore(_url(), schema=schema)
    engine = Engine(store, [shop], worker_id="listener")
    try:
        yield engine
    finally:
        store.drop_schema()
        engine.close()


@pytest.fixture
def polls(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """How many times psycopg's notification reader was resumed (each is one poll of the
    socket that found it ready or timed out)."""
    count = [0]
    original = psycopg_connection.notifies

    def counting(pgconn: Any) -> Any:
        gen = original(pgconn)
        sent = next(gen)
        while True:
            count[0] += 1
            try:
                sent = gen.send((yield sent))
            except StopIteration as stop:
                return stop.value

    monkeypatch.setattr(psycopg_connection, "notifies", counting)
    return count


def _later(seconds: float, do: Callable[[], object]) -> threading.Thread:
    thread = threading.Thread(target=lambda: (time.sleep(seconds), do()))
    thread.start()
    return thread


def test_a_wait_for_work_that_runs_out_does_not_spin(engine: Engine, polls: list[int]) -> None:
    engine.store.wait_for_change(0, work_only=True)  # listening from here
    polls[0] = 0
    began = time.monotonic()
    engine.store.wait_for_change(0.05, work_only=True)
    assert time.monotonic() - began >= 0.05  # it waited its whole time
    assert polls[0] < 20  # psycopg's own timed wait: over a thousand


def test_a_wait_for_an_end_that_runs_out_does_not_spin(engine: Engine, polls: list[int]) -> None:
    engine.start("one", 1, run_id="r1")
    engine.store.wait_for_change(1.0, ending="r1")  # returns at once: listening from here
    polls[0] = 0
    began = time.monotonic()
    engine.store.wait_for_change(0.05, ending="r1")
    assert time.monotonic() - began >= 0.05
    assert polls[0] < 20


def test_a_wait_for_an_end_returns_when_the_run_ends(engine: Engine, schema: str) -> None:
    engine.start("one", 1, run_id="r1")
    engine.store.wait_for_change(1.0, ending="r1")
    worker = Engine(PostgresStore(_url(), schema=schema), [shop], worker_id="worker")
    try:
        ender = _later(0.05, lambda: worker.tick(until_idle=True))
        began = time.monotonic()
        engine.store.wait_for_change(10.0, ending="r1")
        ender.join()
    finally:
        worker.close()
    assert time.monotonic() - began < 5.0  # not the whole ten seconds
    assert engine.get_run("r1").status.value == "Completed"


def test_notes_within_reads_a_packet_whole_and_what_is_queued_at_once() -> None:
    url = _url()
    channel = f"flow_listen_{uuid.uuid4().hex[:8]}"
    with (
        psycopg.connect(url, autocommit=True) as listener,
        psycopg.connect(url, autocommit=True) as sender,
    ):
        listener.execute(f"LISTEN {channel}")
        # Two notifications of one commit, sent while the reader waits.
        sending = _later(
            0.05, lambda: sender.execute(f"NOTIFY {channel}, 'a'; NOTIFY {channel}, 'b'")
        )
        heard = [n.payload for n in notes_within(listener, 5.0)]
        sending.join()
        assert heard == ["a", "b"]
        # Sent before the call: read at once, whatever the timeout.
        sender.execute(f"NOTIFY {channel}, 'queued'")
        time.sleep(0.05)
        assert [n.payload for n in notes_within(listener, 0)] == ["queued"]
        assert list(notes_within(listener, 0.01)) == []
