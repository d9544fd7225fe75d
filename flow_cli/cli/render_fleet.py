"""Rich tables of the fleet commands: ``workers``, ``doctor``, ``builds``, ``upgrade``."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

from rich.console import Group, RenderableType
from rich.text import Text

from flow_cli.cli.io import short_json, short_text
from flow_cli.cli.render import _table, when
from flow_cli.model.names import escape_controls

if TYPE_CHECKING:
    from flow_cli.ops.builds import BuildReport
    from flow_cli.ops.doctor import DoctorReport


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def workers_table(rows: Sequence[Mapping[str, Any]]) -> RenderableType:
    """``flow workers``: one row per registered process, live ones first."""
    table = _table()
    table.add_id_column("worker id")
    table.add_id_column("host")
    table.add_column("pid", justify="right")
    table.add_column("builds", overflow="fold")
    table.add_column("started", no_wrap=True)
    table.add_column("heartbeat", no_wrap=True)
    table.add_column("state", no_wrap=True)
    for row in rows:
        live = bool(row["live"])
        table.add_row(
            Text(escape_controls(str(row["worker_id"]))),
            Text(escape_controls(str(row["host"]))),
            str(row["pid"]),
            Text(escape_controls(", ".join(row["builds"]))),
            when(row["started_at"]),
            when(row["heartbeat_at"]),
            Text("live", style="green") if live else Text("gone", style="dim"),
        )
    live_count = sum(1 for row in rows if row["live"])
    summary = f"{_count(len(rows), 'worker')}, {live_count} live"
    return Group(table, Text(summary, style="dim"))


def since_text(value: datetime | str | None) -> str:
    return when(value) if value is not None else "-"


def doctor_view(report: DoctorReport, samples: int) -> RenderableType:
    """``flow doctor``: runs per cause, a few sample runs of each (longest first), a verdict."""
    from flow_cli.ops.doctor import CAUSES, STUCK

    summary = report.summary
    by_cause: dict[str, list[Any]] = {}
    for diagnosis in report.runs:
        by_cause.setdefault(diagnosis.cause, []).append(diagnosis)
    counts = _table()
    counts.add_column("cause", no_wrap=True)
    counts.add_column("runs", justify="right")
    counts.add_column("", no_wrap=True)
    counts.add_column("oldest since", no_wrap=True)
    for cause in CAUSES:
        if not summary[cause]:
            continue
        stuck = cause in STUCK
        counts.add_row(
            Text(cause, style="red" if stuck else ""),
            str(summary[cause]),
            Text("stuck", style="bold red") if stuck else Text("ok", style="dim"),
            when(by_cause[cause][0].since),
        )
    parts: list[RenderableType] = []
    if report.runs:
        parts.append(counts)
        shown = _table()
        shown.add_column("cause", no_wrap=True)
        shown.add_id_column("run")
        shown.add_id_column("build")
        shown.add_column("since", no_wrap=True)
        shown.add_column("detail", overflow="fold", min_width=24)
        for cause in CAUSES:
            for diagnosis in by_cause.get(cause, [])[:samples]:
                shown.add_row(
                    Text(cause),
                    Text(escape_controls(diagnosis.run_id)),
                    Text(escape_controls(diagnosis.build_id)),
                    when(diagnosis.since),
                    Text(short_text(diagnosis.detail, 120)),
                )
        parts.append(shown)
        hidden = sum(max(0, n - samples) for n in summary.values())
        if hidden:
            parts.append(
                Text(
                    f"{_count(hidden, 'more run')} not shown (at most {samples} per cause, "
                    "longest first); --json lists every run",
                    style="dim",
                )
            )
    stuck_runs = sum(summary[c] for c in STUCK)
    workers = _count(report.workers_live, "live worker")
    if stuck_runs:
        verdict = Text(
            f"{_count(stuck_runs, 'run')} stuck of {report.total} open; {workers}",
            style="bold red",
        )
    else:
        verdict = Text(f"No run is stuck: {_count(report.total, 'open run')}; {workers}")
    parts.append(verdict)
    if report.next_after is not None:
        parts.append(
            Text(
                f"Next page (the page is full; it may be empty): --after {report.next_after}",
                style="dim",
            )
        )
    return Group(*parts)


def _open_text(counts: Mapping[str, int]) -> str:
    if not counts:
        return "-"
    return ", ".join(f"{status} {n}" for status, n in counts.items())


def builds_table(reports: Sequence[BuildReport]) -> RenderableType:
    """``flow builds``: one row per build id (live workers counted; ``--json`` names them)."""
    table = _table()
    table.add_column("build id", no_wrap=True)
    table.add_column("open runs", no_wrap=True)
    table.add_column("oldest open run", no_wrap=True)
    table.add_column("since", no_wrap=True)
    table.add_column("live hosts", justify="right", no_wrap=True)
    table.add_column("patches", overflow="fold")
    table.add_column("retirable", no_wrap=True, min_width=9)
    for report in reports:
        table.add_row(
            Text(escape_controls(report.build_id)),
            Text(_open_text(report.open)),
            Text(escape_controls(report.oldest_open_run or "-")),
            since_text(report.oldest_open_at),
            Text(str(len(report.workers))) if report.workers else Text("none", style="dim"),
            Text(escape_controls(", ".join(report.patches)) or "-"),
            Text("yes", style="green") if report.retirable else Text("no"),
        )
    retirable = sum(1 for r in reports if r.retirable)
    summary = f"{_count(len(reports), 'build')}, {retirable} retirable"
    return Group(table, Text(summary, style="dim"))


__all__ = [
    "builds_table",
    "doctor_view",
    "short_json",
    "short_text",
    "since_text",
    "workers_table",
]
