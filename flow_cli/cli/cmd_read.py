"""Read-only commands: ``show``, ``history``, ``export`` (``runs`` is in ``cmd_triage``).

They open the database with ``create=False`` (a wrong path is reported, never created) and
never import the runtimes, so they work on any machine that can reach the database.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Annotated, Any

import typer

from flow_cli.cli.io import dumps, emit_json, note
from flow_cli.cli.options import JsonFlag, RunArg
from flow_cli.cli.state import CliState
from flow_cli.errors import InputError, RunNotFound
from flow_cli.model.status import ChildStatus, StepStatus

if TYPE_CHECKING:
    from flow_cli.engine.engine import Engine
    from flow_cli.model.snapshot import WorkflowRunSnapshot
    from flow_cli.store.protocol import RunRecord

FOLLOW_POLL_SECONDS = 1.0
"""Upper bound of one ``wait_for_change``; the store returns sooner when something commits."""


def show(
    ctx: typer.Context,
    run_id: RunArg,
    no_follow: Annotated[
        bool,
        typer.Option(
            "--no-follow",
            help="Show RUN itself even if it continued as new (default: its live successor).",
        ),
    ] = False,
    json_output: JsonFlag = False,
    all_steps: Annotated[
        bool, typer.Option("--all", help="List every step (a long list is summarised).")
    ] = False,
) -> None:
    """Show the state of RUN.

    Status, steps, timers, signals, hooks, children, progress and outcome. Everything is
    projected from the run's history. A run stuck on a failed decision shows a "failing" line
    with the error and when the decision is tried next. A run that continued as new is shown as
    its live successor (said on stderr; --no-follow shows the run itself). Of a long list of
    steps, the ones not completed and the latest completed ones are printed; --all prints every
    step, --json has them all.
    """
    state = CliState.of(ctx)
    with state.open_engine(create=False, with_runtimes=False, read_only=True) as engine:
        if not no_follow:
            from flow_cli.ops.chain import follow

            run_id, message = follow(engine, run_id)
            if message is not None:
                note(message.replace("acting on", "showing"))
        data, record = show_data(engine, run_id)
        if state.want_json(json_output):
            emit_json(data)
            return
        child_status = children_status(engine, data)
    from flow_cli.cli import render

    render.console().print(
        render.show_view(data, record.failing, child_status, all_steps=all_steps)
    )


def show_data(engine: Engine, run_id: str) -> tuple[dict[str, Any], RunRecord]:
    """What ``flow show`` prints of RUN (its ``--json``), and its row of the runs index; also
    the detail pane of ``flow top``."""
    snap = engine.snapshot(run_id)
    record = engine.get_run(run_id)
    data: dict[str, Any] = snap.to_json()
    data["failing"] = record.failing
    data["priority"] = snap.spec.priority
    from flow_cli.store.pauses import PauseSet

    spec = snap.spec
    pause = PauseSet(engine.list_pauses()).holding(run_id, spec.workflow, record.build_id)
    data["paused"] = None if pause is None else pause.to_json()
    forked = snap.spec.forked_from
    data["forked_from"] = None if forked is None else {"run_id": forked[0], "sequence": forked[1]}
    # When the run was created here: a fork's history keeps its original's start time.
    data["created_at"] = record.created_at.isoformat()
    # While a decision keeps failing, the runs index holds when it is tried next.
    data["next_decision_at"] = (
        record.decide_at.isoformat()
        if record.decide_at is not None and snap.decision_error is not None
        else None
    )
    _add_heartbeats(engine, snap, data)
    return data, record


def _add_heartbeats(engine: Engine, snap: WorkflowRunSnapshot, data: dict[str, Any]) -> None:
    """Each running step's attempt, worker and last heartbeat (``"heartbeat": {"worker",
    "at", "details"}``, ``None`` when it sent none): stored with lease renewals, not in
    history."""
    running = [s for s in snap.steps.values() if s.status is StepStatus.RUNNING]
    if not running:
        return
    beats = {beat.step_id: beat for beat in engine.step_heartbeats(snap.run_id)}
    for step in running:
        beat = beats.get(step.step_id)
        shown = data["steps"][step.step_id]
        shown["attempt"] = step.attempt
        shown["worker"] = step.worker
        shown["heartbeat"] = (
            None
            if beat is None or beat.attempt != step.attempt
            else {"worker": beat.worker, "at": beat.at.isoformat(), "details": beat.details}
        )


CHILD_STATUS_UNSETTLED = frozenset(
    {ChildStatus.RUNNING, ChildStatus.CANCEL_REQUESTED, ChildStatus.ABANDONED}
)
"""What a parent's history says of a child whose end it has not recorded: it started, the
parent asked it to cancel (its own status tells whether it did), or the parent left it."""


def children_status(engine: Engine, data: dict[str, Any]) -> dict[str, str]:
    """The status of each child whose end the parent's history does not record, read from the
    child's own run (a child the parent cancelled shows Cancelled once it is, not the request)."""
    found: dict[str, str] = {}
    for child in data["children"].values():
        if child["status"] not in CHILD_STATUS_UNSETTLED:
            continue
        try:
            found[child["run_id"]] = engine.get_run(child["run_id"]).status.value
        except RunNotFound:
            continue
    return found


def history(
    ctx: typer.Context,
    run_id: RunArg,
    follow: Annotated[
        bool,
        typer.Option(
            "--follow",
            "-f",
            help="Keep printing new events as they commit, going on into the successor of a "
            "run that continues as new (named on stderr); exit 0 once the chain's terminal event "
            "is printed (NDJSON with --json).",
        ),
    ] = False,
    exit_status: Annotated[
        bool,
        typer.Option(
            "--exit-status",
            help="With --follow: exit as `flow result` does once the chain ends (0 Completed, "
            "4 ended otherwise).",
        ),
    ] = False,
    json_output: JsonFlag = False,
) -> None:
    """Print the events of RUN.

    One row per event: sequence, time, event key and its key data.

    With --json: a JSON array of {sequence, event_key, recorded_at, data}; with --follow --json,
    one such object per line, with the "run_id" it belongs to. --follow goes on into the
    successor of a run that continued as new (a line on stderr names it; its sequences start
    again at 1), so --exit-status reports how the chain ended, as `flow result` does.
    """
    state = CliState.of(ctx)
    as_json = state.want_json(json_output)
    if exit_status and not follow:
        raise InputError("--exit-status goes with --follow.")
    with state.open_engine(create=False, with_runtimes=False, read_only=True) as engine:
        events = [e.to_json() for e in engine.history(run_id)]
        if not follow:
            if as_json:
                emit_json(events)
            else:
                from flow_cli.cli import render

                render.console().print(render.history_table(events))
            return
        _follow_chain(engine, run_id, events, as_json, exit_status)


def _follow_chain(
    engine: Engine, run_id: str, events: list[dict[str, Any]], as_json: bool, exit_status: bool
) -> None:
    """Print ``events`` and every later one, into successors, until the chain ends."""
    from flow_cli.model.events import TERMINAL_KEYS

    printer = _follow_printer(as_json)
    last = 0
    while True:
        successor: str | None = None
        for event in events:
            printer({**event, "run_id": run_id} if as_json else event)  # whose, in a chain
            last = event["sequence"]
            if event["event_key"] == "run_continued_as_new":
                successor = str(event["data"]["successor_run_id"])
                break
            if event["event_key"] in TERMINAL_KEYS:
                if exit_status:
                    _exit_with_outcome(engine, run_id)
                return
        if successor is not None:
            note(f"note: run {run_id!r} continued as new; following its successor {successor!r}")
            run_id, last = successor, 0
        else:
            engine.wait_for_change(FOLLOW_POLL_SECONDS)
        events = [e.to_json() for e in engine.history(run_id, after_sequence=last)]


def _exit_with_outcome(engine: Engine, run_id: str) -> None:
    """``--exit-status``: 0 when the chain's last run completed, 4 (outcome on stderr)
    otherwise."""
    from flow_cli.cli import exits

    outcome = engine.snapshot(run_id).outcome
    if outcome is None or outcome.kind.value == "Completed":
        return
    note(f"run {run_id} ended {outcome.kind.value}: {dumps(outcome.to_json(), compact=True)}")
    raise typer.Exit(exits.ENDED_OTHERWISE)


def _follow_printer(as_json: bool) -> Callable[[dict[str, Any]], None]:
    if as_json:
        return lambda event: emit_json(event, compact=True)
    from flow_cli.cli import render

    con = render.console()
    return lambda event: con.print(render.event_line(event), soft_wrap=True)
