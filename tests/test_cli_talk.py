"""``flow query`` and ``flow update`` end to end: exact output, exit codes, nothing half-written."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_helpers import FlowProject
from talk_workflows import ORDER

from flow_cli.engine.engine import Engine
from flow_cli.store.sqlite import SQLiteStore

CONFIG = """\
[flow]
database = "sqlite:///flow.db"
runtimes = ["talk_workflows:runtime", "talk_workflows:changed"]
build_id = "talk-1"
"""


@pytest.fixture
def project(tmp_path: Path) -> FlowProject:
    import talk_workflows

    made = FlowProject(tmp_path, CONFIG)
    engine = Engine(SQLiteStore(made.db), [talk_workflows.runtime])
    engine.start("order", ORDER, run_id="o1")
    engine.start("looper", {"n": 0}, run_id="l1")
    engine.tick(until_idle=True)
    engine.signal("l1", "go")
    engine.tick(until_idle=True)
    engine.close()
    return made


def events(project: FlowProject, run_id: str) -> list[str]:
    result = project.invoke("history", run_id, "--json")
    return [e["event_key"] for e in result.json()]


def test_query_prints_the_answer(project: FlowProject) -> None:
    before = events(project, "o1")
    result = project.run("query", "o1", "status", "--args", '{"who": "me"}')
    assert (result.code, result.stderr) == (0, "")
    assert json.loads(result.stdout) == {
        "charged": True,
        "shipped": False,
        "address": "1 Old Road",
        "echo": {"who": "me"},
    }
    as_json = project.invoke("query", "o1", "status", "--json")
    assert as_json.json() == {
        "run_id": "o1",
        "query": "status",
        "result": {"charged": True, "shipped": False, "address": "1 Old Road", "echo": None},
    }
    assert events(project, "o1") == before


def test_query_follows_a_continued_run(project: FlowProject) -> None:
    result = project.invoke("query", "l1", "n", "--json")
    assert result.code == 0
    assert result.json()["result"] == 1
    assert "continued as new; acting on its live successor" in result.stderr


@pytest.mark.parametrize(
    ("args", "code", "error"),
    [
        (["query", "nope", "status"], 2, "error: Run 'nope' does not exist."),
        (
            ["query", "o1", "stats"],
            2,
            "error: Run 'o1': its workflow declares no query 'stats'. Declared queries: boom, "
            "sneaky, status, waits.",
        ),
        (["query", "o1", "status", "--args", "{nope"], 2, "error: --args is not valid JSON"),
        (["query", "o1", "boom"], 1, "ValueError: no status today"),
        (["query", "o1", "sneaky"], 1, "ctx.complete(...)"),
        (
            ["update", "o1", "change-address", "--args", '{"street": 1}'],
            1,
            'error: rejected: give {"address": TEXT}',
        ),
        (["update", "o1", "broken"], 1, "update handler talk_workflows.build.<locals>.broken"),
        (
            ["update", "o1", "status"],
            2,
            "Declared updates: broken, change-address, counter, not-json.",
        ),
        (["update", "nope", "counter"], 2, "error: Run 'nope' does not exist."),
    ],
)
def test_bad_requests_write_nothing(
    project: FlowProject, args: list[str], code: int, error: str
) -> None:
    before = events(project, "o1")
    result = project.invoke(*args)
    assert result.code == code, result.stderr
    assert result.stdout == ""
    assert error in result.error_line()
    assert events(project, "o1") == before


def test_update_records_once_per_id(project: FlowProject) -> None:
    command = ["update", "o1", "change-address", "--args", '{"address": "2 New St"}', "--id", "u1"]
    first = project.run(*command)
    assert first.code == 0, first.stderr
    assert json.loads(first.stdout) == {"address": "2 New St"}
    sequence = len(events(project, "o1"))
    assert first.stderr == f"update 'change-address' applied to run o1 (event {sequence}, id u1)\n"
    again = project.run(*command, "--json")
    assert again.code == 0, again.stderr
    assert again.json() == {
        "run_id": "o1",
        "update_id": "u1",
        "result": {"address": "2 New St"},
        "sequence": sequence,
        "duplicate": True,
    }
    other = project.invoke(
        "update", "o1", "change-address", "--args", '{"address": "3"}', "--id", "u1"
    )
    assert other.code == 1
    assert "update id 'u1' was already applied with other args" in other.error_line()
    assert events(project, "o1").count("update_applied") == 1
    shown = project.invoke("show", "o1", "--json").json()
    assert [u["update_id"] for u in shown["updates"]] == ["u1"]
    assert shown["updates"][0]["result"] == {"address": "2 New St"}
    screen = project.invoke("show", "o1").stdout
    assert "updates applied" in screen
    assert "change-address" in screen and '{"address":"2 New St"}' in screen
    line = [e for e in project.invoke("history", "o1").stdout.splitlines() if "update_applied" in e]
    assert len(line) == 1 and "update 'change-address' id u1" in line[0]
    assert project.invoke("query", "o1", "status").json()["address"] == "2 New St"


def test_an_ended_run_refuses_updates(project: FlowProject) -> None:
    project.ok("signal", "o1", "approval", "--payload", "true")
    project.ok("tick", "--until-idle")
    result = project.invoke("update", "o1", "counter")
    assert result.code == 1
    assert "has already ended (Completed); cannot apply update 'counter'" in result.error_line()
    assert project.invoke("query", "o1", "status").json()["shipped"] is True


def test_two_processes_sending_the_same_update_id_record_it_once(project: FlowProject) -> None:
    command = ("update", "o1", "counter", "--id", "same", "--json")
    processes = [project.popen(*command) for _ in range(2)]
    outputs = [p.communicate(timeout=60) for p in processes]
    assert [p.returncode for p in processes] == [0, 0], outputs
    answers = [json.loads(stdout) for stdout, _ in outputs]
    assert sorted(a["duplicate"] for a in answers) == [False, True]
    assert answers[0]["sequence"] == answers[1]["sequence"]
    assert answers[0]["result"] == answers[1]["result"] == {"n": 1}
    assert events(project, "o1").count("update_applied") == 1


def test_args_over_the_payload_limit_are_refused(tmp_path: Path) -> None:
    import talk_workflows

    made = FlowProject(tmp_path, CONFIG + "max_payload_bytes = 2048\n")
    engine = Engine(SQLiteStore(made.db), [talk_workflows.runtime])
    engine.start("order", ORDER, run_id="o1")
    engine.close()
    big = json.dumps({"address": "x" * 4000})
    for verb, name in (("query", "status"), ("update", "change-address")):
        result = made.invoke(verb, "o1", name, "--args", big)
        assert result.code == 2, result.stderr
        assert "max_payload_bytes" in result.error_line()
    assert "update_applied" not in events(made, "o1")


def test_a_run_whose_build_is_not_loaded_is_exit_1(project: FlowProject, tmp_path: Path) -> None:
    (tmp_path / "other").mkdir()
    other = FlowProject(tmp_path / "other", '[flow]\nruntimes = ["cli_workflows:runtime"]\n')
    other.db = project.db
    for verb, name in (("query", "status"), ("update", "counter")):
        result = other.invoke(verb, "o1", name)
        assert result.code == 1, result.stderr
        assert "pinned to build 'talk-1', which is not loaded here" in result.error_line()


def test_replay_check_and_fork_take_the_recorded_answer(project: FlowProject) -> None:
    project.ok("update", "o1", "change-address", "--args", '{"address": "2 New St"}')
    project.ok("signal", "o1", "approval", "--payload", "true")
    project.ok("tick", "--until-idle")
    checked = project.invoke("replay-check", "--all", "--build-id", "talk-2", "--json")
    assert checked.code == 0, checked.stdout + checked.stderr
    forked = project.invoke("fork", "o1", "--id", "o1-copy", "--from-step", "ship", "--json")
    assert forked.code == 0, forked.stderr
    assert "update_applied" in events(project, "o1-copy")
    assert project.invoke("query", "o1-copy", "status").json()["address"] == "2 New St"
    project.ok("tick", "--until-idle")
    result = project.invoke("result", "o1-copy", "--json").json()
    assert result["outcome"]["result"]["address"] == "2 New St"


def test_upgrade_replays_recorded_updates_and_the_new_build_answers(project: FlowProject) -> None:
    project.ok("update", "o1", "change-address", "--args", '{"address": "2 New St"}')
    moved = project.invoke(
        "upgrade", "--from", "talk-1", "--to", "talk-2", "--allow-unhosted", "o1"
    )
    assert moved.code == 0, moved.stdout + moved.stderr
    assert project.invoke("show", "o1", "--json").json()["build_id"] == "talk-2"
    # The recorded answer stays; the next update is answered by talk-2's handler.
    assert project.invoke("query", "o1", "status").json()["address"] == "2 New St"
    again = project.invoke("update", "o1", "change-address", "--args", '{"address": "3 Up"}')
    assert again.code == 0, again.stderr
    assert again.json() == {"address": "3 UP"}
