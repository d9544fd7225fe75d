"""``flow pause``, ``flow resume`` and ``flow pauses``: hold runs fleet-wide, by run, workflow or
build, and let them go on (see ``Engine.pause``).

Every argument is checked before the database is opened: a bad command line changes nothing.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any

import typer

from flow_cli.cli.io import emit_json, out
from flow_cli.cli.options import JsonFlag, text_argument, text_option
from flow_cli.cli.state import CliState
from flow_cli.errors import InputError
from flow_cli.model.names import check_name, check_run_id, escape_controls

if TYPE_CHECKING:
    from flow_cli.engine.pauses import PauseChange
    from flow_cli.store.pauses import PauseTarget

Runs = Annotated[
    list[str] | None,
    text_argument("RUN...", "Run ids."),
]
Workflow = Annotated[
    str | None, text_option("--workflow", "W", "Every run of workflow W, started later too.")
]
Build = Annotated[
    str | None, text_option("--build-id", "B", "Every run pinned to build B, started later too.")
]


def _targets(
    action: str, runs: list[str] | None, workflow: str | None, build_id: str | None
) -> list[PauseTarget]:
    """The command line's targets: runs, or one workflow, or one build (exit 2 otherwise)."""
    from flow_cli.store.pauses import PauseKind, PauseTarget

    kinds = [bool(runs), workflow is not None, build_id is not None]
    if not any(kinds):
        raise InputError(
            f"Nothing to {action}: name runs (flow {action} RUN...), or --workflow W, "
            "or --build-id B."
        )
    if sum(kinds) > 1:
        raise InputError(
            f"flow {action} takes one kind of target: runs, or --workflow W, or --build-id B."
        )
    if workflow is not None:
        check_name(workflow, "workflow name")
        return [PauseTarget(kind=PauseKind.WORKFLOW, name=workflow)]
    if build_id is not None:
        check_name(build_id, "build id")
        return [PauseTarget(kind=PauseKind.BUILD, name=build_id)]
    found: list[PauseTarget] = []
    for run_id in dict.fromkeys(runs or ()):
        check_run_id(run_id)
        found.append(PauseTarget(kind=PauseKind.RUN, name=run_id))
    return found


def _describe(change: PauseChange, action: str) -> str:
    target = change.target
    name = escape_controls(target.name)
    if target.kind.value == "run":
        what = f"run {name}"
    else:
        runs = f"{change.open_runs} open run{'' if change.open_runs == 1 else 's'}"
        what = f"{target.kind.value} {name} ({runs})"
    if change.changed:
        return f"{action}d {what}"
    return f"{what}: was {'paused already' if action == 'pause' else 'not paused'}"


def _change_json(change: PauseChange) -> dict[str, Any]:
    return {
        "kind": change.target.kind.value,
        "target": change.target.name,
        "changed": change.changed,
        "open_runs": change.open_runs,
    }


def pause(
    ctx: typer.Context,
    runs: Runs = None,
    workflow: Workflow = None,
    build_id: Build = None,
    reason: Annotated[
        str | None,
        text_option("--reason", "TEXT", "Why (shown by flow pauses, flow show and flow doctor)."),
    ] = None,
    json_output: JsonFlag = False,
) -> None:
    """Hold runs fleet-wide at once: no decision is made and no step starts for them
    (attempts in flight finish) until `flow resume`.

    Starts, signals, hook callbacks and updates are still recorded. A pause of a --workflow or
    a --build-id also holds the runs started after it. An unknown run is exit 2, a run that
    has ended exit 1; nothing is paused then. --json: [{"kind", "target", "changed",
    "open_runs"}].
    """
    state = CliState.of(ctx)
    targets = _targets("pause", runs, workflow, build_id)
    if reason is not None:
        check_name(reason, "reason")
    with state.open_engine(create=False, with_runtimes=False) as engine:
        changes = engine.pause(targets, reason)
    _report(state, changes, json_output, "pause")


def resume(
    ctx: typer.Context,
    runs: Runs = None,
    workflow: Workflow = None,
    build_id: Build = None,
    json_output: JsonFlag = False,
) -> None:
    """Lift pauses made by `flow pause`: the runs they held go on at once (a run's own pause
    and its workflow's or build's are separate: each is lifted by its own resume).

    --json: [{"kind", "target", "changed", "open_runs"}]; "changed": false when it was not
    paused.
    """
    state = CliState.of(ctx)
    targets = _targets("resume", runs, workflow, build_id)
    with state.open_engine(create=False, with_runtimes=False) as engine:
        changes = engine.resume(targets)
    _report(state, changes, json_output, "resume")


def _report(state: CliState, changes: list[PauseChange], json_output: bool, action: str) -> None:
    if state.want_json(json_output):
        emit_json([_change_json(c) for c in changes])
        return
    for change in changes:
        out(_describe(change, action))


def pauses(ctx: typer.Context, json_output: JsonFlag = False) -> None:
    """List the pauses in force: what each holds, since when, and why.

    --json: [{"kind", "target", "reason", "paused_at"}].
    """
    state = CliState.of(ctx)
    with state.open_engine(create=False, with_runtimes=False, read_only=True) as engine:
        found = engine.list_pauses()
    if state.want_json(json_output):
        emit_json([p.to_json() for p in found])
        return
    if not found:
        out("nothing is paused")
        return
    for p in found:
        why = f"  {escape_controls(p.reason)}" if p.reason else ""
        since = p.paused_at.isoformat(timespec="seconds")
        out(f"{p.target.kind.value:<8} {escape_controls(p.target.name)}  since {since}{why}")
