"""End to end through the real ``flow`` command, on SQLite and PostgreSQL: ``flow runs`` with
filters, ``flow count`` and ``flow hook list``."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from triage_helpers import TriageProject, project_for


@pytest.fixture(
    scope="module", params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]
)
def fleet(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[TriageProject]:
    """Runs in every interesting state, decided once per backend (the tests only read)."""
    tmp_path: Path = tmp_path_factory.mktemp(request.param)
    for project in project_for(request.param, tmp_path):
        for run_id, workflow in (
            ("ap-1", "approval"),
            ("ap-2", "approval"),
            ("cb-1", "callback"),
            ("sl-1", "sleepy"),
            ("pa-1", "parent"),
            ("br-1", "broken"),
            ("ts-1", "two-step"),
        ):
            given = '{"n": 1}' if workflow == "two-step" else "null"
            project.setup("start", workflow, "--id", run_id, "--input", given)
        project.setup("tick", "--until-idle")
        yield project


def ids(result_json: list[dict[str, object]]) -> list[object]:
    return [row["run_id"] for row in result_json]


def test_runs_filters(fleet: TriageProject) -> None:
    everything = fleet.setup("runs", "--json").json()
    assert {r["run_id"] for r in everything} == {
        "ap-1", "ap-2", "cb-1", "sl-1", "pa-1", "pa-1/kid", "br-1", "ts-1",
    }  # fmt: skip
    assert ids(fleet.setup("runs", "--waiting-on", "signal:approve", "--json").json()) == [
        "ap-2",
        "ap-1",
    ]
    assert ids(fleet.setup("runs", "--waiting-on", "hook", "--json").json()) == ["cb-1"]
    assert ids(fleet.setup("runs", "--waiting-on", "timer:nap", "--json").json()) == ["sl-1"]
    assert ids(fleet.setup("runs", "--waiting-on", "child:kid", "--json").json()) == []
    assert ids(fleet.setup("runs", "--failing", "--json").json()) == ["br-1"]
    suspended = fleet.setup("runs", "--status", "suspended,COMPLETED", "--workflow", "approval")
    assert "ap-1" in suspended.stdout and "cb-1" not in suspended.stdout
    top = ids(fleet.setup("runs", "--top-level", "--status", "Completed", "--json").json())
    assert top == ["ts-1", "pa-1"]
    assert ids(fleet.setup("runs", "--build-id", "cli-1", "--since", "1h", "--json").json()) == ids(
        everything
    )
    assert fleet.setup("runs", "--until", "1h", "--json").json() == []
    assert fleet.setup("runs", "--idle-for", "1h", "--json").json() == []
    [row] = fleet.setup("runs", "--waiting-on", "hook", "--json").json()
    assert row["waiting_on"] == ["hook:callback"] and row["workflow"] == "callback"


def test_runs_jsonl_and_cursor(fleet: TriageProject) -> None:
    lines = fleet.setup("runs", "--limit", "3", "--jsonl").stdout.splitlines()
    assert len(lines) == 3
    import json

    first = [json.loads(line)["run_id"] for line in lines]
    rest = fleet.setup("runs", "--after", first[-1], "--json").json()
    assert first + ids(rest) == ids(fleet.setup("runs", "--json").json())


def test_count(fleet: TriageProject) -> None:
    assert fleet.setup("count", "--json").json() == {"total": 8, "groups": {}}
    by_status = fleet.setup("count", "--by", "status", "--json").json()
    assert by_status == {
        "total": 8,
        "groups": {"Completed": 3, "Pending": 1, "Suspended": 4},
    }
    assert fleet.setup("count", "--by", "workflow", "--failing", "--json").json() == {
        "total": 1,
        "groups": {"broken": 1},
    }
    assert fleet.setup("count", "--workflow", "nothing", "--json").json() == {
        "total": 0,
        "groups": {},
    }
    text = fleet.setup("count", "--by", "build_id").stdout
    assert "cli-1" in text and "8 in total" in text
    assert fleet.setup("count").stdout.strip() == "8"


def test_hook_list(fleet: TriageProject) -> None:
    [hook] = fleet.setup("hook", "list", "--open", "--json").json()
    assert hook["run_id"] == "cb-1" and hook["hook_id"] == "callback"
    assert hook["state"] == "open" and hook["metadata"] == {"purpose": "test [not markup]"}
    assert hook["created_at"] and len(hook["token"]) > 10
    assert fleet.setup("hook", "list", "cb-1", "--jsonl").stdout.count("\n") == 1
    assert fleet.setup("hook", "list", "ap-1", "--json").json() == []
    table = fleet.setup("hook", "list").stdout
    assert hook["token"] in table and "open" in table and "test [not markup]" in table


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("runs", "--status", "bogus"), "'bogus' is not one of"),
        (("runs", "--waiting-on", "nothing"), "KIND one of signal, hook, timer, step, child"),
        (("runs", "--since", "yesterday"), "neither an ISO 8601 time"),
        (("runs", "--idle-for", "soon"), "is not a duration"),
        (("runs", "--after", "no-such-run"), "no-such-run"),
        (("count", "--by", "colour"), "colour"),
        (("hook", "list", "no-such-run"), "no-such-run"),
    ],
)
def test_bad_filters_are_exit_2(fleet: TriageProject, args: tuple[str, ...], message: str) -> None:
    result = fleet.run(*args)
    assert (result.code, result.stdout) == (2, ""), result.stderr
    assert message in result.error_line()
