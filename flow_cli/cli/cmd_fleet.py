"""Fleet health: ``workers``, ``doctor``, ``builds`` and ``upgrade``.

``workers``, ``doctor`` and ``builds`` only read the database (``create=False``); ``builds``
imports flow.toml's runtimes when it can, to list their builds too (a machine without the code
still gets the rest); ``upgrade`` needs the runtime of the target build to replay runs against
it.
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Annotated, Any

import typer

from flow_cli.cli import exits
from flow_cli.cli.cmd_triage import JsonlFlag, emit_rows
from flow_cli.cli.filters import FilterArgs, parse_duration, with_filters
from flow_cli.cli.io import emit_json_streamed, note
from flow_cli.cli.options import JsonFlag
from flow_cli.cli.state import CliState

if TYPE_CHECKING:
    from flow_cli.store.protocol import WorkerInfo


def workers(ctx: typer.Context, json_output: JsonFlag = False, jsonl: JsonlFlag = False) -> None:
    """List the workers registered in the database, live or gone.

    `flow worker` and `flow tick` register themselves and heartbeat every few seconds
    (FLOW_HEARTBEAT_SECONDS, default 5). A worker is live while its last heartbeat is at most
    three of its intervals old; one that stopped cleanly or stopped heartbeating (killed,
    machine lost) is gone. Gone workers are forgotten after a day. --json: [{"worker_id",
    "host", "pid", "builds", "started_at", "heartbeat_at", "live", "stopped_at",
    "heartbeat_seconds"}]; --jsonl: one such object a line.
    """
    state = CliState.of(ctx)
    with state.open_engine(create=False, with_runtimes=False, read_only=True) as engine:
        found = engine.list_workers()
        now = engine.clock.now()
    rows = worker_rows(found, now)
    if jsonl or state.want_json(json_output):
        emit_rows(rows, jsonl)
        return
    from flow_cli.cli import render
    from flow_cli.cli.render_fleet import workers_table

    render.console().print(workers_table(rows))


SAMPLES = 3
"""Runs shown per cause in ``flow doctor``'s table (``--json`` lists them all)."""


@with_filters
def doctor(
    ctx: typer.Context,
    overdue_after: Annotated[
        str,
        typer.Option(
            "--overdue-after",
            metavar="DURATION",
            help="How long past due a timer, a ready step or a lease may be before it counts "
            "as stuck.",
        ),
    ] = "30s",
    json_output: JsonFlag = False,
    *,
    filters: FilterArgs,
) -> None:
    """Classify every open run by what must happen for it to move; exit 1 if any is stuck.

    Read from the runs index, the step tasks and the workers registry, never from histories:
    cheap enough for a cron job. The first cause that applies wins, in this order:

    \b
    paused            a pause holds it (`flow pause`) until `flow resume`
    decision-failing  its last decision failed (code raised or diverged)       stuck
    step-unknown      a step's outcome is unknown: `flow step resolve`          stuck
    build-unhosted    no live worker hosts its build (see below)                stuck
    throttled         a limit holds it back: `flow limits` (not stuck)
    timer-overdue     a timer, retry or ready step is 30 s past due, unstarted  stuck
    lease-expired     a decision or step lease ended 30 s ago, not taken over   stuck
    schedule-late     a schedule's fire time is 30 s past, nobody fired it      stuck
    step-retrying     a step attempt failed; the next waits for its back-off
    step-running      a worker runs one of its steps (`flow show`: heartbeat)
    runnable          a decision or step is due now, or being decided
    waiting-signal    waits for a signal (then waiting-hook, waiting-child)
    sleeping          otherwise: a timer (or decision) due later; wakes by itself

    A build is unhosted when no live worker hosts it and either some worker is live or no
    registered worker (live or gone) ever hosted it. When only gone workers hosted it (the
    fleet is down, e.g. after `flow tick` ended), its runs are judged by what is overdue.

    --json: {"ok": bool, "summary": {cause: n}, "runs": [{"run_id", "workflow", "build_id",
    "cause", "detail", "since"}], "next_after"}. Runs are listed by cause, not in listing
    order: to page with --limit N, pass next_after (the table's last line names it) to --after.
    Exit 0 when no run is stuck, 1 when one is.
    """
    state = CliState.of(ctx)
    grace = parse_duration(overdue_after, "--overdue-after")
    where = filters.to_filter()
    from flow_cli.ops.doctor import diagnose

    with state.open_engine(create=False, with_runtimes=False, read_only=True) as engine:
        schedules = engine.schedules.all()
        limited = engine.limits.targets()
        as_json = state.want_json(json_output)
        # The table shows SAMPLES runs of each cause: keep only those (memory flat in the
        # open runs); --json lists every run.
        keep = None if as_json else SAMPLES
        report = diagnose(engine, where, engine.clock.now(), grace, schedules, limited, keep=keep)
    if as_json:
        runs = (diagnosis.to_json() for diagnosis in report.runs)
        emit_json_streamed(report.to_json(runs=False), "runs", runs)
    else:
        from flow_cli.cli import render
        from flow_cli.cli.render_fleet import doctor_view

        render.console().print(doctor_view(report, SAMPLES))
    if not report.ok:
        raise typer.Exit(exits.FAILED)


def worker_rows(found: list[WorkerInfo], now: datetime) -> list[dict[str, Any]]:
    """The workers registry as ``flow workers --json`` lists it, live ones first."""
    rows: list[dict[str, Any]] = [
        {
            "worker_id": w.worker_id,
            "host": w.host,
            "pid": w.pid,
            "builds": list(w.builds),
            "started_at": w.started_at.isoformat(),
            "heartbeat_at": w.heartbeat_at.isoformat(),
            "live": w.live(now),
            "stopped_at": None if w.stopped_at is None else w.stopped_at.isoformat(),
            "heartbeat_seconds": w.heartbeat_seconds,
        }
        for w in found
    ]
    rows.sort(key=lambda row: not row["live"])  # live first; each group newest first
    return rows


def builds(ctx: typer.Context, json_output: JsonFlag = False, jsonl: JsonlFlag = False) -> None:
    """List the build ids in use: open runs by status, oldest open run, live workers hosting
    it, patch markers its open runs carry, and whether it is retirable (no open run).

    Builds are known from runs, from registered workers (live or gone), from flow.toml's
    build_id and from the runtimes it names, so a build with no run yet, or that no worker
    hosts, is listed too. --json: [{"build_id", "open": {status: n}, "oldest_open_run",
    "oldest_open_at", "workers", "patches", "retirable"}]; --jsonl: one such object a line.
    """
    state = CliState.of(ctx)
    configured = [state.config.build_id] if state.config.build_id else []
    configured += _loaded_builds(state)
    from flow_cli.ops.builds import build_reports

    with state.open_engine(create=False, with_runtimes=False, read_only=True) as engine:
        reports = build_reports(engine, engine.clock.now(), configured)
    if jsonl or state.want_json(json_output):
        emit_rows([r.to_json() for r in reports], jsonl)
        return
    from flow_cli.cli import render
    from flow_cli.cli.render_fleet import builds_table

    render.console().print(builds_table(reports))


def _loaded_builds(state: CliState) -> list[str]:
    """The build ids of flow.toml's runtimes; none (with a warning) when they cannot be
    imported here: ``flow builds`` works from any machine that reaches the database."""
    from flow_cli.errors import FlowError

    if not state.config.runtimes:
        return []
    try:
        return [runtime.build_id for runtime in state.runtimes()]
    except FlowError as error:
        note(f"warning: builds of flow.toml's runtimes not listed: {error}")
        return []
