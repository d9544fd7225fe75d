"""``flow signal``, ``hook resolve``, ``cancel`` and ``show`` given a run that continued as new
act on its live successor and say so on stderr."""

from __future__ import annotations

from pathlib import Path

import pytest
from cli_helpers import FlowProject

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
