"""Rich views of ``flow schedule list`` and ``flow schedule show``."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from rich import box
from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from flow_cli.cli.io import short_json
from flow_cli.cli.render import when
from flow_cli.model.names import escape_controls


def _timing(row: Mapping[str, Any]) -> str:
    if row["cron"] is not None:
        zone = row["timezone"]
        return f"cron {row['cron']}" + ("" if zone == "UTC" else f" ({zone})")
    return f"every {row['every']}"


def schedules_table(rows: Sequence[Mapping[str, Any]]) -> RenderableType:
    """One line per schedule: what it starts, when, and how it went (overlap: ``show``)."""
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False)
    table.add_column("schedule", no_wrap=True)
    table.add_column("workflow", no_wrap=True)
    table.add_column("when", overflow="fold")
    table.add_column("zone", no_wrap=True)
    table.add_column("next fire", no_wrap=True)
    table.add_column("skipped/missed", justify="right", no_wrap=True)
    for row in rows:
        times = row["next_fire_times"]
        when_text = row["cron"] if row["cron"] is not None else f"every {row['every']}"
        table.add_row(
            Text(escape_controls(row["schedule_id"])),
            Text(escape_controls(row["workflow"])),
            Text(escape_controls(when_text)),
            Text(escape_controls(row["timezone"])),
            Text("paused", style="yellow") if row["paused"] else when(times[0] if times else None),
            f"{row['skipped']}/{row['missed']}",
        )
    noun = "schedule" if len(rows) == 1 else "schedules"
    paused = sum(1 for row in rows if row["paused"])
    return Group(table, Text(f"{len(rows)} {noun}, {paused} paused", style="dim"))


def schedule_view(row: Mapping[str, Any]) -> RenderableType:
    """``flow schedule show``: the definition, the next fire times, the recent runs."""
    lines = Table.grid(padding=(0, 2))
    lines.add_column(style="bold", no_wrap=True)
    lines.add_column(overflow="fold")
    state = "paused" if row["paused"] else "active"
    if row["note"]:
        state += f" ({row['note']})"
    for label, value in (
        ("schedule", row["schedule_id"]),
        ("workflow", row["workflow"]),
        ("when", _timing(row)),
        ("input", short_json(row["input"])),
        ("overlap", row["overlap"]),
        ("catch-up", row["catchup_window"]),
        ("jitter", row["jitter"]),
        ("state", state),
        ("skipped", str(row["skipped"])),
        ("missed", str(row["missed"])),
    ):
        lines.add_row(label, Text(escape_controls(str(value))))
    if row["start_at"] or row["end_at"]:
        lines.add_row("between", f"{when(row['start_at'])} .. {when(row['end_at'])}")
    lines.add_row("next fires", "\n".join(when(t) for t in row["next_fire_times"]) or "-")
    parts: list[RenderableType] = [lines]
    recent = row.get("recent")
    if recent:
        table = Table(
            title="recent runs", title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False
        )
        table.add_column("scheduled at", no_wrap=True)
        table.add_column("run", overflow="fold")
        table.add_column("status", no_wrap=True)
        for run in recent:
            table.add_row(
                when(run["scheduled_at"]),
                Text(escape_controls(run["run_id"])),
                run["status"] or "(gone)",
            )
        parts.append(table)
    return Group(*parts)
