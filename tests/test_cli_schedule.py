"""``flow schedule`` end to end: the JSON shapes of DESIGN §6.3, bad input (exit 2, one line
with an example of a right value, nothing written), apply's plan, trigger, backfill and the
firing by ``flow tick``."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from cli_helpers import FlowProject

CONFIG = """\
[flow]
database = "sqlite:///flow.db"
runtimes = ["schedule_workflows:runtime"]

[schedules.nightly]
workflow = "report"
cron = "0 2 * * *"
timezone = "Europe/Berlin"
input = { scope = "all" }

[schedules.quarter]
workflow = "report"
every = "15m"
overlap = "buffer-one"
"""

SHOW_KEYS = [
    "schedule_id", "workflow", "cron", "every", "timezone", "input", "overlap", "paused",
    "note", "next_fire_times", "recent", "skipped", "missed",
]  # fmt: skip


@pytest.fixture
def project(tmp_path: Path) -> FlowProject:
    return FlowProject(tmp_path, CONFIG)


def stored(project: FlowProject) -> list[str]:
    if not project.db.exists():
        return []
    with sqlite3.connect(project.db) as conn:
        return [row[0] for row in conn.execute("SELECT schedule_id FROM schedules")]


def test_create_show_and_list_json(project: FlowProject) -> None:
    created = project.invoke(
        "schedule", "create", "hourly", "--workflow", "report", "--cron", "@hourly",
        "--input", '{"a": 1}', "--timezone", "America/New_York", "--json",
    )  # fmt: skip
    assert (created.code, created.stderr) == (0, "")
    assert created.json()["schedule_id"] == "hourly"
    shown = project.invoke("schedule", "show", "hourly", "--json").json()
    assert [k for k in shown if k in SHOW_KEYS] == SHOW_KEYS
    assert shown["cron"] == "@hourly" and shown["every"] is None
    assert shown["input"] == {"a": 1} and shown["overlap"] == "skip"
    assert len(shown["next_fire_times"]) == 5
    assert all(t.endswith(":00:00Z") for t in shown["next_fire_times"])
    assert shown["recent"] == [] and (shown["skipped"], shown["missed"]) == (0, 0)
    listed = project.invoke("schedule", "list", "--json").json()
    assert [row["schedule_id"] for row in listed] == ["hourly"]
    assert "recent" not in listed[0]
    table = project.invoke("schedule", "list").stdout
    assert "hourly" in table and "@hourly" in table and "America/New_York" in table


@pytest.mark.parametrize(
    ("options", "wrong", "right"),
    [
        (["--cron", "61 * * * *"], "cron '61 * * * *' is not valid", "e.g. --cron '0 9 * * 1-5'"),
        (["--cron", "0 9 * *"], "needs five fields", "e.g. --cron"),
        (["--every", "fortnight"], "--every 'fortnight' is not a duration", "e.g. 90s, 15m"),
        (["--every", "0s"], "at least 1", "e.g. 15m"),
        (["--cron", "@daily", "--timezone", "Europe/Berln"], "'Europe/Berln'", "Europe/Berlin"),
        (["--cron", "@daily", "--overlap", "queue"], "overlap 'queue'", "e.g. --overlap skip"),
        (["--cron", "@daily", "--every", "1h"], "exactly one", "e.g. --cron"),
        (
            ["--every", "1h", "--start-at", "2027-01-02", "--end-at", "2027-01-01"],
            "is after --end-at",
            "e.g. --start-at",
        ),
    ],
)
def test_bad_input_is_exit_2_with_an_example_and_writes_nothing(
    project: FlowProject, options: list[str], wrong: str, right: str
) -> None:
    result = project.invoke("schedule", "create", "s", "--workflow", "report", *options)
    assert result.code == 2
    line = result.error_line()
    assert wrong in line and right in line
    assert stored(project) == []


def test_a_duplicate_id_is_exit_2_and_changes_nothing(project: FlowProject) -> None:
    project.setup("schedule", "create", "s", "--workflow", "report", "--every", "1h")
    again = project.invoke("schedule", "create", "s", "--workflow", "report", "--every", "5m")
    assert again.code == 2 and "exists already" in again.error_line()
    assert project.invoke("schedule", "show", "s", "--json").json()["every"] == "1h"
    unknown = project.invoke("schedule", "show", "nope")
    assert unknown.code == 2 and "no schedule 'nope'" in unknown.error_line()
    workflow = project.invoke("schedule", "create", "t", "--workflow", "nope", "--every", "1h")
    assert workflow.code == 2 and stored(project) == ["s"]


def test_backfill_from_after_to_is_exit_2(project: FlowProject) -> None:
    project.setup("schedule", "create", "s", "--workflow", "report", "--every", "1h")
    result = project.invoke(
        "schedule", "backfill", "s", "--from", "2026-12-02T00:00:00Z", "--to", "2026-12-01"
    )
    assert result.code == 2 and "is after --to" in result.error_line()
    assert "e.g. --from" in result.error_line()
    assert project.invoke("runs", "--json").json() == []


def test_apply_creates_updates_and_deletes_and_dry_run_changes_nothing(
    project: FlowProject,
) -> None:
    project.setup("schedule", "create", "old", "--workflow", "report", "--every", "1h")
    project.setup("schedule", "create", "quarter", "--workflow", "report", "--every", "30m")
    plan = project.invoke("schedule", "apply", "--dry-run", "--json").json()
    assert plan == {
        "create": ["nightly"],
        "update": ["quarter"],
        "delete": ["old"],
        "unchanged": [],
        "dry_run": True,
    }
    assert sorted(stored(project)) == ["old", "quarter"]
    text = project.invoke("schedule", "apply").stdout.splitlines()
    assert text == ["create nightly", "update quarter", "delete old"]
    quarter = project.invoke("schedule", "show", "quarter", "--json").json()
    assert (quarter["every"], quarter["overlap"]) == ("15m", "buffer-one")
    again = project.invoke("schedule", "apply")
    assert again.stdout == "nothing to change (2 schedules match flow.toml)\n"


def test_trigger_tick_show_and_backfill_twice(project: FlowProject) -> None:
    project.setup("schedule", "apply")
    fired = project.invoke("schedule", "trigger", "nightly", "--json").json()
    assert fired["action"] == "started" and fired["run_id"].startswith("nightly@")
    assert fired["run_id"] == f"nightly@{fired['scheduled_at']}"
    project.setup("tick", "--until-idle")
    recent = project.invoke("schedule", "show", "nightly", "--json").json()["recent"]
    assert recent == [
        {"scheduled_at": fired["scheduled_at"], "run_id": fired["run_id"], "status": "Completed"}
    ]
    span = ["--from", "2026-11-01T00:00:00Z", "--to", "2026-11-02T23:59:59Z"]
    first = project.invoke("schedule", "backfill", "nightly", *span, "--json").json()
    assert [(f["action"], f["run_id"]) for f in first] == [
        ("started", "nightly@2026-11-01T01:00:00Z"),
        ("started", "nightly@2026-11-02T01:00:00Z"),
    ]
    second = project.invoke("schedule", "backfill", "nightly", *span, "--json").json()
    assert [f["action"] for f in second] == ["existing", "existing"]
    assert len(project.invoke("runs", "--json").json()) == 3
    started = project.invoke("history", "nightly@2026-11-01T01:00:00Z", "--json").json()[0]
    assert started["data"]["spec"]["schedule"] == {
        "id": "nightly",
        "scheduled_at": "2026-11-01T01:00:00Z",
    }


def test_pause_resume_update_delete(project: FlowProject) -> None:
    project.setup("schedule", "create", "s", "--workflow", "report", "--cron", "0 9 * * *")
    assert project.invoke("schedule", "pause", "s", "--note", "db move").stdout == "paused s\n"
    shown = project.invoke("schedule", "show", "s", "--json").json()
    assert shown["paused"] is True and shown["note"] == "db move"
    assert shown["next_fire_times"] == []
    resumed = project.invoke("schedule", "resume", "s").stdout
    assert resumed.startswith("resumed s; next fire ") and resumed.endswith(":00Z\n")
    project.setup("schedule", "update", "s", "--every", "10m", "--overlap", "allow-all")
    shown = project.invoke("schedule", "show", "s", "--json").json()
    assert (shown["cron"], shown["every"], shown["overlap"]) == (None, "10m", "allow-all")
    bad = project.invoke("schedule", "update", "s", "--timezone", "Nowhere/Town")
    assert bad.code == 2
    assert project.invoke("schedule", "show", "s", "--json").json()["timezone"] == "UTC"
    assert project.invoke("schedule", "delete", "s").stdout == "deleted s\n"
    assert stored(project) == []


def test_the_example_project_has_a_nightly_schedule() -> None:
    from flow_cli.cli.schedule_config import read_schedule_tables

    root = Path(__file__).resolve().parent.parent
    (nightly,) = read_schedule_tables(root / "workflows_example" / "flow.toml")
    assert (nightly.schedule_id, nightly.workflow, nightly.cron, nightly.timezone) == (
        "nightly-rates",
        "exchange-rate",
        "0 2 * * *",
        "Europe/Berlin",
    )


def test_apply_refuses_an_unknown_key_in_a_schedule_table(tmp_path: Path) -> None:
    project = FlowProject(tmp_path, CONFIG + '\n[schedules.odd]\nworkflow = "report"\ncorn = "x"\n')
    result = project.invoke("schedule", "apply")
    assert result.code == 2 and "unknown keys corn" in result.error_line()
    assert stored(project) == []
