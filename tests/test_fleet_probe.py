"""Defects found probing the fleet-health commands (issue 11); each test fails without its fix."""

from __future__ import annotations

import json
import socket
import sqlite3
from pathlib import Path

import pytest
from cli_helpers import FlowProject


def _downgrade_to_v3(db: Path) -> None:
    """Make ``db`` look like a database written before schema version 4 (no failing_since)."""
    conn = sqlite3.connect(db)
    conn.execute("ALTER TABLE runs DROP COLUMN failing_since")
    conn.execute("UPDATE flow_meta SET value = '3' WHERE key = 'schema_version'")
    conn.commit()
    conn.close()


def _schema_version(db: Path) -> str:
    conn = sqlite3.connect(db)
    try:
        return str(
            conn.execute("SELECT value FROM flow_meta WHERE key = 'schema_version'").fetchone()[0]
        )
    finally:
        conn.close()


def test_workers_and_upgrade_dry_run_never_migrate_an_older_schema(tmp_path: Path) -> None:
    project = FlowProject(tmp_path)
    project.setup("start", "two-step", "--id", "r")
    _downgrade_to_v3(project.db)
    before = project.db.read_bytes()
    for args in (
        ("workers",),
        ("upgrade", "--from", "cli-1", "--to", "cli-1-compatible", "--dry-run"),
    ):
        result = project.run(*args)
        assert result.code == 1, (args, result.stderr)
        assert "has schema version 3, older than this Flow's" in result.error_line()
        assert _schema_version(project.db) == "3", args
    assert project.db.read_bytes() == before


def test_doctor_pages_with_next_after(tmp_path: Path) -> None:
    """doctor lists a page by cause, oldest first: its last run is not the listing cursor, so
    the report names the cursor of the next page."""
    project = FlowProject(tmp_path)
    started = [f"r-{n}" for n in range(5)]
    for run_id in started:
        project.setup("start", "two-step", "--id", run_id)
    seen: list[str] = []
    after: list[str] = []
    for _ in range(len(started)):
        page = project.run("doctor", "--json", "--limit", "2", *after).json()
        seen += [run["run_id"] for run in page["runs"]]
        if page["next_after"] is None:
            break
        after = ["--after", page["next_after"]]
    assert sorted(seen) == started  # each run once
    table = project.run("doctor", "--limit", "2")
    assert (
        table.stdout.splitlines()[-1]
        == "Next page (the page is full; it may be empty): --after r-3"
    )


def test_upgrade_with_no_run_ids_on_stdin_upgrades_nothing(tmp_path: Path) -> None:
    """`flow runs --failing --jsonl | flow upgrade ... -` with nothing failing must not fall
    back to every open run of the --from build."""
    project = FlowProject(tmp_path)
    project.setup("start", "two-step", "--id", "r")
    for stdin in ("", "\n  \n"):  # no ids; no comment syntax (an id may begin with #)
        result = project.run(
            "upgrade", "--from", "cli-1", "--to", "cli-1-compatible", "-", "--json", stdin=stdin
        )
        assert (result.code, result.stderr) == (0, "")
        assert result.json()["upgraded"] == []
    assert project.setup("runs", "--json").json()[0]["build_id"] == "cli-1"
    moved = project.run(
        "upgrade",
        "--from",
        "cli-1",
        "--to",
        "cli-1-compatible",
        "-",
        "--allow-unhosted",
        stdin="r\n",
    )
    assert moved.code == 0, moved.stderr
    assert project.setup("runs", "--json").json()[0]["build_id"] == "cli-1-compatible"


def test_a_fatal_error_under_log_format_json_is_a_json_line(tmp_path: Path) -> None:
    """A log shipper reading `flow worker --log-format json` gets the error that stopped it as
    JSON too; in text, and for every other command, it stays the plain `error:` line."""
    pytest.importorskip("prometheus_client")
    project = FlowProject(tmp_path)
    with socket.socket() as taken:
        taken.bind(("0.0.0.0", 0))
        taken.listen()
        port = str(taken.getsockname()[1])
        failed = project.run("worker", "--log-format", "json", "--metrics-port", port)
        assert failed.code == 1
        lines = failed.stderr.splitlines()
        assert len(lines) == 1, failed.stderr
        line = json.loads(lines[0])
        assert (line["level"], line["event"], line["exit_code"]) == ("error", "command_failed", 1)
        assert line["message"].startswith(f"--metrics-port {port}: cannot listen on port")
        text = project.run("worker", "--metrics-port", port)
        assert text.code == 1
        assert text.error_line().startswith(f"error: --metrics-port {port}: cannot listen")
    # In one process, a later command without --log-format json is back to text.
    project.invoke("tick", "--log-format", "json")
    assert project.invoke("show", "nope").error_line().startswith("error: Run 'nope'")


def test_doctor_table_says_how_many_runs_it_leaves_out(tmp_path: Path) -> None:
    project = FlowProject(tmp_path)
    for n in range(5):
        project.setup("start", "two-step", "--id", f"r-{n}")
    table = project.run("doctor")
    assert table.code == 1  # never decided, no worker ever hosted cli-1: build-unhosted
    assert "2 more runs not shown (at most 3 per cause, longest first); --json lists every run" in (
        table.stdout
    )
    project.setup("start", "two-step", "--id", "r-5")
    assert "3 more runs not shown" in project.run("doctor").stdout
    assert "not shown" not in project.run("doctor", "--limit", "3").stdout


def test_workers_and_builds_take_jsonl_like_every_listing(tmp_path: Path) -> None:
    project = FlowProject(tmp_path)
    project.setup("start", "two-step", "--id", "r")
    project.setup("tick")
    for command in ("workers", "builds"):
        array = project.run(command, "--json")
        lines = project.run(command, "--jsonl")
        assert (lines.code, lines.stderr) == (0, "")
        assert [json.loads(line) for line in lines.stdout.splitlines()] == array.json()
        assert array.json()  # one tick registered; cli-1 ran a run


def test_upgrade_from_a_build_no_run_is_pinned_to_says_so(tmp_path: Path) -> None:
    """A typo in --from is not an error (a rerun after every run moved must stay exit 0), but
    the note says no run is pinned to it and names the builds that have runs."""
    project = FlowProject(tmp_path)
    project.setup("start", "two-step", "--id", "r")
    typo = project.run("upgrade", "--from", "cli-l", "--to", "cli-1-compatible")
    assert (typo.code, typo.stdout) == (0, "")
    assert typo.stderr == (
        "no open runs of build cli-l to upgrade; nothing done (no run is pinned to cli-l; "
        "builds with runs: cli-1)\n"
    )
    known = project.run("upgrade", "--from", "cli-1", "--to", "cli-1-compatible", "--failing")
    assert known.stderr == "no open runs of build cli-1 to upgrade; nothing done\n"
