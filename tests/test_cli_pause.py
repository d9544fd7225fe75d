"""``flow start --priority``, ``flow pause``, ``flow resume``, ``flow pauses``: bad input is one
line and exit 2 (an ended run: exit 1) with nothing written; end to end with a real worker
process on SQLite and on PostgreSQL, a paused workflow makes no progress while a signal sent to
it is recorded, and goes on to completion after ``flow resume``."""

from __future__ import annotations

import json
import os
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cli_helpers import CONFIG, FlowProject
from fleet_helpers import FleetProject, stop, wait_for


@pytest.fixture
def project(tmp_path: Path) -> FlowProject:
    return FlowProject(tmp_path)


def test_priority_is_recorded_and_shown(project: FlowProject) -> None:
    project.setup("start", "approval", "--id", "urgent", "--priority", "1")
    project.setup("start", "approval", "--id", "plain")
    rows = {row["run_id"]: row["priority"] for row in project.setup("runs", "--json").json()}
    assert rows == {"urgent": 1, "plain": 5}
    shown = project.setup("show", "urgent", "--json").json()
    assert (shown["priority"], shown["paused"]) == (1, None)
    assert "priority  1" in project.setup("show", "urgent").stdout


@pytest.mark.parametrize("value", ["0", "10", "-3"])
def test_a_priority_outside_1_to_9_is_exit_2_and_writes_nothing(
    project: FlowProject, value: str
) -> None:
    result = project.invoke("start", "approval", "--id", "r", "--priority", value)
    assert result.code == 2
    assert "priority must be a whole number from 1 (taken first) to 9" in result.error_line()
    assert not project.db.exists()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("pause",), "Nothing to pause: name runs (flow pause RUN...), or --workflow W"),
        (("resume",), "Nothing to resume"),
        (("pause", "r1", "--workflow", "approval"), "flow pause takes one kind of target"),
        (("resume", "--workflow", "a", "--build-id", "b"), "flow resume takes one kind"),
        (("pause", "nope"), "Run 'nope' does not exist"),
    ],
)
def test_bad_pause_targets_are_exit_2_and_write_nothing(
    project: FlowProject, args: tuple[str, ...], message: str
) -> None:
    project.setup("start", "approval", "--id", "r1")
    before = project.snapshot_files()
    result = project.invoke(*args)
    assert result.code == 2
    assert message in result.error_line()
    assert project.snapshot_files() == before
    assert project.setup("pauses", "--json").json() == []


def test_pausing_an_ended_run_says_so(project: FlowProject) -> None:
    project.setup("start", "approval", "--id", "r1")
    project.setup("cancel", "r1")
    project.setup("tick", "--until-idle")
    result = project.invoke("pause", "r1")
    assert result.code == 1
    assert result.error_line() == (
        "error: Run 'r1' has already ended (Cancelled); cannot pause it."
    )
    assert project.setup("pauses", "--json").json() == []


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def fleet(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[FleetProject]:
    """The CLI test workflows on SQLite, and on PostgreSQL (a schema of its own)."""
    if request.param == "sqlite":
        yield FleetProject(tmp_path, f"sqlite:///{tmp_path / 'flow.db'}", CONFIG)
        return
    pg = os.environ.get("FLOW_TEST_POSTGRES")
    if not pg:
        pytest.skip("set FLOW_TEST_POSTGRES=postgresql://... to run the PostgreSQL CLI tests")
    schema = f"pause_{uuid.uuid4().hex[:12]}"
    sep = "&" if "?" in pg else "?"
    yield FleetProject(tmp_path, f"{pg}{sep}schema={schema}", CONFIG)
    from flow_cli.store.postgres import PostgresStore

    store = PostgresStore(pg, schema=schema)
    try:
        store.drop_schema()
    finally:
        store.close()


def _read(fleet: FleetProject, *args: str) -> Any:
    """``flow ARGS --json`` run in-process (polling with a process a time is slow)."""
    from typer.testing import CliRunner

    from flow_cli.cli.app import app

    runner = CliRunner()
    argv = ["--config", str(fleet.config), "--db", fleet.url, *args, "--json"]
    result = runner.invoke(app, argv, env={"NO_COLOR": "1"}, prog_name="flow")
    assert result.exit_code == 0, result.stderr
    return json.loads(result.stdout)


def _status(fleet: FleetProject, run_id: str) -> str:
    return str(_read(fleet, "show", run_id)["status"])


def _keys(fleet: FleetProject, run_id: str) -> list[str]:
    return [e["event_key"] for e in _read(fleet, "history", run_id)]


def test_a_paused_workflow_waits_for_resume_under_a_real_worker(fleet: FleetProject) -> None:
    fleet.must("start", "approval", "--id", "a1")
    worker = fleet.spawn_worker("--lease-seconds", "5")
    try:
        wait_for(lambda: _status(fleet, "a1") == "Suspended", "a1 to wait for its signal")
        paused = fleet.must("pause", "--workflow", "approval", "--reason", "deploy")
        assert paused.stdout == "paused workflow approval (1 open run)\n"
        fleet.must("signal", "a1", "approve", "--payload", '"yes"')
        fleet.must("start", "approval", "--id", "a2")  # a run started later is held too
        # The worker is woken by these commits and looks at least once a second: give it time
        # to (not) act. Facts are recorded; nothing is decided.
        time.sleep(2)
        assert _keys(fleet, "a1")[-1] == "signal_received"
        assert _keys(fleet, "a2") == ["run_started"]
        doctor = _read(fleet, "doctor")
        assert {(r["run_id"], r["cause"]) for r in doctor["runs"]} == {
            ("a1", "paused"),
            ("a2", "paused"),
        }
        assert doctor["ok"] is True  # paused is not stuck
        assert (
            "paused (deploy): a pause holds its workflow 'approval'"
            in (doctor["runs"][0]["detail"])
        )

        resumed = fleet.must("resume", "--workflow", "approval")
        assert resumed.stdout == "resumed workflow approval (2 open runs)\n"
        wait_for(lambda: _status(fleet, "a1") == "Completed", "a1 to complete")
        wait_for(lambda: _status(fleet, "a2") == "Suspended", "a2 to wait for its signal")
    finally:
        _, errors = stop(worker)
    assert "Traceback" not in errors
    outcome = fleet.must("result", "a1", "--json").json()["outcome"]
    assert outcome == {"kind": "Completed", "result": {"approved": "yes"}}
