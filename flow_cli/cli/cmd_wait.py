"""Waiting for results: ``flow result``, ``flow execute`` (and ``history --exit-status``).

Exit codes: 0 the run completed (its result JSON on stdout), 4 it ended otherwise (its outcome
on stderr), 5 the time ran out first. A run that continued as new is followed to its successor.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from flow_cli.cli import exits
from flow_cli.cli.filters import parse_duration
from flow_cli.cli.io import dumps, emit_json, note, one_line, out, parse_json_arg, short_json
from flow_cli.cli.options import JsonFlag, RunArg, RunInput, text_option
from flow_cli.cli.state import CliState
from flow_cli.errors import InputError, RunStillOpen

if TYPE_CHECKING:
    from flow_cli.ops.waiting import Waited

Timeout = Annotated[
    str | None,
    text_option(
        "--timeout",
        "DURATION",
        "Give up after DURATION (e.g. 30s, 5m): exit 5. Default: wait for ever.",
    ),
]


def finish(waited: Waited, as_json: bool, *, timeout_text: str | None = None) -> int:
    """Print what ``flow result`` prints and return its exit code."""
    outcome = waited.outcome
    if outcome is None:
        if waited.decision_error is not None:
            note(
                f"error: timed out after {timeout_text} waiting for run {waited.run_id}, which "
                f"is failing, not just slow: {_failing(waited)}"
            )
            return exits.TIMED_OUT
        note(
            f"error: timed out after {timeout_text} waiting for run {waited.run_id} "
            f"(still {waited.status})"
        )
        return exits.TIMED_OUT
    data = outcome.to_json()
    if as_json:
        emit_json({"run_id": waited.run_id, "outcome": data})
    elif outcome.kind.value == "Completed":
        out(dumps(outcome.result))
    if outcome.kind.value == "Completed":
        return exits.OK
    note(f"run {waited.run_id} ended {outcome.kind.value}: {short_json(data, 400)}")
    return exits.ENDED_OTHERWISE


def _failing(waited: Waited) -> str:
    """What a failing run's decision raised, and what to do (one line)."""
    from flow_cli.cli.render import failing_text

    return one_line(
        f"its workflow code failed with {failing_text(waited.decision_error)} (decision_failed; "
        f"still {waited.status}, retried with back-off). Fix the code and deploy it, or end the "
        f"run with `flow terminate {waited.run_id}`."
    )


def _say_failing(waited: Waited) -> None:
    from flow_cli.cli.render import failing_text

    note(
        one_line(
            f"run {waited.run_id} is failing: its workflow code failed with "
            f"{failing_text(waited.decision_error)} (decision_failed); still waiting while it is "
            "retried with back-off"
        )
    )


def result(
    ctx: typer.Context,
    run_id: RunArg,
    wait: Annotated[bool, typer.Option("--wait", help="Wait until the run ends.")] = False,
    timeout: Timeout = None,
    json_output: JsonFlag = False,
) -> None:
    """Print the result JSON of RUN.

    Exit 0 when it completed; 4 when it ended otherwise (Failed, Cancelled; the outcome goes to
    stderr); 5 when --timeout passed first. Without --wait, a run still open is exit 1. With
    --json: {"run_id", "outcome"}. A run that continued as new is followed to its successor.
    """
    from flow_cli.ops.waiting import outcome_of, wait_for_outcome

    seconds = None if timeout is None else parse_duration(timeout, "--timeout").total_seconds()
    if timeout is not None and not wait:
        raise InputError("--timeout goes with --wait.")
    state = CliState.of(ctx)
    with state.open_engine(create=False, with_runtimes=False, read_only=True) as engine:
        if wait:
            waited = wait_for_outcome(engine, run_id, seconds, on_failing=_say_failing)
        else:
            waited = outcome_of(engine, run_id)
            if waited.outcome is None:
                raise RunStillOpen(
                    f"Run {waited.run_id!r} has not ended ({waited.status}); "
                    "add --wait to wait for it."
                )
    raise typer.Exit(finish(waited, state.want_json(json_output), timeout_text=timeout))


def execute(
    ctx: typer.Context,
    workflow: Annotated[str, typer.Argument(metavar="WORKFLOW", help="The workflow to start.")],
    input: RunInput = None,
    run_id: Annotated[
        str | None,
        text_option(
            "--id",
            "ID",
            "Run id (default: WORKFLOW-<random>); the same id and input again waits for "
            "the existing run.",
        ),
    ] = None,
    timeout: Timeout = None,
    json_output: JsonFlag = False,
) -> None:
    """Start WORKFLOW, drive it to its end in this process, and print its result.

    Decides the run and runs its steps here (alongside any workers, which is safe), waiting
    for timers, signals and hooks in between; then exits as `flow result --wait`: 0 completed,
    4 ended otherwise, 5 --timeout passed. The run id goes to stderr.
    """
    from flow_cli.ops.waiting import wait_for_outcome

    if run_id == "":
        raise InputError("--id is empty; give the run id, or leave --id out for a generated one.")
    seconds = None if timeout is None else parse_duration(timeout, "--timeout").total_seconds()
    value = parse_json_arg(input, "--input")
    state = CliState.of(ctx)
    state.check_startable(workflow, None)
    with state.open_engine(create=True, with_runtimes=True) as engine:
        started = engine.start(workflow, value, run_id=run_id)
        note(f"run {started.run_id} {'started' if started.created else 'exists; waiting'}")
        waited = wait_for_outcome(
            engine, started.run_id, seconds, drive=True, on_failing=_say_failing
        )
    raise typer.Exit(finish(waited, state.want_json(json_output), timeout_text=timeout))
