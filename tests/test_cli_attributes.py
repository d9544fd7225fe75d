"""Search attributes on the command line (DESIGN §6.5): ``flow start --attr``, ``--attr`` on
the FILTERS commands (runs, count, a bulk verb), ``count --by attr:KEY``, ``"attributes"`` in
``show --json`` and ``runs --json``, and bad input (exit 2, one line, nothing written)."""

from __future__ import annotations

from pathlib import Path

import pytest
from cli_helpers import FlowProject


@pytest.fixture
def proj(tmp_path: Path) -> FlowProject:
    project = FlowProject(tmp_path)
    for run_id, attrs in (
        ("o1", ["customer=acme", "n=5", "vip=true"]),
        ("o2", ["customer=acme", 'n="5"']),
        ("o3", ["customer=globex", "n=5"]),
        ("o4", []),
    ):
        args = [f"--attr={a}" for a in attrs]
        project.setup("start", "approval", "--id", run_id, *args)
    project.setup("tick", "--until-idle")
    return project


def listed(proj: FlowProject, *args: str) -> list[str]:
    return [r["run_id"] for r in proj.setup("runs", "--json", *args).json()]


def test_start_attr_lands_in_the_index_and_show(proj: FlowProject) -> None:
    [o1] = [r for r in proj.setup("runs", "--json").json() if r["run_id"] == "o1"]
    assert o1["attributes"] == {"customer": "acme", "n": 5, "vip": True}
    shown = proj.setup("show", "o2", "--json").json()
    assert shown["attributes"] == {"customer": "acme", "n": "5"}
    assert proj.setup("show", "o4", "--json").json()["attributes"] == {}
    text = proj.setup("show", "o1").stdout
    assert "attributes  customer=acme n=5 vip=true" in text


def test_attr_filters_are_typed_and_anded(proj: FlowProject) -> None:
    assert listed(proj, "--attr", "customer=acme") == ["o2", "o1"]
    assert listed(proj, "--attr", "n=5") == ["o3", "o1"]  # the number, not the text "5"
    assert listed(proj, "--attr", 'n="5"') == ["o2"]
    assert listed(proj, "--attr", "customer=acme", "--attr", "n=5") == ["o1"]
    assert listed(proj, "--attr", "customer=acme", "--attr", "vip=false") == []
    assert listed(proj, "--attr", "customer=acme", "--status", "Suspended") == ["o2", "o1"]
    table = proj.setup("runs", "--attr", "customer=globex").stdout
    assert "o3" in table and "o1" not in table


def test_count_with_attr_filters_and_by_attribute(proj: FlowProject) -> None:
    counted = proj.setup("count", "--attr", "customer=acme", "--attr", "vip=true", "--json")
    assert counted.json() == {"total": 1, "groups": {}}
    by = proj.setup("count", "--by", "attr:customer", "--json").json()
    assert by == {"total": 4, "groups": {"(none)": 1, "acme": 2, "globex": 1}}
    table = proj.setup("count", "--by", "attr:customer").stdout
    assert "acme" in table and "4 in total" in table


def test_a_bulk_verb_acts_on_the_runs_matching_every_attr(proj: FlowProject) -> None:
    done = proj.invoke(
        "cancel", "--attr", "customer=acme", "--attr", "n=5", "--reason", "x", "--json"
    )
    assert done.code == 0, done.stderr
    assert [r["run_id"] for r in done.json()] == ["o1"]
    statuses = {r["run_id"]: r["status"] for r in proj.setup("runs", "--json").json()}
    assert statuses["o1"] == "Cancelling"
    assert {statuses["o2"], statuses["o3"], statuses["o4"]} == {"Suspended"}


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (("runs", "--attr", "customer"), "write KEY=VALUE"),
        (("runs", "--attr", "=acme"), "key before '=' is empty"),
        (("count", "--attr", "novalue"), "write KEY=VALUE"),
        (("count", "--by", "attr:"), "needs a KEY"),
        (("count", "--by", "colour"), "attr:KEY"),
        (("cancel", "--attr", "x", "--yes"), "write KEY=VALUE"),
    ],
)
def test_bad_attr_input_is_a_usage_error(
    proj: FlowProject, args: tuple[str, ...], said: str
) -> None:
    result = proj.invoke(*args)
    assert result.code == 2, result.stderr
    assert said in result.error_line()


@pytest.mark.parametrize("attr", ["novalue", "=v", f"{'k' * 101}=v"])
def test_start_with_a_bad_attr_writes_nothing(proj: FlowProject, attr: str) -> None:
    before = proj.dump()
    result = proj.invoke("start", "approval", "--id", "bad", "--attr", attr)
    assert result.code == 2
    assert "--attr" in result.error_line()
    assert proj.dump() == before


def test_start_from_jsonl_takes_attributes_per_line(tmp_path: Path) -> None:
    project = FlowProject(tmp_path)
    lines = (
        '{"run_id": "j1", "workflow": "approval", "attributes": {"customer": "acme"}}\n'
        '{"run_id": "j2", "workflow": "approval", "attributes": {"customer": ["no"]}}\n'
        '{"run_id": "j3", "workflow": "approval"}\n'
    )
    done = project.invoke("start", "--from-jsonl", "-", "--json", stdin=lines)
    assert done.code == 1  # one line failed
    results = {r["run_id"]: r["result"] for r in done.json()}
    assert results == {"j1": "done", "j2": "failed", "j3": "done"}
    assert listed(project, "--attr", "customer=acme") == ["j1"]
