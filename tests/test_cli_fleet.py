"""End to end through the real ``flow`` command: workers, doctor, builds, upgrade."""

from __future__ import annotations

import signal
from typing import Any

from fleet_helpers import FleetProject, fleet, start_order, stop, wait_for

__all__ = ["fleet"]

FAST_HEARTBEAT = {"FLOW_HEARTBEAT_SECONDS": "0.2"}


def _workers(project: FleetProject) -> list[dict[str, Any]]:
    result: list[dict[str, Any]] = project.must("workers", "--json").json()
    return result


def _registered(project: FleetProject) -> list[dict[str, Any]]:
    """Like ``_workers``, but [] while the starting worker has not created the database yet."""
    result = project.flow("workers", "--json")
    return result.json() if result.code == 0 else []  # type: ignore[no-any-return]


def test_tick_registers_and_is_gone_once_done(fleet: FleetProject) -> None:
    start_order(fleet, "o-1")
    fleet.must("tick")
    [row] = _workers(fleet)
    assert set(row) >= {"worker_id", "host", "pid", "builds", "started_at", "heartbeat_at", "live"}
    assert row["live"] is False  # it stopped cleanly
    assert "shop-2026.12.1" in row["builds"]
    table = fleet.must("workers").stdout
    assert row["worker_id"] in table and "gone" in table and "1 worker, 0 live" in table


def test_a_killed_worker_shows_as_gone_after_its_heartbeat_lapses(fleet: FleetProject) -> None:
    process = fleet.spawn_worker(env=FAST_HEARTBEAT)
    try:
        live = wait_for(
            lambda: [w for w in _registered(fleet) if w["pid"] == process.pid and w["live"]],
            "the worker to register",
        )
        assert live[0]["builds"] == ["shop-2026.12.1", "shop-2026.11.1", "shop-2026.12.1-broken"]
        process.send_signal(signal.SIGKILL)
        process.wait()
        wait_for(
            lambda: [w for w in _workers(fleet) if w["pid"] == process.pid and not w["live"]],
            "the killed worker to show as gone",
        )
        [row] = [w for w in _workers(fleet) if w["pid"] == process.pid]
        assert row["stopped_at"] is None  # it never said goodbye: its heartbeat lapsed
    finally:
        stop(process)


def test_a_worker_stopped_cleanly_is_gone_at_once(fleet: FleetProject) -> None:
    process = fleet.spawn_worker(env=FAST_HEARTBEAT)
    try:
        wait_for(lambda: any(w["live"] for w in _registered(fleet)), "the worker to register")
    finally:
        stop(process)
    assert process.returncode == 0
    [row] = _workers(fleet)
    assert row["live"] is False and row["stopped_at"] is not None
