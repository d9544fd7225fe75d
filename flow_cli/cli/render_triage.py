"""Rich output of the triage and repair commands (count, hook list, bulk results, progress)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import TYPE_CHECKING

from rich.console import Group, RenderableType
from rich.text import Text

from flow_cli.cli.io import short_json
from flow_cli.cli.render import _table, console, status_text
from flow_cli.model.names import escape_controls

if TYPE_CHECKING:
    from flow_cli.store.protocol import HookListing, RunCount

__all__ = ["age", "console", "count_table", "hooks_table"]


def age(since: datetime | None, now: datetime) -> str:
    """``45s``, ``12m``, ``3h``, ``2d``: how long ago."""
    if since is None:
        return "-"
    seconds = max((now - since).total_seconds(), 0)
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{int(seconds // size)}{unit}"
    return f"{int(seconds)}s"


def count_table(counted: RunCount, by: str | None) -> RenderableType:
    if by is None:
        return Text(f"{counted.total}")
    table = _table()
    table.add_column(by.replace("_", " "), overflow="fold")
    table.add_column("runs", justify="right", no_wrap=True)
    for key, n in counted.groups.items():
        table.add_row(status_text(key) if by == "status" else Text(escape_controls(key)), str(n))
    return Group(table, Text(f"{counted.total} in total", style="dim"))


def hooks_table(hooks: Sequence[HookListing], now: datetime) -> RenderableType:
    table = _table()
    table.add_id_column("run id")
    table.add_id_column("hook id")
    table.add_id_column("token")
    table.add_column("state", no_wrap=True)
    table.add_column("age", no_wrap=True, justify="right")
    table.add_column("metadata", overflow="fold")
    for hook in hooks:
        table.add_row(
            Text(escape_controls(hook.run_id)),
            Text(escape_controls(hook.hook_id)),
            Text(escape_controls(hook.token)),
            Text("resolved", style="green") if hook.resolved else Text("open", style="yellow"),
            age(hook.created_at, now),
            Text(short_json(hook.metadata, 60)),
        )
    noun = "hook" if len(hooks) == 1 else "hooks"
    return Group(table, Text(f"{len(hooks)} {noun}", style="dim"))
