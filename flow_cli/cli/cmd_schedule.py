"""``flow schedule``: create, list, show, pause, resume, update, delete, trigger, backfill and
apply schedules. Every `flow worker` and `flow tick` fires them (docs/schedules.md).

A definition is checked before the database is opened: a bad cron expression, interval, time
zone or overlap policy is exit 2 with an example of a right one, and nothing is written.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Annotated, Any

import typer

from flow_cli.cli.bundles import bundled, optional_text
from flow_cli.cli.io import emit_json, out, parse_json_arg
from flow_cli.cli.options import JsonFlag, text_argument, text_option
from flow_cli.cli.schedule_config import SpecOptions, build_spec, check_options, schedule_json
from flow_cli.cli.state import CliState
from flow_cli.model.names import escape_controls

if TYPE_CHECKING:
    from flow_cli.engine.engine import Engine
    from flow_cli.model.schedule import Schedule

schedule_app = typer.Typer(
    name="schedule",
    help="Start workflows on a cron expression or an interval; every `flow worker` and "
    "`flow tick` fires them, each fire time exactly once (run id ID@<fire time>).",
    no_args_is_help=True,
    rich_markup_mode=None,
)

IdArg = Annotated[str, text_argument("ID", "The schedule id.")]
Note = Annotated[
    str | None,
    text_option("--note", "TEXT", "A note (why it is paused, who owns it)."),
]


def _spec_options(input: str | None, **given: Any) -> SpecOptions:
    """The definition's options as given (each named as a field of ``SpecOptions``), the
    input read as JSON."""
    parsed = parse_json_arg(input, "--input") if input is not None else None
    return SpecOptions(input=parsed, input_given=input is not None, **given)


# The definition's options, the same for create and update (``None``: not given).
with_spec_options = bundled(
    "given",
    {
        "workflow": optional_text("--workflow", "W", "The workflow each fire time starts."),
        "cron": optional_text(
            "--cron",
            "EXPR",
            "Five cron fields (minute hour day month weekday) or @hourly, @daily, @weekly, "
            "@monthly, read in --timezone.",
        ),
        "every": optional_text(
            "--every",
            "DURATION",
            "An interval instead of --cron: 30s, 15m, 1h30m (on a grid from --start-at, else "
            "the Unix epoch).",
        ),
        "timezone": optional_text("--timezone", "TZ", "IANA time zone of --cron (default UTC)."),
        "input": optional_text("--input", "JSON|@FILE|-", "Each run's input (default null)."),
        "overlap": optional_text(
            "--overlap",
            "P",
            "While the previous run is open: skip (default; counted), buffer-one, allow-all, "
            "cancel-other, terminate-other.",
        ),
        "catchup_window": optional_text(
            "--catchup-window",
            "D",
            "Fire times missed (no worker ran) by at most D still fire; older ones count as "
            "missed (default 1h).",
        ),
        "jitter": optional_text("--jitter", "D", "Start each run up to D after its fire time."),
        "start_at": optional_text("--start-at", "T", "No fire time before T (ISO 8601)."),
        "end_at": optional_text("--end-at", "T", "No fire time after T (ISO 8601)."),
        "note": (Note, None),
    },
    _spec_options,
)


def schedule_row(engine: Engine, schedule: Schedule, recent: bool) -> dict[str, Any]:
    """A schedule as `flow schedule show --json` prints it (`recent`: with its latest runs)."""
    times = engine.schedules.next_fire_times(schedule)
    return schedule_json(schedule, times, engine.schedules.recent(schedule) if recent else None)


def _print_one(state: CliState, json_output: bool, row: dict[str, Any]) -> None:
    if state.want_json(json_output):
        emit_json(row)
        return
    from flow_cli.cli import render
    from flow_cli.cli.render_schedules import schedule_view

    render.console().print(schedule_view(row))


@schedule_app.command("create")
@with_spec_options
def create(
    ctx: typer.Context,
    schedule_id: IdArg,
    paused: Annotated[bool, typer.Option("--paused", help="Create it paused.")] = False,
    json_output: JsonFlag = False,
    *,
    given: SpecOptions,
) -> None:
    """Create a schedule: WORKFLOW started at each fire time of --cron or --every.

    Exit 2, writing nothing, on a bad expression, interval, time zone or overlap policy, or an
    id that is taken. Prints the schedule as `show` does (--json: the same object).
    """
    state = CliState.of(ctx)
    given = replace(given, paused=paused)
    spec = build_spec(schedule_id, given, None)
    if state.config.runtimes:
        state.check_startable(spec.workflow, None)
    with state.open_engine(create=True, with_runtimes=False) as engine:
        row = schedule_row(engine, engine.schedules.create(spec), recent=False)
    _print_one(state, json_output, row)


@schedule_app.command("update")
@with_spec_options
def update(
    ctx: typer.Context,
    schedule_id: IdArg,
    json_output: JsonFlag = False,
    *,
    given: SpecOptions,
) -> None:
    """Change a schedule: only the options given (--cron replaces --every and back).

    A change of timing (cron, interval, zone, start, end) fires next at its first fire time
    after now; the counts and recent runs stay.
    """
    state = CliState.of(ctx)
    check_options(schedule_id, given)  # a bad value is refused before the database is read
    with state.open_engine(create=False, with_runtimes=False) as engine:
        current = engine.schedules.get(schedule_id)
        spec = build_spec(schedule_id, given, current.spec)  # checked before anything is written
        row = schedule_row(
            engine, engine.schedules.update(schedule_id, lambda _: spec), recent=False
        )
    _print_one(state, json_output, row)


@schedule_app.command("list")
def list_schedules(ctx: typer.Context, json_output: JsonFlag = False) -> None:
    """List the schedules with their next fire time and counts.

    --json: an array of `show --json` objects without "recent".
    """
    state = CliState.of(ctx)
    with state.open_engine(create=False, with_runtimes=False, read_only=True) as engine:
        rows = [schedule_row(engine, s, recent=False) for s in engine.schedules.all()]
    if state.want_json(json_output):
        emit_json(rows)
        return
    from flow_cli.cli import render
    from flow_cli.cli.render_schedules import schedules_table

    render.console().print(schedules_table(rows))


@schedule_app.command("show")
def show(ctx: typer.Context, schedule_id: IdArg, json_output: JsonFlag = False) -> None:
    """Show a schedule: its definition, next five fire times and recent runs.

    --json: {"schedule_id", "workflow", "cron", "every", "timezone", "input", "overlap",
    "paused", "note", "next_fire_times", "recent": [{"scheduled_at", "run_id", "status"}],
    "skipped", "missed", "catchup_window", "jitter", "start_at", "end_at", "last_fired_at",
    "buffered_at"}.
    """
    state = CliState.of(ctx)
    with state.open_engine(create=False, with_runtimes=False, read_only=True) as engine:
        row = schedule_row(engine, engine.schedules.get(schedule_id), recent=True)
    _print_one(state, json_output, row)


@schedule_app.command("pause")
def pause(ctx: typer.Context, schedule_id: IdArg, note: Note = None) -> None:
    """Stop firing a schedule (fire times while paused are not fired afterwards)."""
    state = CliState.of(ctx)
    with state.open_engine(create=False, with_runtimes=False) as engine:
        engine.schedules.pause(schedule_id, note)
    out(f"paused {escape_controls(schedule_id)}")


@schedule_app.command("resume")
def resume(ctx: typer.Context, schedule_id: IdArg, note: Note = None) -> None:
    """Fire a paused schedule again, from its first fire time after now."""
    state = CliState.of(ctx)
    with state.open_engine(create=False, with_runtimes=False) as engine:
        schedule = engine.schedules.resume(schedule_id, note)
        times = engine.schedules.next_fire_times(schedule, 1)
    when = times[0].strftime("%Y-%m-%dT%H:%M:%SZ") if times else "never (past --end-at)"
    out(f"resumed {escape_controls(schedule_id)}; next fire {when}")


@schedule_app.command("delete")
def delete(ctx: typer.Context, schedule_id: IdArg) -> None:
    """Delete a schedule; the runs it started stay."""
    state = CliState.of(ctx)
    with state.open_engine(create=False, with_runtimes=False) as engine:
        engine.schedules.delete(schedule_id)
    out(f"deleted {escape_controls(schedule_id)}")


@schedule_app.command("trigger")
def trigger(ctx: typer.Context, schedule_id: IdArg, json_output: JsonFlag = False) -> None:
    """Fire a schedule once now (run id ID@<now>); its overlap policy applies.

    --json: {"schedule_id", "scheduled_at", "action", "run_id"}; action is started, existing,
    skipped or buffered.
    """
    state = CliState.of(ctx)
    with state.open_engine(create=False, with_runtimes=True) as engine:
        fired = engine.schedules.trigger(schedule_id)
    if state.want_json(json_output):
        emit_json(fired.to_json())
    else:
        out(f"{fired.action} {escape_controls(fired.run_id or '-')}")


@schedule_app.command("backfill")
def backfill(
    ctx: typer.Context,
    schedule_id: IdArg,
    start: Annotated[
        str,
        text_option("--from", "T", "First fire time to start (ISO 8601)."),
    ],
    end: Annotated[
        str,
        text_option("--to", "T", "Last fire time to start (ISO 8601)."),
    ],
    overlap: Annotated[
        str | None,
        text_option(
            "--overlap",
            "P",
            "allow-all (default: every fire time starts) or skip (not while the "
            "previous backfilled run is open).",
        ),
    ] = None,
    json_output: JsonFlag = False,
) -> None:
    """Start one run per fire time from --from to --to, as the schedule would have.

    Idempotent: each fire time's run id is ID@<fire time>, so a second backfill of the same
    range starts nothing (action existing). --json: [{"schedule_id", "scheduled_at", "action",
    "run_id"}].
    """
    from datetime import UTC, datetime

    from flow_cli.cli.filters import parse_time
    from flow_cli.errors import ScheduleInvalid
    from flow_cli.model.schedule import parse_overlap, utc_text

    state = CliState.of(ctx)
    now = datetime.now(UTC)
    first, last = parse_time(start, "--from", now), parse_time(end, "--to", now)
    if first > last:
        raise ScheduleInvalid(
            schedule_id,
            f"--from {utc_text(first)} is after --to {utc_text(last)}",
            "--from 2026-12-01T00:00:00Z --to 2026-12-02T00:00:00Z",
        )
    policy = None if overlap is None else parse_overlap(overlap, schedule_id)
    with state.open_engine(create=False, with_runtimes=True) as engine:
        done = engine.schedules.backfill(schedule_id, first, last, policy)
    if state.want_json(json_output):
        emit_json([f.to_json() for f in done])
        return
    for fired in done:
        run = escape_controls(fired.run_id or "-")
        out(f"{fired.action}\t{utc_text(fired.scheduled_at)}\t{run}")
    started = sum(1 for f in done if f.action == "started")
    from flow_cli.cli.io import note

    note(f"{started} started, {len(done) - started} not (existing or skipped)")


@schedule_app.command("apply")
def apply(
    ctx: typer.Context,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Print the plan; change nothing.")
    ] = False,
    json_output: JsonFlag = False,
) -> None:
    """Make the database's schedules match flow.toml's [schedules.ID] tables.

    Creates the ones only flow.toml has, updates the ones whose definition differs (their
    counts and recent runs stay) and deletes the ones flow.toml does not list. --json:
    {"create": [ID...], "update": [...], "delete": [...], "unchanged": [...], "dry_run"}.
    """
    from flow_cli.cli.schedule_config import read_schedule_tables

    state = CliState.of(ctx)
    wanted = read_schedule_tables(state.config.path)
    if state.config.runtimes:
        for spec in wanted:
            state.check_startable(spec.workflow, None)
    with state.open_engine(create=not dry_run, with_runtimes=False) as engine:
        plan = engine.schedules.apply(wanted, dry_run=dry_run)
    if state.want_json(json_output):
        emit_json({**plan.to_json(), "dry_run": dry_run})
        return
    verb = "would " if dry_run else ""
    for action, ids in (("create", plan.create), ("update", plan.update), ("delete", plan.delete)):
        for schedule_id in ids:
            out(f"{verb}{action} {escape_controls(schedule_id)}")
    if not (plan.create or plan.update or plan.delete):
        count = len(plan.unchanged)
        matches = "1 schedule matches" if count == 1 else f"{count} schedules match"
        out(f"nothing to change ({matches} flow.toml)")
