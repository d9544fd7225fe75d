"""One rule for runs that ended, unknown runs under ``--dry-run`` and run ids read from stdin
(issue 25, item 9), through the real ``flow`` command on SQLite and PostgreSQL.

- ``cancel`` and ``terminate`` of a run that already ended: ``skipped``, exit 0, for one run
  and for many, whichever path (batch or one by one) found it ended.
- ``--dry-run`` names a run that does not exist and exits as the real command would: 2 for one
  RUN, 1 among many.
- stdin holds one run id a line, with no comment syntax: an id may begin with ``#``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from triage_helpers import TriageProject, project_for


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def proj(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[TriageProject]:
    for project in project_for(request.param, tmp_path):
        project.setup("start", "two-step", "--id", "done", "--input", '{"n": 1}')
        project.setup("start", "approval", "--id", "open")
        project.setup("tick", "--until-idle")
        yield project


def test_cancel_of_an_ended_run_is_skipped_like_terminate(proj: TriageProject) -> None:
    before = proj.setup("history", "done", "--json").stdout
    one = proj.run("cancel", "done")
    assert (one.code, one.stdout, one.stderr) == (
        0,
        "cancellation of run done skipped: already Completed\n",
        "",
    )
    as_json = proj.invoke("cancel", "done", "--json")
    assert as_json.code == 0
    assert as_json.json() == {"run_id": "done", "requested": False, "skipped": "already Completed"}
    terminated = proj.run("terminate", "done")
    assert (terminated.code, terminated.stdout) == (0, "done\tskipped\talready Completed\n")
    many = proj.run("cancel", "done", "open")
    assert many.code == 0
    assert many.stdout.splitlines() == [
        "done\tskipped\talready Completed",
        "open\tdone\tcancellation requested",
    ]
    assert proj.setup("history", "done", "--json").stdout == before


@pytest.mark.parametrize("verb", ["cancel", "terminate", "export"])
def test_dry_run_of_one_unknown_run_is_exit_2_as_the_real_command(
    proj: TriageProject, verb: str
) -> None:
    dry = proj.run(verb, "nope", "--dry-run")
    assert (dry.code, dry.stdout) == (2, "")
    assert dry.error_line() == "error: Run 'nope' does not exist. List runs with `flow runs`."
    real = proj.run(verb, "nope")
    assert real.code == 2


def test_dry_run_of_one_unknown_run_for_signal(proj: TriageProject) -> None:
    dry = proj.run("signal", "nope", "approve", "--dry-run")
    assert (dry.code, dry.stdout) == (2, "")
    assert "'nope' does not exist" in dry.error_line()
    known = proj.run("signal", "open", "approve", "--dry-run")
    assert (known.code, known.stdout) == (0, "open\tapproval\tSuspended\n")
    assert proj.setup("show", "open", "--json").json()["status"] == "Suspended"


def test_dry_run_among_many_names_the_unknown_run_and_exits_1(proj: TriageProject) -> None:
    dry = proj.run("cancel", "open", "nope", "--dry-run")
    assert dry.code == 1
    assert dry.stdout.splitlines() == ["open\tapproval\tSuspended", "nope\tdoes not exist"]
    assert dry.stderr == "dry run: 1 run would be acted on; 1 does not exist\n"
    as_json = proj.invoke("terminate", "open", "nope", "--dry-run", "--json")
    assert as_json.code == 1
    assert json.loads(as_json.stdout) == [
        {"run_id": "open", "workflow": "approval", "status": "Suspended"},
        {"run_id": "nope", "error": "does not exist"},
    ]
    real = proj.run("cancel", "open", "nope")
    assert real.code == 1  # the real command: "nope failed", exit 1
    assert proj.setup("show", "open", "--json").json()["status"] == "Cancelling"


def test_a_run_id_read_from_stdin_may_begin_with_a_hash(proj: TriageProject) -> None:
    proj.setup("start", "approval", "--id", "#7")
    proj.setup("start", "approval", "--id", "# note")
    proj.setup("tick", "--until-idle")
    result = proj.run("cancel", "-", stdin="#7\n\n# note\n")
    assert result.code == 0, result.stderr
    assert result.stdout.splitlines() == [
        "#7\tdone\tcancellation requested",
        "# note\tdone\tcancellation requested",
    ]
    assert proj.setup("show", "#7", "--json").json()["status"] == "Cancelling"


def test_dry_run_of_one_export_writes_nothing(proj: TriageProject, tmp_path: Path) -> None:
    target = tmp_path / "done.json"
    dry = proj.run("export", "done", "-o", str(target), "--dry-run")
    assert (dry.code, dry.stdout) == (0, "done\ttwo-step\tCompleted\n")
    assert not target.exists()
