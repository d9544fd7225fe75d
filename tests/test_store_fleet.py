"""Store conformance for the fleet-health queries (workers registry, open-run index, builds).

Runs once per ``store`` param (memory, SQLite, PostgreSQL when configured), like
``test_store_conformance.py``.
"""

from __future__ import annotations

from datetime import timedelta

from flow_cli.model.clock import ManualClock
from flow_cli.store.protocol import WORKER_RETENTION, EventStore, WorkerInfo


def worker(worker_id: str, clock: ManualClock, builds: tuple[str, ...] = ("b1",)) -> WorkerInfo:
    now = clock.now()
    return WorkerInfo(
        worker_id=worker_id,
        host="host-a",
        pid=4242,
        builds=builds,
        started_at=now,
        heartbeat_at=now,
        heartbeat_seconds=2.0,
    )


def test_register_list_heartbeat_and_stop(store: EventStore, clock: ManualClock) -> None:
    store.register_worker(worker("w1", clock, ("b1", "b2")))
    clock.advance(seconds=1)
    store.register_worker(worker("w2", clock))
    listed = store.list_workers()
    assert [w.worker_id for w in listed] == ["w2", "w1"]  # most recently started first
    first = listed[1]
    assert (first.host, first.pid, first.builds, first.heartbeat_seconds) == (
        "host-a",
        4242,
        ("b1", "b2"),
        2.0,
    )
    assert first.stopped_at is None and first.live(clock.now())

    clock.advance(seconds=7)
    assert store.heartbeat("w1", clock.now()) is True
    by_id = {w.worker_id: w for w in store.list_workers()}
    assert by_id["w1"].heartbeat_at == clock.now()
    assert by_id["w1"].live(clock.now())
    assert not by_id["w2"].live(clock.now())  # 7 s silent > 3 intervals of 2 s: gone

    store.worker_stopped("w1", clock.now())
    stopped = {w.worker_id: w for w in store.list_workers()}["w1"]
    assert stopped.stopped_at == clock.now()
    assert not stopped.live(clock.now())
    assert store.heartbeat("w1", clock.now()) is False  # a stopped worker must register again
    assert store.heartbeat("nobody", clock.now()) is False


def test_registering_again_revives_and_old_workers_are_forgotten(
    store: EventStore, clock: ManualClock
) -> None:
    store.register_worker(worker("old", clock))
    store.register_worker(worker("w1", clock))
    store.worker_stopped("w1", clock.now())
    store.register_worker(worker("w1", clock))
    assert {w.worker_id: w.stopped_at for w in store.list_workers()}["w1"] is None
    clock.advance(seconds=WORKER_RETENTION.total_seconds() + 1)
    store.register_worker(worker("new", clock))
    assert [w.worker_id for w in store.list_workers()] == ["new"]


def test_liveness_counts_three_heartbeat_intervals(clock: ManualClock) -> None:
    info = worker("w", clock)
    assert info.live(clock.now() + timedelta(seconds=6))
    assert not info.live(clock.now() + timedelta(seconds=6.01))
