"""Commands that add facts to runs: ``start``, ``signal``, ``hook resolve``, ``cancel``.

Every argument is parsed and checked before the database is opened, so a bad command line never
creates or changes a database. Only ``start`` may create a missing SQLite file.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from flow_cli.cli.io import emit_json, note, out, parse_json_arg
from flow_cli.cli.options import JsonFlag, Payload, RunArg, SignalKey
from flow_cli.cli.state import CliState
from flow_cli.errors import InputError, RunFinished
from flow_cli.model.names import check_name, check_run_id, escape_controls

if TYPE_CHECKING:
    from flow_cli.engine.engine import Engine

hook_app = typer.Typer(
    name="hook",
    help="Work with hooks: callbacks that a run waits for by token.",
    no_args_is_help=True,
    rich_markup_mode=None,
)


def start(
    ctx: typer.Context,
    workflow: Annotated[
        str | None,
        typer.Argument(
            metavar="WORKFLOW",
            help="The workflow name, as registered with @runtime.workflow.",
            show_default=False,
        ),
    ] = None,
    run_id: Annotated[
        str | None,
        typer.Option(
            "--id",
            metavar="ID",
            help="Run id to use (default: WORKFLOW-<random>). Starting the same id with the "
            "same workflow and input again is a no-op.",
            show_default=False,
        ),
    ] = None,
    input: Annotated[
        str | None,
        typer.Option(
            "--input",
            metavar="JSON|@FILE|-",
            help="The run input: literal JSON, @file.json, or - to read stdin. Default: null.",
            show_default=False,
        ),
    ] = None,
    build_id: Annotated[
        str | None,
        typer.Option(
            "--build-id",
            metavar="B",
            help="Start under this loaded build. Default: flow.toml's build_id, else the one "
            "runtime that defines WORKFLOW (several and no build_id: exit 2, pass this).",
            show_default=False,
        ),
    ] = None,
    from_jsonl: Annotated[
        str | None,
        typer.Option(
            "--from-jsonl",
            metavar="FILE|-",
            help='Start many runs, one {"run_id", "workflow", "input", "build_id"?} a line '
            "(- reads stdin); one result line per run; idempotent.",
            show_default=False,
        ),
    ] = None,
    json_output: JsonFlag = False,
    jsonl: Annotated[
        bool, typer.Option("--jsonl", help="With --from-jsonl: one JSON result a line.")
    ] = False,
) -> None:
    """Create a run of WORKFLOW and print its run id.

    Starting again with the same --id, workflow and input prints the same id (created: false);
    the same id with a different workflow or input is an error (exit 2). The run is decided by
    the next `flow tick` or a running `flow worker`.
    """
    state = CliState.of(ctx)
    if from_jsonl is not None:
        if workflow is not None or run_id is not None or input is not None:
            raise InputError("--from-jsonl takes workflow, id and input from its lines; drop them.")
        from flow_cli.cli.jsonl_starts import start_from_jsonl

        start_from_jsonl(ctx, from_jsonl, state.want_json(json_output), jsonl)
        return
    if workflow is None:
        raise InputError("Missing argument 'WORKFLOW' (or use --from-jsonl FILE).")
    if run_id == "":
        raise InputError("--id is empty; give the run id, or leave --id out for a generated one.")
    check_name(workflow, "workflow name")
    if run_id is not None:
        check_run_id(run_id)
    value = parse_json_arg(input, "--input")
    state.check_startable(workflow, build_id)
    with state.open_engine(create=True, with_runtimes=True) as engine:
        result = engine.start(workflow, value, run_id=run_id, build_id=build_id)
    if state.want_json(json_output):
        emit_json({"run_id": result.run_id, "created": result.created})
    else:
        out(escape_controls(result.run_id))


def signal_run(
    ctx: typer.Context,
    run_id: RunArg,
    name: Annotated[
        str, typer.Argument(metavar="NAME", help="The signal name the workflow waits for.")
    ],
    payload: Payload = None,
    json_output: JsonFlag = False,
    key: SignalKey = None,
) -> None:
    """Deliver signal NAME to RUN.

    A signal that arrives before the workflow waits for it is kept and matched later, in order.
    A run that continued as new passes the signal on to its live successor (said on stderr).
    Signalling a run that already ended fails (exit 1). With --key, sending again with the same
    key delivers nothing new.
    """
    state = CliState.of(ctx)
    check_name(name, "signal name")
    value = parse_json_arg(payload, "--payload")
    with state.open_engine(create=False, with_runtimes=False) as engine:
        run_id = _follow(engine, run_id)
        sequence = engine.signal(run_id, name, value, key=key)
    if state.want_json(json_output):
        emit_json({"run_id": run_id, "signal": name, "sequence": sequence})
    else:
        out(f"signal {name!r} delivered to run {escape_controls(run_id)} (event {sequence})")


@hook_app.command("resolve")
def hook_resolve(
    ctx: typer.Context,
    token: Annotated[
        str,
        typer.Argument(metavar="TOKEN", help="The hook's token (see the hooks of `flow show`)."),
    ],
    payload: Payload = None,
    run_id: Annotated[
        str | None,
        typer.Option(
            "--run",
            metavar="RUN",
            help="Only resolve the hook if it belongs to this run.",
            show_default=False,
        ),
    ] = None,
    json_output: JsonFlag = False,
) -> None:
    """Deliver the callback of the hook with TOKEN.

    A hook takes exactly one callback: an unknown token is exit 2, a token that was already
    resolved (or whose run ended) is exit 1. --run naming a run that continued as new means its
    live successor (said on stderr). TOKEN - reads tokens from stdin (one a line, or
    the JSON lines of `flow hook list --jsonl`) and resolves each with the same payload: one
    result line per token, exit 1 if any failed.
    """
    state = CliState.of(ctx)
    value = parse_json_arg(payload, "--payload")
    if token == "-":
        from flow_cli.cli.cmd_bulk import resolve_from_stdin

        resolve_from_stdin(state, value, run_id, state.want_json(json_output))
        return
    with state.open_engine(create=False, with_runtimes=False) as engine:
        if run_id is not None:
            run_id = _follow(engine, run_id)
        owner, hook_id = engine.resolve_hook(token, value, run_id=run_id)
    if state.want_json(json_output):
        emit_json({"run_id": owner, "hook_id": hook_id, "token": token})
    else:
        out(f"hook {hook_id!r} of run {escape_controls(owner)} resolved")


def cancel(
    ctx: typer.Context,
    run_id: RunArg,
    reason: Annotated[
        str, typer.Option("--reason", metavar="TEXT", help="Why; recorded in the history.")
    ] = "cancelled by operator",
    json_output: JsonFlag = False,
) -> None:
    """Request cancellation of RUN.

    The run moves to Cancelling; its workflow may run cleanup steps, then ends Cancelled.
    Asking twice is harmless. A run that continued as new has its live successor cancelled
    (said on stderr). A run that already ended is skipped (exit 0), as by `flow terminate`.
    """
    state = CliState.of(ctx)
    with state.open_engine(create=False, with_runtimes=False) as engine:
        run_id = _follow(engine, run_id)
        try:
            requested = engine.cancel(run_id, reason)
        except RunFinished as exc:
            # What cancelling asks for, an end, is already there: skipped, exit 0, the rule
            # of `flow terminate` and of both verbs on many runs.
            if state.want_json(json_output):
                emit_json(
                    {"run_id": run_id, "requested": False, "skipped": f"already {exc.status}"}
                )
            else:
                out(f"cancellation of run {run_id} skipped: already {exc.status}")
            return
    if state.want_json(json_output):
        emit_json({"run_id": run_id, "requested": requested})
    elif requested:
        out(f"cancellation of run {escape_controls(run_id)} requested")
    else:
        out(f"cancellation of run {escape_controls(run_id)} was already requested")


def _follow(engine: Engine, run_id: str) -> str:
    """The live run of ``run_id``'s continue-as-new chain; a note on stderr when it differs."""
    from flow_cli.ops.chain import follow

    live, message = follow(engine, run_id)
    if message is not None:
        note(message)
    return live
