"""``flow limits`` end to end (DESIGN §6.4): the JSON shape, overrides and their undoing, and
bad input (exit 2, one line saying what is right, nothing written)."""

from __future__ import annotations

import sqlite3

import pytest
from cli_helpers import FlowProject, Result

CONFIG = """\
[flow]
database = "sqlite:///flow.db"
runtimes = ["limit_workflows:runtime"]
"""


@pytest.fixture
def project(tmp_path):  # type: ignore[no-untyped-def]
    found = FlowProject(tmp_path, CONFIG)
    assert found.invoke("start", "pay", "--input", "1").code == 0
    assert found.invoke("tick").code == 0  # a worker's first lease declares the code's limits
    return found


def _ok(project: FlowProject, *args: str) -> Result:
    result = project.invoke(*args)
    assert result.code == 0, result.stderr
    return result


def _overrides(project: FlowProject) -> list[tuple[str, str, int]]:
    with sqlite3.connect(project.db) as conn:
        return conn.execute(
            "SELECT kind, name, overridden FROM limits ORDER BY kind, name"
        ).fetchall()


def test_list_set_and_unset(project: FlowProject) -> None:
    listed = _ok(project, "limits", "--json").json()
    assert listed == [
        {"target": "step:charge", "concurrency": 3, "rate": None, "in_use": 0, "waiting": 0,
         "source": "code"},
        {"target": "step:ping", "concurrency": None, "rate": "20/1s", "in_use": 0, "waiting": 0,
         "source": "code"},
        {"target": "step:solo", "concurrency": 1, "rate": None, "in_use": 0, "waiting": 0,
         "source": "code"},
        {"target": "workflow:batch", "concurrency": 2, "rate": None, "in_use": 0, "waiting": 0,
         "source": "code"},
        {"target": "workflow:sync", "concurrency": 1, "rate": None, "in_use": 0, "waiting": 0,
         "source": "code"},
    ]  # fmt: skip
    assert _ok(project, "limits", "set", "step:plain", "--rate", "10/1s").stdout == (
        "step:plain: override set\n"
    )
    _ok(project, "limits", "set", "step:charge", "--concurrency", "2")
    listed = {row["target"]: row for row in _ok(project, "limits", "--json").json()}
    assert listed["step:plain"]["rate"] == "10/1s"
    assert (listed["step:charge"]["concurrency"], listed["step:charge"]["source"]) == (
        2,
        "override",
    )
    table = _ok(project, "limits").stdout
    assert "step:charge" in table and "override" in table and "6 limits in effect" in table
    _ok(project, "limits", "unset", "step:plain")
    _ok(project, "limits", "unset", "step:charge")
    assert {row["source"] for row in _ok(project, "limits", "--json").json()} == {"code"}


@pytest.mark.parametrize(
    ("args", "right"),
    [
        (["set", "charge", "--concurrency", "2"], "step:chargeCard or workflow:sync"),
        (["set", "queue:charge", "--concurrency", "2"], "step:chargeCard or workflow:sync"),
        (["set", "step:nobody", "--concurrency", "2"], "no worker declared 'step:nobody'"),
        (["unset", "workflow:nobody"], "no worker declared 'workflow:nobody'"),
        (["set", "step:charge", "--concurrency", "0"], "--concurrency 2 (at least 1)"),
        (["set", "step:charge", "--rate", "10/1d"], "--rate 100/1m (forms: 20/1s"),
        (["set", "step:charge", "--rate", "fast"], "--rate 100/1m (forms: 20/1s"),
        (["set", "step:charge"], "give --concurrency and/or --rate"),
    ],
)
def test_bad_input_is_exit_2_and_writes_nothing(
    project: FlowProject, args: list[str], right: str
) -> None:
    before = _overrides(project)
    result = project.invoke("limits", *args)
    assert result.code == 2
    assert right in result.error_line()
    assert _overrides(project) == before
