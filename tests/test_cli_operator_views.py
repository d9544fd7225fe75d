"""What operators see and are told, through the real ``flow`` command on SQLite and PostgreSQL:
a hook token named with another run, a cancelled child in its parent's view, ..."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from cli_helpers import FlowProject
from triage_helpers import TriageProject, project_for

CONFIG = """\
[flow]
database = "{database}"
build_id = "ops-1"
runtimes = ["operator_workflows:runtime"]
"""


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def proj(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[TriageProject]:
    for project in project_for(request.param, tmp_path):
        project.config.write_text(CONFIG.format(database=project.database), encoding="utf-8")
        yield project


def test_a_token_named_with_another_run_says_whose_it_is(proj: TriageProject) -> None:
    proj.setup("start", "callback", "--id", "a")
    proj.setup("start", "callback", "--id", "b")
    proj.setup("tick", "--until-idle")

    result = proj.invoke("hook", "resolve", "token-a", "--run", "b", "--payload", "1")

    assert (result.code, result.stdout) == (2, "")
    assert "belongs to run 'a', not to run 'b'" in result.error_line()
    assert proj.invoke("hook", "resolve", "token-a", "--run", "a").code == 0


def test_a_cancelled_child_shows_its_own_status_in_its_parents_view(
    proj: TriageProject,
) -> None:
    proj.setup("start", "guardian", "--id", "p")
    proj.setup("tick", "--until-idle")
    proj.setup("terminate", "p", "--reason", "called off")
    proj.setup("tick", "--until-idle")
    assert proj.setup("show", "p/kid", "--json").json()["status"] == "Cancelled"

    shown = proj.invoke("show", "p")

    [row] = [line for line in shown.stdout.splitlines() if "p/kid" in line]
    assert "Cancelled" in row and "CancelRequested" not in row


def test_builds_lists_a_loaded_build_that_nothing_runs_or_hosts(tmp_path: Path) -> None:
    project = FlowProject(tmp_path)  # cli-1 (flow.toml's build_id), cli-1-compatible, cli-2
    project.setup("start", "two-step", "--id", "r")

    rows = project.ok("builds", "--json").json()

    assert [row["build_id"] for row in rows] == ["cli-1", "cli-1-compatible", "cli-2"]
    assert rows[2]["workers"] == [] and rows[2]["retirable"] is True
    broken = tmp_path / "broken.toml"
    broken.write_text(
        project.config.read_text(encoding="utf-8").replace("cli_workflows:", "no_such_module:"),
        encoding="utf-8",
    )
    elsewhere = project.run("--config", str(broken), "builds", "--json")
    assert elsewhere.code == 0, elsewhere.stderr
    assert [row["build_id"] for row in elsewhere.json()] == ["cli-1"]
    assert elsewhere.stderr.startswith("warning: builds of flow.toml's runtimes not listed")


def _many_runs(proj: TriageProject, waiting: int) -> None:
    lines = [
        json.dumps({"run_id": f"cb-{n:03d}", "workflow": "callback", "input": None})
        for n in range(waiting)
    ]
    lines.append(json.dumps({"run_id": "bad", "workflow": "broken", "input": None}))
    lines.append(
        json.dumps({"run_id": "lost", "workflow": "order", "input": {"to": "Mars", "fail": True}})
    )
    proj.setup("start", "--from-jsonl", "-", stdin="\n".join(lines) + "\n")
    proj.setup("tick", "--until-idle")


def test_runs_tables_stop_at_50_rows_and_give_the_reason(proj: TriageProject) -> None:
    _many_runs(proj, 53)  # 55 runs

    table = proj.invoke("runs")

    ids = ("cb-", "bad", "lost")
    rows = [line for line in table.stdout.split("\n") if line.lstrip().startswith(ids)]
    assert len(rows) == 50
    assert table.stdout.rstrip().splitlines()[-1] == (
        "50 of 55 matching runs shown, newest first; --limit N shows more, --limit 0 all, "
        "--after cb-005 the next page"
    )
    assert len(proj.invoke("runs", "--json").json()) == 55  # data is never cut silently
    assert sum(1 for _ in proj.invoke("runs", "--jsonl").stdout.splitlines()) == 55
    everything = proj.invoke("runs", "--limit", "0").stdout
    assert everything.rstrip().endswith("55 runs") and "cb-000" in everything
    assert proj.invoke("runs", "--limit", "3").stdout.rstrip().endswith("3 runs")

    failed = {
        line.split()[0]: line
        for line in proj.invoke("runs", "--status", "Failed,Pending").stdout.splitlines()
        if line.strip()
    }
    assert "reason" in failed["run"]
    assert "ShippingFailed: no carrier for Mars (step 'ship'" in failed["lost"]
    assert "⚠ KeyError: 'missing'" in failed["bad"]
    data = {r["run_id"]: r for r in proj.invoke("runs", "--json").json()}
    assert data["bad"]["error_type"] == "KeyError"
    assert data["bad"]["reason"] == "KeyError: 'missing'"
    assert data["lost"]["error_type"] == "ShippingFailed"  # the step's error: the cause
    assert data["cb-000"]["error_type"] is None and data["cb-000"]["reason"] is None


def test_error_type_filters_and_counts(proj: TriageProject) -> None:
    _many_runs(proj, 2)

    keyerrors = proj.invoke("runs", "--error-type", "KeyError", "--json").json()
    assert [r["run_id"] for r in keyerrors] == ["bad"]
    counted = proj.invoke("count", "--by", "error_type", "--json").json()
    assert counted == {
        "total": 4,
        "groups": {"(none)": 2, "KeyError": 1, "ShippingFailed": 1},
    }
    assert "ShippingFailed" in proj.invoke("count", "--by", "error_type").stdout
    dry = proj.invoke("terminate", "--error-type", "KeyError", "--dry-run")
    assert dry.stdout.split() == ["bad", "broken", "Pending"]


def test_counts_and_types_read_as_english(proj: TriageProject) -> None:
    proj.setup("start", "broken", "--id", "bad")
    assert ", 1 decision failure" in proj.invoke("tick", "--until-idle").stdout
    assert "1 decision failures" not in proj.invoke("tick").stdout
    proj.config.write_text(
        CONFIG.format(database=proj.database).replace(
            "operator_workflows:runtime", "operator_workflows:NOT_A_RUNTIME"
        ),
        encoding="utf-8",
    )
    wrong = proj.invoke("tick")
    assert wrong.code == 2
    assert "runtime 'operator_workflows:NOT_A_RUNTIME' is an int, not" in wrong.error_line()


def test_export_all_writes_every_run(proj: TriageProject, tmp_path: Path) -> None:
    proj.setup("start", "callback", "--id", "a")
    proj.setup("start", "callback", "--id", "b")
    target = tmp_path / "exported"

    unconfirmed = proj.invoke("export", "--all", "-o", str(target))
    assert unconfirmed.code == 2 and "--yes" in unconfirmed.error_line()
    done = proj.invoke("export", "--all", "-o", str(target), "--yes")

    assert done.code == 0, done.stderr
    assert sorted(p.name for p in target.iterdir()) == ["a.json", "b.json"]
    both = proj.invoke("export", "a", "--all", "-o", str(target))
    assert both.code == 2 and "--all selects every run" in both.error_line()


AMBIGUOUS = """\
[flow]
database = "sqlite:///flow.db"
runtimes = ["cli_workflows:runtime", "cli_workflows:compatible"]
"""


def test_start_never_guesses_the_build(tmp_path: Path) -> None:
    project = FlowProject(tmp_path, AMBIGUOUS)  # both builds define every workflow

    guessed = project.run("start", "two-step", "--id", "r")

    assert (guessed.code, guessed.stdout) == (2, "")
    line = guessed.error_line()
    assert "defined by builds cli-1, cli-1-compatible" in line and "--build-id" in line
    assert not project.db.exists()  # refused before the database is touched
    chosen = project.ok("start", "two-step", "--id", "r", "--build-id", "cli-1-compatible")
    assert chosen.stdout == "r\n"
    assert project.ok("runs", "--json").json()[0]["build_id"] == "cli-1-compatible"
    project.config.write_text(
        AMBIGUOUS.replace("[flow]\n", '[flow]\nbuild_id = "cli-1"\n'), encoding="utf-8"
    )
    project.ok("start", "two-step", "--id", "d")
    assert project.ok("show", "d", "--json").json()["build_id"] == "cli-1"


def test_piped_tables_have_no_padding_or_framing_blank_lines(proj: TriageProject) -> None:
    _many_runs(proj, 2)
    for args in (
        ("runs",),
        ("count", "--by", "status"),
        ("show", "lost"),
        ("history", "lost"),
        ("hook", "list"),
        ("doctor",),
        ("builds",),
    ):
        printed = proj.run(*args).stdout
        lines = printed.split("\n")
        assert printed.endswith("\n") and lines[-1] == "", args
        assert lines[0].strip() and lines[-2].strip(), (args, printed)
        assert not [line for line in lines if line != line.rstrip()], (args, printed)
        assert not [line for line in lines if line and not line.strip()], (args, printed)


def test_completion_show_and_install(tmp_path: Path) -> None:
    project = FlowProject(tmp_path)
    env = {"XDG_DATA_HOME": str(tmp_path / "data"), "XDG_CONFIG_HOME": str(tmp_path / "conf")}

    shown = project.run("completion", "show", "bash", env=env)
    assert shown.code == 0 and "_FLOW_COMPLETE=complete_bash" in shown.stdout
    installed = project.run("completion", "install", "fish", env=env)
    assert installed.code == 0, installed.stderr
    fish = tmp_path / "conf" / "fish" / "completions" / "flow.fish"
    assert fish.read_text(encoding="utf-8") == project.run("completion", "show", "fish").stdout
    bash = project.run("completion", "install", "bash", env=env)
    assert f"to {tmp_path / 'data' / 'bash-completion' / 'completions' / 'flow'}" in bash.stdout
    zsh = project.run("completion", "install", "zsh", "--path", str(tmp_path / "z" / "_flow"))
    assert zsh.code == 0 and (tmp_path / "z" / "_flow").exists()
    assert f"fpath=({tmp_path / 'z'} $fpath)" in zsh.stderr
    unknown = project.run("completion", "show", env={**env, "SHELL": "/bin/tcsh"})
    assert unknown.code == 2 and "flow completion install bash|zsh|fish" in unknown.error_line()
