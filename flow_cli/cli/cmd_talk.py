"""Talking to a run: ``query`` (its own handler answers, nothing is written) and ``update``
(its handler validates and answers, and the answer is recorded for the workflow).

Both load the runtimes (a handler is the run's own build code) and follow a continued run to
its live successor, said on stderr, as every verb that names a run does.
"""

from __future__ import annotations

from typing import Annotated

import typer

from flow_cli.cli.bulk import open_live
from flow_cli.cli.io import emit_json, note, parse_json_arg
from flow_cli.cli.options import JsonFlag, RunArg, text_option
from flow_cli.cli.state import CliState
from flow_cli.model.names import check_name

Args = Annotated[
    str | None,
    text_option(
        "--args",
        "JSON|@FILE|-",
        "The handler's args: literal JSON, @file.json, or - to read stdin. Default: null.",
    ),
]

HandlerName = Annotated[
    str,
    typer.Argument(
        metavar="NAME",
        help="The handler's name, as the workflow declares it (@runtime.query, @runtime.update).",
    ),
]


def query(
    ctx: typer.Context,
    run_id: RunArg,
    name: HandlerName,
    args: Args = None,
    json_output: JsonFlag = False,
) -> None:
    """Ask RUN's own query handler NAME and print its answer (JSON).

    The handler runs here, with the run's build code, on the run's current history; nothing
    is written (the database is opened read-only). Ended runs answer too; a run that continued
    as new is followed to its live successor (said on stderr). A name the workflow does not
    declare: exit 2, listing the declared queries. The run's build not loaded here, or a
    handler that raises or calls a command: exit 1. --json prints {"run_id", "query",
    "result"}.
    """
    state = CliState.of(ctx)
    check_name(name, "query name")
    value = parse_json_arg(args, "--args")
    with open_live(state, run_id, with_runtimes=True, read_only=True) as (engine, live):
        answer = engine.query(live, name, value)
    emit_json(answer.to_json() if state.want_json(json_output) else answer.result)


def update(
    ctx: typer.Context,
    run_id: RunArg,
    name: HandlerName,
    args: Args = None,
    update_id: Annotated[
        str | None,
        text_option(
            "--id",
            "UPDATE_ID",
            "The update's id (default: a new one). The same id again returns the recorded "
            "answer and writes nothing; with another NAME or --args it is refused (exit 1).",
        ),
    ] = None,
    json_output: JsonFlag = False,
) -> None:
    """Send update NAME to RUN; print the handler's answer (JSON).

    The run's own handler validates the request on its current history. If it raises
    UpdateRejected, nothing is written: exit 1, "rejected: REASON". Otherwise its answer is
    recorded (update_applied, where the workflow reads it with ctx.updates(NAME)) and the run
    is woken. A run that continued as new is followed to its live successor (said on stderr);
    an ended run refuses updates (exit 1). A name the workflow does not declare: exit 2,
    listing the declared updates. --json prints {"run_id", "update_id", "result", "sequence",
    "duplicate"}.
    """
    state = CliState.of(ctx)
    check_name(name, "update name")
    if update_id is not None:
        check_name(update_id, "update id")
    value = parse_json_arg(args, "--args")
    with open_live(state, run_id, with_runtimes=True) as (engine, live):
        answer = engine.update(live, name, value, update_id=update_id)
    if state.want_json(json_output):
        emit_json(answer.to_json())
        return
    if answer.duplicate:
        note(
            f"update id {answer.update_id!r} was already applied to run {answer.run_id} "
            f"(event {answer.sequence}); its recorded answer:"
        )
    else:
        note(
            f"update {name!r} applied to run {answer.run_id} (event {answer.sequence}, "
            f"id {answer.update_id})"
        )
    emit_json(answer.result)
