"""``flow replay-check`` and ``flow export``: compatible builds pass, incompatible ones exit 3."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from cli_helpers import FlowProject


@pytest.fixture
def project(tmp_path: Path) -> FlowProject:
    """Three completed runs recorded under build ``cli-1``."""
    project = FlowProject(tmp_path)
    project.invoke("start", "two-step", "--id", "r1", "--input", '{"n": 3}')
    project.invoke("start", "approval", "--id", "a1")
    project.invoke("start", "callback", "--id", "c1", "--input", '{"token": "t"}')
    project.invoke("tick", "--until-idle")
    project.invoke("signal", "a1", "approve")
    project.invoke("hook", "resolve", "t")
    project.invoke("tick", "--until-idle")
    return project


def test_a_compatible_build_replays_every_history(project: FlowProject) -> None:
    result = project.run("replay-check", "--all", "--build-id", "cli-1-compatible")
    assert (result.code, result.stderr) == (0, "")
    assert result.stdout == (
        "replay-check: 3 of 3 histories replay cleanly against build cli-1-compatible\n"
    )
    chosen = project.invoke("replay-check", "r1", "a1", "--build-id", "cli-1")
    assert chosen.stdout == "replay-check: 2 of 2 histories replay cleanly against build cli-1\n"


def test_an_incompatible_build_diverges_with_a_table_and_exit_3(project: FlowProject) -> None:
    result = project.run("replay-check", "--all", "--build-id", "cli-2")
    assert (result.code, result.stderr) == (3, "")
    lines = result.stdout.splitlines()
    header = next(line for line in lines if "identity" in line)
    assert header.split() == ["runs", "identity", "field", "recorded", "produced", "sample", "runs"]
    row = next(line for line in lines if "'first'" in line)
    assert row.split() == ["1", "step", "'first'", "input", '{"n":3}', '{"n":103}', "r1"]
    assert lines[-1] == (
        "replay-check: 1 of 3 histories diverges from build cli-2 (1 distinct divergence)"
    )


def test_replay_check_json_shape(project: FlowProject) -> None:
    result = project.invoke("replay-check", "--all", "--build-id", "cli-2", "--json")
    assert result.code == 3
    document = result.json()
    assert document["ok"] is False
    assert document["build_id"] == "cli-2"
    runs = {run["run_id"]: run for run in document["runs"]}
    assert set(runs) == {"r1", "a1", "c1"}
    assert all(set(run) == {"run_id", "ok", "divergences"} for run in runs.values())
    assert runs["a1"] == {"run_id": "a1", "ok": True, "divergences": []}
    assert runs["r1"]["ok"] is False
    assert runs["r1"]["divergences"] == [
        {
            "sequence": 2,
            "identity": "step 'first'",
            "field": "input",
            "recorded": {"n": 3},
            "produced": {"n": 103},
        }
    ]
    passing = project.invoke("replay-check", "--all", "--build-id", "cli-1", "--json")
    assert passing.code == 0
    assert passing.json()["ok"] is True


def test_exported_files_replay_without_a_database(project: FlowProject) -> None:
    exported = project.root / "r1.json"
    project.invoke("export", "r1", "-o", str(exported))
    elsewhere = project.root / "no-database-here.db"
    args = ("--db", f"sqlite:///{elsewhere}", "replay-check", "--file", str(exported))
    failing = project.run(*args, "--build-id", "cli-2")
    assert (failing.code, failing.stderr) == (3, "")
    assert "step 'first'" in failing.stdout and '{"n":103}' in failing.stdout
    assert failing.stdout.splitlines()[-1] == (
        "replay-check: 1 of 1 history diverges from build cli-2 (1 distinct divergence)"
    )
    passing = project.run(*args, "--build-id", "cli-1-compatible", "--json")
    assert (passing.code, passing.stderr) == (0, "")
    assert passing.json() == {
        "ok": True,
        "build_id": "cli-1-compatible",
        "runs": [{"run_id": "r1", "ok": True, "divergences": []}],
    }
    assert not elsewhere.exists()
    both = project.invoke("replay-check", "a1", "--file", str(exported), "--build-id", "cli-2")
    assert both.code == 3
    assert both.stdout.splitlines()[-1].startswith("replay-check: 1 of 2 histories diverges")


def test_replay_check_usage_errors_are_exit_2(project: FlowProject) -> None:
    cases = [
        (
            ("--build-id", "cli-1"),
            "error: No histories selected: name RUN ids, pass --all, or --file F.",
        ),
        (("r1", "--all", "--build-id", "cli-1"), "error: Name runs or pass --all, not both."),
        (
            ("--all", "--build-id", "cli-9"),
            "error: No runtime with build id 'cli-9' is loaded. "
            "Hosted builds: cli-1, cli-1-compatible, cli-2.",
        ),
    ]
    for args, message in cases:
        result = project.invoke("replay-check", *args)
        assert (result.code, result.stdout) == (2, ""), args
        assert result.error_line() == message


def test_an_unreadable_file_is_exit_2(project: FlowProject) -> None:
    missing = project.root / "missing.json"
    unreadable = project.run("replay-check", "--file", str(missing), "--build-id", "cli-1")
    assert (unreadable.code, unreadable.stdout.splitlines()[-1]) == (
        2,
        "replay-check: 0 of 0 histories replay cleanly against build cli-1; "
        "1 file could not be read",
    )
    assert unreadable.error_line() == (f"error: cannot read {missing}: No such file or directory")
    not_json = project.root / "notes.json"
    not_json.write_text("{oops", encoding="utf-8")
    bad = project.invoke("replay-check", "--file", str(not_json), "--build-id", "cli-1")
    assert bad.code == 2
    assert bad.error_line().startswith(f"error: {not_json} is not JSON")
    other = project.root / "other.json"
    other.write_text(json.dumps({"hello": "world"}), encoding="utf-8")
    wrong = project.invoke("replay-check", "--file", str(other), "--build-id", "cli-1")
    assert wrong.code == 2
    assert "is not a `flow export` file" in wrong.error_line()


def test_replay_check_is_fast_on_hundreds_of_histories(tmp_path: Path) -> None:
    from cli_workflows import runtime

    from flow_cli.engine.engine import Engine

    project = FlowProject(tmp_path)
    count = 300
    with Engine.open(f"sqlite:///{project.db}?synchronous=OFF", [runtime]) as engine:
        for index in range(count):
            engine.start("two-step", {"n": index}, run_id=f"bulk-{index:04d}")
        engine.tick(until_idle=True)
    began = time.monotonic()
    result = project.run("replay-check", "--all", "--build-id", "cli-2", "--json")
    elapsed = time.monotonic() - began
    assert result.code == 3
    runs = result.json()["runs"]
    assert len(runs) == count
    assert all(len(run["divergences"]) == 1 for run in runs)
    assert elapsed < 10, f"replay-check of {count} histories took {elapsed:.1f} s"
