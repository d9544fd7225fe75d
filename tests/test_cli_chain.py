"""``flow signal``, ``hook resolve``, ``cancel`` and ``show`` given a run that continued as new
act on its live successor and say so on stderr."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from cli_helpers import FlowProject
from triage_helpers import TriageProject, project_for

from flow_cli.engine.engine import Engine
from flow_cli.model.clock import ManualClock
from flow_cli.ops.chain import chain_from, live_run
from flow_cli.store.protocol import EventStore

CONFIG = """\
[flow]
database = "sqlite:///flow.db"
runtimes = ["cli_chain_workflows:runtime"]
"""


@pytest.fixture
def project(tmp_path: Path) -> FlowProject:
    return FlowProject(tmp_path, CONFIG)


def test_cli_verbs_follow_the_chain_to_the_live_run(project: FlowProject) -> None:
    project.setup("start", "relay", "--id", "relay", "--input", '{"generation": 0}')
    project.setup("tick", "--until-idle")

    shown = project.ok("show", "relay", "--json")
    assert shown.json()["run_id"] == "relay~2"
    assert "run 'relay' continued as new 2 times; showing its live successor 'relay~2'" in (
        shown.stderr
    )
    itself = project.ok("show", "relay", "--no-follow", "--json")
    assert itself.json()["run_id"] == "relay" and itself.stderr == ""

    resolved = project.ok("hook", "resolve", "ack-relay", "--run", "relay", "--payload", "1")
    assert "acting on its live successor 'relay~2'" in resolved.stderr
    project.setup("tick", "--until-idle")

    signalled = project.ok("signal", "relay~1", "go", "--payload", '"now"')
    assert "run 'relay~1' continued as new; acting on its live successor 'relay~2'" in (
        signalled.stderr
    )
    assert "delivered to run relay~2" in signalled.stdout
    project.setup("tick", "--until-idle")
    outcome = project.setup("show", "relay~2", "--json").json()["outcome"]
    assert outcome == {"kind": "Completed", "result": {"go": "now", "ack": 1, "first": "relay"}}


def test_cancel_follows_the_chain(project: FlowProject) -> None:
    project.setup("start", "relay", "--id", "relay", "--input", '{"generation": 0}')
    project.setup("tick", "--until-idle")

    cancelled = project.ok("cancel", "relay")

    assert "acting on its live successor 'relay~2'" in cancelled.stderr
    assert "cancellation of run relay~2 requested" in cancelled.stdout
    project.setup("tick", "--until-idle")
    assert project.setup("show", "relay~2", "--json").json()["status"] == "Cancelled"


def test_chain_from_on_every_store(store: EventStore, clock: ManualClock) -> None:
    from cli_chain_workflows import runtime

    engine = Engine(store, [runtime], clock=clock)
    engine.start("relay", {"generation": 0}, run_id="r")
    engine.tick(until_idle=True)
    assert chain_from(engine, "r") == ["r", "r~1", "r~2"]
    assert live_run(engine, "r~2") == "r~2"


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def chain_proj(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[TriageProject]:
    for proj in project_for(request.param, tmp_path):
        proj.config.write_text(
            CONFIG.replace('"sqlite:///flow.db"', f'"{proj.database}"'), encoding="utf-8"
        )
        yield proj


def test_terminate_follows_the_chain(chain_proj: TriageProject) -> None:
    chain_proj.setup("start", "relay", "--id", "relay", "--input", '{"generation": 0}')
    chain_proj.setup("tick", "--until-idle")

    terminated = chain_proj.run("terminate", "relay", "--reason", "stop the chain")

    assert (terminated.code, terminated.stdout) == (0, "relay~2\tdone\tterminated\n")
    assert "run 'relay' continued as new 2 times; acting on its live successor 'relay~2'" in (
        terminated.stderr
    )
    shown = chain_proj.setup("show", "relay~2", "--json").json()
    assert shown["status"] == "Cancelled" and shown["outcome"]["forced"] is True


def test_bulk_verbs_naming_runs_of_one_chain_act_once_on_the_live_run(
    chain_proj: TriageProject,
) -> None:
    chain_proj.setup("start", "relay", "--id", "relay", "--input", '{"generation": 0}')
    chain_proj.setup("tick", "--until-idle")

    signalled = chain_proj.invoke("signal", "-", "go", "--payload", '"x"', stdin="relay\nrelay~1\n")
    assert (signalled.code, signalled.stdout) == (0, "relay~2\tdone\tsignal 'go' delivered\n")
    cancelled = chain_proj.invoke("cancel", "relay", "relay~1", "nope")
    assert cancelled.code == 1
    lines = cancelled.stdout.splitlines()
    assert lines[0] == "relay~2\tdone\tcancellation requested"
    assert lines[1].startswith("nope\tfailed\t") and len(lines) == 2


def test_a_dry_run_naming_a_continued_run_names_its_live_successor(
    chain_proj: TriageProject,
) -> None:
    chain_proj.setup("start", "relay", "--id", "relay", "--input", '{"generation": 0}')
    chain_proj.setup("tick", "--until-idle")
    for verb in (("cancel", "relay"), ("signal", "relay", "go")):
        dry = chain_proj.invoke(*verb, "--dry-run")
        assert dry.code == 0, dry.stderr
        assert dry.stdout.split("\t")[0] == "relay~2", (verb, dry.stdout)
        assert "following" in dry.stderr or "relay~2" in dry.stderr, dry.stderr
    exported = chain_proj.invoke("export", "relay", "--dry-run")
    assert exported.stdout.split("\t")[0] == "relay"  # an export reads the run named


def test_history_follow_goes_into_successors_and_reports_the_chains_outcome(
    chain_proj: TriageProject,
) -> None:
    chain_proj.setup("start", "doomed", "--id", "doomed", "--input", '{"generation": 0}')
    chain_proj.setup("tick", "--until-idle")
    assert chain_proj.run("result", "doomed").code == 4

    followed = chain_proj.run("history", "doomed", "--follow", "--exit-status", "--json")

    assert followed.code == 4, followed.stderr
    lines = [json.loads(line) for line in followed.stdout.splitlines()]
    assert [(e["run_id"], e["event_key"]) for e in lines] == [
        ("doomed", "run_started"),
        ("doomed", "run_continued_as_new"),
        ("doomed~1", "run_started"),
        ("doomed~1", "run_failed"),
    ]
    assert "run 'doomed' continued as new; following its successor 'doomed~1'" in (followed.stderr)
    assert "run doomed~1 ended Failed" in followed.stderr
    text = chain_proj.run("history", "doomed", "--follow")
    assert text.code == 0 and "run_failed" in text.stdout.splitlines()[-1]
