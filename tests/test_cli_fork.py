"""End to end through the real ``flow`` command, on SQLite and PostgreSQL: ``flow fork``."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from triage_helpers import TriageProject, project_for


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def proj(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[TriageProject]:
    for project in project_for(request.param, tmp_path):
        project.setup("start", "two-step", "--id", "t1", "--input", '{"n": 5}')
        project.setup("tick", "--until-idle")
        yield project


def test_fork_from_a_step(proj: TriageProject) -> None:
    forked = proj.run("fork", "t1", "--from-step", "second", "--id", "t1-f", "--json")
    assert forked.code == 0, forked.stderr
    assert forked.json() == {"run_id": "t1-f", "forked_from": {"run_id": "t1", "sequence": 4}}
    events = proj.setup("history", "t1-f", "--json").json()
    assert [e["event_key"] for e in events] == [
        "run_started", "step_scheduled", "step_started", "step_completed",
    ]  # fmt: skip
    assert events[0]["data"]["spec"]["forked_from"] == {"run_id": "t1", "sequence": 4}
    proj.setup("tick", "--until-idle")
    assert proj.invoke("result", "t1-f").stdout.replace(" ", "").replace("\n", "") == (
        '{"result":20}'
    )
    keys = [e["event_key"] for e in proj.setup("history", "t1-f", "--json").json()]
    assert keys.count("step_started") == 2  # first copied, second run anew
    shown = proj.invoke("show", "t1-f")
    assert "forked from  t1 (its events up to 4), forked 20" in shown.stdout
    assert proj.invoke("show", "t1-f", "--json").json()["forked_from"] == {
        "run_id": "t1",
        "sequence": 4,
    }
    assert proj.invoke("show", "t1", "--json").json()["forked_from"] is None
    table = proj.invoke("history", "t1-f").stdout
    assert "forked from t1 (up to event 4)" in table
    whole = proj.invoke("fork", "t1", "--input", '{"n": 1}')
    assert whole.code == 0 and whole.stdout.startswith("t1-fork-")


def test_fork_refusals(proj: TriageProject) -> None:
    before = proj.setup("history", "t1", "--json").json()
    diverges = proj.run("fork", "t1", "--from-step", "second", "--build-id", "cli-2")
    assert (diverges.code, diverges.stdout) == (3, "")
    lines = diverges.stderr.splitlines()
    assert lines[0].startswith("error: Fork of run 't1' refused")
    assert "seq 2 step 'first' input" in lines[1] and '{"n":105}' in lines[1]
    assert proj.setup("count", "--json").json()["total"] == 1
    assert proj.setup("history", "t1", "--json").json() == before
    for args, message in (
        (("fork", "nope"), "'nope' does not exist"),
        (("fork", "t1", "--from-step", "third"), "never scheduled that step"),
        (("fork", "t1", "--id", "t1"), "t1"),
        (("fork", "t1", "--build-id", "cli-9"), "cli-9"),
    ):
        result = proj.invoke(*args)
        assert (result.code, result.stdout) == (2, ""), (args, result.stderr)
        assert message in result.error_line()
