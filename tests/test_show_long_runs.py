"""`flow show` of a long run summarises its steps; --all and --json have every one (issue 7)."""

from __future__ import annotations

from typing import Any

from rich.console import Console

from flow_cli.cli.render import STEP_ROWS, show_view


def _snapshot(completed: int, running: int) -> dict[str, Any]:
    steps = {
        f"s{i}": {
            "name": "inc",
            "state": "completed" if i < completed else "running",
            "attempts": 1,
            "output": i,
            "error": None,
            "scheduled_at": "2026-12-01T09:00:00+00:00",
            "started_at": "2026-12-01T09:00:00+00:00",
            "finished_at": "2026-12-01T09:00:01+00:00" if i < completed else None,
        }
        for i in range(completed + running)
    }
    return {
        "run_id": "long",
        "workflow": "chain",
        "status": "Running",
        "build_id": "b",
        "patches": [],
        "input": None,
        "steps": steps,
        "waits": {},
        "signals": {"waits": {}, "received": []},
        "hooks": {},
        "children": {},
        "progress": {"steps_total": len(steps), "steps_completed": completed, "events": 1},
    }


def _render(snap: dict[str, Any], **options: bool) -> str:
    console = Console(width=160, record=True, color_system=None)
    console.print(show_view(snap, None, {}, **options))
    return console.export_text()


def _rows(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.strip().startswith("s") and " inc " in line]


def test_a_long_step_list_is_summarised_with_the_open_steps_kept() -> None:
    text = _render(_snapshot(2000, 1))
    rows = _rows(text)
    assert len(rows) <= STEP_ROWS
    assert any(row.strip().startswith("s2000 ") and "running" in row for row in rows)
    assert any(row.strip().startswith("s1999 ") for row in rows)  # the latest completed
    assert not any(row.strip().startswith("s0 ") for row in rows)
    assert "earlier completed steps not shown" in text
    assert "--all" in text


def test_all_lists_every_step_and_a_short_list_is_not_summarised() -> None:
    assert len(_rows(_render(_snapshot(200, 1), all_steps=True))) == 201
    short = _render(_snapshot(10, 1))
    assert len(_rows(short)) == 11
    assert "not shown" not in short
