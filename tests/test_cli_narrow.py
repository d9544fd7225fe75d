"""Tables on narrow terminals: an identifier is never split, a value never cropped.

Rich folds a cell mid-word and crops cells that do not wrap when a table is wider than the
terminal; ``FittedTable`` prints one block a row instead where an id or an unwrapped value would
not be whole. Checked through the real command line at several widths, and on the table itself.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from cli_helpers import FlowProject
from rich.console import Console
from rich.text import Text

from flow_cli.cli.render import _table

ERROR_WORDS = ["ValueError:", "boom", "[red]not", "markup[/red]"]


@pytest.fixture
def project(tmp_path: Path) -> FlowProject:
    project = FlowProject(tmp_path)
    project.setup("start", "callback", "--id", "callback-run-with-a-long-id-2026-12-04")
    project.setup("start", "broken", "--id", "broken-run-2026-12-04")
    project.setup("tick", "--until-idle")
    return project


def _token(project: FlowProject) -> str:
    (hook,) = project.setup("hook", "list", "--json").json()
    return str(hook["token"])


@pytest.mark.parametrize("columns", ["200", "100", "80", "60", "50"])
def test_hook_list_shows_the_token_whole_at_every_width(project: FlowProject, columns: str) -> None:
    result = project.run("hook", "list", env={"COLUMNS": columns})
    assert (result.code, result.stderr) == (0, "")
    lines = result.stdout.splitlines()
    assert any(_token(project) in line for line in lines)
    assert any("callback-run-with-a-long-id-2026-12-04" in line for line in lines)
    assert "…" not in result.stdout


@pytest.mark.parametrize("columns", ["200", "100", "80", "60"])
def test_doctor_loses_no_word_of_a_failing_decision_at_any_width(
    project: FlowProject, columns: str
) -> None:
    result = project.run("doctor", env={"COLUMNS": columns})
    assert result.code == 1, result.stderr  # a run is stuck on its failing decision
    words = result.stdout.split()
    assert "broken-run-2026-12-04" in words
    for word in ERROR_WORDS:
        # A long word may fold over two lines, never lose a letter.
        assert word in words or word in "".join(result.stdout.split()), (word, result.stdout)
    assert "…" not in result.stdout


def test_show_counts_one_open_wait_in_the_singular(tmp_path: Path) -> None:
    project = FlowProject(tmp_path)
    project.setup("start", "sleepy", "--id", "nap")
    project.setup("tick", "--until-idle")
    shown = project.ok("show", "nap").stdout
    assert "1 wait open" in shown and "1 waits open" not in shown


def _rendered(table: object, width: int) -> str:
    console = Console(width=width, record=True, color_system=None)
    console.print(table)
    return console.export_text()


@pytest.mark.parametrize("width", [48, 60, 75, 90, 120, 200])
def test_a_fitted_table_keeps_every_id_and_unwrapped_value_whole(width: int) -> None:
    # Down to the width of the longest id beside its header ("detail" and two spaces): below
    # that, no layout can show it on one line.
    table = _table()
    table.add_id_column("run")
    table.add_column("since", no_wrap=True)
    table.add_column("detail", overflow="fold")
    ids = ["order-2026-12-04-0001", "order-2026-12-04-0002-with-a-longer-id"]
    for run_id in ids:
        table.add_row(Text(run_id), "2026-12-04 09:00:00Z", Text(" ".join(ERROR_WORDS)))
    text = _rendered(table, width)
    lines = text.splitlines()
    for run_id in ids:
        assert any(run_id in line for line in lines), text
    assert sum("2026-12-04 09:00:00Z" in line for line in lines) == 2, text
    assert "…" not in text
    for word in ERROR_WORDS:
        assert "".join(text.split()).count(word) == 2, text
