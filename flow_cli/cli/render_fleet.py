"""Rich tables of the fleet commands: ``workers``, ``doctor``, ``builds``, ``upgrade``."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from rich import box
from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from flow_cli.cli.io import short_json, short_text
from flow_cli.cli.render import when


def _table(title: str | None = None) -> Table:
    return Table(title=title, title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False)


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def workers_table(rows: Sequence[Mapping[str, Any]]) -> RenderableType:
    """``flow workers``: one row per registered process, live ones first."""
    table = _table()
    table.add_column("worker id", overflow="fold")
    table.add_column("host", overflow="fold")
    table.add_column("pid", justify="right")
    table.add_column("builds", overflow="fold")
    table.add_column("started", no_wrap=True)
    table.add_column("heartbeat", no_wrap=True)
    table.add_column("state", no_wrap=True)
    for row in rows:
        live = bool(row["live"])
        table.add_row(
            Text(str(row["worker_id"])),
            Text(str(row["host"])),
            str(row["pid"]),
            Text(", ".join(row["builds"])),
            when(row["started_at"]),
            when(row["heartbeat_at"]),
            Text("live", style="green") if live else Text("gone", style="dim"),
        )
    live_count = sum(1 for row in rows if row["live"])
    summary = f"{_count(len(rows), 'worker')}, {live_count} live"
    return Group(table, Text(summary, style="dim"))


def since_text(value: datetime | str | None) -> str:
    return when(value) if value is not None else "-"


__all__ = ["short_json", "short_text", "since_text", "workers_table"]
