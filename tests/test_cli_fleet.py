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


# -- flow doctor and flow builds -------------------------------------------------------------

FLEET_CONFIG = """\
[flow]
database = "sqlite:///flow.db"
build_id = "fleet-1"
runtimes = [{runtimes}]
"""


def _configure(project: FleetProject, *runtimes: str) -> None:
    names = ", ".join(f'"fleet_workflows:{name}"' for name in runtimes)
    project.config.write_text(FLEET_CONFIG.format(runtimes=names), encoding="utf-8")


def _doctor(project: FleetProject, *args: str) -> tuple[int, dict[str, Any]]:
    result = project.flow("doctor", "--json", *args)
    assert result.stderr == ""
    return result.code, result.json()


def _causes(report: dict[str, Any]) -> dict[str, str]:
    return {row["run_id"]: row["cause"] for row in report["runs"]}


def test_doctor_names_orphaned_failing_and_overdue_runs_and_exits_1(fleet: FleetProject) -> None:
    _configure(fleet, "runtime", "old")
    nap = ("--input", '{"seconds": 1}')
    fleet.must("start", "nap", "--id", "orphan", "--build-id", "fleet-0", *nap)
    _configure(fleet, "runtime")  # fleet-0 is dropped: nothing will ever decide "orphan"
    assert "0 runs decided" in fleet.must("tick").stdout
    code, report = _doctor(fleet)
    assert code == 1 and report["ok"] is False
    [row] = report["runs"]
    assert row == {
        "run_id": "orphan",
        "workflow": "nap",
        "build_id": "fleet-0",
        "cause": "build-unhosted",
        "detail": "no worker hosts build 'fleet-0'",
        "since": row["since"],
    }

    fleet.must("start", "broken", "--id", "bad")
    fleet.must("start", "approval", "--id", "calm")
    # The nap counts from the run's start: long enough for the tick to find it asleep.
    fleet.must("start", "nap", "--id", "late", "--input", '{"seconds": 4}')
    fleet.must("tick")  # decides them; the tick worker is gone once it returns
    assert _causes(_doctor(fleet, "--overdue-after", "0.2s")[1])["late"] == "sleeping"
    wait_for(
        lambda: _doctor(fleet, "--overdue-after", "0.2s")[1]["summary"]["timer-overdue"],
        "the nap timer to pass",
    )
    code, report = _doctor(fleet, "--overdue-after", "0.2s")
    assert code == 1
    assert _causes(report) == {
        "bad": "decision-failing",
        "orphan": "build-unhosted",
        "late": "timer-overdue",
        "calm": "waiting-signal",
    }
    assert report["summary"] == {
        "paused": 0,
        "decision-failing": 1,
        "step-unknown": 0,
        "build-unhosted": 1,
        "timer-overdue": 1,
        "lease-expired": 0,
        "schedule-late": 0,
        "throttled": 0,
        "step-retrying": 0,
        "step-running": 0,
        "waiting-signal": 1,
        "waiting-hook": 0,
        "waiting-child": 0,
        "sleeping": 0,
        "runnable": 0,
    }
    by_id = {row["run_id"]: row for row in report["runs"]}
    assert by_id["bad"]["detail"] == "ValueError: the order book is missing"
    assert by_id["late"]["detail"].startswith("timer 'nap' was due at ")
    assert by_id["calm"]["detail"] == "signal 'approve'"
    # The default grace is 30 s: the timer due a moment ago is not overdue yet.
    assert _causes(_doctor(fleet)[1])["late"] == "runnable"

    table = fleet.flow("doctor", "--overdue-after", "0.2s")
    assert table.code == 1 and table.stderr == ""
    for text in ("decision-failing", "build-unhosted", "timer-overdue", "waiting-signal"):
        assert text in table.stdout
    assert "3 runs stuck of 4 open; 0 live workers" in table.stdout

    filtered = fleet.flow("doctor", "--json", "--workflow", "approval")
    assert (filtered.code, _causes(filtered.json())) == (0, {"calm": "waiting-signal"})


def test_doctor_table_shows_a_few_samples_per_cause(fleet: FleetProject) -> None:
    _configure(fleet, "runtime")
    for n in range(5):
        fleet.must("start", "broken", "--id", f"bad-{n}")
    fleet.must("tick")
    result = fleet.flow("doctor")
    assert result.code == 1
    lines = [line for line in result.stdout.splitlines() if "decision-failing" in line]
    assert len(lines) == 1 + 3  # the count row, then three sample runs
    assert " 5 " in lines[0] and "stuck" in lines[0]


def test_doctor_exits_0_while_healthy_workers_keep_every_run_moving(fleet: FleetProject) -> None:
    _configure(fleet, "runtime")
    process = fleet.spawn_worker(env=FAST_HEARTBEAT)
    try:
        wait_for(lambda: any(w["live"] for w in _registered(fleet)), "the worker to register")
        fleet.must("start", "approval", "--id", "a")
        fleet.must("start", "callback", "--id", "c")
        fleet.must("start", "nap", "--id", "n", "--input", '{"seconds": 3600}')

        def settled() -> Any:
            code, report = _doctor(fleet)
            causes = _causes(report)
            done = causes.get("c") == "waiting-hook" and len(causes) == 3
            return (code, report) if done else None

        code, report = wait_for(settled, "the runs to reach their waits")
        assert code == 0 and report["ok"] is True
        assert _causes(report) == {"a": "waiting-signal", "c": "waiting-hook", "n": "sleeping"}
        table = fleet.must("doctor").stdout
        assert "No run is stuck: 3 open runs; 1 live worker" in table
    finally:
        stop(process)


def test_doctor_with_nothing_open_and_without_a_database(fleet: FleetProject) -> None:
    _configure(fleet, "runtime")
    if fleet.url.startswith("sqlite"):
        missing = fleet.flow("doctor")
        assert missing.code == 1 and "No Flow database" in missing.error_line()
    fleet.must("start", "approval", "--id", "a")
    code, report = _doctor(fleet, "--status", "Completed")
    assert (code, report["ok"], report["runs"]) == (0, True, [])
    bad = fleet.flow("doctor", "--overdue-after", "soon")
    assert bad.code == 2 and "--overdue-after" in bad.error_line()


def test_builds_lists_open_runs_hosts_patches_and_retirable_builds(fleet: FleetProject) -> None:
    _configure(fleet, "runtime", "old", "spare")
    fleet.must("start", "approval", "--id", "old-1", "--build-id", "fleet-0")
    fleet.must("start", "approval", "--id", "new-1")
    fleet.must("start", "approval", "--id", "new-2")
    fleet.must("tick")
    fleet.must("signal", "old-1", "approve", "--payload", "true")
    fleet.must("tick")  # old-1 completes: fleet-0 keeps no open run
    process = fleet.spawn_worker(env=FAST_HEARTBEAT)
    try:
        live = wait_for(
            lambda: [w for w in _registered(fleet) if w["live"]], "the worker to register"
        )
        rows = fleet.must("builds", "--json").json()
        created = {r["run_id"]: r["created_at"] for r in fleet.must("runs", "--json").json()}
        assert rows == [
            {
                "build_id": "fleet-0",
                "open": {},
                "oldest_open_run": None,
                "oldest_open_at": None,
                "workers": [live[0]["worker_id"]],
                "patches": [],
                "retirable": True,
            },
            {
                "build_id": "fleet-1",
                "open": {"Suspended": 2},
                "oldest_open_run": "new-1",
                "oldest_open_at": created["new-1"],
                "workers": [live[0]["worker_id"]],
                "patches": ["fleet-fix"],
                "retirable": False,
            },
            {
                "build_id": "fleet-2",
                "open": {},
                "oldest_open_run": None,
                "oldest_open_at": None,
                "workers": [live[0]["worker_id"]],
                "patches": [],
                "retirable": True,
            },
        ]
        table = fleet.must("builds").stdout
        assert "Suspended 2" in table and "new-1" in table and "3 builds, 2 retirable" in table
    finally:
        stop(process)
