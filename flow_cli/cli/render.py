"""Every Rich object the command line prints is built here.

Rich decides colour: none when the stream is not a terminal or ``NO_COLOR`` is set. Values that
come from runs (ids, payloads, error messages) are wrapped in ``Text`` so that square brackets in
them are never read as markup. This module is imported only by commands that render tables, so
``flow --help`` and ``--json`` output never pay for Rich.
"""

from __future__ import annotations

import dataclasses
import os
import sys
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from rich import box
from rich.console import Console, Group, RenderableType
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from flow_cli.cli.fitted import FittedTable
from flow_cli.cli.io import short_json, short_text
from flow_cli.cli.words import plural
from flow_cli.model.events import TERMINAL_KEYS
from flow_cli.model.names import escape_controls

if TYPE_CHECKING:
    from flow_cli.engine.worker import TickReport
    from flow_cli.store.protocol import RunRecord

STATUS_STYLES = {
    "Pending": "dim",
    "Running": "cyan",
    "Suspended": "blue",
    "Cancelling": "yellow",
    "Completed": "green",
    "Failed": "bold red",
    "Cancelled": "yellow",
    "ContinuedAsNew": "magenta",
}
STEP_STYLES = {
    "scheduled": "dim",
    "running": "cyan",
    "backoff": "yellow",
    "completed": "green",
    "failed": "bold red",
    "cancelled": "yellow",
}
PIPE_WIDTH = 400
"""Line width off a terminal (no ``COLUMNS``): wide enough that rows stay one line for grep."""


def console(*, stderr: bool = False) -> Console:
    """A console on stdout (data) or stderr (progress); no automatic highlighting.

    Rich already drops colour off a terminal and under ``NO_COLOR``; with ``NO_COLOR`` we also
    drop bold and the other styles, so the output carries no escape sequences at all. Off a
    terminal, lines are not wrapped at 80 columns (``COLUMNS`` still wins).
    """
    stream = sys.stderr if stderr else sys.stdout
    width = None
    piped = not stream.isatty()
    if "COLUMNS" not in os.environ and piped:
        width = PIPE_WIDTH  # piped or redirected: never wrap a row at Rich's default of 80
    kind = _PipeConsole if piped and not stderr else Console
    if os.environ.get("NO_COLOR"):
        return kind(stderr=stderr, highlight=False, color_system=None, width=width)
    return kind(stderr=stderr, highlight=False, width=width)


class _PipeConsole(Console):
    """Stdout that is not a terminal (a pipe, a file, a test): each ``print`` is written without
    the spaces that pad cells to the table's width and without the blank lines that frame a
    table, so ``grep``, ``diff`` and ``awk`` see only what was printed."""

    def print(self, *objects: Any, **options: Any) -> None:
        with self.capture() as captured:
            super().print(*objects, **options)
        # A line of spaces is the blank top or bottom edge of a table: dropped.
        lines = [line.rstrip() for line in captured.get().split("\n") if line == "" or line.strip()]
        while lines and not lines[0]:
            lines.pop(0)
        while lines and not lines[-1]:
            lines.pop()
        if lines:  # through Rich again, so that a caller's capture() sees it too
            super().print(
                "\n".join(lines), markup=False, emoji=False, highlight=False, soft_wrap=True
            )


# -- small pieces ----------------------------------------------------------------------------


def when(value: datetime | str | None, *, millis: bool = False) -> str:
    """A UTC time as ``2026-12-02 17:38:19Z`` (``.123`` with ``millis``); ``-`` for none."""
    if value is None:
        return "-"
    moment = datetime.fromisoformat(value) if isinstance(value, str) else value
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    moment = moment.astimezone(UTC)
    text = moment.strftime("%Y-%m-%d %H:%M:%S")
    if millis:
        text += f".{moment.microsecond // 1000:03d}"
    return text + "Z"


def duration(start: str | None, end: str | None) -> str:
    if start is None or end is None:
        return ""
    seconds = (datetime.fromisoformat(end) - datetime.fromisoformat(start)).total_seconds()
    if seconds < 1:
        return f"{seconds * 1000:.0f} ms"
    if seconds < 120:
        return f"{seconds:.1f} s"
    return f"{seconds / 60:.1f} min"


def status_text(status: str) -> Text:
    return Text(status, style=STATUS_STYLES.get(status, ""))


def failing_text(error: Any) -> str:
    """``ErrorType: message`` of a ``decision_failed`` (or the runs index's text)."""
    if isinstance(error, Mapping):
        kind = error.get("error_type") or error.get("type") or "error"
        return f"{kind}: {error.get('message', '')}".strip()
    return str(error)


def clean(value: Any) -> Any:
    """``value`` with control characters in every string (keys too) shown as ``\\xNN``.

    Everything printed from stored data passes through here first: a run id, a payload or a
    corrupt record holding ESC or other control characters must not drive the terminal.
    """
    if isinstance(value, str):
        return escape_controls(value)
    if isinstance(value, Mapping):
        return {clean(k): clean(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [clean(item) for item in value]
    return value


def _clean_record(record: RunRecord) -> RunRecord:
    return dataclasses.replace(
        record,
        run_id=escape_controls(record.run_id),
        workflow=escape_controls(record.workflow),
        build_id=escape_controls(record.build_id),
        failing=None if record.failing is None else escape_controls(record.failing),
        error=None if record.error is None else escape_controls(record.error),
    )


def _table(title: str | None = None) -> FittedTable:
    return FittedTable(title=title, title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False)


# -- flow runs -------------------------------------------------------------------------------


def runs_table(
    records: Sequence[RunRecord], *, matched: int | None = None, more: bool = False
) -> RenderableType:
    """``flow runs``: one row per run. ``more``: the table was cut at ``len(records)`` rows of
    ``matched`` (``None``: not counted)."""
    records = [_clean_record(record) for record in records]
    table = _table()
    # Status and time never wrap; ids, names and the error fold, so an 80-column terminal
    # still shows every column (no-wrap ids squeezed the rest down to "…"); narrower than
    # status and time fit, one block a run. The reason column is there only when a run failed
    # or is failing.
    table.add_column("run id", overflow="fold")
    table.add_column("workflow", overflow="fold")
    table.add_column("status", no_wrap=True)
    table.add_column("build", overflow="fold")
    table.add_column("updated", no_wrap=True)
    any_reason = any(_reason(record) for record in records)
    if any_reason:
        table.add_column("reason", overflow="fold")
    for record in records:
        cells: list[RenderableType] = [
            Text(record.run_id),
            Text(record.workflow),
            status_text(record.status.value),
            Text(record.build_id),
            when(record.updated_at),
        ]
        if any_reason:
            cells.append(_reason(record))
        table.add_row(*cells)
    noun = "run" if len(records) == 1 else "runs"
    if not more:
        return Group(table, Text(f"{len(records)} {noun}", style="dim"))
    shown = f"{len(records)} of {matched}" if matched is not None else f"the first {len(records)}"
    footer = (
        f"{shown} matching runs shown, newest first; --limit N shows more, --limit 0 all, "
        f"--after {records[-1].run_id} the next page"
    )
    return Group(table, Text(footer, style="dim"))


def _reason(record: RunRecord) -> Text:
    """Why the run failed (Failed) or its decisions fail (marked ⚠); empty otherwise."""
    if record.failing:
        return Text("⚠ " + short_text(record.failing, 60), style="bold red")
    if record.error and record.status.value == "Failed":
        return Text(short_text(record.error, 60), style="red")
    return Text("")


# -- flow show -------------------------------------------------------------------------------


STEP_ROWS = 30
"""Step rows ``flow show`` prints without ``--all``: every step that is not completed comes
first, then the latest completed ones."""


def show_view(
    snap: Mapping[str, Any],
    failing: str | None,
    child_status: Mapping[str, str],
    *,
    all_steps: bool = False,
) -> RenderableType:
    """The ``flow show`` screen, built from the stable ``--json`` shape of the snapshot."""
    # Only the rows that are printed are escaped: a long run's steps mostly are not.
    shown, hidden = _shown_steps(snap["steps"], all_steps)
    # Tracebacks keep their lines: taken before ``clean`` escapes the newlines.
    traces = _step_traces(shown)
    decision_error = snap.get("decision_error")
    decision_trace = (
        decision_error.get("traceback") if isinstance(decision_error, Mapping) else None
    )
    snap = {**snap, "steps": dict(shown)}
    snap, failing, child_status = clean(snap), clean(failing), clean(child_status)
    parts: list[RenderableType] = [_header(snap, failing)]
    if isinstance(decision_trace, str):
        parts.append(traceback_text(decision_trace))
    if snap["steps"]:
        parts.append(_steps(snap["steps"], hidden))
        parts.extend(_running(snap["steps"]))
        parts.extend(
            Group(Text(f"step {step_id!r}, attempt {attempt}:", "bold"), traceback_text(trace))
            for step_id, attempt, trace in traces
        )
    if snap["waits"]:
        parts.append(_timers(snap["waits"]))
    signals = snap["signals"]
    if signals["waits"] or signals["received"]:
        parts.append(_signals(signals))
    if snap["hooks"]:
        parts.append(_hooks(snap["hooks"]))
    if snap.get("updates"):
        parts.append(_updates(snap["updates"]))
    if snap["children"]:
        parts.append(_children(snap["children"], child_status))
    parts.append(_progress(snap["progress"]))
    return Group(*parts)


def _running(steps: Mapping[str, Any]) -> list[RenderableType]:
    """A line per running step: its worker, and its last heartbeat with its details."""
    lines: list[RenderableType] = []
    for step_id, step in steps.items():
        if step.get("state") != "running":
            continue
        text = Text(f"step {step_id!r} attempt {step.get('attempt')} on {step.get('worker')}")
        beat = step.get("heartbeat")
        if isinstance(beat, Mapping):
            at, details = when(beat.get("at")), short_json(beat.get("details"), 200)
            text.append(f": last heartbeat {at} {details}")
        else:
            text.append(": no heartbeat", "dim")
        lines.append(text)
    return lines


def _header(snap: Mapping[str, Any], failing: str | None) -> RenderableType:
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="bold", no_wrap=True)
    grid.add_column(overflow="fold")
    grid.add_row("status", status_text(snap["status"]))
    grid.add_row("workflow", Text(snap["workflow"]))
    build = Text(snap["build_id"])
    upgrades = snap.get("build_upgrades") or []
    if upgrades:
        first = upgrades[0]
        build.append(f" (upgraded from {first['from']} at event {first['sequence']})", "dim")
    grid.add_row("build", build)
    grid.add_row("patches", Text(", ".join(snap["patches"]) or "-"))
    if snap.get("priority", 5) != 5:
        grid.add_row("priority", Text(str(snap["priority"])))
    paused = snap.get("paused")
    if paused:
        why = f" ({paused['reason']})" if paused.get("reason") else ""
        held = f"{paused['kind']} {paused['target']}"
        since = when(paused["paused_at"])
        grid.add_row("paused", Text(f"{held} since {since}{why}: flow resume", "yellow"))
    grid.add_row("started", when(snap.get("started_at")))
    for key, label in (("parent_run_id", "parent"), ("predecessor_run_id", "predecessor")):
        if snap.get(key):
            grid.add_row(label, Text(snap[key]))
    forked = snap.get("forked_from")
    if forked:
        grid.add_row(
            "forked from",
            Text(
                f"{forked['run_id']} (its events up to {forked['sequence']}), "
                f"forked {when(snap.get('created_at'))}"
            ),
        )
    grid.add_row("input", Text(short_json(snap["input"], 200)))
    attributes = snap.get("attributes")
    if attributes:
        grid.add_row("attributes", Text(attributes_text(attributes)))
    if snap.get("cancel_requested"):
        grid.add_row("cancel", Text(f"requested: {snap.get('cancel_reason') or ''}", "yellow"))
    outcome = snap.get("outcome")
    if outcome is not None:
        detail = {k: v for k, v in outcome.items() if k != "kind"}
        value = next(iter(detail.values()), None)
        grid.add_row(
            "outcome", Text.assemble(status_text(outcome["kind"]), " ", short_json(value, 200))
        )
    if snap.get("decision_error") is not None or failing:
        message = failing_text(snap["decision_error"]) if snap.get("decision_error") else failing
        grid.add_row(Text("failing", "bold red"), Text(str(message), "bold red"))
        if snap.get("next_decision_at"):
            grid.add_row("retry", Text(f"next try {when(snap['next_decision_at'])}"))
    return Panel(
        grid, title=Text(f"run {snap['run_id']}", "bold"), title_align="left", expand=False
    )


def attributes_text(attributes: Mapping[str, Any]) -> str:
    """Search attributes on one line, sorted by key: ``customer=acme priority=5``; a text
    value that would read as another type or holds a space is shown as JSON."""
    import json

    from flow_cli.errors import InputError
    from flow_cli.model.attributes import parse_attribute

    parts = []
    for key in sorted(attributes):
        value = attributes[key]
        shown = value if isinstance(value, str) else json.dumps(value)
        try:
            plain = isinstance(value, str) and parse_attribute(f"{key}={value}")[1] == value
        except InputError:
            plain = False
        if isinstance(value, str) and (not plain or " " in value or not value):
            shown = json.dumps(value, ensure_ascii=False)
        parts.append(f"{key}={shown}")
    return " ".join(parts)


def traceback_text(trace: str) -> Text:
    """A recorded traceback, each line escaped, indented under the error it explains."""
    lines = [f"  {escape_controls(line.rstrip())}" for line in trace.splitlines()]
    return Text("\n".join(lines), "dim")


def _step_traces(
    steps: list[tuple[str, Mapping[str, Any]]],
) -> list[tuple[str, Any, str]]:
    """(step id, attempt, traceback) of each shown step whose last failure recorded one."""
    found = []
    for step_id, step in steps:
        error = step.get("error")
        if step.get("state") == "completed" or not isinstance(error, Mapping):
            continue
        trace = error.get("traceback")
        if isinstance(trace, str):
            found.append((escape_controls(step_id), error.get("attempt"), trace))
    return found


def _shown_steps(
    steps: Mapping[str, Mapping[str, Any]], all_steps: bool
) -> tuple[list[tuple[str, Mapping[str, Any]]], int]:
    """The step rows to print (in history order) and how many completed ones are left out."""
    items = list(steps.items())
    if all_steps or len(items) <= STEP_ROWS:
        return items, 0
    keep = {step_id for step_id, step in items if step["state"] != "completed"}
    room = max(STEP_ROWS - len(keep), 5)
    completed = [step_id for step_id, step in items if step["state"] == "completed"]
    keep.update(completed[-room:])
    return [item for item in items if item[0] in keep], len(items) - len(keep)


def _steps(steps: Mapping[str, Mapping[str, Any]], hidden: int) -> RenderableType:
    table = _table("steps")
    if hidden:
        table.caption = (
            f"{hidden:,} earlier completed steps not shown (flow show RUN --all lists every "
            "step; --json has them all)"
        )
    for column in ("id", "name", "state", "attempts", "timing"):
        table.add_column(column, no_wrap=column != "timing")
    table.add_column("output / error", overflow="fold")
    for step_id, step in steps.items():
        state = step["state"]
        if step.get("finished_at"):
            timing = f"took {duration(step.get('scheduled_at'), step['finished_at'])}"
        elif step.get("next_attempt_at"):
            timing = f"retry at {when(step['next_attempt_at'])}"
        elif step.get("started_at"):
            timing = f"started {when(step['started_at'])}"
        else:
            timing = f"scheduled {when(step.get('scheduled_at'))}"
        if step.get("error") is not None and state != "completed":
            error = step["error"]
            detail = Text(
                f"{error.get('type')}: {error.get('message')}"
                if isinstance(error, dict)
                else str(error),
                "red",
            )
        elif state == "cancelled":
            detail = Text(step.get("cancel_reason") or "", "yellow")
        else:
            detail = Text(short_json(step.get("output"), 80) if state == "completed" else "")
        table.add_row(
            Text(step_id),
            Text(step["name"]),
            Text(state, STEP_STYLES.get(state, "")),
            str(step["attempts"]),
            timing,
            detail,
        )
    return table


def _timers(waits: Mapping[str, Mapping[str, Any]]) -> RenderableType:
    table = _table("timers")
    for column in ("wait", "deadline", "state"):
        table.add_column(column, no_wrap=True)
    for wait_id, wait in waits.items():
        if wait["done"]:
            state = Text(f"fired {when(wait.get('fired_at'))}", "green")
        elif wait.get("state") == "closed":
            state = Text("closed (run ended)", "dim")
        else:
            state = Text("pending", "blue")
        table.add_row(Text(wait_id), when(wait["deadline"]), state)
    return table


def _signals(signals: Mapping[str, Any]) -> RenderableType:
    parts: list[RenderableType] = []
    if signals["waits"]:
        table = _table("signal waits")
        for column in ("wait", "signal", "state"):
            table.add_column(column, no_wrap=True)
        table.add_column("payload", overflow="fold")
        for wait_id, wait in signals["waits"].items():
            if wait["delivered"]:
                state = Text("delivered", "green")
            elif wait.get("timed_out"):
                state = Text("timed out", "yellow")
            elif wait.get("closed"):
                state = Text("closed (another branch won)", "yellow")
            else:
                state = Text("waiting", "blue")
            payload = short_json(wait.get("payload"), 80) if wait["delivered"] else ""
            table.add_row(Text(wait_id), Text(wait["signal_name"]), state, Text(payload))
        parts.append(table)
    if signals["received"]:
        table = _table("signals received")
        for column in ("seq", "signal", "consumed by"):
            table.add_column(column, no_wrap=True)
        table.add_column("payload", overflow="fold")
        for signal in signals["received"]:
            table.add_row(
                str(signal["sequence"]),
                Text(signal["signal_name"]),
                Text(signal.get("wait_id") or "buffered", "" if signal.get("wait_id") else "dim"),
                Text(short_json(signal.get("payload"), 80)),
            )
        parts.append(table)
    return Group(*parts)


def _hooks(hooks: Mapping[str, Mapping[str, Any]]) -> RenderableType:
    table = _table("hooks")
    for column in ("hook", "token", "state"):
        table.add_column(column, no_wrap=True)
    table.add_column("metadata / payload", overflow="fold")
    for hook_id, hook in hooks.items():
        resolved = bool(hook["resolved"])
        table.add_row(
            Text(hook_id),
            Text(hook["token"]),
            Text("resolved", "green") if resolved else Text("open", "blue"),
            Text(short_json(hook.get("payload") if resolved else hook.get("metadata"), 80)),
        )
    return table


def _updates(updates: Sequence[Mapping[str, Any]]) -> RenderableType:
    table = _table("updates applied")
    for column in ("seq", "update", "id", "at"):
        table.add_column(column, no_wrap=True)
    table.add_column("args → result", overflow="fold")
    for update in updates:
        table.add_row(
            Text(str(update["sequence"])),
            Text(update["name"]),
            Text(update["update_id"]),
            Text(when(update.get("at"))),
            Text(f"{short_json(update.get('args'), 40)} → {short_json(update.get('result'), 40)}"),
        )
    return table


def _children(
    children: Mapping[str, Mapping[str, Any]], child_status: Mapping[str, str]
) -> RenderableType:
    table = _table("children")
    for column in ("child", "run id", "workflow", "status"):
        table.add_column(column, no_wrap=True)
    for child_id, child in children.items():
        status = child_status.get(child["run_id"], child["status"])
        table.add_row(
            Text(child_id), Text(child["run_id"]), Text(child["workflow"]), status_text(status)
        )
    return table


def _progress(progress: Mapping[str, int]) -> RenderableType:
    bits = [
        f"steps {progress.get('steps_completed', 0)}/{progress.get('steps_total', 0)} completed",
    ]
    for key, noun, many in (
        ("steps_failed", "failed", "failed"),
        ("steps_cancelled", "cancelled", "cancelled"),
        ("waits_open", "wait open", "waits open"),
        ("hooks_open", "hook open", "hooks open"),
        ("children_open", "child open", "children open"),
    ):
        if progress.get(key):
            bits.append(plural(progress[key], noun, many))
    bits.append(f"{progress.get('events', 0)} events")
    return Text("progress: " + " · ".join(bits), style="dim")


# -- flow history ----------------------------------------------------------------------------


def event_summary(key: str, data: Mapping[str, Any]) -> str:
    """The key data of one event, in a few words."""
    d = data
    match key:
        case "run_started":
            spec = d.get("spec") or {}
            text = f"workflow {spec.get('workflow')!r} build {spec.get('runtime_build_id')!r}"
            if spec.get("patches"):
                text += f" patches {', '.join(spec['patches'])}"
            if spec.get("parent_run_id"):
                text += f" parent {spec['parent_run_id']}"
            if spec.get("predecessor_run_id"):
                text += f" continues {spec['predecessor_run_id']}"
            forked = spec.get("forked_from")
            if isinstance(forked, Mapping):
                origin, cut = forked.get("run_id"), forked.get("sequence")
                text += f" forked from {origin} (up to event {cut})"
            if isinstance(spec.get("attributes"), Mapping):
                text += f" attributes {attributes_text(spec['attributes'])}"
            return f"{text} input {short_json(spec.get('input'), 60)}"
        case "step_scheduled":
            batch = f" batch {d['batch_id']!r}" if d.get("batch_id") else ""
            call = f"{d.get('name')}({short_json(d.get('input'), 50)})"
            return f"step {d.get('step_id')!r} → {call}{batch}"
        case "step_started":
            return f"step {d.get('step_id')!r} attempt {d.get('attempt')} on {d.get('worker')}"
        case "step_completed":
            by = " (resolved by operator)" if d.get("resolved") else ""
            return (
                f"step {d.get('step_id')!r} attempt {d.get('attempt')} "
                f"→ {short_json(d.get('output'), 60)}{by}"
            )
        case "step_outcome_unknown":
            return (
                f"step {d.get('step_id')!r} attempt {d.get('attempt')} outcome unknown: "
                f"{d.get('reason')}"
            )
        case "retry_requested":
            what = (["decision"] if d.get("decision") else []) + [
                f"step {step!r}" for step in d.get("steps") or []
            ]
            return f"retry now: {', '.join(what)} ({d.get('reason')})"
        case "step_failed":
            after = (
                "exhausted" if d.get("exhausted") else f"retry at {when(d.get('next_attempt_at'))}"
            )
            return (
                f"step {d.get('step_id')!r} attempt {d.get('attempt')} "
                f"{d.get('error_type')}: {d.get('message')} ({after})"
            )
        case "step_cancelled":
            unknown = " (outcome unknown)" if d.get("outcome_unknown") else ""
            return f"step {d.get('step_id')!r}: {d.get('reason')}{unknown}"
        case "wait_started":
            return f"wait {d.get('wait_id')!r} until {when(d.get('deadline'))}"
        case "wait_completed":
            return f"wait {d.get('wait_id')!r} fired"
        case "signal_wait_started":
            select = d.get("select")
            among = f" (first of {', '.join(map(str, select))})" if isinstance(select, list) else ""
            return f"wait {d.get('wait_id')!r} for signal {d.get('signal_name')!r}{among}"
        case "signal_received":
            carried = f" (carried from {d['carried_from']})" if d.get("carried_from") else ""
            return f"signal {d.get('signal_name')!r} {short_json(d.get('payload'), 60)}{carried}"
        case "update_applied":
            return (
                f"update {d.get('name')!r} id {d.get('update_id')} "
                f"{short_json(d.get('args'), 40)} → {short_json(d.get('result'), 40)}"
            )
        case "attributes_set":
            given = d.get("attributes")
            return attributes_text(given) if isinstance(given, dict) else short_json(given, 60)
        case "hook_created":
            return (
                f"hook {d.get('hook_id')!r} token {d.get('token')} "
                f"{short_json(d.get('metadata'), 40)}"
            )
        case "hook_resolved":
            return f"hook {d.get('hook_id')!r} {short_json(d.get('payload'), 60)}"
        case "child_scheduled":
            return (
                f"child {d.get('child_id')!r} → run {d.get('child_run_id')} "
                f"{d.get('workflow')}({short_json(d.get('input'), 40)})"
            )
        case "child_completed":
            outcome = d.get("outcome")
            kind = outcome.get("kind") if isinstance(outcome, dict) else outcome
            return f"child {d.get('child_id')!r} (run {d.get('child_run_id')}) {kind}"
        case "child_cancelled" | "child_abandoned":
            return f"child {d.get('child_id')!r} (run {d.get('child_run_id')}): {d.get('reason')}"
        case "cancel_requested" | "run_cancelled":
            forced = " (terminated: forced)" if d.get("forced") else ""
            return str(d.get("reason", "")) + forced
        case "decision_failed":
            return failing_text(d)
        case "decision_recovered":
            return f"decided cleanly again after {d.get('error_type')}"
        case "build_upgraded":
            return f"re-pinned from build {d.get('from')!r} to {d.get('to')!r}"
        case "run_completed":
            return f"result {short_json(d.get('result'), 70)}"
        case "run_failed":
            return f"error {short_json(d.get('error'), 70)}"
        case "run_continued_as_new":
            return f"successor {d.get('successor_run_id')} input {short_json(d.get('input'), 50)}"
        case _:
            return short_json(dict(d), 80)


def _event_style(key: str) -> str:
    if key in ("run_failed", "decision_failed", "step_failed"):
        return "red"
    if key in TERMINAL_KEYS:
        return "bold green" if key == "run_completed" else "bold"
    return "cyan"


def history_table(events: Iterable[Mapping[str, Any]]) -> RenderableType:
    table = _table()
    table.add_column("seq", justify="right", no_wrap=True)
    table.add_column("time (UTC)", no_wrap=True)
    table.add_column("event", no_wrap=True)
    table.add_column("details", overflow="fold")
    for event in map(clean, events):
        key = event["event_key"]
        table.add_row(
            str(event["sequence"]),
            when(event["recorded_at"], millis=True),
            Text(key, _event_style(key)),
            Text(event_summary(key, event["data"])),
        )
    return table


def event_line(event: Mapping[str, Any]) -> Text:
    """One event as a line, for ``history --follow`` (a table cannot grow row by row)."""
    event = clean(event)
    key = event["event_key"]
    return Text.assemble(
        (f"{event['sequence']:>4}  ", ""),
        (when(event["recorded_at"], millis=True) + "  ", "dim"),
        (f"{key:<21} ", _event_style(key)),
        event_summary(key, event["data"]),
    )


# -- flow tick -------------------------------------------------------------------------------


def tick_progress_text(report: TickReport) -> str:
    return (
        f"tick: pass {report.passes} · {report.runs_decided} runs decided · "
        f"{report.steps_run} steps run"
    )


# -- flow replay-check -----------------------------------------------------------------------


# -- flow upgrade ----------------------------------------------------------------------------

UPGRADE_STYLES = {"upgraded": "green", "would upgrade": "green", "refused": "bold red"}


def upgrade_table(rows: Sequence[tuple[str, str, str]]) -> RenderableType:
    """One row per run ``flow upgrade`` looked at: (run id, result, detail)."""
    table = _table()
    table.add_id_column("run")
    table.add_column("result", no_wrap=True)
    table.add_column("detail", overflow="fold")
    for run_id, result, detail in rows:
        table.add_row(
            Text(escape_controls(run_id)),
            Text(result, style=UPGRADE_STYLES.get(result, "dim")),
            Text(escape_controls(detail)),
        )
    return table
