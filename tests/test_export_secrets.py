"""``flow export`` leaves out what resolves a hook (issue 8, defect 9); replay-check still works.

Before, an export carried the run's seed (from which ``ctx.new_token`` derives hook tokens) and
the tokens of hooks still open: anyone holding the file could resolve them.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_helpers import FlowProject

from flow_cli.engine.export import REDACTED_SEED, SEED, TOKENS, read_export


@pytest.fixture
def project(tmp_path: Path) -> FlowProject:
    project = FlowProject(tmp_path)
    project.setup("start", "callback", "--id", "open")  # token from ctx.new_token (the seed)
    project.setup("start", "callback", "--id", "done")
    project.setup("tick", "--until-idle")
    return project


def _token(project: FlowProject, run_id: str) -> str:
    hooks = project.setup("show", run_id, "--json").json()["hooks"]
    return str(hooks["callback"]["token"])


def _seed(project: FlowProject, run_id: str) -> str:
    return str(project.setup("history", run_id, "--json").json()[0]["data"]["seed"])


def test_an_open_runs_export_leaves_out_seed_and_tokens(project: FlowProject) -> None:
    token, seed = _token(project, "open"), _seed(project, "open")
    text = project.setup("export", "open").stdout
    assert token not in text and seed not in text
    document = json.loads(text)
    assert document["redacted"] == [SEED, TOKENS]
    events = {e["event_key"]: e["data"] for e in document["events"]}
    assert events["run_started"]["seed"] == REDACTED_SEED
    assert events["hook_created"]["token"] == "redacted:callback"


def test_include_secrets_keeps_them(project: FlowProject) -> None:
    token, seed = _token(project, "open"), _seed(project, "open")
    document = project.setup("export", "open", "--include-secrets").json()
    assert document["redacted"] == []
    text = json.dumps(document)
    assert token in text and seed in text


def test_a_finished_runs_export_is_complete(project: FlowProject) -> None:
    token = _token(project, "done")
    project.setup("hook", "resolve", token)
    project.setup("tick", "--until-idle")
    document = project.setup("export", "done").json()
    assert document["redacted"] == []
    assert token in json.dumps(document)


@pytest.mark.parametrize("build", ["cli-1", "cli-1-compatible"])
def test_replay_check_works_on_a_redacted_export(project: FlowProject, build: str) -> None:
    path = project.root / "open.json"
    project.setup("export", "open", "-o", str(path))
    assert read_export(path).redacted == {SEED, TOKENS}
    result = project.run(
        "--db",
        f"sqlite:///{project.root / 'none.db'}",
        "replay-check",
        "--file",
        str(path),
        "--build-id",
        build,
    )
    assert result.code == 0, result.stdout + result.stderr
    assert "1 of 1 history replays cleanly" in result.stdout


def test_a_redacted_export_still_catches_real_divergences(tmp_path: Path) -> None:
    from flow_cli.engine.export import export_document
    from flow_cli.store.sqlite import SQLiteStore

    project = FlowProject(tmp_path)
    project.setup("start", "two-step", "--id", "t")
    project.setup("tick", "--until-idle")
    store = SQLiteStore(project.db)
    history = store.read_history("t")
    store.close()
    unfinished = [e for e in history if e.event.event_key() != "run_completed"]
    path = project.root / "t.json"
    path.write_text(json.dumps(export_document("t", unfinished)), encoding="utf-8")
    assert read_export(path).redacted == {SEED, TOKENS}
    result = project.invoke("replay-check", "--file", str(path), "--build-id", "cli-2")
    assert result.code == 3, result.stdout
